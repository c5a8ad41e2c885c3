import type { AmbiguityReason, StoredPayload } from 'nest-idempotency';

/**
 * A reference model of one scope's records, small enough to check by eye against
 * the lifecycle: absent / IN_PROGRESS / COMPLETE / AMBIGUOUS; acquire, complete,
 * release, extend, steal after lease expiry, purge; fencing by lease; a COMPLETE
 * record past its TTL is absent to the next acquisition. Strict mode: an
 * acquisition with `onExpiredLease: 'refuse'` moves an expired lease's record to
 * AMBIGUOUS instead of stealing it, `markAmbiguous` does so for a failed action,
 * and only `resolve` ends it (neither TTL nor purge does).
 *
 * Time is discrete. Leases and TTLs are long (minutes to an hour), so nothing
 * expires by itself while a run lasts; a lease or a TTL runs out only when a
 * command says so ("expire the lease of k0"), which flips one boolean here and
 * moves one deadline into the past in each store (see stores-under-test.ts).
 *
 * Who removes a purgeable record (COMPLETE past its TTL, IN_PROGRESS past its
 * TTL and its lease) is the one thing stores may differ in, as the
 * conformance kit's `expiry` says: `purge` (PostgreSQL, MariaDB, in memory)
 * keeps it until `purgeExpired` deletes it; `backend` (Redis, whose keys
 * expire at the later of TTL and lease) has it gone the moment it becomes
 * purgeable, and `purgeExpired` has nothing left to delete.
 */
export type ExpiryRule = 'purge' | 'backend';

/** Two keys: enough for purge counts and cross-key leases, few enough that each stays busy. */
export const KEYS = ['k0', 'k1'] as const;
export type Key = (typeof KEYS)[number];

export type Fingerprint = 'f1' | 'f2';

/** A lease, numbered in the order acquisitions returned it within one run. */
export type LeaseNo = number;
/** A well-formed lease id that no acquisition ever returned. */
export const NEVER_ISSUED: LeaseNo = -1;

export type ModelRecord =
  | {
      state: 'IN_PROGRESS';
      lease: LeaseNo;
      fingerprint: string | null;
      leaseExpired: boolean;
      ttlExpired: boolean;
    }
  | {
      state: 'COMPLETE';
      payload: StoredPayload;
      fingerprint: string | null;
      ttlExpired: boolean;
      /** Set when a resolution completed it. */
      resolvedBy?: string;
    }
  | {
      state: 'AMBIGUOUS';
      fingerprint: string | null;
      reason: AmbiguityReason;
      ttlExpired: boolean;
    };

/**
 * What a test sees of one key through `find()`, reduced to what the model knows.
 * Stores map their views to this shape (`snapshotOf`), so the two compare deep-equal.
 */
export type Snapshot =
  | null
  | { state: 'IN_PROGRESS'; fingerprint: string | null; leaseExpired: boolean; ttlExpired: boolean }
  | {
      state: 'COMPLETE';
      fingerprint: string | null;
      payload: StoredPayload;
      ttlExpired: boolean;
      resolvedBy?: string;
    }
  | { state: 'AMBIGUOUS'; fingerprint: string | null; reason: AmbiguityReason };

/** `tryAcquire` with `waitTimeoutMs: 0`, reduced the same way. */
export type AcquireOutcome =
  | { kind: 'acquired' }
  | { kind: 'duplicate'; payload: StoredPayload }
  | { kind: 'in-flight'; retryAfterWithinLease: true }
  | { kind: 'fingerprint-mismatch' }
  | { kind: 'ambiguous'; reason: AmbiguityReason; transitioned: boolean };

/** Strict mode's `resolve`, reduced the same way. */
export type ResolveOutcome =
  { kind: 'resolved' } | { kind: 'not-ambiguous'; state: 'IN_PROGRESS' | 'COMPLETE' | null };

/** `complete` and `release` either succeed or throw `IdempotencyLeaseLostError`. */
export type HeldOutcome = 'done' | 'lease-lost';

