import type { ReceiptSupport } from './receipts';

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
   * Optional: one round trip to the backend, for health checks. Resolves when
   * it answered; throws `IdempotencyStoreUnavailableError` when it did not
   * answer within the store's operation timeout or cannot be reached. Reads
   * and writes no record. Wrappers pass it on.
   */
  ping?(): Promise<void>;
  /**
   * Optional: calls `listener` each time a duplicate starts waiting inside
   * `tryAcquire` (after a look found the record in flight). For tests, which
   * can then act at the moment a waiter waits, and for metrics.
   */
  onWait?(listener: (scope: string) => void): () => void;
  /**
   * Optional capability: completion inside the caller's own database
   * transaction (`completion: 'transaction'`), so an action's writes and its
   * record's completion commit together or not at all. Wrappers pass it on.
   */
  readonly transactional?: TransactionalCompletion;
  /**
   * Optional capability: strict mode (`onExpiredLease: 'refuse'`, AMBIGUOUS
   * records and their resolution). A store that declares it honours
   * `AcquireRequest.onExpiredLease`; one that does not makes strict mode fail
   * the bootstrap. Wrappers pass it on.
   */
  readonly strictMode?: StrictModeSupport;
  /**
   * Optional capability: recorded steps (`ctx.step(name, fn)`). A store that
   * declares it keeps, inside each IN_PROGRESS record, one entry per step
   * name: begun, or recorded with its value. A takeover of an expired lease
   * keeps them; completion, release and a fresh record drop them. Wrappers
   * pass it on.
   */
  readonly steps?: StepSupport;
  /**
   * Optional capability: continuations (`ctx.suspend(answer, { hold })` and
   * `resumes`). A store that declares it keeps a SUSPENDED record's answer
   * and state, answers its duplicates `suspended`, and admits one
   * resumption per continuation. Wrappers pass it on.
   */
  readonly continuations?: ContinuationSupport;
  /**
   * Optional capability: receipts (`receipts: true`). A store that declares
   * it keeps hash chains of receipts of terminal records, appending each
   * atomically by its own clock (see ./receipts.ts). Wrappers pass it on.
   */
  readonly receipts?: ReceiptSupport;
}

/**
 * What a store that holds continuations offers besides the base SPI.
 *
 * A suspended record is IN_PROGRESS to every other rule: its hold is its
 * lease (the store's clock), nobody extends it, and once it lapses the record
 * is an ordinary expired lease (taken over, or AMBIGUOUS in strict mode), the
 * suspension dropped. Until then `tryAcquire` answers at once (no wait)
 * `suspended`, with the answer and the continuation, to every acquirer whose
 * fingerprint matches. A record is found by its locator (`recordLocator`),
 * so a resumption needs neither the raw key nor the tenant.
 */
export interface ContinuationSupport {
  /**
   * Moves the record held under `lease` to SUSPENDED for `holdMs` from now,
   * keeping `answer`, `state` and `continuation`, and wakes its waiters (who
   * get `suspended`). Recorded steps stay. Throws `IdempotencyLeaseLostError`
   * unless the record is IN_PROGRESS under that lease id, and
   * `IdempotencyPayloadError` when answer and state exceed the store's limit.
   */
  suspend(lease: Lease, suspension: Suspension): Promise<void>;
  /**
   * Admits the one resumption of `continuation`, in one atomic step: a
   * record of `scope` at `locator` that is SUSPENDED with that continuation
   * and whose hold has not lapsed becomes IN_PROGRESS under a new lease
   * (`leaseMs`, and `ttlMs` for what follows), its suspension consumed and
   * its steps kept. Anything else changes nothing and says why.
   */
  resume(request: ResumeRequest): Promise<ResumeResult>;
}

/** What `suspend` keeps. */
export interface Suspension {
  /** Who may resume: an opaque, printable id the engine made (at most 64 characters). */
  continuation: string;
  /** What every duplicate meanwhile is answered, in its stored form. */
  answer: StoredPayload;
  /** What the resumption is handed (`ctx.resumed`), in its stored form. */
  state: StoredPayload;
  /** How long the record stays reserved, by the store's clock. */
  holdMs: number;
}

