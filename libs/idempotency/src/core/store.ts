/**
 * The storage SPI. A store keeps one record per (scope, key): absent,
 * IN_PROGRESS under a lease, or COMPLETE with a stored payload.
 *
 * - Blocking for a duplicate happens inside `tryAcquire`, so each backend
 *   waits the way its technology waits best (`waitForRecord` in
 *   ./wait-loop.ts is the loop every built-in store shares).
 * - `complete`, `release` and `extend` take the `Lease` that `tryAcquire`
 *   handed out: the record's identity as the store computed it once, and the
 *   lease id that fences a stale owner out. `complete` and `release` throw
 *   `IdempotencyLeaseLostError` unless the record is IN_PROGRESS under that
 *   lease id; `extend` returns false instead.
 * - `find` and `list` never change a record.
 * - Every time decision (lease expiry, TTL) uses the backend's own clock.
 * - A backend that cannot answer in time throws `IdempotencyStoreUnavailableError`.
 *
 * The behaviour is specified by the conformance kit (`nest-idempotency/testing`).
 */
export interface IdempotencyStore {
  tryAcquire(request: AcquireRequest): Promise<AcquireResult>;
  /** Stores the payload and moves the record to COMPLETE for the lease's `ttlMs`. */
  complete(lease: Lease, payload: StoredPayload): Promise<void>;
  /** Deletes the record: a failed attempt leaves no trace. */
  release(lease: Lease): Promise<void>;
  /** Moves the lease's expiry to `leaseMs` from now; false when the lease is no longer held. */
  extend(lease: Lease): Promise<boolean>;
  /**
   * Deletes at most `limit` (default 1000) expired records in one batch and
   * returns how many it deleted: COMPLETE records past their TTL, IN_PROGRESS
   * records past both their TTL and their lease. A caller that wants more
   * repeats it until a batch comes back short.
   */
  purgeExpired(options?: { limit?: number }): Promise<number>;
  find(id: RecordId): Promise<IdempotencyRecordView | null>;
  /** Newest first. */
  list(filter?: ListFilter): Promise<IdempotencyRecordView[]>;
  /** Optional: prepare (check schema, open connections). Called once at bootstrap by the Nest module. */
  init?(): Promise<void>;
  /** Optional: release connections and wake waiters. Called on application shutdown. */
  close?(): Promise<void>;
  /**
   * Optional: calls `listener` each time a duplicate starts waiting inside
   * `tryAcquire` (after a look found the record in flight). For tests, which
   * can then act at the moment a waiter waits, and for metrics.
   */
  onWait?(listener: (scope: string) => void): () => void;
}

/** The record's identity: a scope (a namespace such as `Class.method`) and a key within it. */
export interface RecordId {
  scope: string;
  key: string;
}

export interface AcquireRequest extends RecordId {
  /** How long the new holder is protected before another caller may steal the record. */
  leaseMs: number;
  /** How long to block, inside `tryAcquire`, for an IN_PROGRESS record's outcome. 0: look once. */
  waitTimeoutMs: number;
  /** How long a COMPLETE record stays replayable (and an abandoned one is kept). */
  ttlMs: number;
  /** What identifies the request; a record first taken with another one answers `fingerprint-mismatch`. */
  fingerprint: string | null;
}

/**
 * What `tryAcquire` hands the holder. Stores return their own subtype carrying
 * what their later calls need (for instance the hashed record id); callers
 * treat it as opaque and pass it back as it is.
 */
export interface Lease {
  readonly leaseId: string;
  readonly leaseMs: number;
  readonly ttlMs: number;
}

/**
 * A payload in its stored form: bytes, encoded once by the caller (see
 * ./payload.ts) and handed back on a replay exactly as they were stored.
 */
export type StoredPayload = Buffer;

export interface ReplayedRecord {
  kind: 'duplicate';
  payload: StoredPayload;
  completedAt: Date;
  /** How long the record stays replayable, by the store's clock. */
  expiresInMs: number;
  fingerprint: string | null;
}

export type AcquireResult = (
  | {
      kind: 'acquired';
      lease: Lease;
      /** Optional: true when the record was taken over from an expired lease (or an expired result). */
      stolen?: boolean;
    }
  | ReplayedRecord
  | { kind: 'in-flight'; retryAfterMs: number }
  | { kind: 'fingerprint-mismatch' }
) & {
  /** Optional: how long the caller waited inside `tryAcquire` for a holder (`waitForRecord` reports it). */
  waitedMs?: number;
};

export type RecordState = 'IN_PROGRESS' | 'COMPLETE';

/** What a read shows. It names an attempt's timing, never a host or a process. */
export interface IdempotencyRecordView extends RecordId {
  state: RecordState;
  leaseExpiresAt: Date | null;
  /** True for an IN_PROGRESS record whose lease has run out but that nobody has stolen yet. */
  leaseExpired: boolean;
  expiresAt: Date;
  createdAt: Date;
  completedAt: Date | null;
  fingerprint: string | null;
  /** The stored payload of a COMPLETE record; undefined otherwise. */
  payload?: StoredPayload;
}

export interface ListFilter {
  scope?: string;
  state?: RecordState;
  /** Default 100. */
  limit?: number;
}

/** Default bound on duplicates parked in one process; past it a duplicate is told "in flight" at once. */
export const DEFAULT_MAX_WAITERS = 10_000;

/** Default rows deleted by one `purgeExpired` batch. */
export const DEFAULT_PURGE_BATCH = 1000;

/** Injection token for the store (same name as the interface, as `@nestjs/throttler` does). */
export const IdempotencyStore = Symbol('IdempotencyStore');
