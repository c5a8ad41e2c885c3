import { randomUUID } from 'node:crypto';
import {
  becomesAmbiguous,
  decide,
  isPurgeable,
  isStealable,
  ObservedRecord,
} from '../../core/decide';
import { PROBE_BYTES, PROBE_SCOPE, PROBE_TTL_MS, probeMismatch } from '../../core/byte-probe';
import { IdempotencyLeaseLostError, IdempotencyStoreSchemaError } from '../../core/errors';
import { optionKeys, refuseUnknownOptions } from '../../core/option-keys';
import { assertPayloadSize, DEFAULT_MAX_PAYLOAD_BYTES } from '../../core/payload';
import {
  checkAcquireRequest,
  checkLease,
  checkListFilter,
  checkPayload,
  checkPurgeOptions,
  checkRecordId,
  checkResolution,
  checkResumeRequest,
  checkStepName,
  checkSuspension,
} from '../../core/store-input';
import { recordLocator } from '../../core/key';
import {
  AcquireRequest,
  AcquireResult,
  AmbiguityReason,
  ContinuationSupport,
  DEFAULT_MAX_WAITERS,
  DEFAULT_PURGE_BATCH,
  IdempotencyRecordView,
  IdempotencyStore,
  Lease,
  ListFilter,
  RecordId,
  RecordedStep,
  RecordState,
  Resolution,
  ResolveResult,
  StepSupport,
  StoredPayload,
  StrictModeSupport,
} from '../../core/store';
import { Observation, waitForRecord } from '../../core/wait-loop';
import { WaiterRegistry } from '../../core/waiters';
import { MemoryReceipts } from './memory-receipts';

interface MemoryRecord {
  scope: string;
  key: string;
  state: RecordState;
  leaseId: string | null;
  leaseExpiresAt: number | null;
  expiresAt: number;
  createdAt: number;
  completedAt: number | null;
  fingerprint: string | null;
  payload: StoredPayload | null;
  /** AMBIGUOUS: since when and why. */
  ambiguousSince?: number;
  ambiguousReason?: AmbiguityReason;
  /** Completed by a resolution: who said so, and when. */
  resolvedBy?: string;
  resolvedAt?: number;
  /** Recorded steps (IN_PROGRESS and AMBIGUOUS only): name → value, or null when begun. */
  steps?: Map<string, StoredPayload | null>;
  /** The continuation it was suspended with: kept once resumed (so a second resumption is `consumed`). */
  continuation?: string;
  /** SUSPENDED (IN_PROGRESS, its lease the hold): the answer and the state, until resumed. */
  suspension?: { answer: StoredPayload; state: StoredPayload };
}

interface MemoryLease extends Lease {
  readonly id: string;
}

export interface InMemoryIdempotencyStoreOptions {
  maxPayloadBytes?: number;
  /** Most duplicates parked waiting at once; one more is answered `in-flight` at once. Default 10,000. */
  maxWaiters?: number;
  /** Clock in epoch milliseconds; replaceable for model tests. */
  now?: () => number;
}

/** Every key of `InMemoryIdempotencyStoreOptions` (`tsc` fails when the two disagree); any other is refused. */
export const IN_MEMORY_STORE_OPTION_KEYS = optionKeys<InMemoryIdempotencyStoreOptions>()([
  'maxPayloadBytes',
  'maxWaiters',
  'now',
]);

/**
 * A single-process store, for tests, development and single-instance
 * services. Waiters are woken the moment the holder completes or releases; a
 * lease running out wakes them through the wait's own timer. Supports strict
 * mode (AMBIGUOUS records live as long as the process: nothing here survives
 * a restart).
 */
export class InMemoryIdempotencyStore implements IdempotencyStore {
  private readonly records = new Map<string, MemoryRecord>();
  private readonly waiters = new WaiterRegistry();
  private readonly maxPayloadBytes: number;
  private readonly maxWaiters: number;
  private readonly now: () => number;
  /** Receipts: an array and a head per chain, in this process (see ./memory-receipts.ts). */
  readonly receipts: MemoryReceipts;

  readonly strictMode: StrictModeSupport = {
    markAmbiguous: (lease, reason) => this.markAmbiguous(lease, reason),
    resolve: (id, resolution) => this.resolve(id, resolution),
  };