export interface ResumeRequest {
  /** The record's stored scope (with its tenant, if any); a record of another scope is `unknown`. */
  scope: string;
  /** `recordLocator(scope, key)`: where the record is. */
  locator: string;
  continuation: string;
  leaseMs: number;
  ttlMs: number;
}

export type ResumeResult =
  /** Admitted: the caller now holds the record (`id` as stored) and completes or releases it. */
  | { kind: 'admitted'; lease: Lease; id: RecordId; state: StoredPayload }
  /**
   * Refused, nothing changed: `consumed` (resumed already: the record is IN_PROGRESS
   * under that resumption, or COMPLETE after it), `lapsed` (still suspended with
   * it, but its hold ran out), `unknown` (no record here, another continuation,
   * another scope, or the record went on without it).
   */
  | { kind: 'consumed' | 'lapsed' | 'unknown' };

/** What an acquirer of a SUSPENDED record (hold not lapsed, fingerprint matching) is answered. */
export interface SuspendedRecord {
  kind: 'suspended';
  answer: StoredPayload;
  continuation: string;
  /** How long the hold lasts still, by the store's clock. */
  holdRemainingMs: number;
}

/**
 * What a store that records steps offers besides the base SPI. Two fenced
 * writes and one read: `begin` is the look and the mark in one round trip (a
 * replayed step costs one), `record` is fenced like `complete`, and `list`
 * reads by record id, since an AMBIGUOUS record has no lease to read under.
 */
export interface StepSupport {
  /**
   * The step `name` of the record held under `lease`: its recorded value if
   * there is one (nothing changes), else `null` after marking it begun.
   * Throws `IdempotencyLeaseLostError` unless the record is IN_PROGRESS
   * under that lease id.
   */
  begin(lease: Lease, name: string): Promise<StoredPayload | null>;
  /**
   * Writes the value of step `name` (begun or not). Throws
   * `IdempotencyLeaseLostError` unless the record is IN_PROGRESS under that
   * lease id, and `IdempotencyPayloadError` for a value over the store's limit.
   */
  record(lease: Lease, name: string, value: StoredPayload): Promise<void>;
  /** The steps of a record (IN_PROGRESS or AMBIGUOUS), sorted by name; none for another state or no record. Changes nothing. */
  list(id: RecordId): Promise<RecordedStep[]>;
}

/** One step of a record: `value` null when it began and recorded nothing. */
export interface RecordedStep {
  name: string;
  value: StoredPayload | null;
}

/**
 * What a store that supports strict mode offers besides the base SPI. An
 * AMBIGUOUS record (the action may have run, and nobody knows its outcome)
 * never expires, is never purged, and is never taken over: only `resolve`
 * ends it. Reads show it and move nothing.
 */
export interface StrictModeSupport {
  /**
   * Moves the record from IN_PROGRESS under this lease to AMBIGUOUS. Throws
   * `IdempotencyLeaseLostError` unless the record is IN_PROGRESS under that
   * lease id.
   */
  markAmbiguous(lease: Lease, reason: AmbiguityReason): Promise<void>;
  /**
   * Ends an AMBIGUOUS record, atomically. `completed` makes it COMPLETE with
   * the payload for `ttlMs` from now (the store's clock), recording
   * `resolvedBy` and the time; `not-executed` deletes it, so the next attempt
   * runs. A record that is not AMBIGUOUS (absent, in flight, complete, or
   * resolved meanwhile by someone else) is left alone: `not-ambiguous`.
   */
  resolve(id: RecordId, resolution: Resolution): Promise<ResolveResult>;
}

/**
 * Why a record became AMBIGUOUS: its holder's lease ran out (strict mode
 * refuses to take it over), or its action threw. `step-unknown`: either, while
 * a recorded step (`ctx.step`) had begun and recorded nothing; the engine
 * reports it (stores keep the first two), naming the step.
 */
