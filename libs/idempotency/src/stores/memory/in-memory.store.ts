import { randomUUID } from 'node:crypto';
import { IdempotencyLeaseLostError } from '../../core/errors';
import { decodePayload, DEFAULT_MAX_PAYLOAD_BYTES, encodePayload } from '../../core/payload';
import {
  AcquireRequest,
  AcquireResult,
  DEFAULT_MAX_WAITERS,
  IdempotencyRecordView,
  IdempotencyStore,
  ListFilter,
  RecordId,
} from '../../core/store';
import { WaiterRegistry } from '../../core/waiters';

interface MemoryRecord {
  scope: string;
  key: string;
  state: 'IN_PROGRESS' | 'COMPLETE';
  leaseId: string | null;
  leaseExpiresAt: number | null;
  expiresAt: number;
  createdAt: number;
  completedAt: number | null;
  fingerprint: string | null;
  payload: string | null;
}

export interface InMemoryIdempotencyStoreOptions {
  maxPayloadBytes?: number;
  /** Most duplicates parked waiting at once; one more is answered `in-flight` at once. Default 10,000. */
  maxWaiters?: number;
  /** Clock in epoch milliseconds; replaceable for model tests. */
  now?: () => number;
}

/**
 * A single-process store. Waiters are woken the moment the holder completes or
 * releases; a lease running out wakes them through a timer set to its expiry.
 */
export class InMemoryIdempotencyStore implements IdempotencyStore {
  private readonly records = new Map<string, MemoryRecord>();
  private readonly waiters = new WaiterRegistry();
  private readonly maxPayloadBytes: number;
  private readonly maxWaiters: number;
  private readonly now: () => number;

  constructor(options: InMemoryIdempotencyStoreOptions = {}) {
    this.maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
    this.maxWaiters = options.maxWaiters ?? DEFAULT_MAX_WAITERS;
    this.now = options.now ?? Date.now;
  }

  async tryAcquire(request: AcquireRequest): Promise<AcquireResult> {
    const id = idOf(request);
    const deadline = Date.now() + request.waitTimeoutMs;
    for (;;) {
      const now = this.now();
      const existing = this.records.get(id);
      if (!existing || isStealable(existing, now)) {
        const leaseId = randomUUID();
        this.records.set(id, {
          scope: request.scope,
          key: request.key,
          state: 'IN_PROGRESS',
          leaseId,
          leaseExpiresAt: now + request.leaseMs,
          expiresAt: now + request.ttlMs,
          createdAt: now,
          completedAt: null,
          fingerprint: request.fingerprint ?? null,
          payload: null,
        });
        return { kind: 'acquired', leaseId };
      }
      if (
        request.fingerprint &&
        existing.fingerprint &&
        request.fingerprint !== existing.fingerprint
      ) {
        return { kind: 'fingerprint-mismatch' };
      }
      if (existing.state === 'COMPLETE') {
        return {
          kind: 'duplicate',
          payload: decodePayload(existing.payload),
          completedAt: new Date(existing.completedAt!),
          expiresInMs: Math.max(0, existing.expiresAt - now),
          fingerprint: existing.fingerprint,
        };
      }
      const leaseLeftMs = Math.max(0, existing.leaseExpiresAt! - now);
      const waitLeftMs = deadline - Date.now();
      // Past the cap, answer at once rather than hold memory for one more waiter.
      if (waitLeftMs <= 0 || this.waiters.size >= this.maxWaiters) {
        return { kind: 'in-flight', retryAfterMs: leaseLeftMs };
      }
      const ticket = this.waiters.register(id);
      try {
        // Wake at the holder's completion or release, at lease expiry (to steal), or when our wait ends.
        await ticket.wait(Math.min(waitLeftMs, leaseLeftMs + 1));
      } finally {
        ticket.dispose();
      }
    }
  }

  async complete(id: RecordId, leaseId: string, payload: unknown, ttlMs: number): Promise<void> {
    const encoded = encodePayload(payload, this.maxPayloadBytes);
    const record = this.held(id, leaseId, 'complete');
    const now = this.now();
    Object.assign(record, {
      state: 'COMPLETE',
      payload: encoded,
      completedAt: now,
      expiresAt: now + ttlMs,
      leaseId: null,
      leaseExpiresAt: null,
    });
    this.waiters.notify(idOf(id));
  }

  async release(id: RecordId, leaseId: string): Promise<void> {
    this.held(id, leaseId, 'release');
    this.records.delete(idOf(id));
    this.waiters.notify(idOf(id));
  }

  async extend(id: RecordId, leaseId: string, leaseMs: number): Promise<boolean> {
    const record = this.records.get(idOf(id));
    if (!record || record.state !== 'IN_PROGRESS' || record.leaseId !== leaseId) return false;
    record.leaseExpiresAt = this.now() + leaseMs;
    return true;
  }

  async purgeExpired(options: { limit?: number } = {}): Promise<number> {
    const now = this.now();
    let purged = 0;
    for (const [id, record] of this.records) {
      if (options.limit !== undefined && purged >= options.limit) break;
      if (isPurgeable(record, now)) {
        this.records.delete(id);
        purged++;
      }
    }
    return purged;
  }

  async find(id: RecordId): Promise<IdempotencyRecordView | null> {
    const record = this.records.get(idOf(id));
    return record ? this.view(record) : null;
  }

  async list(filter: ListFilter = {}): Promise<IdempotencyRecordView[]> {
    const out: IdempotencyRecordView[] = [];
    const sorted = [...this.records.values()].sort((a, b) => b.createdAt - a.createdAt);
    for (const record of sorted) {
      if (filter.scope !== undefined && record.scope !== filter.scope) continue;
      if (filter.state !== undefined && record.state !== filter.state) continue;
      out.push(this.view(record));
      if (filter.limit !== undefined && out.length >= filter.limit) break;
    }
    return out;
  }

  async close(): Promise<void> {
    this.waiters.notifyAll();
  }

  private held(id: RecordId, leaseId: string, operation: string): MemoryRecord {
    const record = this.records.get(idOf(id));
    if (!record || record.state !== 'IN_PROGRESS' || record.leaseId !== leaseId) {
      throw new IdempotencyLeaseLostError(
        `${operation} refused: the record is no longer held under this lease`,
      );
    }
    return record;
  }

  private view(record: MemoryRecord): IdempotencyRecordView {
    const now = this.now();
    return {
      scope: record.scope,
      key: record.key,
      state: record.state,
      leaseExpiresAt: record.leaseExpiresAt === null ? null : new Date(record.leaseExpiresAt),
      leaseExpired: record.state === 'IN_PROGRESS' && record.leaseExpiresAt! <= now,
      expiresAt: new Date(record.expiresAt),
      createdAt: new Date(record.createdAt),
      completedAt: record.completedAt === null ? null : new Date(record.completedAt),
      fingerprint: record.fingerprint,
      ...(record.state === 'COMPLETE' ? { payload: decodePayload(record.payload) } : {}),
    };
  }
}

function idOf(id: RecordId): string {
  return JSON.stringify([id.scope, id.key]);
}

function isStealable(record: MemoryRecord, now: number): boolean {
  return record.state === 'IN_PROGRESS' ? record.leaseExpiresAt! <= now : record.expiresAt <= now;
}

function isPurgeable(record: MemoryRecord, now: number): boolean {
  return record.expiresAt <= now && (record.state === 'COMPLETE' || record.leaseExpiresAt! <= now);
}
