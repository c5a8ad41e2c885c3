import type { DataSource } from 'typeorm';
import { IdempotencyStoreUnavailableError } from '../../../core/errors';
import { logsQueries } from '../query-log';
import { isMysqlUnavailable } from './unavailable';

/*
 * The slice of mysql2's callback API the store uses, typed here so that the
 * library needs no mysql2 types (mysql2 is an optional peer, like pg).
 */
type Callback<T> = (error: (Error & { fatal?: boolean }) | null, result?: T) => void;

interface MysqlConnection {
  query(options: { sql: string; values: unknown[] }, callback: Callback<unknown>): unknown;
  execute?(options: { sql: string; values: unknown[] }, callback: Callback<unknown>): unknown;
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
function connectorOf(
  dataSource: DataSource,
): ((callback: Callback<MysqlConnection>) => void) | undefined {
  const driver = dataSource.driver as unknown as {
    pool?: MysqlPool;
    poolCluster?: MysqlPoolCluster;
  };
  const { pool, poolCluster } = driver;
  if (pool) return (callback) => pool.getConnection(callback);
  if (poolCluster) return (callback) => poolCluster.getConnection('MASTER', callback);
  return undefined;
}

export interface MysqlStoreQuery {
  operation: string;
  text: string;
  values: unknown[];
  /** Sent as a prepared statement (mysql2 `execute`: parsed once per connection, values in binary). */
  prepared: boolean;
  /**
   * What the DataSource's logger is shown in place of `values`: keys and
   * payloads replaced, so query logging never prints a raw key or a stored
   * body. Called only for a logger that logs queries (or for an error).
   */
  logged: () => unknown[];
}

/**
 * One statement straight through the mysql2 pool under the DataSource (never
 * `dataSource.query`, which would log the raw parameters), bounded by
 * `timeoutMs` (waiting for a pooled connection included): past it the call
 * fails with `IdempotencyStoreUnavailableError` and the connection it was
 * running on is destroyed (the server may still finish the statement). The
 * statement is reported to the DataSource's logger with `logged` as its
 * parameters.
 */
export function mysqlStoreQuery<T>(
  dataSource: DataSource,
  timeoutMs: number,
  product: string,
  query: MysqlStoreQuery,
): Promise<T> {
  const logger = dataSource.logger;
  if (logsQueries(logger)) logger.logQuery(query.text, query.logged());
  const connector = connectorOf(dataSource);
  if (!connector) {
    return Promise.reject(
      new IdempotencyStoreUnavailableError(
        `${query.operation}: the DataSource is not initialized (destroyed while the application runs?)`,
      ),
    );
  }
  return sendRetryingDeadlocks<T>(connector, query, timeoutMs, product, dataSource).catch(
    (error: unknown) => {
      logger.logQueryError(
        error instanceof Error ? error : String(error),
        query.text,
        query.logged(),
      );
      throw error;
    },
  );
}

/** InnoDB's ER_LOCK_DEADLOCK: this statement was chosen as the victim and rolled back whole. */
const ER_LOCK_DEADLOCK = 1213;
/** Attempts of one statement that keeps losing deadlocks, within its `timeoutMs`. */
const DEADLOCK_ATTEMPTS = 4;

function isDeadlock(error: unknown): boolean {
  return (error as { errno?: unknown } | null)?.errno === ER_LOCK_DEADLOCK;
}

/**
 * Every statement here runs alone in autocommit, so a deadlock victim left no
 * trace and is sent again: InnoDB can pick one when a purge's DELETE (which
 * walks the expires_at index) and a completion or acquisition (which starts at
 * the primary key and then moves the record's expires_at entry) lock the same
 * rows in opposite orders. The statements are fenced or conditional, so a
 * second run decides on what it finds then.
 */
async function sendRetryingDeadlocks<T>(
  connector: (callback: Callback<MysqlConnection>) => void,
  query: MysqlStoreQuery,
  timeoutMs: number,
  product: string,
  dataSource: DataSource,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let attempt = 1; ; attempt++) {
    // The first attempt has the whole budget; a message always names the budget.
    const left = attempt === 1 ? timeoutMs : Math.max(1, deadline - Date.now());
    try {
      return await send<T>(connector, query, left, timeoutMs, product, dataSource);
    } catch (error) {
      // Out of attempts or time, the deadlock goes up as it came: an acquisition
      // then looks at the record again, the engine retries a completion.
      if (!isDeadlock(error) || attempt >= DEADLOCK_ATTEMPTS || deadline - Date.now() <= 0) {
        throw error;
      }
      // A few milliseconds, random, so the two sides do not meet again at once.
      await new Promise((resolve) => setTimeout(resolve, 1 + Math.random() * 4 * attempt));
    }
  }
}

function send<T>(
  connector: (callback: Callback<MysqlConnection>) => void,
  query: MysqlStoreQuery,
  timeoutMs: number,
  budgetMs: number,
  product: string,
  dataSource: DataSource,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    let running: MysqlConnection | undefined;
    const timer = setTimeout(() => {
      settled = true;
      // A connection that did not answer in time is not handed back to the pool.
      running?.destroy();
      reject(
        new IdempotencyStoreUnavailableError(
          `${product} did not answer ${query.operation} within ${budgetMs} ms`,
        ),
      );
    }, timeoutMs);
    connector((error, connection) => {
      if (settled) {
        // The caller gave up while this waited for a connection: hand it back unused.
        connection?.release();
        return;
      }
      if (error || !connection) {
        settled = true;
        clearTimeout(timer);
        reject(error ?? new Error('the pool handed out no connection'));
        return;
      }
      running = connection;
      // Unheard, an 'error' event on an idle pooled connection would crash the process.
      if (connection.listenerCount('error') === 0) {
        connection.on('error', (failure) =>
          dataSource.logger.log('warn', `MySQL connection raised an error. ${failure}`),
        );
      }
      const options = { sql: query.text, values: query.values };
      const done: Callback<unknown> = (failure, result) => {
        if (settled) return; // timed out: the connection is already destroyed
        settled = true;
        clearTimeout(timer);
        running = undefined;
        if (failure) {
          // A statement error leaves the connection usable (and its prepared
          // statements with it); only a broken one is dropped from the pool.
          if (isMysqlUnavailable(failure)) connection.destroy();
          else connection.release();
          reject(failure);
          return;
        }
        connection.release();
        resolve(result as T);
      };
      try {
        if (query.prepared && connection.execute) connection.execute(options, done);
        else connection.query(options, done);
      } catch (failure) {
        done(failure as Error);
      }
    });
  });
}
