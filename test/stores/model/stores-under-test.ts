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
import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { recordIdOf } from '../../../libs/idempotency/src/stores/sql/table';
import { AnyRedisClient, command } from '../../support/redis';
import { ExpiryRule, Snapshot } from './lifecycle-model';

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
  /** Who removes purgeable records; the model follows the same rule (see lifecycle-model.ts). */
  readonly expiry: ExpiryRule;
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
    expiry: 'purge',
    expireLease: (id) => moveToPast('lease_expires_at', true, id),
    expireTtl: (id) => moveToPast('expires_at', false, id),
    leaseFor: sqlLeaseFor,
  });
}

/** The lease the TypeORM store hands out, on either dialect: the record's hashed id and the lease id. */
function sqlLeaseFor(id: RecordId, leaseId: string): Lease {
  const recordId = recordIdOf(id.scope, id.key);
  return {
    id: recordId,
    idHex: recordId.toString('hex'),
    leaseId,
    leaseMs: LEASE_MS,
    ttlMs: TTL_MS,
  } as Lease;
}

/**
 * The TypeORM store on MariaDB, with expiry as an UPDATE on its real table,
 * to one second before the server's `UTC_TIMESTAMP(6)`, the clock the store's
 * statements decide by.
 */
export function mariadbUnderTest(
  dataSource: DataSource,
  store: TypeOrmIdempotencyStore,
): Promise<StoreUnderTest> {
  const { table } = store.tableName;
  const quoted = `\`${table.replace(/`/g, '``')}\``;
  const moveToPast = async (column: string, onlyInProgress: boolean, id: RecordId) => {
    const result: { affectedRows?: number } = await dataSource.query(
      `UPDATE ${quoted} SET ${column} = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND
       WHERE id = ? ${onlyInProgress ? `AND state = 'IN_PROGRESS'` : ''}`,
      [recordIdOf(id.scope, id.key)],
    );
    if (typeof result?.affectedRows !== 'number') {
      throw new Error(`MariaDB: an UPDATE answered ${JSON.stringify(result)}; update this helper`);
    }
    return result.affectedRows;
  };
  return checkedLeaseFor({
    name: 'MariaDB',
    store,
    expiry: 'purge',
    expireLease: (id) => moveToPast('lease_expires_at', true, id),
    expireTtl: (id) => moveToPast('expires_at', false, id),
    leaseFor: sqlLeaseFor,
  });
}

/**
 * Moves one deadline of a Redis record (`le`, the lease, or `e`, the TTL) to one
 * second before the server's TIME, in the store's own format, and sets the
 * key's expiry as the store's scripts do: the later of TTL and lease for an
 * IN_PROGRESS record, the TTL for a COMPLETE one, none for an AMBIGUOUS one. When both have passed, the
 * PEXPIREAT is in the past and Redis deletes the key there and then: the
 * store's own rule, not the helper's.
 */
const REDIS_EXPIRE = `
local r = redis.call('HMGET', KEYS[1], 'st', 'le', 'e')
if not r[1] then return 0 end
if ARGV[1] == 'le' and r[1] ~= 'IN_PROGRESS' then return 0 end
local t = redis.call('TIME')
local past = string.format('%.3f', tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000 - 1000)
redis.call('HSET', KEYS[1], ARGV[1], past)
if r[1] == 'AMBIGUOUS' then return 1 end -- no expiry: the store PERSISTs it
local lease, ttl = r[2], r[3]
if ARGV[1] == 'le' then lease = past else ttl = past end
local at = tonumber(ttl)
if r[1] == 'IN_PROGRESS' then at = math.max(at, tonumber(lease)) end
redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', math.ceil(at)))
return 1
`;

/** The Redis store, with expiry as the one-record nudge above. */
export function redisUnderTest(
  client: AnyRedisClient,
  store: RedisIdempotencyStore,
): Promise<StoreUnderTest> {
  const move = async (field: 'le' | 'e', id: RecordId) => {
    const key = store.keys.record(id.scope, id.key).key;
    return Number(await command(client, key, ['EVAL', REDIS_EXPIRE, '1', key, field]));
  };
  return checkedLeaseFor({
    name: 'Redis',
    store,
    expiry: 'backend',
    expireLease: (id) => move('le', id),
    expireTtl: (id) => move('e', id),
    // The store's lease: the record's key names, and its scope and key (for a log line's digest).
    leaseFor: (id, leaseId) =>
      ({
        leaseId,
        leaseMs: LEASE_MS,
        ttlMs: TTL_MS,
        names: store.keys.record(id.scope, id.key),
        scope: id.scope,
        key: id.key,
      }) as Lease,
  });
}

/** The fields of an in-memory record the expiry helper finds and moves. */
interface MemoryDeadlines {
  scope: string;
  key: string;
  state: 'IN_PROGRESS' | 'COMPLETE' | 'AMBIGUOUS';
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
    expiry: 'purge',
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
  if (view.state === 'AMBIGUOUS') {
    if (view.leaseExpiresAt !== null) problems.push('AMBIGUOUS with leaseExpiresAt');
    if (view.leaseExpired) problems.push('AMBIGUOUS with leaseExpired=true');
    if ('payload' in view) problems.push('AMBIGUOUS view carries a payload');
    if (!(view.ambiguousSince instanceof Date)) problems.push('AMBIGUOUS without ambiguousSince');
    if (view.resolvedBy !== undefined) problems.push('AMBIGUOUS with resolvedBy');
    if (problems.length > 0) return { problems };
    return { state: 'AMBIGUOUS', fingerprint: view.fingerprint, reason: view.ambiguousReason! };
  }
  if (view.ambiguousSince !== undefined) problems.push(`${view.state} with ambiguousSince`);
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
  if ((view.resolvedBy === undefined) !== (view.resolvedAt === undefined)) {
    problems.push('resolvedBy and resolvedAt must come together');
  }
  if (problems.length > 0) return { problems };
  return {
    state: 'COMPLETE',
    fingerprint: view.fingerprint,
    payload: view.payload!,
    ttlExpired,
    ...(view.resolvedBy === undefined ? {} : { resolvedBy: view.resolvedBy }),
  };
}