export type AmbiguityReason = 'lease-expired' | 'action-failed' | 'step-unknown';

/**
 * What an acquirer is told about a record nobody knows the outcome of.
 * `transitioned`: this very call moved it there (it found the lease expired).
 */
export interface AmbiguousRecord {
  kind: 'ambiguous';
  since: Date;
  reason: AmbiguityReason;
  transitioned?: boolean;
  /** `step-unknown`: the step that began and recorded nothing (set by the engine). */
  step?: string;
}

/** How an AMBIGUOUS record ends, and who said so (`cli:local`, `reconcile`, or a label of yours). */
export type Resolution =
  | { outcome: 'completed'; payload: StoredPayload; ttlMs: number; resolvedBy: string }
  | { outcome: 'not-executed'; resolvedBy: string };

export type ResolveResult =
  | { kind: 'resolved'; resolvedAt: Date }
  /** Nothing was changed: the record is absent (`state: null`) or not AMBIGUOUS. */
  | { kind: 'not-ambiguous'; state: RecordState | null };

/**
 * Completion that joins a transaction of the store's own database. `Tx` is
 * that database's transaction handle (a TypeORM `EntityManager` for the
 * TypeORM store).
 */
export interface TransactionalCompletion<Tx = unknown> {
  /** Runs `work` in a new transaction of the store's database; it commits when `work` resolves. */
  transaction<T>(work: (tx: Tx) => Promise<T>): Promise<T>;
  /**
   * The fenced completion as a statement of `tx`, committed (or rolled back)
   * with it: `lease-lost` when the record is no longer IN_PROGRESS under the
   * lease, and the caller then rolls back. Waiters wake once `tx` commits.
   */
  completeIn(tx: Tx, lease: Lease, payload: StoredPayload): Promise<'stored' | 'lease-lost'>;
  /** Optional: called once the transaction that completed `lease` has committed (to wake this process's waiters). */
  afterCommit?(lease: Lease): void;
}

/** Runs `work` in a transaction (a new one, or one the caller's framework already opened). */
export type TransactionRunner<Tx = unknown> = <T>(work: (tx: Tx) => Promise<T>) => Promise<T>;

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
  /**
   * Optional, strict mode: `refuse` never takes over an IN_PROGRESS record
   * whose lease ran out; the look moves it to AMBIGUOUS and answers
   * `ambiguous`. Absent or `steal`: the expired lease is taken over. Only
   * sent to stores that declare `strictMode`.
   */
  onExpiredLease?: 'steal' | 'refuse';
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
  /** Strict-mode stores only: the record is AMBIGUOUS (whatever `onExpiredLease` the caller sent). */
  | AmbiguousRecord
  /** Stores with continuations only: the record is SUSPENDED and its hold runs (answered without waiting). */
  | SuspendedRecord
) & {
  /** Optional: how long the caller waited inside `tryAcquire` for a holder (`waitForRecord` reports it). */
  waitedMs?: number;
};

/** AMBIGUOUS exists only in stores that support strict mode. */
export type RecordState = 'IN_PROGRESS' | 'COMPLETE' | 'AMBIGUOUS';

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
  /** AMBIGUOUS only: since when (the store's clock) and why. */
  ambiguousSince?: Date;
  ambiguousReason?: AmbiguityReason;
  /** A SUSPENDED record (IN_PROGRESS, `ctx.suspend`): when its hold lapses (the store's clock). */
  suspendedUntil?: Date;
  /** A COMPLETE record that a resolution completed: who said so, and when (the store's clock). */
  resolvedBy?: string;
  resolvedAt?: Date;
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

/**
 * Injection token for the store (same name as the interface, as `@nestjs/throttler` does).
 * A global symbol: the same in both builds of the package.
 */
export const IdempotencyStore = Symbol.for('nest-idempotency.IdempotencyStore');
