import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { DataSource } from 'typeorm';
import {
  IdempotencyRecordView,
  IdempotencyStore,
  InMemoryIdempotencyStore,
  Lease,
  RecordId,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { recordIdOf } from '../../../libs/idempotency/src/stores/typeorm/table';
import { Snapshot } from './lifecycle-model';

/** Leases and TTLs that cannot run out by themselves while a run lasts. */
export const LEASE_MS = 10 * 60_000;
export const TTL_MS = 60 * 60_000;

/**
 * A store plus the two ways a test makes time pass for one record.
 *
 * How time passes, and why this keeps both stores honest: the PostgreSQL store
 * decides every expiry with the server's `now()`, which a test cannot move, and
 * the model needs "the lease of k0 ran out" without touching k1 — something a
 * global clock cannot say either. So in both stores an expiry command moves that
 * one record's stored deadline (`lease_expires_at` / `expires_at`) to one second
 * before the store's own clock, and nothing else. Every decision that follows —
 * steal or not, purge or not, `leaseExpired` in a view — is still made by the
 * store's own code against its own clock: in SQL on the real table for
 * PostgreSQL, in `isStealable`/`isPurgeable` for the in-memory store. Neither
 * store is replaced by a fake, and both get the same, minimal nudge.
 */
export interface StoreUnderTest {
  readonly name: string;
  readonly store: IdempotencyStore;
  /** Moves the lease deadline of the record if it is IN_PROGRESS; returns how many records moved. */
  expireLease(id: RecordId): Promise<number>;
  /** Moves the TTL deadline of the record in either state; returns how many records moved. */
  expireTtl(id: RecordId): Promise<number>;
  /**
   * The lease handle this store would hand out for `id` under `leaseId`
   * (leases LEASE_MS, TTL TTL_MS). A lease names its record, so this is how a
   * command presents a lease id that was not issued for the key it targets:
   * another key's, or one never issued. Checked against a genuine lease when
   * the store under test is made (`checkedLeaseFor`).
   */
  leaseFor(id: RecordId, leaseId: string): Lease;
}

/**
 * Fails unless `leaseFor`, given a genuine lease's id, builds exactly the
 * handle the store returned (same fields, same values), and unless the store accepts
 * it: so a handle the model builds is one the store could have issued, and a
 * change to the store's lease shape fails here rather than quietly.
 */
async function checkedLeaseFor(sut: StoreUnderTest): Promise<StoreUnderTest> {
  const id = { scope: `lease-probe-${randomUUID()}`, key: 'probe' };
  const acquired = await sut.store.tryAcquire({
    ...id,
    leaseMs: LEASE_MS,
    ttlMs: TTL_MS,
    waitTimeoutMs: 0,
    fingerprint: null,
  });
  if (acquired.kind !== 'acquired')
    throw new Error(`${sut.name}: probe acquisition ${acquired.kind}`);
  const built = sut.leaseFor(id, acquired.lease.leaseId);
  if (!isDeepStrictEqual({ ...built }, { ...acquired.lease })) {
    throw new Error(
      `${sut.name}: leaseFor no longer builds the lease the store hands out; update this helper`,
    );
  }
  await sut.store.release(built); // accepted as the real thing
  if ((await sut.store.find(id)) !== null) throw new Error(`${sut.name}: probe record left behind`);
  return sut;
}

/** The PostgreSQL store, with expiry as an UPDATE on its real table. */
export function postgresUnderTest(
  dataSource: DataSource,
  store: TypeOrmIdempotencyStore,
): Promise<StoreUnderTest> {
  const { schema, table } = store.tableName;
  const qualified = `"${schema.replace(/"/g, '""')}"."${table.replace(/"/g, '""')}"`;
  const moveToPast = async (column: string, onlyInProgress: boolean, id: RecordId) => {
    const rows: Array<{ moved: number }> = await dataSource.query(
      `WITH moved AS (
         UPDATE ${qualified} SET ${column} = now() - interval '1 second'
         WHERE scope = $1 AND "key" = $2 ${onlyInProgress ? `AND state = 'IN_PROGRESS'` : ''}
         RETURNING 1
       )
       SELECT count(*)::int AS moved FROM moved`,
      [id.scope, id.key],
    );
    return rows[0].moved;
  };
  return checkedLeaseFor({
    name: 'PostgreSQL',
    store,
    expireLease: (id) => moveToPast('lease_expires_at', true, id),
    expireTtl: (id) => moveToPast('expires_at', false, id),
    leaseFor: (id, leaseId) => {
      const recordId = recordIdOf(id.scope, id.key);
      return {
        id: recordId,
        idHex: recordId.toString('hex'),
        leaseId,
        leaseMs: LEASE_MS,
        ttlMs: TTL_MS,
      } as Lease;
    },
  });
}

/** The fields of an in-memory record the expiry helper finds and moves. */
interface MemoryDeadlines {
  scope: string;
  key: string;
  state: 'IN_PROGRESS' | 'COMPLETE';
  leaseExpiresAt: number | null;
  expiresAt: number;
}

/**
 * A fresh in-memory store, with expiry as the same one-record nudge. The store's
 * clock is injected so the helper and the store read the same time. If the
 * store's internals change, the helper finds no record and the model reports
 * "0 records moved, expected 1" at the first expiry, rather than passing quietly.
 */
export function inMemoryUnderTest(): Promise<StoreUnderTest> {
  const now = () => Date.now();
  const store = new InMemoryIdempotencyStore({ now });
  const records = (store as unknown as { records: unknown }).records;
  if (!(records instanceof Map)) {
    throw new Error('InMemoryIdempotencyStore no longer keeps a `records` Map; update this helper');
  }
  const recordOf = (id: RecordId) =>
    [...(records as Map<string, MemoryDeadlines>).values()].find(
      (record) => record.scope === id.scope && record.key === id.key,
    );
  return checkedLeaseFor({
    name: 'in-memory',
    store,
    expireLease: async (id) => {
      const record = recordOf(id);
      if (record?.state !== 'IN_PROGRESS') return 0;
      record.leaseExpiresAt = now() - 1000;
      return 1;
    },
    expireTtl: async (id) => {
      const record = recordOf(id);
      if (!record) return 0;
      record.expiresAt = now() - 1000;
      return 1;
    },
    // The store's record id: the scope's length, the scope, the key.
    leaseFor: (id, leaseId) =>
      ({
        id: `${id.scope.length}:${id.scope}${id.key}`,
        leaseId,
        leaseMs: LEASE_MS,
        ttlMs: TTL_MS,
      }) as Lease,
  });
}

/**
 * Reduces a view to the model's terms. `ttlExpired` is read off `expiresAt`: a
 * live TTL ends about an hour ahead and a moved one a second ago, so "less than
 * half a TTL left" separates them whatever the clocks' skew (under half an hour).
 * Anything the view gets wrong beyond that shape lands in `problems`.
 */
export function snapshotOf(
  view: IdempotencyRecordView | null,
  id: RecordId,
): Snapshot | { problems: string[] } {
  if (!view) return null;
  const problems: string[] = [];
  const observedAt = Date.now();
  if (view.scope !== id.scope || view.key !== id.key) {
    problems.push(`find(${id.key}) returned the record of ${view.scope}/${view.key}`);
  }
  const ttlExpired = view.expiresAt.getTime() - observedAt < TTL_MS / 2;
  if (view.state === 'IN_PROGRESS') {
    if (view.leaseExpiresAt === null) problems.push('IN_PROGRESS without leaseExpiresAt');
    else if (view.leaseExpiresAt.getTime() - observedAt < LEASE_MS / 2 !== view.leaseExpired) {
      problems.push(`leaseExpired=${view.leaseExpired} contradicts leaseExpiresAt`);
    }
    if (view.completedAt !== null) problems.push('IN_PROGRESS with completedAt');
    if ('payload' in view) problems.push('IN_PROGRESS view carries a payload');
    if (problems.length > 0) return { problems };
    return {
      state: 'IN_PROGRESS',
      fingerprint: view.fingerprint,
      leaseExpired: view.leaseExpired,
      ttlExpired,
    };
  }
  if (view.leaseExpiresAt !== null) problems.push('COMPLETE with leaseExpiresAt');
  if (view.leaseExpired) problems.push('COMPLETE with leaseExpired=true');
  if (view.completedAt === null) problems.push('COMPLETE without completedAt');
  if (!('payload' in view)) problems.push('COMPLETE view without a payload field');
  else if (!Buffer.isBuffer(view.payload)) problems.push('COMPLETE view payload is not bytes');
  if (problems.length > 0) return { problems };
  return { state: 'COMPLETE', fingerprint: view.fingerprint, payload: view.payload!, ttlExpired };
}
