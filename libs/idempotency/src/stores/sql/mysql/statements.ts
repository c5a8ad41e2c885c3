import {
  epochMicros,
  microsLeft,
  MysqlTableName,
  mysqlQualified,
  NOW,
  nowPlusMs,
  statement,
  Statement,
} from './sql';

/**
 * Every statement the MySQL/MariaDB store sends. Each is one round trip
 * (autocommit: no transaction is opened around any of them), and every time
 * comparison uses the server's UTC_TIMESTAMP(6), which a statement evaluates
 * once, so every part of a statement sees the same instant.
 */
/** The JSON path of the step `{name}` (step names hold no character a quoted path member needs escaped). */
const STEP_PATH = `CONCAT('$.', JSON_QUOTE({name}))`;

export interface MysqlStatements {
  /** Recorded steps: mark begun (fenced), read back (fenced), record (fenced), list by id. */
  stepBegin: Statement;
  stepRead: Statement;
  stepRecord: Statement;
  stepList: Statement;
  /**
   * Insert, else steal, else leave the row as it is: one
   * `INSERT … ON DUPLICATE KEY UPDATE`. With RETURNING (MariaDB 10.5+), it
   * also hands back the row as it now stands; without (MySQL), it reports in
   * the OK packet's insert id what it did (3 inserted, 2 stole, 1 left the row
   * alone), and `readBack` fetches the row only when it was left alone.
   */
  acquire: Statement;
  /** Undefined when `acquire` returns the row itself. */
  readBack?: Statement;
  /**
   * A new record, or nothing: the minimum `INSERT … ON DUPLICATE KEY UPDATE`
   * whose update clause only marks the insert id (3 inserted, 1 a row was
   * there, left as it was). What an acquisition sends first in a scope of
   * fresh keys; MariaDB evaluates `acquire`'s long update clause on every
   * execution, which costs a new key about a fifth of the statement's rate.
   */
  insert: Statement;
  /**
   * A consistent read of the row, no lock and no write: what an acquisition
   * sends first in a scope whose recent acquisitions found a record (replays).
   * It settles a live record (a replay, a mismatch, in flight), or with
   * `ambiguousRead` an AMBIGUOUS one; absent or stealable, `acquire` decides
   * under the row lock.
   */
  peek: Statement;
  /**
   * Strict mode's `acquire` (`onExpiredLease: 'refuse'`): insert, else steal
   * an expired result, else move an IN_PROGRESS record whose lease ran out to
   * AMBIGUOUS, else leave the row alone. The move writes this caller's lease
   * id into `lease_id` as its mark (so the row read back says who moved it);
   * on an AMBIGUOUS row that id fences nothing and grants nothing, since every
   * lease statement also asks for IN_PROGRESS. Reads the AMBIGUOUS columns too.
   */
  acquireStrict: Statement;
  readBackStrict?: Statement;
  /** An AMBIGUOUS record's since and why, after `acquire` (which does not read them) found one. */
  ambiguousRead: Statement;
  markAmbiguous: Statement;
  resolveCompleted: Statement;
  resolveNotExecuted: Statement;
  /** After a resolution: when it was resolved (the row's `resolved_at`). */
  resolvedAt: Statement;
  stateOf: Statement;
  now: Statement;
  complete: Statement;
  release: Statement;
  extend: Statement;
  purge: Statement;
  countExpired: Statement;
  find: Statement;
  /** Deletes a record whatever its state: only the byte probe at `init()` uses it, on its own record. */
  forget: Statement;
  list: Statement;
  /** The current lease of the records duplicates wait on (./wake-poller.ts); `{ids}` is a list. */
  poll: Statement;
  /** Continuations (./continuations.ts): suspend (fenced), admit a resumption, then read and clear its state (fenced by the new lease), or read why not. */
  suspend: Statement;
  resume: Statement;
  resumedRead: Statement;
  resumedClear: Statement;
  resumeRefusal: Statement;
}

/**
 * An exact comparison of a text column with a value: byte for byte, trailing
 * spaces included. utf8mb4_bin and ascii_bin are PAD SPACE collations (MySQL
 * before 8.0's _0900 ones, every MariaDB), under which `'acme' = 'acme '` is
 * true; binary strings are never padded. Written beside the plain `=`, which
 * an index on the column (if one is ever added) can still narrow with.
 */
