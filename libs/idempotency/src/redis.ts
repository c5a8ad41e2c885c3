/**
 * `nest-idempotency/redis`: the Redis store, standalone or Redis Cluster, on
 * the application's node-redis client (the `redis` package) or ioredis client
 * (both optional peers, neither loaded by this file). Nothing else in the
 * library loads this file.
 */
// First: records that this build is loaded (see core/loaded-builds.ts).
import './core/loaded-builds';
export { RedisIdempotencyStore } from './stores/redis/redis.store';
export type {
  RedisIdempotencyStoreOptions,
  RedisIdempotencyStoreFromUrlOptions,
} from './stores/redis/redis.store';
export type { RedisConnectionOptions } from './stores/redis/from-url';
export type {
  RedisIdempotencyClient,
  RedisStandaloneClient,
  RedisClusterClient,
  IoredisClient,
  IoredisStandaloneClient,
  IoredisClusterClient,
  RedisClientLibrary,
} from './stores/redis/client';
export { DEFAULT_KEY_PREFIX } from './stores/redis/keys';
