import { LRUCache } from 'lru-cache';
import { performance } from 'node:perf_hooks';
import { fingerprintsConflict } from '../../core/decide';
import { optionKeys } from '../../core/option-keys';
import { checkAcquireRequest } from '../../core/store-input';
import type {
  AcquireRequest,
  AcquireResult,
  ContinuationSupport,
  IdempotencyRecordView,
  IdempotencyStore,
  Lease,
  ListFilter,
  RecordId,
  ReplayedRecord,
  StoredPayload,
  StepSupport,
  StrictModeSupport,
  TransactionalCompletion,
} from '../../core/store';
import type { ReceiptSupport } from '../../core/receipts';

export interface ReplayCacheOptions {
  /** Most records kept. Default 10,000. */
  maxEntries?: number;
  /** Most bytes of serialized payload kept. Default 64 MiB. */
  maxBytes?: number;
}

/** Every key of `ReplayCacheOptions` (`tsc` fails when the two disagree); any other is refused. */
export const REPLAY_CACHE_OPTION_KEYS = optionKeys<ReplayCacheOptions>()([
  'maxEntries',
  'maxBytes',
]);

interface CachedRecord {
  payload: StoredPayload;
  completedAt: Date;
  fingerprint: string | null;
  /** performance.now() at which the record's TTL ends, by the store's own count. */
  endsAt: number;
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
  readonly onWait?: (listener: (scope: string) => void) => () => void;
  /**
   * Passed through as it is: a completion inside a transaction is not cached
   * (it may still roll back); the first replay after the commit caches it.
   */
  readonly transactional?: TransactionalCompletion;
  /**
   * Passed through as it is: an AMBIGUOUS record is never cached (only
   * replays are), and a resolved one is cached from its first replay.
   */
  readonly strictMode?: StrictModeSupport;
  /** Passed through as it is: steps live only in records in flight, which are never cached. */
  readonly steps?: StepSupport;
  /**
   * Passed through as it is: a suspended record is in flight (only replays are
   * cached, never a `suspended` answer), and the result its resumption
   * completes is cached from its first replay.
   */
  readonly continuations?: ContinuationSupport;
  /** Passed through as it is: receipts are appended past the cache, to the store that keeps them. */
  readonly receipts?: ReceiptSupport;
  /** Passed through: a health check asks the store, never the cache. */
  readonly ping?: () => Promise<void>;

  constructor(
    readonly inner: IdempotencyStore,
    options: ReplayCacheOptions = {},
  ) {
    // Passed through only when the inner store can say it: the kit falls back otherwise.
    if (inner.onWait) this.onWait = (listener) => inner.onWait!(listener);
    if (inner.transactional) this.transactional = inner.transactional;
    if (inner.strictMode) this.strictMode = inner.strictMode;
    if (inner.steps) this.steps = inner.steps;
    if (inner.continuations) this.continuations = inner.continuations;
    if (inner.receipts) this.receipts = inner.receipts;
    if (inner.ping) this.ping = () => inner.ping!();
    this.cache = new LRUCache<string, CachedRecord>({
      max: options.maxEntries ?? 10_000,
      maxSize: options.maxBytes ?? 64 * 1024 * 1024,
      sizeCalculation: (entry) => Math.max(1, entry.payload.length),
      // The monotonic clock: wall-clock steps never stretch an entry's life.
      perf: performance,
    });
  }

  async tryAcquire(given: AcquireRequest): Promise<AcquireResult> {
    // Checked before the cache answers: a replay from memory refuses what the store would.
    const request = checkAcquireRequest(given);
    const cacheKey = keyOf(request);
    const hit = this.cache.get(cacheKey);
    if (hit) {
      if (fingerprintsConflict(request.fingerprint, hit.fingerprint)) {
        return { kind: 'fingerprint-mismatch' };
      }
      return {
        kind: 'duplicate',
        payload: hit.payload,
        completedAt: hit.completedAt,
        expiresInMs: Math.max(0, Math.floor(hit.endsAt - performance.now())),
        fingerprint: hit.fingerprint,
      };
    }
    const askedAt = performance.now();
    const result = await this.inner.tryAcquire(request);
    if (result.kind === 'duplicate') this.remember(cacheKey, result, askedAt);
    return result;
  }

  complete(lease: Lease, payload: StoredPayload): Promise<void> {
    return this.inner.complete(lease, payload);
  }

  release(lease: Lease): Promise<void> {
    return this.inner.release(lease);
  }

  extend(lease: Lease): Promise<boolean> {
    return this.inner.extend(lease);
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

  private remember(cacheKey: string, result: ReplayedRecord, since: number): void {
    // Counted from before the store was asked, so the entry always ends before the record does.
    const ttl = Math.floor(result.expiresInMs - (performance.now() - since));
    if (ttl <= 0) return;
    this.cache.set(
      cacheKey,
      {
        payload: result.payload,
        completedAt: result.completedAt,
        fingerprint: result.fingerprint,
        endsAt: since + result.expiresInMs,
      },
      { ttl },
    );
  }
}

/** Unambiguous for any scope and key: the scope's length says where the key starts. */
function keyOf(id: RecordId): string {
  return `${id.scope.length}:${id.scope}${id.key}`;
}