  readonly steps: StepSupport = {
    begin: async (lease, name) => {
      checkLease(lease, 'steps.begin');
      checkStepName(name, 'steps.begin');
      const record = this.held((lease as MemoryLease).id, lease, 'steps.begin');
      record.steps ??= new Map();
      const recorded = record.steps.get(name);
      if (recorded) return Buffer.from(recorded);
      record.steps.set(name, null);
      return null;
    },
    record: async (lease, name, value) => {
      checkLease(lease, 'steps.record');
      checkStepName(name, 'steps.record');
      checkPayload(value, 'steps.record');
      assertPayloadSize(value, this.maxPayloadBytes);
      const record = this.held((lease as MemoryLease).id, lease, 'steps.record');
      (record.steps ??= new Map()).set(name, Buffer.from(value));
    },
    list: async (id) => {
      checkRecordId(id, 'steps.list');
      const record = this.records.get(idOf(id));
      if (!record?.steps || record.state === 'COMPLETE') return [];
      const out: RecordedStep[] = [];
      for (const [name, value] of record.steps) {
        out.push({ name, value: value === null ? null : Buffer.from(value) });
      }
      return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    },
  };

  readonly continuations: ContinuationSupport = {
    suspend: async (lease, suspension) => {
      checkLease(lease, 'continuations.suspend');
      checkSuspension(suspension);
      assertPayloadSize(Buffer.concat([suspension.answer, suspension.state]), this.maxPayloadBytes);
      const { id } = lease as MemoryLease;
      const record = this.held(id, lease, 'continuations.suspend');
      // Nobody holds a suspended record: its lease id is one no holder has.
      record.leaseId = randomUUID();
      record.leaseExpiresAt = this.now() + suspension.holdMs;
      record.continuation = suspension.continuation;
      record.suspension = {
        answer: Buffer.from(suspension.answer),
        state: Buffer.from(suspension.state),
      };
      this.located.set(recordLocator(record.scope, record.key), id);
      this.waiters.notify(id);
    },
    resume: async (request) => {
      checkResumeRequest(request);
      const id = this.located.get(request.locator);
      const record = id === undefined ? undefined : this.records.get(id);
      if (
        !record ||
        record.scope !== request.scope ||
        record.continuation !== request.continuation ||
        record.state === 'AMBIGUOUS'
      ) {
        return { kind: 'unknown' };
      }
      if (!record.suspension) return { kind: 'consumed' };
      const now = this.now();
      if (leaseLeft(record, now) <= 0) return { kind: 'lapsed' };
      const { state } = record.suspension;
      delete record.suspension;
      const leaseId = randomUUID();
      record.leaseId = leaseId;
      record.leaseExpiresAt = now + request.leaseMs;
      record.expiresAt = now + request.ttlMs;
      const lease: MemoryLease = {
        id: id!,
        leaseId,
        leaseMs: request.leaseMs,
        ttlMs: request.ttlMs,
      };
      return { kind: 'admitted', lease, id: { scope: record.scope, key: record.key }, state };
    },
  };

  /** Suspended records by locator, for `resume` (entries go with their records). */
  private readonly located = new Map<string, string>();

  constructor(options: InMemoryIdempotencyStoreOptions = {}) {
    refuseUnknownOptions(options, IN_MEMORY_STORE_OPTION_KEYS, 'InMemoryIdempotencyStore');
    this.maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
    this.maxWaiters = options.maxWaiters ?? DEFAULT_MAX_WAITERS;
    this.now = options.now ?? Date.now;
    this.receipts = new MemoryReceipts(() => this.now());
  }

  /**
   * Proves, as every built-in store does at `init()`, that a payload comes back
   * byte for byte: `PROBE_BYTES` stored under a record of its own, replayed,
   * read, and deleted.
   */
  async init(): Promise<void> {
    const key = randomUUID();
    const request: AcquireRequest = {
      scope: PROBE_SCOPE,
      key,
      leaseMs: PROBE_TTL_MS,
      ttlMs: PROBE_TTL_MS,
      waitTimeoutMs: 0,
      fingerprint: null,
    };
    try {
      const acquired = await this.tryAcquire(request);
      if (acquired.kind !== 'acquired') throw new Error(`the probe's record was ${acquired.kind}`);
      await this.complete(acquired.lease, PROBE_BYTES);
      const replayed = await this.tryAcquire(request);
      const found = await this.find({ scope: PROBE_SCOPE, key });
      const mismatch =
        probeMismatch(replayed.kind === 'duplicate' ? replayed.payload : null) ??
        probeMismatch(found?.payload);
      if (mismatch) throw new Error(mismatch);
    } catch (error) {
      throw new IdempotencyStoreSchemaError(
        `InMemoryIdempotencyStore: stored bytes do not come back unchanged: ${(error as Error).message}`,
      );
    } finally {
      this.records.delete(idOf({ scope: PROBE_SCOPE, key }));
    }
  }

