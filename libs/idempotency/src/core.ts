/**
 * `nest-idempotency/core`: the framework-free part. The engine, the store SPI
 * and what a store author needs to implement it, the typed errors, and the
 * in-memory store. Loads nothing from Nest, TypeORM or a database driver.
 */
// First: records that this build is loaded (see core/loaded-builds.ts).
import './core/loaded-builds';
export * from './core/index';
export { InMemoryIdempotencyStore } from './stores/memory/in-memory.store';
export type { InMemoryIdempotencyStoreOptions } from './stores/memory/in-memory.store';
export { ReplayCachingStore } from './stores/cache/replay-cache.store';
export type { ReplayCacheOptions } from './stores/cache/replay-cache.store';