export function exactly(column: string, value: string): string {
  return `CAST(${column} AS BINARY) = CAST(${value} AS BINARY)`;
}

/** ../../../core/decide.ts isStealable, in SQL, on the row as it was. */
const STEALABLE = `((state = 'IN_PROGRESS' AND lease_expires_at <= ${NOW}) OR (state = 'COMPLETE' AND expires_at <= ${NOW}))`;
/** ../../../core/decide.ts isPurgeable: COMPLETE past its TTL; IN_PROGRESS past its TTL and its lease; AMBIGUOUS never. */
const PURGEABLE = `(expires_at <= ${NOW} AND (state = 'COMPLETE' OR (state = 'IN_PROGRESS' AND lease_expires_at <= ${NOW})))`;

/** A suspended record's answer and continuation (both null otherwise): duplicates are answered with them. */
const SUSPENSION_COLUMNS = `suspended_answer,
  CASE WHEN suspended_answer IS NOT NULL THEN continuation END AS continuation`;

/** What a look reads: whether this caller holds the record, and what a waiter or a replay needs. */
const LOOK_COLUMNS = `(lease_id <=> {lease}) AS mine, state, fingerprint, lease_id,
  CASE WHEN state = 'COMPLETE' THEN payload END AS payload,
  ${epochMicros('completed_at')} AS completed_at_us,
  ${microsLeft('lease_expires_at')} AS lease_left_us,
  ${microsLeft('expires_at')} AS expires_left_us, ${SUSPENSION_COLUMNS}`;

/**
 * What the peek reads: a replay's answer, or a live record's lease. Whether the
 * lease is this caller's is compared in Node (the lease id is sent with no
 * statement that only reads), and an AMBIGUOUS record's since and why come from
 * `ambiguousRead`: every column is built, sent and parsed on every execution.
 * Only a COMPLETE row holds a payload (every write that leaves COMPLETE clears
 * it), so the column is read as it is.
 */
const PEEK_COLUMNS = `state, fingerprint, lease_id, payload,
  ${epochMicros('completed_at')} AS completed_at_us,
  ${microsLeft('lease_expires_at')} AS lease_left_us,
  ${microsLeft('expires_at')} AS expires_left_us, ${SUSPENSION_COLUMNS}`;

/** What a strict look reads besides: an AMBIGUOUS record's since and why. */
const AMBIGUOUS_COLUMNS = `${epochMicros('ambiguous_since')} AS ambiguous_since_us, ambiguous_reason`;

const VIEW_COLUMNS = `scope, \`key\`, state, fingerprint, ${AMBIGUOUS_COLUMNS},
  resolved_by, ${epochMicros('resolved_at')} AS resolved_at_us,
  CASE WHEN state = 'COMPLETE' THEN payload END AS payload,
  ${epochMicros('lease_expires_at')} AS lease_expires_at_us,
  ${epochMicros('expires_at')} AS expires_at_us,
  ${epochMicros('created_at')} AS created_at_us,
  ${epochMicros('completed_at')} AS completed_at_us,
  (state = 'IN_PROGRESS' AND lease_expires_at <= ${NOW}) AS lease_expired,
  CASE WHEN state = 'IN_PROGRESS' AND suspended_answer IS NOT NULL
    THEN ${epochMicros('lease_expires_at')} END AS suspended_until_us`;