  tryAcquire(given: AcquireRequest): Promise<AcquireResult> {
    let request: AcquireRequest;
    try {
      request = checkAcquireRequest(given);
    } catch (error) {
      return Promise.reject(error as Error);
    }
    const id = idOf(request);
    // The look is synchronous, so nothing can complete or release the record between
    // it and the answer: only a record in flight needs the shared wait loop (and its
    // ticket, taken before that loop looks again).
    const observed = this.look(id, request);
    if (observed.kind === 'acquired') return Promise.resolve(observed);
    if (observed.kind === 'record') {
      const decision = decide(observed.record, request.fingerprint);
      if (decision.kind !== 'busy') return Promise.resolve(decision);
    }
    return waitForRecord({
      request,
      waiters: this.waiters,
      waiterId: id,
      maxWaiters: this.maxWaiters,
      pollMs: () => Number.POSITIVE_INFINITY,
      look: async () => this.look(id, request),
    });
  }

  async complete(lease: Lease, payload: StoredPayload): Promise<void> {
    checkLease(lease, 'complete');
    checkPayload(payload, 'complete');
    assertPayloadSize(payload, this.maxPayloadBytes);
    const { id } = lease as MemoryLease;
    const record = this.held(id, lease, 'complete');
    const now = this.now();
    record.state = 'COMPLETE';
    // A copy: the caller's buffer may be reused after this returns.
    record.payload = Buffer.from(payload);
    record.completedAt = now;
    record.expiresAt = now + lease.ttlMs;
    record.leaseId = null;
    record.leaseExpiresAt = null;
    delete record.steps;
    this.waiters.notify(id);
  }

  async release(lease: Lease): Promise<void> {
    checkLease(lease, 'release');
    const { id } = lease as MemoryLease;
    this.forget(id, this.held(id, lease, 'release'));
    this.waiters.notify(id);
  }

  private async markAmbiguous(lease: Lease, reason: AmbiguityReason): Promise<void> {
    checkLease(lease, 'markAmbiguous');
    const { id } = lease as MemoryLease;
    const record = this.held(id, lease, 'markAmbiguous');
    toAmbiguous(record, reason, this.now());
    this.waiters.notify(id);
  }

  private async resolve(id: RecordId, resolution: Resolution): Promise<ResolveResult> {
    checkResolution(id, resolution);
    if (resolution.outcome === 'completed') {
      assertPayloadSize(resolution.payload, this.maxPayloadBytes);
    }
    const recordId = idOf(id);
    const record = this.records.get(recordId);
    if (!record || record.state !== 'AMBIGUOUS') {
      return { kind: 'not-ambiguous', state: record?.state ?? null };
    }
    const now = this.now();
    if (resolution.outcome === 'not-executed') {
      this.forget(recordId, record);
    } else {
      record.state = 'COMPLETE';
      record.payload = Buffer.from(resolution.payload);
      record.completedAt = now;
      record.expiresAt = now + resolution.ttlMs;
      record.resolvedBy = resolution.resolvedBy;
      record.resolvedAt = now;
      delete record.steps;
      delete record.ambiguousSince;
      delete record.ambiguousReason;
    }
    this.waiters.notify(recordId);
    return { kind: 'resolved', resolvedAt: new Date(now) };
  }

  async extend(lease: Lease): Promise<boolean> {
    checkLease(lease, 'extend');
    const record = this.records.get((lease as MemoryLease).id);
    if (!record || record.state !== 'IN_PROGRESS' || record.leaseId !== lease.leaseId) return false;
    record.leaseExpiresAt = this.now() + lease.leaseMs;
    return true;
  }

  async purgeExpired(options: { limit?: number } = {}): Promise<number> {
    checkPurgeOptions(options);
    const limit = options.limit ?? DEFAULT_PURGE_BATCH;
    const now = this.now();
    let purged = 0;
    for (const [id, record] of this.records) {
      if (purged >= limit) break;
      if (isPurgeable(record.state, leaseLeft(record, now), record.expiresAt - now)) {
        this.forget(id, record);
        purged++;
      }
    }
    return purged;
  }

  async find(id: RecordId): Promise<IdempotencyRecordView | null> {
    checkRecordId(id, 'find');
    const record = this.records.get(idOf(id));
    return record ? this.view(record) : null;
  }

  async list(filter: ListFilter = {}): Promise<IdempotencyRecordView[]> {
    checkListFilter(filter);
    const limit = filter.limit ?? 100;
    const out: IdempotencyRecordView[] = [];
    const sorted = [...this.records.values()].sort((a, b) => b.createdAt - a.createdAt);
    for (const record of sorted) {
      if (out.length >= limit) break;
      if (filter.scope !== undefined && record.scope !== filter.scope) continue;
      if (filter.state !== undefined && record.state !== filter.state) continue;
      out.push(this.view(record));
    }
    return out;
  }

  /** Nothing to reach: the records are in this process. */
  async ping(): Promise<void> {}

  async close(): Promise<void> {
    this.waiters.notifyAll();
  }

