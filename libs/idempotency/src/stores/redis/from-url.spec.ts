import { createServer } from 'node:net';
import { IdempotencyConfigError, IdempotencyStoreUnavailableError } from '../../core/errors';
import { RedisIdempotencyStore } from './redis.store';

/** `RedisIdempotencyStore.fromUrl` without a server: what it refuses, and a server that is not there. */

const PASSWORD = 'pa55-do-not-print';

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return typeof address === 'object' && address ? address.port : 0;
}

function refusal(make: () => unknown): Error {
  try {
    make();
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected fromUrl to throw');
}

describe('RedisIdempotencyStore.fromUrl', () => {
  it.each([
    ['an empty URL', '', /the URL must be a redis:\/\/ or rediss:\/\/ URL$/],
    [
      'a PostgreSQL URL',
      `postgres://app:${PASSWORD}@db:5432/app`,
      /the URL must start with redis:\/\/ or rediss:\/\/, not postgres:\/\/$/,
    ],
    [
      'something that is no URL',
      `${PASSWORD} at localhost`,
      /the URL is not a URL; expected redis:\/\//,
    ],
  ])('refuses %s with IdempotencyConfigError, never echoing it', (_label, url, message) => {
    const error = refusal(() => RedisIdempotencyStore.fromUrl(url));
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect(error.message).toMatch(/^RedisIdempotencyStore\.fromUrl: /);
    expect(error.message).toMatch(message);
    expect(error.message).not.toContain(PASSWORD);
  });

  it('takes several URLs only as the seed nodes of a Cluster', () => {
    const seeds = ['redis://10.0.0.1:7000', 'redis://10.0.0.2:7000'];
    expect(refusal(() => RedisIdempotencyStore.fromUrl(seeds)).message).toBe(
      'RedisIdempotencyStore.fromUrl: 2 URLs were given; several URLs are the seed nodes of a Redis Cluster: pass cluster: true',
    );
    const clustered = RedisIdempotencyStore.fromUrl(seeds, { cluster: true });
    expect(clustered.cluster).toBe(true);
    expect(refusal(() => RedisIdempotencyStore.fromUrl([])).message).toMatch(/URL is required/);
  });

  it("checks the store's own options and connectTimeoutMs", () => {
    expect(
      refusal(() => RedisIdempotencyStore.fromUrl('redis://h', { connectTimeoutMs: 0 })),
    ).toBeInstanceOf(IdempotencyConfigError);
    expect(
      refusal(() => RedisIdempotencyStore.fromUrl('redis://h', { keyPrefix: 'a{b}' })).message,
    ).toMatch(/keyPrefix must not contain/);
  });

  it('creates its client without connecting it: init() does', () => {
    const store = RedisIdempotencyStore.fromUrl('redis://127.0.0.1:6379');
    expect(store.cluster).toBe(false);
    expect(store.client.isOpen).toBe(false);
  });

  it('fails init() at once when nothing listens at the address, names host and port but not the password, and stops the client', async () => {
    const port = await closedPort();
    const warnings: string[] = [];
    // Far beyond the test's own timeout: init() must not wait for it.
    const store = RedisIdempotencyStore.fromUrl(`redis://app:${PASSWORD}@127.0.0.1:${port}/0`, {
      connectTimeoutMs: 600_000,
      logger: { warn: (m) => warnings.push(m), error: (m) => warnings.push(m) },
    });
    const error = await store.init().then(
      () => new Error('init() connected to a closed port'),
      (e: Error) => e,
    );
    expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(error.message).toMatch(
      new RegExp(
        `^cannot connect to Redis at 127\\.0\\.0\\.1:${port}: .*ECONNREFUSED.* \\(is Redis running there, and is the address right\\?\\)$`,
      ),
    );
    expect(error.message).not.toContain(PASSWORD);
    expect(store.client.isOpen).toBe(false);
    // While connecting, failures go into init()'s error, not the log.
    expect(warnings).toEqual([]);
    await store.close();
  });

  it('gives up connecting after connectTimeoutMs when the address accepts but never answers', async () => {
    // A listener that takes the connection and says nothing: node-redis waits for its handshake.
    const sockets: import('node:net').Socket[] = [];
    const silent = createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as import('node:net').AddressInfo;
    const store = RedisIdempotencyStore.fromUrl(`redis://127.0.0.1:${port}`, {
      connectTimeoutMs: 300,
      logger: { warn: () => undefined, error: () => undefined },
    });
    try {
      const error = await store.init().then(
        () => new Error('init() connected to a silent server'),
        (e: Error) => e,
      );
      expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
      expect(error.message).toMatch(
        new RegExp(`^cannot connect to Redis at 127\\.0\\.0\\.1:${port} within 300 ms`),
      );
      expect(store.client.isOpen).toBe(false);
    } finally {
      await store.close();
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});
