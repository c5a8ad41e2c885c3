import { qualified, TableName } from '../table';

/**
 * Every statement the PostgreSQL store sends. Each is one round trip, and
 * every time comparison uses the server's `now()`, so instances with skewed
 * clocks agree.
 *
 * The hot path is small single-purpose statements, chosen per call by the
 * dialect (./dialect.ts): a read-only `peek`, a plain `insert`, and a `steal`
 * or `mark` only when the peek asks for one. A statement that writes pays the
 * setup of its write (ModifyTable) on every execution even when it writes
 * nothing, so no read carries a write step it rarely needs: a replay is one
 * `SELECT` by primary key, and a first execution one `INSERT … ON CONFLICT DO
 * NOTHING` and one fenced `UPDATE`.
 */
export interface Statements {
  /** $1 id. What is there, read-only: no row lock, no write. */
  peek: string;
  /** $1 id, $2 scope, $3 key, $4 lease id, $5 lease ms, $6 ttl ms, $7 fingerprint. One row inserted, or none (the record exists). */
  insert: string;
  /** $1 id, $2 lease id, $3 lease ms, $4 ttl ms, $5 fingerprint. One row taken over (an expired lease or an expired result), or none. */
  steal: string;
  /** $1 id, $2 the holder's lease id, as the peek saw it. One row marked watched, or none (the holder is gone, or another waiter marked it). */
  mark: string;
  /** Strict mode's `steal`: $1 to $5 as `steal`. Takes over an expired result only, never an expired lease. */
  stealResult: string;
  /** Strict mode: $1 id. An IN_PROGRESS record whose lease ran out becomes AMBIGUOUS; returns it (fingerprint, since, watched), or no row. */
  toAmbiguous: string;
  /** $1 id. An AMBIGUOUS record's fingerprint, since when and why (the peek does not read them). */
  ambiguousPeek: string;
  /** $1 id, $2 lease id, $3 reason. Returns `watched` of the row moved to AMBIGUOUS, or no row. */
  markAmbiguous: string;
  /** $1 id, $2 payload, $3 ttl ms, $4 resolved by. An AMBIGUOUS record becomes COMPLETE; returns `resolved_at`, `watched`, or no row. */
  resolveCompleted: string;
  /** $1 id. Deletes an AMBIGUOUS record; returns `resolved_at` (now), `watched`, or no row. */
  resolveNotExecuted: string;
  /** $1 id. The state, after a resolve that changed nothing. */
  stateOf: string;
  /** $1 id, $2 lease id, $3 payload, $4 ttl ms. Returns `watched` of the completed row, or no row. */
  complete: string;
  /** $1 channel, $2 id hex. Sent after a completion or release of a watched record. */
  notify: string;
  /** $1 id, $2 lease id. Returns `watched` of the deleted row, or no row. */
  release: string;
  /** $1 id, $2 lease id, $3 lease ms. */
  extend: string;
  /** $1 batch size. */
  purgeBatch: string;
  /** $1 limit. Counts what `purgeBatch` would delete, without locking or deleting anything. */
  countExpired: string;
  /** $1 id. */
  find: string;
  /** Deletes a record whatever its state: only the byte probe at `init()` uses it, on its own record. */
  forget: string;
  /** $1 scope or null, $2 state or null, $3 limit. */
  list: string;
  /** $1 id, $2 lease id, $3 step name. Marks the step begun unless it has an entry; returns its value (base64, or null), or no row. */
  stepBegin: string;
  /** $1 id, $2 lease id, $3 step name, $4 value (base64). One row, or none (not held). */
  stepRecord: string;
  /** $1 id. The steps (jsonb) of a record that is not COMPLETE, or no row. */
  stepList: string;
  /**
   * $1 id, $2 lease id, $3 the hold's lease id (fresh, held by nobody), $4 hold ms,
   * $5 continuation, $6 answer, $7 state. Returns `watched` of the suspended row, or no row.
   */
  suspend: string;
  /**
   * $1 id, $2 scope, $3 continuation, $4 new lease id, $5 lease ms, $6 ttl ms. Admits the
   * resumption of a suspended record whose hold runs; returns its scope, key and state, or no row.
   */
  resume: string;
  /** $1 id, $2 scope, $3 continuation. Why `resume` admitted nothing: the record with that continuation, or no row. */
  resumeRefusal: string;
}

