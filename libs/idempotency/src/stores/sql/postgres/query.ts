import { createHash } from 'node:crypto';
import type { Pool, QueryConfig, QueryResult } from 'pg';
import { IdempotencyStoreUnavailableError } from '../../../core/errors';
import type { Deadlines } from '../bounded-query';
import { logFailedQuery } from '../query-log';
import { storeError } from '../unavailable-error';
import type { PgConnection } from './pool';
import { isUnavailable } from './unavailable';

/**
 * The name a statement is prepared under on each connection: the operation and
 * a digest of the text, so stores on different tables sharing one pool never
 * collide, and a changed text is a new statement rather than a clash.
 */
export function preparedName(operation: string, text: string): string {
  const digest = createHash('sha256').update(text).digest('hex').slice(0, 16);
  return `nest_idem_${operation}_${digest}`;
}

export interface StoreQuery {
  operation: string;
  text: string;
  values: unknown[];
  /** Set: sent as this named prepared statement (parsed and planned once per connection). */
  name?: string;
  /**
   * What the query log is shown in place of `values`: keys, tenants
   * and payloads replaced, so query logging never prints a raw key, a tenant
   * or a stored body. Built only when a logger will see it.
   */
  logged: () => unknown[];
}

/** What a statement answered: its rows, and how many rows it wrote (INSERT, UPDATE, DELETE). */
export type StoreResult<T> = Pick<QueryResult, 'rowCount'> & { rows: T[] };

/**
 * One statement straight through the connection's `pg` pool (under a
 * DataSource never `dataSource.query`, which would log the raw parameters),
 * bounded by `deadlines` (waiting for a pooled connection included). The
 * statement is still reported to the query log, with `logged` as its parameters.
 * A lost or unreachable server rejects with `IdempotencyStoreUnavailableError`.
 */
export function storeQuery<T>(
  connection: PgConnection,
  deadlines: Deadlines,
  query: StoreQuery,
): Promise<StoreResult<T>> {
  const log = connection.log;
  if (log.logsQueries()) log.query(query.text, query.logged());
  const pool = connection.pool();
  if (!pool) {
    return Promise.reject(
      new IdempotencyStoreUnavailableError(`${query.operation}: ${connection.unready}`),
    );
  }
  return new Promise<StoreResult<T>>((resolve, reject) => {
    const fail = (error: unknown) => {
      reject(storeError(error, 'PostgreSQL', query.operation, isUnavailable));
      logFailedQuery(log, error, query);
    };
    const deadline = deadlines.add(() =>
      fail(
        new IdempotencyStoreUnavailableError(
          `PostgreSQL did not answer ${query.operation} within ${deadlines.timeoutMs} ms`,
        ),
      ),
    );
    send(pool, query, (error, result) => {
      // Past the deadline the caller was already answered; a late outcome is moot.
      if (!deadlines.settle(deadline)) return;
      if (error) fail(error);
      else resolve(result as StoreResult<T>);
    });
  });
}

type Done = (error: Error | undefined, result?: StoreResult<unknown>) => void;

/** pg's Query class, as the pool's own `pg` module has it (pg is the application's, not ours). */
type QueryClass = new (
  text: string,
  values: unknown[],
  callback: (error: Error | undefined, result: StoreResult<unknown>) => void,
) => { name?: string };

/**
 * Sends the statement on a pooled connection, in callbacks throughout (a
 * promise per step costs more than the step). The statement goes as a `Query`
 * built from its text, so pg does not copy a config object per call (which
 * it does by its property descriptors: microseconds per statement); the
 * prepared statement's name is set on it afterwards.
 */
function send(pool: Pool, query: StoreQuery, done: Done): void {
  pool.connect((connectError, client) => {
    if (connectError || !client) {
      done(connectError ?? new Error('the pool handed out no connection'));
      return;
    }
    let broken: Error | undefined;
    let finished = false;
    // A connection that fails while checked out reports it as an 'error' event
    // (besides failing the query); unheard, that event would crash the process.
    const onError = (error: Error) => (broken = error);
    client.on('error', onError);
    // Once, whoever calls it: pg can answer one query twice (a value it fails to
    // serialize fails the query at once, and the ReadyForQuery of the Sync it sent
    // then completes it again), and a second release would throw out of pg's
    // callback and leave the pool wedged.
    const finish = (error: Error | undefined, result?: StoreResult<unknown>) => {
      if (finished) return;
      finished = true;
      // Only the server's own answer to the statement (an error with a SQLSTATE)
      // leaves the connection in a known, usable state (its prepared statements
      // with it). Anything else (a connection error, a value pg could not
      // serialize before or while sending, a throw) leaves it unknown: destroyed.
      if (error && (isUnavailable(error) || !isServerError(error))) broken = error;
      client.removeListener('error', onError);
      client.release(broken ?? false);
      done(error, result);
    };
    try {
      const Query = (client.constructor as { Query?: QueryClass }).Query;
      if (Query) {
        const statement = new Query(query.text, query.values, finish);
        if (query.name) statement.name = query.name;
        client.query(statement as unknown as QueryConfig);
      } else {
        client.query(
          query.name
            ? { name: query.name, text: query.text, values: query.values }
            : { text: query.text, values: query.values },
          finish as never,
        );
      }
    } catch (error) {
      finish(error as Error);
    }
  });
}

/** An error the server sent in answer to a statement (pg's DatabaseError): it has a SQLSTATE and a severity. */
function isServerError(error: Error): boolean {
  const { code, severity } = error as { code?: unknown; severity?: unknown };
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && typeof severity === 'string';
}
