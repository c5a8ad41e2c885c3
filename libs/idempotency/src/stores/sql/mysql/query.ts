import type { DataSource } from 'typeorm';
import { IdempotencyStoreUnavailableError } from '../../../core/errors';
import type { Deadlines } from '../bounded-query';
import { logFailedQuery, type QueryLog } from '../query-log';
import { isMysqlUnavailable } from './unavailable';
import { storeError } from '../unavailable-error';

/*
 * The slice of mysql2's callback API the store uses, typed here so that the
 * library needs no mysql2 types (mysql2 is an optional peer, like pg).
 */
export type Callback<T> = (error: (Error & { fatal?: boolean }) | null, result?: T) => void;

interface MysqlConnection {
  query(sql: string, values: unknown[], callback: Callback<unknown>): unknown;
  execute?(sql: string, values: unknown[], callback: Callback<unknown>): unknown;
  release(): void;
  destroy(): void;
  listenerCount(event: string): number;
  on(event: 'error', listener: (error: Error) => void): unknown;
}

interface MysqlPool {
  getConnection(callback: Callback<MysqlConnection>): void;
}

interface MysqlPoolCluster {
  getConnection(pattern: string, callback: Callback<MysqlConnection>): void;
}

/** What a write answers: rows touched, and the insert id (the acquire statement's marker). */
export interface MysqlOk {
  affectedRows: number;
  insertId: number | string;
  /** "Rows matched: 1  Changed: 0  Warnings: 0" for an UPDATE (mysql2 `info`, mysqljs `message`). */
  info?: string;
  message?: string;
}

/** Rows an UPDATE matched, whether or not they changed and whatever the client's FOUND_ROWS flag. */
export function matchedRows(ok: MysqlOk): number {
  const matched = /Rows matched: (\d+)/.exec(ok.info ?? ok.message ?? '');
  return matched ? Number(matched[1]) : ok.affectedRows;
}

/**
 * How to take a connection from the pool under a mysql/mariadb DataSource
 * (TypeORM keeps it as the driver's `pool`, or the replication cluster's
 * MASTER); undefined before `initialize()` and after `destroy()`.
 */
export function connectorOf(dataSource: DataSource): MysqlConnector | undefined {
  const driver = dataSource.driver as unknown as {
    pool?: MysqlPool;
    poolCluster?: MysqlPoolCluster;
  };
  const { pool, poolCluster } = driver;
  if (pool) return (callback) => pool.getConnection(callback);
  if (poolCluster) return (callback) => poolCluster.getConnection('MASTER', callback);
  return undefined;
}

/** Takes a connection from a pool, in mysql2's callback style. */
export type MysqlConnector = (callback: Callback<MysqlConnection>) => void;

/**
 * The SQL connection a MySQL dialect runs on: a mysql2 pool (the
 * application's own, or the one under a DataSource).
 */
export interface MysqlPoolConnection {
  /** Takes a connection; undefined when none can be taken now (a DataSource not initialized). */
  connector(): MysqlConnector | undefined;
  /** Where statements are reported. */
  readonly log: QueryLog;
  /** Why `connector()` gave nothing, as an error says it. */
  readonly unready: string;
}

/**
 * The connector of an application's own mysql2 pool: the callback `Pool`
 * (`mysql.createPool`) as it is, a `mysql2/promise` pool through the callback
 * pool it wraps (its `pool`). Undefined for anything else.
 */
export function connectorOfPool(given: unknown): MysqlConnector | undefined {
  const candidate = given as { pool?: unknown; getConnection?: unknown; promise?: unknown } | null;
  if (!candidate || typeof candidate !== 'object') return undefined;
  // The callback pool has promise() (its promise wrapper); the wrapper has pool (the callback one).
  const core = (typeof candidate.promise === 'function' ? candidate : candidate.pool) as
    MysqlPool | undefined;
  if (!core || typeof core.getConnection !== 'function') return undefined;
  return (callback) => core.getConnection(callback);
}

export interface MysqlStoreQuery {
  operation: string;
  text: string;
  values: unknown[];
  /** Sent as a prepared statement (mysql2 `execute`: parsed once per connection, values in binary). */
  prepared: boolean;
  /**
   * What the query log is shown in place of `values`: keys and
   * payloads replaced, so query logging never prints a raw key or a stored
   * body. Called only for a logger that logs queries (or for an error).
   */
  logged: () => unknown[];
}

/**
 * One statement straight through the mysql2 pool (under a DataSource never
 * `dataSource.query`, which would log the raw parameters), bounded by
 * `deadlines.timeoutMs` (waiting for a pooled connection and any deadlock
 * retries included): past it the call fails with
 * `IdempotencyStoreUnavailableError` and the connection it was running on is
 * destroyed (the server may still finish the statement). The statement is
 * reported to the query log with `logged` as its parameters. An error
 * that means the database cannot take work comes back as
 * `IdempotencyStoreUnavailableError` naming `product` and the operation; any
 * other as mysql2 raised it.
 *
 * Callbacks all the way down, one Promise and no timer of its own per call:
 * this runs for every acquisition, and each promise layer or timer costs the
 * hot path a microsecond or so.
 */