/**
 * The statements on every request's path. The store sends these as named
 * prepared statements; the others (purge, count, find, list) run rarely and
 * are planned for their actual parameters.
 */
export const HOT_STATEMENTS = [
  'peek',
  'insert',
  'steal',
  'mark',
  'stealResult',
  'toAmbiguous',
  'ambiguousPeek',
  'markAmbiguous',
  'complete',
  'notify',
  'release',
  'extend',
  'stepBegin',
  'stepRecord',
  'suspend',
  'resume',
] as const;

/** While a record is suspended, its hold's end (its lease's expiry); null otherwise. */
const SUSPENDED = `CASE WHEN state = 'IN_PROGRESS' AND suspended_answer IS NOT NULL THEN lease_expires_at END`;

const VIEW_COLUMNS = `scope, "key", state, lease_expires_at, expires_at, created_at, completed_at, fingerprint,
  CASE WHEN state = 'COMPLETE' THEN payload END AS payload,
  (state = 'IN_PROGRESS' AND lease_expires_at <= now()) AS lease_expired,
  ambiguous_since, ambiguous_reason, resolved_by, resolved_at,
  ${SUSPENDED} AS suspended_until`;

/** ../../../core/decide.ts isStealable, in SQL. An AMBIGUOUS record never is. */
const STEALABLE = `((state = 'IN_PROGRESS' AND lease_expires_at <= now()) OR (state = 'COMPLETE' AND expires_at <= now()))`;
/** isStealable with `onExpiredLease: 'refuse'`: an expired result only. */
const STEALABLE_STRICT = `(state = 'COMPLETE' AND expires_at <= now())`;
/**
 * ../../../core/decide.ts isPurgeable, in SQL: COMPLETE past its TTL; IN_PROGRESS past its TTL
 * and its lease; AMBIGUOUS never (it has no lease either, so it would not match anyway).
 */
const PURGEABLE = `(expires_at <= now() AND (state = 'COMPLETE' OR (state = 'IN_PROGRESS' AND lease_expires_at <= now())))`;
const ms = (param: string) => `(${param}::double precision * interval '1 millisecond')`;
/** Milliseconds from the server's now to `column` (negative once past; null for a null column). */
const leftMs = (column: string) => `date_part('epoch', ${column} - now()) * 1000`;

