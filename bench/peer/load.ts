/**
 * The peer the HTTP benchmark compares with: node-idempotency
 * (`@node-idempotency/nestjs` and its in-memory and Redis storage adapters).
 * It declares Nest ^9 || ^10 as peers, so it is installed here, apart from
 * the root (bench/peer/package.json, `legacy-peer-deps` in bench/peer/.npmrc:
 * no Nest of its own), and resolves the root's Nest 12 at run time: one copy
 * of @nestjs/* in the process, or Nest would not see its decorators.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

/** The peer's stores: `peer-memory` (MemoryStorageAdapter), `peer-redis` (RedisStorageAdapter). */
export type PeerStore = 'peer-memory' | 'peer-redis';

const PEER_DIR = __dirname;
const requirePeer = createRequire(path.join(PEER_DIR, 'package.json'));
const PEER_MAIN = '@node-idempotency/nestjs';

/** `npm ci` in bench/peer when its node_modules lacks the peer (the npm registry must answer). */
export function ensurePeerInstalled(log: (line: string) => void = () => undefined): void {
  if (fs.existsSync(path.join(PEER_DIR, 'node_modules', PEER_MAIN, 'package.json'))) return;
  log(`installing the peer (${PEER_MAIN}) in ${path.relative(process.cwd(), PEER_DIR)}`);
  execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--prefix', PEER_DIR], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

/** The peer's own @nestjs/* resolve to the root's copies, file for file; throws otherwise. */
export function assertOneNest(): void {
  const fromPeer = createRequire(requirePeer.resolve(PEER_MAIN));
  for (const name of ['@nestjs/common', '@nestjs/core', 'rxjs']) {
    const theirs = fs.realpathSync(fromPeer.resolve(name));
    const ours = fs.realpathSync(require.resolve(name));
    if (theirs !== ours)
      throw new Error(`the peer resolves ${name} to ${theirs}, the root to ${ours}: two copies`);
  }
}

/** What the benchmark uses of `@node-idempotency/nestjs`. */
export interface PeerNest {
  NodeIdempotencyModule: {
    forRootAsync(options: {
      cacheKeyPrefix?: string;
      storage: { adapter: 'memory' | 'redis'; options?: { url: string } };
    }): import('@nestjs/common').DynamicModule;
  };
  Idempotent(options?: object): MethodDecorator & ClassDecorator;
}

/** `@node-idempotency/nestjs`, loaded from bench/peer after checking that it shares the root's Nest. */
export function loadPeer(): PeerNest {
  assertOneNest();
  return requirePeer(PEER_MAIN) as PeerNest;
}
