/** The record's identity inside a store. */
export interface RecordId {
  scope: string;
  key: string;
}

export interface AcquireRequest extends RecordId {
  leaseMs: number;
  waitTimeoutMs: number;
  ttlMs: number;
  fingerprint?: string;
}

export type AcquireResult =
  | { kind: 'acquired'; leaseId: string }
  | {
      kind: 'duplicate';
      payload: unknown;
      completedAt: Date;
      /** Optional: how long the record stays replayable, by the store's clock. Lets a local cache keep it no longer. */
      expiresInMs?: number;
      /** Optional: the record's fingerprint, so a cached copy can still refuse a mismatch. */
      fingerprint?: string | null;
    }
  | { kind: 'in-flight'; retryAfterMs: number }
  | { kind: 'fingerprint-mismatch' };

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
  /** The stored result of a COMPLETE record; undefined otherwise. */
  payload?: unknown;
}

export interface ListFilter {
  scope?: string;
  state?: RecordState;
  limit?: number;
}

/**
 * The storage SPI. Blocking for a duplicate happens inside `tryAcquire`, so
 * each backend waits the way its technology waits best.
 *
 * - `complete` and `release` throw `IdempotencyLeaseLostError` unless the record
 *   is IN_PROGRESS under `leaseId`; `extend` returns false instead.
 * - `find` and `list` never change a record.
 * - Backends throw `IdempotencyStoreUnavailableError` when they cannot answer in time.
 */
export interface IdempotencyStore {
  tryAcquire(request: AcquireRequest): Promise<AcquireResult>;
  complete(id: RecordId, leaseId: string, payload: unknown, ttlMs: number): Promise<void>;
  release(id: RecordId, leaseId: string): Promise<void>;
  extend(id: RecordId, leaseId: string, leaseMs: number): Promise<boolean>;
  purgeExpired(options?: { limit?: number }): Promise<number>;
  find(id: RecordId): Promise<IdempotencyRecordView | null>;
  list(filter?: ListFilter): Promise<IdempotencyRecordView[]>;
  /** Optional: prepare (check schema, open connections). Called once at bootstrap by the Nest module. */
  init?(): Promise<void>;
  /** Optional: release connections and wake waiters. Called on application shutdown. */
  close?(): Promise<void>;
}

/** Default bound on duplicates parked in one process; past it a duplicate is told "in flight" at once. */
export const DEFAULT_MAX_WAITERS = 10_000;

/** Injection token for the store (same name as the interface, as `@nestjs/throttler` does). */
export const IdempotencyStore = Symbol('IdempotencyStore');