/** An expected outcome and a label saying which edge of the lifecycle it exercised. */
export interface Expected<T> {
  outcome: T;
  labels: string[];
}

export class LifecycleModel {
  private readonly records = new Map<Key, ModelRecord>();
  /** The key each lease was issued for, by lease number. */
  private readonly leaseKeys: Key[] = [];

  constructor(private readonly expiry: ExpiryRule = 'purge') {}

  get leasesIssued(): number {
    return this.leaseKeys.length;
  }

  /** The lease holding `key` now, else the last one issued for it (stale), else none. */
  currentOrLastLease(key: Key): LeaseNo {
    const record = this.records.get(key);
    if (record?.state === 'IN_PROGRESS') return record.lease;
    return this.leaseKeys.lastIndexOf(key);
  }

  /** The lease issued for `key` before `currentOrLastLease(key)`, else none. */
  previousLease(key: Key): LeaseNo {
    const last = this.currentOrLastLease(key);
    return last <= 0 ? NEVER_ISSUED : this.leaseKeys.lastIndexOf(key, last - 1);
  }

  snapshot(key: Key): Snapshot {
    const record = this.records.get(key);
    if (!record) return null;
    if (record.state === 'AMBIGUOUS') {
      return { state: 'AMBIGUOUS', fingerprint: record.fingerprint, reason: record.reason };
    }
    return record.state === 'IN_PROGRESS'
      ? {
          state: 'IN_PROGRESS',
          fingerprint: record.fingerprint,
          leaseExpired: record.leaseExpired,
          ttlExpired: record.ttlExpired,
        }
      : {
          state: 'COMPLETE',
          fingerprint: record.fingerprint,
          payload: record.payload,
          ttlExpired: record.ttlExpired,
          ...(record.resolvedBy === undefined ? {} : { resolvedBy: record.resolvedBy }),
        };
  }

  /**
   * `strict`: `onExpiredLease: 'refuse'`: an expired lease is not stolen; the
   * record becomes AMBIGUOUS (whatever the fingerprint) and the caller is told
   * so, or of a mismatch. An AMBIGUOUS record is never stolen, strict or not.
   */
  acquire(
    key: Key,
    fingerprint: Fingerprint | undefined,
    strict = false,
  ): Expected<AcquireOutcome> {
    let record = this.records.get(key);
    let transitioned = false;
    if (record?.state === 'IN_PROGRESS' && record.leaseExpired && strict) {
      record = {
        state: 'AMBIGUOUS',
        fingerprint: record.fingerprint,
        reason: 'lease-expired',
        ttlExpired: record.ttlExpired,
      };
      this.records.set(key, record);
      transitioned = true;
    }
    if (record?.state === 'AMBIGUOUS') {
      const moved = transitioned ? ' (moved: lease expired)' : '';
      if (fingerprint && record.fingerprint && fingerprint !== record.fingerprint) {
        return {
          outcome: { kind: 'fingerprint-mismatch' },
          labels: [`acquire → fingerprint-mismatch (AMBIGUOUS)${moved}`],
        };
      }
      return {
        outcome: { kind: 'ambiguous', reason: record.reason, transitioned },
        labels: [`acquire → ambiguous${moved || ` (${strict ? 'strict' : 'not strict'})`}`],
      };
    }
    // Stealable: an expired lease, or a COMPLETE record past its TTL. A steal
    // starts over, so it ignores the old fingerprint.
    const stealable =
      record !== undefined &&
      (record.state === 'IN_PROGRESS' ? record.leaseExpired : record.ttlExpired);
    if (!record || stealable) {
      this.records.set(key, {
        state: 'IN_PROGRESS',
        lease: this.leaseKeys.push(key) - 1,
        fingerprint: fingerprint ?? null,
        leaseExpired: false,
        ttlExpired: false,
      });
      const how = !record
        ? 'absent'
        : record.state === 'IN_PROGRESS'
          ? 'stole an expired lease'
          : 'replaced a COMPLETE record past its TTL';
      return { outcome: { kind: 'acquired' }, labels: [`acquire → acquired (${how})`] };
    }
    if (fingerprint && record.fingerprint && fingerprint !== record.fingerprint) {
      return {
        outcome: { kind: 'fingerprint-mismatch' },
        labels: [`acquire → fingerprint-mismatch (${record.state})`],
      };
    }
    if (record.state === 'COMPLETE') {
      return {
        outcome: { kind: 'duplicate', payload: record.payload },
        labels: ['acquire → duplicate'],
      };
    }
    return {
      outcome: { kind: 'in-flight', retryAfterWithinLease: true },
      labels: [`acquire → in-flight${record.ttlExpired ? ' (past its TTL, lease live)' : ''}`],
    };
  }

