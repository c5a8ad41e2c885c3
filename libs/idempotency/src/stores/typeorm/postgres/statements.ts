import { qualified, TableName } from '../table';

/**
 * Every statement the PostgreSQL store sends. Each is one round trip, and
 * every time comparison uses the server's `now()`, so instances with skewed
 * clocks agree.
 */
export interface Statements {
  /** $1 id, $2 scope, $3 key, $4 lease id, $5 lease ms, $6 ttl ms, $7 fingerprint, $8 watch. */
  acquire: string;
  /** $1 id, $2 lease id, $3 payload, $4 ttl ms, $5 channel, $6 id hex. */
  complete: string;
  /** $1 id, $2 lease id, $3 channel, $4 id hex. */
  release: string;
  /** $1 id, $2 lease id, $3 lease ms. */
  extend: string;
  /** $1 batch size. */
  purgeBatch: string;
  /** $1 limit. Counts what `purgeBatch` would delete, without locking or deleting anything. */
  countExpired: string;
  /** $1 id. */
  find: string;
  /** $1 scope or null, $2 state or null, $3 limit. */
  list: string;
}

/**
 * The statements on every request's path. The store sends these as named
 * prepared statements; the others (purge, count, find, list) run rarely and
 * are planned for their actual parameters.
 */
export const HOT_STATEMENTS = ['acquire', 'complete', 'release', 'extend'] as const;

const VIEW_COLUMNS = `scope, "key", state, lease_expires_at, expires_at, created_at, completed_at, fingerprint,
  CASE WHEN state = 'COMPLETE' THEN payload END AS payload,
  (state = 'IN_PROGRESS' AND lease_expires_at <= now()) AS lease_expired`;

/** ./decide.ts isStealable, in SQL. */
const STEALABLE = `((state = 'IN_PROGRESS' AND lease_expires_at <= now()) OR (state = 'COMPLETE' AND expires_at <= now()))`;
/** ./decide.ts isPurgeable, in SQL: COMPLETE past its TTL; IN_PROGRESS past its TTL and its lease. */
const purgeable = () =>
  `(expires_at <= now() AND (state = 'COMPLETE' OR lease_expires_at <= now()))`;
const ms = (param: string) => `(${param}::double precision * interval '1 millisecond')`;