export function buildStatements(name: TableName): Statements {
  const t = qualified(name);
  // A new holder starts unwatched, and a result it leaves is its own (no resolution's).
  const takeOver = `state = 'IN_PROGRESS', lease_id = $2, lease_expires_at = now() + ${ms('$3')},
        expires_at = now() + ${ms('$4')}, fingerprint = $5, payload = NULL, created_at = now(),
        completed_at = NULL, watched = false, resolved_by = NULL, resolved_at = NULL,
        steps = CASE WHEN state = 'IN_PROGRESS' THEN steps END,
        continuation = NULL, suspended_answer = NULL, suspended_state = NULL`;
  return {
    // The record as it is, with its times relative to the server's clock and its
    // completion as epoch milliseconds (a float parses faster than a timestamp);
    // the dialect decides (replay, refuse, wait, steal) from this one read.
    peek: `
      SELECT state, fingerprint, lease_id, watched,
        date_part('epoch', date_trunc('milliseconds', completed_at)) * 1000 AS completed_ms,
        CASE WHEN state = 'COMPLETE' THEN payload END AS payload,
        suspended_answer, CASE WHEN suspended_answer IS NOT NULL THEN continuation END AS continuation,
        ${leftMs('lease_expires_at')} AS lease_left_ms, ${leftMs('expires_at')} AS expires_left_ms
      FROM ${t} WHERE id = $1`,
    insert: `
      INSERT INTO ${t} (id, scope, "key", state, lease_id, lease_expires_at, expires_at, fingerprint, created_at)
      VALUES ($1, $2, $3, 'IN_PROGRESS', $4, now() + ${ms('$5')}, now() + ${ms('$6')}, $7, now())
      ON CONFLICT (id) DO NOTHING`,
    // The stealable test is rechecked on the newest row version under the row
    // lock (READ COMMITTED re-evaluates the WHERE after waiting on a concurrent
    // writer), so of two callers stealing at once only one takes the record.
    steal: `UPDATE ${t} SET ${takeOver} WHERE id = $1 AND ${STEALABLE}`,
    // Strict mode: the same, for an expired result only. A record that became
    // IN_PROGRESS again since the peek, and whose lease ran out too, is not taken.
    stealResult: `UPDATE ${t} SET ${takeOver} WHERE id = $1 AND ${STEALABLE_STRICT}`,
    // Strict mode: the contender's look that finds the lease run out. Rechecked
    // under the row lock like `steal`, so of many contenders exactly one moves
    // it (the others update nothing, look again and find it AMBIGUOUS). No
    // lease, and no expiry either: purge passes it by, and only a resolution
    // ends it. `watched` (kept) says whether a waiter is to be told. A lapsed
    // suspension goes with the lease: no resumption is ever admitted.
    toAmbiguous: `
      UPDATE ${t} SET state = 'AMBIGUOUS', lease_id = NULL, lease_expires_at = NULL,
        ambiguous_since = now(), ambiguous_reason = 'lease-expired',
        continuation = NULL, suspended_answer = NULL, suspended_state = NULL
      WHERE id = $1 AND state = 'IN_PROGRESS' AND lease_expires_at <= now()
      RETURNING fingerprint, ambiguous_since, watched`,
    ambiguousPeek: `
      SELECT state, fingerprint, ambiguous_since, ambiguous_reason FROM ${t} WHERE id = $1`,
    // Fenced as `complete` is: only the holder, whether or not its lease ran out.
    markAmbiguous: `
      UPDATE ${t} SET state = 'AMBIGUOUS', lease_id = NULL, lease_expires_at = NULL,
        ambiguous_since = now(), ambiguous_reason = $3
      WHERE id = $1 AND lease_id = $2 AND state = 'IN_PROGRESS'
      RETURNING watched`,
    resolveCompleted: `
      UPDATE ${t} SET state = 'COMPLETE', payload = $2, completed_at = now(),
        expires_at = now() + ${ms('$3')}, resolved_by = $4, resolved_at = now(),
        ambiguous_since = NULL, ambiguous_reason = NULL, steps = NULL
      WHERE id = $1 AND state = 'AMBIGUOUS'
      RETURNING resolved_at, watched`,
    resolveNotExecuted: `
      DELETE FROM ${t} WHERE id = $1 AND state = 'AMBIGUOUS'
      RETURNING now() AS resolved_at, watched`,
    stateOf: `SELECT state FROM ${t} WHERE id = $1`,
    // Fenced by the lease id the peek saw: marks that holder's record only while
    // its lease is live. See ./dialect.ts for why no wake-up is lost. `NOT watched`:
    // of waiters arriving together only the first writes (the rest, rechecking
    // under the row lock, update nothing and look again, finding it watched).
    mark: `
      UPDATE ${t} SET watched = true
      WHERE id = $1 AND lease_id = $2 AND state = 'IN_PROGRESS' AND lease_expires_at > now()
        AND NOT watched`,
    // `watched` is not assigned, so RETURNING shows the newest version's flag:
    // the dialect notifies (`notify`, after this committed) only when it is set.
    complete: `
      UPDATE ${t} SET state = 'COMPLETE', payload = $3, completed_at = now(),
        expires_at = now() + ${ms('$4')}, lease_id = NULL, lease_expires_at = NULL, steps = NULL
      WHERE id = $1 AND lease_id = $2 AND state = 'IN_PROGRESS'
      RETURNING watched`,
    // A transaction of its own that writes nothing but the notification: it need
    // not wait for its commit record to reach disk (a crash loses at most a
    // wake-up, which the waiter's poll makes good), so it does not pay a WAL flush.
    notify: `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)`,
    release: `
      DELETE FROM ${t} WHERE id = $1 AND lease_id = $2 AND state = 'IN_PROGRESS'
      RETURNING watched`,
    extend: `
      UPDATE ${t} SET lease_expires_at = now() + ${ms('$3')}
      WHERE id = $1 AND lease_id = $2 AND state = 'IN_PROGRESS'`,
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
        SELECT id FROM ${t} WHERE ${PURGEABLE}
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
      SELECT count(*)::int AS expired FROM (SELECT 1 FROM ${t} WHERE ${PURGEABLE} LIMIT $1) AS due`,
    find: `SELECT ${VIEW_COLUMNS} FROM ${t} WHERE id = $1`,
    forget: `DELETE FROM ${t} WHERE id = $1`,
    list: `
      SELECT ${VIEW_COLUMNS} FROM ${t}
      WHERE ($1::text IS NULL OR scope = $1) AND ($2::text IS NULL OR state = $2)
      ORDER BY created_at DESC
      LIMIT $3`,
    // Fenced as `complete` is. A step with an entry (begun, or recorded) is left as it is.
    stepBegin: `
      UPDATE ${t} SET steps = CASE WHEN steps -> $3::text IS NULL
        THEN coalesce(steps, '{}'::jsonb) || jsonb_build_object($3::text, null) ELSE steps END
      WHERE id = $1 AND lease_id = $2 AND state = 'IN_PROGRESS'
      RETURNING steps ->> $3::text AS value`,
    stepRecord: `
      UPDATE ${t} SET steps = coalesce(steps, '{}'::jsonb) || jsonb_build_object($3::text, $4::text)
      WHERE id = $1 AND lease_id = $2 AND state = 'IN_PROGRESS'`,
    stepList: `SELECT steps FROM ${t} WHERE id = $1 AND state <> 'COMPLETE'`,
    // Fenced as `complete` is. The hold is a lease nobody holds: the suspender's is
    // fenced out, nothing extends it, and once it lapses the record is an expired lease.
    suspend: `
      UPDATE ${t} SET lease_id = $3, lease_expires_at = now() + ${ms('$4')},
        continuation = $5, suspended_answer = $6, suspended_state = $7
      WHERE id = $1 AND lease_id = $2 AND state = 'IN_PROGRESS'
      RETURNING watched`,
    // The test and the admission under one row lock: of concurrent resumptions the
    // first takes it, and the others, rechecking on the row's newest version after
    // waiting for the lock (READ COMMITTED), find the answer gone and admit nothing.
    // The locked read hands back the state the update clears.
    resume: `
      WITH held AS (
        SELECT id, suspended_state FROM ${t}
        WHERE id = $1 AND scope = $2 AND state = 'IN_PROGRESS' AND continuation = $3
          AND suspended_answer IS NOT NULL AND lease_expires_at > now()
        FOR UPDATE
      )
      UPDATE ${t} AS r SET lease_id = $4, lease_expires_at = now() + ${ms('$5')},
        expires_at = now() + ${ms('$6')}, suspended_answer = NULL, suspended_state = NULL
      FROM held WHERE r.id = held.id
      RETURNING r.scope, r."key", held.suspended_state AS state`,
    resumeRefusal: `
      SELECT state, suspended_answer IS NOT NULL AS suspended, lease_expires_at <= now() AS lapsed
      FROM ${t} WHERE id = $1 AND scope = $2 AND continuation = $3`,
  };
}