  onWait(listener: (scope: string) => void): () => void {
    return this.waiters.onWait(listener);
  }

  private forget(id: string, record: MemoryRecord): void {
    this.records.delete(id);
    if (record.continuation !== undefined)
      this.located.delete(recordLocator(record.scope, record.key));
  }

  private look(id: string, request: AcquireRequest): Observation {
    const now = this.now();
    const existing = this.records.get(id);
    let transitioned = false;
    if (
      existing &&
      becomesAmbiguous(existing.state, leaseLeft(existing, now), request.onExpiredLease)
    ) {
      // Strict mode: the lapse is noticed here, by the contender, and refused.
      toAmbiguous(existing, 'lease-expired', now);
      delete existing.suspension;
      this.waiters.notify(id);
      transitioned = true;
    }
    if (
      !existing ||
      isStealable(
        existing.state,
        leaseLeft(existing, now),
        existing.expiresAt - now,
        request.onExpiredLease,
      )
    ) {
      const leaseId = randomUUID();
      const record: MemoryRecord = {
        scope: request.scope,
        key: request.key,
        state: 'IN_PROGRESS',
        leaseId,
        leaseExpiresAt: now + request.leaseMs,
        expiresAt: now + request.ttlMs,
        createdAt: now,
        completedAt: null,
        fingerprint: request.fingerprint,
        payload: null,
      };
      // A takeover of an expired lease keeps what the earlier holder recorded.
      if (existing?.state === 'IN_PROGRESS' && existing.steps) record.steps = existing.steps;
      this.records.set(id, record);
      const lease: MemoryLease = { id, leaseId, leaseMs: request.leaseMs, ttlMs: request.ttlMs };
      return { kind: 'acquired', lease, stolen: existing !== undefined };
    }
    const record: ObservedRecord = {
      state: existing.state,
      fingerprint: existing.fingerprint,
      leaseLeftMs: leaseLeft(existing, now),
      expiresLeftMs: existing.expiresAt - now,
      payload: existing.payload,
      completedAt: existing.completedAt === null ? null : new Date(existing.completedAt),
      suspension: existing.suspension
        ? { answer: existing.suspension.answer, continuation: existing.continuation! }
        : null,
    };
    if (existing.state === 'AMBIGUOUS') {
      record.ambiguousSince = new Date(existing.ambiguousSince!);
      record.ambiguousReason = existing.ambiguousReason!;
      record.transitioned = transitioned;
    }
    return { kind: 'record', record };
  }

  private held(id: string, lease: Lease, operation: string): MemoryRecord {
    const record = this.records.get(id);
    if (!record || record.state !== 'IN_PROGRESS' || record.leaseId !== lease.leaseId) {
      throw new IdempotencyLeaseLostError(
        `${operation} refused: the record is no longer held under this lease`,
      );
    }
    return record;
  }

  private view(record: MemoryRecord): IdempotencyRecordView {
    const now = this.now();
    const view: IdempotencyRecordView = {
      scope: record.scope,
      key: record.key,
      state: record.state,
      leaseExpiresAt: record.leaseExpiresAt === null ? null : new Date(record.leaseExpiresAt),
      leaseExpired: record.state === 'IN_PROGRESS' && record.leaseExpiresAt! <= now,
      expiresAt: new Date(record.expiresAt),
      createdAt: new Date(record.createdAt),
      completedAt: record.completedAt === null ? null : new Date(record.completedAt),
      fingerprint: record.fingerprint,
    };
    if (record.state === 'COMPLETE') view.payload = record.payload!;
    if (record.suspension) view.suspendedUntil = new Date(record.leaseExpiresAt!);
    if (record.state === 'AMBIGUOUS') {
      view.ambiguousSince = new Date(record.ambiguousSince!);
      view.ambiguousReason = record.ambiguousReason!;
    }
    if (record.resolvedBy !== undefined) {
      view.resolvedBy = record.resolvedBy;
      view.resolvedAt = new Date(record.resolvedAt!);
    }
    return view;
  }
}

/** Unambiguous for any scope and key. */
function idOf(id: RecordId): string {
  return `${id.scope.length}:${id.scope}${id.key}`;
}

/** Strict mode: nobody knows what the action did. The lease is gone, and the record stays until resolved. */
function toAmbiguous(record: MemoryRecord, reason: AmbiguityReason, now: number): void {
  record.state = 'AMBIGUOUS';
  record.leaseId = null;
  record.leaseExpiresAt = null;
  record.ambiguousSince = now;
  record.ambiguousReason = reason;
}

function leaseLeft(record: MemoryRecord, now: number): number {
  return record.leaseExpiresAt === null ? 0 : record.leaseExpiresAt - now;
}
