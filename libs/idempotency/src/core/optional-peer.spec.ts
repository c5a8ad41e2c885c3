import { beforeEach, describe, expect, it, vi } from 'vitest';

// The loader's two primitives, observed: which one each call goes through.
const importPackage = vi.fn<(name: string) => Promise<unknown>>();
const requirePackage = vi.fn<(name: string) => unknown>();
vi.mock('./module-format', () => ({ MODULE_FORMAT: 'module', importPackage, requirePackage }));

async function fresh() {
  vi.resetModules();
  return import('./optional-peer.js'); // Vite maps it to the source
}

describe('optional peers', () => {
  beforeEach(() => {
    importPackage.mockReset();
    requirePackage.mockReset();
  });

  it('serves a preloaded peer without loading it again', async () => {
    const { preloadOptionalPeer, optionalPeer } = await fresh();
    const graphql = { GraphQLError: class {} };
    importPackage.mockResolvedValueOnce(graphql);
    await preloadOptionalPeer('graphql');
    await preloadOptionalPeer('graphql');
    expect(optionalPeer('graphql')).toBe(graphql);
    expect(importPackage).toHaveBeenCalledTimes(1);
    expect(requirePackage).not.toHaveBeenCalled();
  });

  it('keeps a failed preload and throws its error on use, never requiring instead', async () => {
    const { preloadOptionalPeer, optionalPeer } = await fresh();
    const missing = new Error("Cannot find package '@nestjs/microservices'");
    importPackage.mockRejectedValueOnce(missing);
    await expect(preloadOptionalPeer('@nestjs/microservices')).resolves.toBeUndefined();
    expect(() => optionalPeer('@nestjs/microservices')).toThrow(missing);
    expect(requirePackage).not.toHaveBeenCalled();
  });

  it('requires a peer that was not preloaded, when it is first used', async () => {
    const { optionalPeer } = await fresh();
    const redis = { createClient() {} };
    requirePackage.mockReturnValueOnce(redis);
    expect(optionalPeer('redis')).toBe(redis);
    expect(requirePackage).toHaveBeenCalledWith('redis');
  });
});