  /** Allowed only while the record is IN_PROGRESS under `lease`, even if that lease has run out unstolen. */
  /** `payload`: the bytes stored; a replay and a view hand back exactly these. */
  complete(key: Key, lease: LeaseNo, payload: StoredPayload): Expected<HeldOutcome> {
    const refusal = this.refusal(key, lease);
    if (refusal) return { outcome: 'lease-lost', labels: [`complete → lease-lost (${refusal})`] };
    const held = this.records.get(key) as Extract<ModelRecord, { state: 'IN_PROGRESS' }>;
    this.records.set(key, {
      state: 'COMPLETE',
      payload,
      fingerprint: held.fingerprint,
      ttlExpired: false,
    });
    return {
      outcome: 'done',
      labels: [`complete → done${held.leaseExpired ? ' (lease expired, not stolen)' : ''}`],
    };
  }

  /**
   * Transactional completion (`store.transactional`): `completeIn` inside a
   * transaction that then commits (as `complete`) or rolls back (the record is
   * as it was: the holder keeps it, unfinished). Fenced as `complete` is.
   */
  completeInTransaction(
    key: Key,
    lease: LeaseNo,
    payload: StoredPayload,
    commit: boolean,
  ): Expected<HeldOutcome | 'rolled-back'> {
    const refusal = this.refusal(key, lease);
    if (refusal) return { outcome: 'lease-lost', labels: [`completeIn → lease-lost (${refusal})`] };
    if (!commit) {
      return { outcome: 'rolled-back', labels: ['completeIn → rolled back (still IN_PROGRESS)'] };
    }
    const done = this.complete(key, lease, payload);
    return { outcome: done.outcome, labels: ['completeIn → committed'] };
  }

  /** Strict mode: the holder's action threw; allowed where release is. */
  markAmbiguous(key: Key, lease: LeaseNo): Expected<HeldOutcome> {
    const refusal = this.refusal(key, lease);
    if (refusal)
      return { outcome: 'lease-lost', labels: [`markAmbiguous → lease-lost (${refusal})`] };
    const held = this.records.get(key) as Extract<ModelRecord, { state: 'IN_PROGRESS' }>;
    this.records.set(key, {
      state: 'AMBIGUOUS',
      fingerprint: held.fingerprint,
      reason: 'action-failed',
      ttlExpired: held.ttlExpired,
    });
    return { outcome: 'done', labels: ['markAmbiguous → done'] };
  }

  /** Only an AMBIGUOUS record is resolved: completed (a fresh TTL) or not executed (gone). */
  resolve(
    key: Key,
    payload: StoredPayload | undefined,
    resolvedBy: string,
  ): Expected<ResolveOutcome> {
    const record = this.records.get(key);
    if (record?.state !== 'AMBIGUOUS') {
      return {
        outcome: { kind: 'not-ambiguous', state: record?.state ?? null },
        labels: [`resolve → not-ambiguous (${record?.state ?? 'absent'})`],
      };
    }
    if (payload === undefined) {
      this.records.delete(key);
    } else {
      this.records.set(key, {
        state: 'COMPLETE',
        payload,
        fingerprint: record.fingerprint,
        ttlExpired: false,
        resolvedBy,
      });
    }
    return {
      outcome: { kind: 'resolved' },
      labels: [`resolve → resolved (${payload === undefined ? 'not-executed' : 'completed'})`],
    };
  }