export function buildStatements(name: TableName): Statements {
  const t = qualified(name);
  return {
    // Steal (an expired lease or an expired COMPLETE record), else insert, else
    // read what is there: one statement. A replay takes no row lock and writes nothing.
    //
    // A caller that will wait ($8) marks a live IN_PROGRESS record `watched` in the
    // same statement, so complete and release notify only records someone waits on
    // (a notifying commit takes a database-wide lock). Only the first waiter writes.
    //
    // All parts share one snapshot, while the writes see the latest row version. So
    // when the read part looks stealable but nothing was stolen, or looks unwatched
    // but the mark did not land, the row changed under the statement: the caller
    // just asks again (./wait-loop.ts 'changed').
    acquire: `
      WITH stolen AS (
        UPDATE ${t} SET state = 'IN_PROGRESS', lease_id = $4, lease_expires_at = now() + ${ms('$5')},
          expires_at = now() + ${ms('$6')}, fingerprint = $7, payload = NULL, created_at = now(),
          completed_at = NULL, watched = false
        WHERE id = $1 AND ${STEALABLE}
        RETURNING 1
      ), inserted AS (
        INSERT INTO ${t} (id, scope, "key", state, lease_id, lease_expires_at, expires_at, fingerprint, created_at)
        SELECT $1, $2, $3, 'IN_PROGRESS', $4, now() + ${ms('$5')}, now() + ${ms('$6')}, $7, now()
        WHERE NOT EXISTS (SELECT 1 FROM stolen)
        ON CONFLICT (id) DO NOTHING
        RETURNING 1
      ), marked AS (
        UPDATE ${t} SET watched = true
        WHERE $8 AND id = $1 AND state = 'IN_PROGRESS' AND NOT watched AND lease_expires_at > now()
          AND ($7::text IS NULL OR fingerprint IS NULL OR fingerprint = $7)
          AND NOT EXISTS (SELECT 1 FROM stolen) AND NOT EXISTS (SELECT 1 FROM inserted)
        RETURNING 1
      )
      SELECT 'acquired' AS outcome, NULL::text AS state, NULL::text AS fingerprint, NULL::bytea AS payload,
        NULL::timestamptz AS completed_at, NULL::double precision AS lease_left_ms,
        NULL::double precision AS expires_left_ms, false AS stealable, false AS watched, false AS marked
      FROM stolen
      UNION ALL
      SELECT 'acquired', NULL, NULL, NULL, NULL, NULL, NULL, false, false, false FROM inserted
      UNION ALL
      SELECT 'existing', state, fingerprint, CASE WHEN state = 'COMPLETE' THEN payload END, completed_at,
        extract(epoch FROM (lease_expires_at - now()))::double precision * 1000,
        extract(epoch FROM (expires_at - now()))::double precision * 1000,
        ${STEALABLE}, watched, EXISTS (SELECT 1 FROM marked)
      FROM ${t}
      WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM stolen) AND NOT EXISTS (SELECT 1 FROM inserted)`,
    // `watched` stays as it was (a stolen or new record resets it), so RETURNING tells
    // whether anyone waits; only then does the statement notify.
    complete: `
      WITH done AS (
        UPDATE ${t} SET state = 'COMPLETE', payload = $3, completed_at = now(),
          expires_at = now() + ${ms('$4')}, lease_id = NULL, lease_expires_at = NULL
        WHERE id = $1 AND lease_id = $2 AND state = 'IN_PROGRESS'
        RETURNING watched
      )
      SELECT CASE WHEN watched THEN pg_notify($5, $6) END AS notified FROM done`,
    release: `
      WITH gone AS (
        DELETE FROM ${t} WHERE id = $1 AND lease_id = $2 AND state = 'IN_PROGRESS' RETURNING watched
      )
      SELECT CASE WHEN watched THEN pg_notify($3, $4) END AS notified FROM gone`,
    extend: `
      UPDATE ${t} SET lease_expires_at = now() + ${ms('$3')}
      WHERE id = $1 AND lease_id = $2 AND state = 'IN_PROGRESS'
      RETURNING 1 AS kept`,
    // One bounded batch; SKIP LOCKED lets several instances purge side by side
    // without waiting on each other or on live traffic.
    //
    // The delete is keyed by the victims' ids alone. Each victim is already
    // locked by this statement, and the lock (FOR UPDATE under READ COMMITTED)
    // re-evaluated the rule on the row's newest version, which nobody can change
    // before this statement commits; `now()` is fixed for the statement. So the
    // rule needs no second test, and repeating it would let the planner drive the
    // delete from the expires_at index, testing every expired row against the id
    // array: with statistics from before the rows expired that is quadratic
    // (measured: 490 to 780 ms per 1,000-row batch among 20k expired and 20k live rows).
    // Keyed by id alone, the delete probes the primary key once per victim.
    purgeBatch: `
      WITH victims AS (
        SELECT id FROM ${t} WHERE ${purgeable()}
        ORDER BY expires_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED
      ), gone AS (
        DELETE FROM ${t} WHERE id = ANY (ARRAY(SELECT id FROM victims))
        RETURNING 1
      )
      SELECT count(*)::int AS purged FROM gone`,
    // A plain read: no row lock, no write, so a dry run moves nothing.
    countExpired: `
      SELECT count(*)::int AS expired FROM (SELECT 1 FROM ${t} WHERE ${purgeable()} LIMIT $1) AS due`,
    find: `SELECT ${VIEW_COLUMNS} FROM ${t} WHERE id = $1`,
    list: `
      SELECT ${VIEW_COLUMNS} FROM ${t}
      WHERE ($1::text IS NULL OR scope = $1) AND ($2::text IS NULL OR state = $2)
      ORDER BY created_at DESC
      LIMIT $3`,
  };
}