export function mysqlStoreQuery<T>(
  pool: MysqlPoolConnection,
  deadlines: Deadlines,
  product: string,
  query: MysqlStoreQuery,
): Promise<T> {
  const log = pool.log;
  if (log.logsQueries()) log.query(query.text, query.logged());
  const connector = pool.connector();
  if (!connector) {
    return Promise.reject(
      new IdempotencyStoreUnavailableError(`${query.operation}: ${pool.unready}`),
    );
  }
  return new Promise<T>((resolve, reject) => {
    let running: MysqlConnection | undefined;
    let attempts = 1;
    const report = (error: Error) => {
      reject(storeError(error, product, query.operation, isMysqlUnavailable));
      logFailedQuery(log, error, query);
    };
    const deadline = deadlines.add(() => {
      // A connection that did not answer in time is not handed back to the pool.
      running?.destroy();
      running = undefined;
      report(
        new IdempotencyStoreUnavailableError(
          `${product} did not answer ${query.operation} within ${deadlines.timeoutMs} ms`,
        ),
      );
    });
    const fail = (error: Error) => {
      // A deadlock victim is sent again while attempts and time are left; past them it
      // goes up as it came: an acquisition then looks again, the engine retries a completion.
      if (isDeadlock(error) && attempts < DEADLOCK_ATTEMPTS) {
        // A few milliseconds, random, so the two sides do not meet again at once.
        setTimeout(attempt, 1 + Math.random() * 4 * attempts++);
        return;
      }
      if (deadlines.settle(deadline)) report(error);
    };
    function attempt(): void {
      if (deadline.settled) return; // given up (during a deadlock's back-off)
      try {
        send();
      } catch (error) {
        // The pool threw instead of calling back (a retry runs from a timer: nothing else would catch it).
        fail(error as Error);
      }
    }
    function send(): void {
      connector!((error, connection) => {
        if (deadline.settled) {
          // The caller gave up while this waited for a connection: hand it back unused.
          connection?.release();
          return;
        }
        if (error || !connection) {
          fail(error ?? new Error('the pool handed out no connection'));
          return;
        }
        running = connection;
        hearErrors(connection, log);
        let answered = false;
        const done: Callback<unknown> = (failure, result) => {
          // Once, whoever calls it: a second call would hand the connection back twice.
          if (answered) return;
          answered = true;
          if (deadline.settled) return; // timed out: the connection is already destroyed
          running = undefined;
          if (failure) {
            // Only the server's answer to the statement (an error with a SQLSTATE)
            // leaves the connection usable (and its prepared statements with it). A
            // broken one, or one whose state is unknown (a value the driver could
            // not serialize, a throw), is dropped from the pool.
            if (isMysqlUnavailable(failure) || !isServerError(failure)) connection.destroy();
            else connection.release();
            fail(failure);
            return;
          }
          connection.release();
          deadlines.settle(deadline);
          resolve(result as T);
        };
        try {
          // Positional arguments: mysql2 copies an options object into a new one per call.
          if (query.prepared && connection.execute)
            connection.execute(query.text, query.values, done);
          else connection.query(query.text, query.values, done);
        } catch (failure) {
          done(failure as Error);
        }
      });
    }
    attempt();
  });
}

/** InnoDB's ER_LOCK_DEADLOCK: this statement was chosen as the victim and rolled back whole. */
const ER_LOCK_DEADLOCK = 1213;
/**
 * Attempts of one statement that keeps losing deadlocks, within its `timeoutMs`.
 * Every statement here runs alone in autocommit, so a deadlock victim left no
 * trace and is sent again: InnoDB can pick one when a purge's DELETE (which
 * walks the expires_at index) and a completion or acquisition (which starts at
 * the primary key and then moves the record's expires_at entry) lock the same
 * rows in opposite orders. The statements are fenced or conditional, so a
 * second run decides on what it finds then.
 */
const DEADLOCK_ATTEMPTS = 4;

function isDeadlock(error: unknown): boolean {
  return (error as { errno?: unknown } | null)?.errno === ER_LOCK_DEADLOCK;
}

/** Marks a pooled connection that already has the store's 'error' listener. */
const HEARD = Symbol('nest-idempotency: error listener');

/**
 * Gives a pooled connection the store's 'error' listener, once: unheard, an
 * 'error' event on an idle pooled connection would crash the process.
 */
function hearErrors(connection: MysqlConnection, log: QueryLog): void {
  const marked = connection as MysqlConnection & { [HEARD]?: true };
  // Marked only once the listener is the store's own: someone else's may be removed later.
  if (marked[HEARD] || connection.listenerCount('error') > 0) return;
  marked[HEARD] = true;
  connection.on('error', (failure) => log.warn(`MySQL connection raised an error. ${failure}`));
}

/** An error the server sent in answer to a statement: mysql2 gives it a SQLSTATE and a numeric errno. */
function isServerError(error: Error): boolean {
  const { sqlState, errno, fatal } = error as {
    sqlState?: unknown;
    errno?: unknown;
    fatal?: unknown;
  };
  return typeof sqlState === 'string' && typeof errno === 'number' && fatal !== true;
}