  /** A released record is gone, as if never used. */
  release(key: Key, lease: LeaseNo): Expected<HeldOutcome> {
    const refusal = this.refusal(key, lease);
    if (refusal) return { outcome: 'lease-lost', labels: [`release → lease-lost (${refusal})`] };
    this.records.delete(key);
    return { outcome: 'done', labels: ['release → done'] };
  }

  /** Renews the lease (not the TTL); false where complete/release would be refused. */
  extend(key: Key, lease: LeaseNo): Expected<boolean> {
    const refusal = this.refusal(key, lease);
    if (refusal) return { outcome: false, labels: [`extend → false (${refusal})`] };
    const held = this.records.get(key) as Extract<ModelRecord, { state: 'IN_PROGRESS' }>;
    const labels = [`extend → true${held.leaseExpired ? ' (revived an expired lease)' : ''}`];
    held.leaseExpired = false;
    return { outcome: true, labels };
  }

  /** Number of records whose lease deadline moved: the IN_PROGRESS one, if any. */
  expireLease(key: Key): Expected<number> {
    const record = this.records.get(key);
    if (record?.state !== 'IN_PROGRESS') return { outcome: 0, labels: ['expire lease (no lease)'] };
    record.leaseExpired = true;
    return { outcome: 1, labels: ['expire lease', ...this.expireIfDue(key)] };
  }

  /** Number of records whose TTL deadline moved: the record, in either state. */
  expireTtl(key: Key): Expected<number> {
    const record = this.records.get(key);
    if (!record) return { outcome: 0, labels: ['expire TTL (absent)'] };
    record.ttlExpired = true;
    return { outcome: 1, labels: [`expire TTL (${record.state})`, ...this.expireIfDue(key)] };
  }

  /** Under the `backend` rule, a record that just became purgeable is gone at once. */
  private expireIfDue(key: Key): string[] {
    const record = this.records.get(key);
    if (this.expiry !== 'backend' || !record || !isDue(record)) return [];
    this.records.delete(key);
    return [`the backend expires ${record.state}`];
  }

  /** COMPLETE past its TTL; IN_PROGRESS past its TTL *and* its lease. Nothing else. */
  purge(): Expected<number> {
    const labels: string[] = [];
    let purged = 0;
    for (const [key, record] of this.records) {
      if (isDue(record)) {
        this.records.delete(key);
        purged++;
        labels.push(`purge removes ${record.state}`);
      } else if (record.state === 'IN_PROGRESS' && record.ttlExpired) {
        labels.push('purge spares IN_PROGRESS past its TTL with a live lease');
      } else if (record.state === 'IN_PROGRESS' && record.leaseExpired) {
        labels.push('purge spares IN_PROGRESS with an expired lease within its TTL');
      } else if (record.state === 'AMBIGUOUS' && record.ttlExpired) {
        labels.push('purge spares AMBIGUOUS past its TTL');
      }
    }
    return { outcome: purged, labels: labels.length > 0 ? labels : ['purge (nothing due)'] };
  }

  private refusal(key: Key, lease: LeaseNo): string | undefined {
    const record = this.records.get(key);
    if (lease === NEVER_ISSUED) return 'never-issued lease';
    if (!record) return 'absent';
    if (record.state !== 'IN_PROGRESS') return record.state;
    if (record.lease !== lease) {
      return this.leaseKeys[lease] === key ? 'stale lease of this key' : "another key's lease";
    }
    return undefined;
  }
}

/** What `purgeExpired` deletes (decide.ts `isPurgeable`): COMPLETE past its TTL; IN_PROGRESS past its TTL and its lease. */
function isDue(record: ModelRecord): boolean {
  if (record.state === 'AMBIGUOUS') return false; // never: only a resolution ends it
  return record.ttlExpired && (record.state === 'COMPLETE' || record.leaseExpired);
}
