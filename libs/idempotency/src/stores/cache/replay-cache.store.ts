import { LRUCache } from 'lru-cache';
import { performance } from 'node:perf_hooks';
import { decodePayload, encodePayload } from '../../core/payload';
import type {
  AcquireRequest,
  AcquireResult,
  IdempotencyRecordView,
  IdempotencyStore,
  ListFilter,
  RecordId,
} from '../../core/store';

export interface ReplayCacheOptions {
  /** Most records kept. Default 10,000. */
  maxEntries?: number;
  /** Most bytes of serialized payload kept. Default 64 MiB. */
  maxBytes?: number;
}

interface CachedRecord {
  json: string;
  completedAt: Date;
  fingerprint: string | null;
}

/**
 * Keeps COMPLETE records in process memory (bounded LRU) so a replay touches no
 * database. Safe because a COMPLETE record never changes before it expires. An
 * entry is made from a replay the store answered, so its completion time,
 * fingerprint and remaining TTL are the store's (by the database clock), and it
 * lives at most that remaining TTL, counted on this process's monotonic clock
 * from before the store call, so it always ends first. The first replay of a
 * key reads the store; the ones after it do not. IN_PROGRESS records are never
 * cached; everything else passes through to the inner store.
 */
export class ReplayCachingStore implements IdempotencyStore {
  private readonly cache: LRUCache<string, CachedRecord>;

  constructor(
    readonly inner: IdempotencyStore,
    options: ReplayCacheOptions = {},
  ) {
    this.cache = new LRUCache<string, CachedRecord>({
      max: options.maxEntries ?? 10_000,
      maxSize: options.maxBytes ?? 64 * 1024 * 1024,
      sizeCalculation: (entry) => Math.max(1, entry.json.length * 2),
      // The monotonic clock: wall-clock steps never stretch an entry's life.
      perf: performance,
    });
  }

  async tryAcquire(request: AcquireRequest): Promise<AcquireResult> {
    const cacheKey = keyOf(request);
    const hit = this.cache.get(cacheKey);
    if (hit) {
      if (request.fingerprint && hit.fingerprint && request.fingerprint !== hit.fingerprint) {
        return { kind: 'fingerprint-mismatch' };
      }
      return { kind: 'duplicate', payload: decodePayload(hit.json), completedAt: hit.completedAt };
    }
    const askedAt = performance.now();
    const result = await this.inner.tryAcquire(request);
    if (
      result.kind === 'duplicate' &&
      result.expiresInMs !== undefined &&
      result.fingerprint !== undefined
    ) {
      this.remember(
        cacheKey,
        result.payload,
        result.completedAt,
        result.fingerprint,
        result.expiresInMs,
        askedAt,
      );
    }
    return result;
  }

  complete(id: RecordId, leaseId: string, payload: unknown, ttlMs: number): Promise<void> {
    return this.inner.complete(id, leaseId, payload, ttlMs);
  }

  release(id: RecordId, leaseId: string): Promise<void> {
    return this.inner.release(id, leaseId);
  }

  extend(id: RecordId, leaseId: string, leaseMs: number): Promise<boolean> {
    return this.inner.extend(id, leaseId, leaseMs);
  }

  purgeExpired(options?: { limit?: number }): Promise<number> {
    return this.inner.purgeExpired(options);
  }

  find(id: RecordId): Promise<IdempotencyRecordView | null> {
    return this.inner.find(id);
  }

  list(filter?: ListFilter): Promise<IdempotencyRecordView[]> {
    return this.inner.list(filter);
  }

  async init(): Promise<void> {
    await this.inner.init?.();
  }

  async close(): Promise<void> {
    this.cache.clear();
    await this.inner.close?.();
  }

  /** Entries currently cached (for tests and metrics). */
  get size(): number {
    return this.cache.size;
  }

  private remember(
    cacheKey: string,
    payload: unknown,
    completedAt: Date,
    fingerprint: string | null,
    lifeMs: number,
    since: number,
  ): void {
    const ttl = Math.floor(lifeMs - (performance.now() - since));
    if (ttl <= 0) return;
    let json: string;
    try {
      json = encodePayload(payload, Number.POSITIVE_INFINITY);
    } catch {
      return; // the store refused it too; nothing to cache
    }
    this.cache.set(cacheKey, { json, completedAt, fingerprint }, { ttl });
  }
}

/** Unambiguous for any scope and key: the scope's length says where the key starts. */
function keyOf(id: RecordId): string {
  return `${id.scope.length}:${id.scope}${id.key}`;
}