export function buildMysqlStatements(
  name: MysqlTableName,
  options: { returning: boolean },
): MysqlStatements {
  const t = mysqlQualified(name);
  // The insert's values are evaluated for every call, the insert id marker among
  // them (3); on a duplicate key the update clause runs instead and sets 2 or 1.
  const insertedMarker = options.returning
    ? `'IN_PROGRESS'`
    : `IF(LAST_INSERT_ID(3), 'IN_PROGRESS', 'IN_PROGRESS')`;
  // The update clause assigns left to right, each assignment seeing the ones before:
  // lease_id first, decided on the row as it was; every other column then follows
  // whether lease_id is now this caller's (a fresh UUID: equal only after a steal).
  // A live record keeps every value, so a replay or an in-flight look writes nothing.
  const stolen = `lease_id <=> {lease}`;
  const stateAssignment = options.returning
    ? `IF(${stolen}, 'IN_PROGRESS', state)`
    : `IF(LAST_INSERT_ID(IF(${stolen}, 2, 1)) = 2, 'IN_PROGRESS', state)`;
  const acquire = `
    INSERT INTO ${t} (id, scope, \`key\`, state, lease_id, lease_expires_at, expires_at, fingerprint, created_at)
    VALUES ({id}, {scope}, {key}, ${insertedMarker}, {lease}, ${nowPlusMs('leaseMs')}, ${nowPlusMs('ttlMs')}, {fingerprint}, ${NOW})
    ON DUPLICATE KEY UPDATE
      lease_id = IF(${STEALABLE}, {lease}, lease_id),
      state = ${stateAssignment},
      lease_expires_at = IF(${stolen}, ${nowPlusMs('leaseMs')}, lease_expires_at),
      expires_at = IF(${stolen}, ${nowPlusMs('ttlMs')}, expires_at),
      fingerprint = IF(${stolen}, {fingerprint}, fingerprint),
      payload = IF(${stolen}, NULL, payload),
      steps = IF(${stolen} AND completed_at IS NOT NULL, NULL, steps),
      continuation = IF(${stolen}, NULL, continuation),
      suspended_answer = IF(${stolen}, NULL, suspended_answer),
      suspended_state = IF(${stolen}, NULL, suspended_state),
      created_at = IF(${stolen}, ${NOW}, created_at),
      completed_at = IF(${stolen}, NULL, completed_at),
      resolved_by = IF(${stolen}, NULL, resolved_by),
      resolved_at = IF(${stolen}, NULL, resolved_at)`;
  // Strict mode: lease_id first again, now this caller's for an expired result (a steal)
  // or an expired lease (a move); the state then says which, and the other columns follow.
  const mine = `lease_id <=> {lease}`;
  const strictState = options.returning
    ? `IF(${mine}, IF(state = 'COMPLETE', 'IN_PROGRESS', 'AMBIGUOUS'), state)`
    : `IF(LAST_INSERT_ID(IF(${mine} AND state = 'COMPLETE', 2, 1)) = 2, 'IN_PROGRESS',
        IF(${mine}, 'AMBIGUOUS', state))`;
  const took = `(${mine} AND state = 'IN_PROGRESS')`;
  const moved = `(${mine} AND state = 'AMBIGUOUS')`;
  const acquireStrict = `
    INSERT INTO ${t} (id, scope, \`key\`, state, lease_id, lease_expires_at, expires_at, fingerprint, created_at)
    VALUES ({id}, {scope}, {key}, ${insertedMarker}, {lease}, ${nowPlusMs('leaseMs')}, ${nowPlusMs('ttlMs')}, {fingerprint}, ${NOW})
    ON DUPLICATE KEY UPDATE
      lease_id = IF(${STEALABLE}, {lease}, lease_id),
      state = ${strictState},
      lease_expires_at = IF(${took}, ${nowPlusMs('leaseMs')}, IF(${moved}, NULL, lease_expires_at)),
      expires_at = IF(${took}, ${nowPlusMs('ttlMs')}, expires_at),
      fingerprint = IF(${took}, {fingerprint}, fingerprint),
      payload = IF(${took}, NULL, payload),
      steps = IF(${took}, NULL, steps),
      continuation = IF(${mine}, NULL, continuation),
      suspended_answer = IF(${mine}, NULL, suspended_answer),
      suspended_state = IF(${mine}, NULL, suspended_state),
      created_at = IF(${took}, ${NOW}, created_at),
      completed_at = IF(${took}, NULL, completed_at),
      resolved_by = IF(${took}, NULL, resolved_by),
      resolved_at = IF(${took}, NULL, resolved_at),
      ambiguous_since = IF(${moved}, ${NOW}, ambiguous_since),
      ambiguous_reason = IF(${moved}, 'lease-expired', ambiguous_reason)`;
  const strictColumns = `${LOOK_COLUMNS}, ${AMBIGUOUS_COLUMNS}`;
  return {
    acquire: statement(
      options.returning ? `${acquire}\n    RETURNING ${LOOK_COLUMNS}` : acquire,
      true,
    ),
    readBack: options.returning
      ? undefined
      : statement(`SELECT ${LOOK_COLUMNS} FROM ${t} WHERE id = {id}`, true),
    peek: statement(`SELECT ${PEEK_COLUMNS} FROM ${t} WHERE id = {id}`, true),
    insert: statement(
      `INSERT INTO ${t} (id, scope, \`key\`, state, lease_id, lease_expires_at, expires_at, fingerprint, created_at)
    VALUES ({id}, {scope}, {key}, IF(LAST_INSERT_ID(3), 'IN_PROGRESS', 'IN_PROGRESS'), {lease}, ${nowPlusMs('leaseMs')}, ${nowPlusMs('ttlMs')}, {fingerprint}, ${NOW})
    ON DUPLICATE KEY UPDATE lease_id = IF(LAST_INSERT_ID(1), lease_id, lease_id)`,
      true,
    ),
    acquireStrict: statement(
      options.returning ? `${acquireStrict}\n    RETURNING ${strictColumns}` : acquireStrict,
      true,
    ),
    readBackStrict: options.returning
      ? undefined
      : statement(`SELECT ${strictColumns} FROM ${t} WHERE id = {id}`, true),
    ambiguousRead: statement(
      `SELECT state, fingerprint, ${AMBIGUOUS_COLUMNS} FROM ${t} WHERE id = {id}`,
      true,
    ),
    // Fenced as complete is: only the holder, whether or not its lease ran out.
    markAmbiguous: statement(
      `UPDATE ${t} SET state = 'AMBIGUOUS', lease_id = NULL, lease_expires_at = NULL,
        ambiguous_since = ${NOW}, ambiguous_reason = {reason}
      WHERE id = {id} AND lease_id = {lease} AND state = 'IN_PROGRESS'`,
      true,
    ),
    resolveCompleted: statement(
      `UPDATE ${t} SET state = 'COMPLETE', payload = {payload}, completed_at = ${NOW},
        expires_at = ${nowPlusMs('ttlMs')}, resolved_by = {resolvedBy}, resolved_at = ${NOW},
        lease_id = NULL, ambiguous_since = NULL, ambiguous_reason = NULL, steps = NULL
      WHERE id = {id} AND state = 'AMBIGUOUS'`,
    ),
    resolveNotExecuted: statement(`DELETE FROM ${t} WHERE id = {id} AND state = 'AMBIGUOUS'`),
    resolvedAt: statement(
      `SELECT ${epochMicros('resolved_at')} AS resolved_at_us FROM ${t} WHERE id = {id}`,
    ),
    stateOf: statement(`SELECT state FROM ${t} WHERE id = {id}`),
    now: statement(`SELECT ${epochMicros(NOW)} AS now_us`),
    complete: statement(
      `UPDATE ${t} SET state = 'COMPLETE', payload = {payload}, completed_at = ${NOW},
        expires_at = ${nowPlusMs('ttlMs')}, lease_id = NULL, lease_expires_at = NULL, steps = NULL
      WHERE id = {id} AND lease_id = {lease} AND state = 'IN_PROGRESS'`,
      true,
    ),
    // Fenced as complete is; a step with an entry (begun or recorded) is left as it is.
    stepBegin: statement(
      `UPDATE ${t} SET steps = IF(JSON_CONTAINS_PATH(COALESCE(steps, '{}'), 'one', ${STEP_PATH}),
        steps, JSON_SET(COALESCE(steps, '{}'), ${STEP_PATH}, NULL))
      WHERE id = {id} AND lease_id = {lease} AND state = 'IN_PROGRESS'`,
      true,
    ),
    stepRead: statement(
      `SELECT steps FROM ${t} WHERE id = {id} AND lease_id = {lease} AND state = 'IN_PROGRESS'`,
      true,
    ),
    stepRecord: statement(
      `UPDATE ${t} SET steps = JSON_SET(COALESCE(steps, '{}'), ${STEP_PATH}, {value})
      WHERE id = {id} AND lease_id = {lease} AND state = 'IN_PROGRESS'`,
      true,
    ),
    stepList: statement(`SELECT steps FROM ${t} WHERE id = {id} AND state <> 'COMPLETE'`),
    release: statement(
      `DELETE FROM ${t} WHERE id = {id} AND lease_id = {lease} AND state = 'IN_PROGRESS'`,
      true,
    ),
    extend: statement(
      `UPDATE ${t} SET lease_expires_at = ${nowPlusMs('leaseMs')}
      WHERE id = {id} AND lease_id = {lease} AND state = 'IN_PROGRESS'`,
      true,
    ),
    // One bounded batch, oldest expiry first along the expires_at index (whose entries
    // end in the id, so the order is total and statement-based replication deterministic);
    // the rule is evaluated per row under its lock, so a record extended meanwhile stays.
    purge: statement(`DELETE FROM ${t} WHERE ${PURGEABLE} ORDER BY expires_at, id LIMIT {limit}`),
    // A plain consistent read: no row lock, no write, so a dry run moves nothing.
    countExpired: statement(
      `SELECT COUNT(*) AS expired FROM (SELECT 1 FROM ${t} WHERE ${PURGEABLE} LIMIT {limit}) AS due`,
    ),
    find: statement(`SELECT ${VIEW_COLUMNS} FROM ${t} WHERE id = {id}`),
    forget: statement(`DELETE FROM ${t} WHERE id = {id}`),
    // utf8mb4_bin and ascii_bin are PAD SPACE collations: `=` alone would take 'acme '
    // for 'acme'. The byte comparison beside it makes the match exact (see `exactly`).
    list: statement(
      `SELECT ${VIEW_COLUMNS} FROM ${t}
      WHERE ({scope} IS NULL OR (scope = {scope} AND ${exactly('scope', '{scope}')}))
        AND ({state} IS NULL OR (state = {state} AND ${exactly('state', '{state}')}))
      ORDER BY created_at DESC
      LIMIT {limit}`,
    ),
    poll: statement(`SELECT id, lease_id FROM ${t} WHERE id IN ({ids})`),
    // Fenced as complete is. The hold is a lease nobody holds ({hold}): the suspender's
    // is fenced out, and other instances' waiters see the lease change at their poll.
    suspend: statement(
      `UPDATE ${t} SET lease_id = {hold}, lease_expires_at = ${nowPlusMs('holdMs')},
        continuation = {continuation}, suspended_answer = {answer}, suspended_state = {state}
      WHERE id = {id} AND lease_id = {lease} AND state = 'IN_PROGRESS'`,
      true,
    ),
    // The admission: one UPDATE, its test evaluated on the row's newest version under
    // the row lock, so of concurrent resumptions exactly one finds the answer there.
    resume: statement(
      `UPDATE ${t} SET lease_id = {lease}, lease_expires_at = ${nowPlusMs('leaseMs')},
        expires_at = ${nowPlusMs('ttlMs')}, suspended_answer = NULL
      WHERE id = {id} AND scope = {scope} AND ${exactly('scope', '{scope}')}
        AND state = 'IN_PROGRESS' AND continuation = {continuation}
        AND suspended_answer IS NOT NULL AND lease_expires_at > ${NOW}`,
      true,
    ),
    resumedRead: statement(
      `SELECT scope, \`key\`, suspended_state FROM ${t}
      WHERE id = {id} AND lease_id = {lease} AND state = 'IN_PROGRESS'`,
      true,
    ),
    resumedClear: statement(
      `UPDATE ${t} SET suspended_state = NULL
      WHERE id = {id} AND lease_id = {lease} AND state = 'IN_PROGRESS'`,
      true,
    ),
    resumeRefusal: statement(
      `SELECT state, suspended_answer IS NOT NULL AS suspended, lease_expires_at <= ${NOW} AS lapsed
      FROM ${t} WHERE id = {id} AND scope = {scope} AND ${exactly('scope', '{scope}')}
        AND continuation = {continuation}`,
    ),
  };
}
