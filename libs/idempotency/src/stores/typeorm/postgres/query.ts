import { createHash } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import type { DataSource } from 'typeorm';
import { IdempotencyStoreUnavailableError } from '../../../core/errors';
import { withinTimeout } from '../bounded-query';
import { poolOf } from './pool';
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
   * What the DataSource's logger is shown in place of `values`: keys and
   * payloads replaced, so query logging never prints a raw key or a stored body.
   */
  logged: unknown[];
}

/**
 * One statement straight through the `pg` pool under the DataSource (never
 * `dataSource.query`, which would log the raw parameters), bounded by
 * `timeoutMs` (waiting for a pooled connection included). The statement is
 * still reported to the DataSource's logger, with `logged` as its parameters.
 */
export function storeQuery<T>(
  dataSource: DataSource,
  timeoutMs: number,
  query: StoreQuery,
): Promise<T[]> {
  dataSource.logger.logQuery(query.text, query.logged);
  const pool = poolOf(dataSource);
  if (!pool) {
    return Promise.reject(
      new IdempotencyStoreUnavailableError(
        `${query.operation}: the DataSource is not initialized (destroyed while the application runs?)`,
      ),
    );
  }
  return withinTimeout(send<T>(pool, query), timeoutMs, query.operation).catch((error: unknown) => {
    dataSource.logger.logQueryError(
      error instanceof Error ? error : String(error),
      query.text,
      query.logged,
    );
    throw error;
  });
}

async function send<T>(pool: Pool, query: StoreQuery): Promise<T[]> {
  const client: PoolClient = await pool.connect();
  let broken: Error | undefined;
  // A connection that fails while checked out reports it as an 'error' event
  // (besides failing the query); unheard, that event would crash the process.
  const onError = (error: Error) => (broken = error);
  client.on('error', onError);
  try {
    const result = await client.query(
      query.name
        ? { name: query.name, text: query.text, values: query.values }
        : { text: query.text, values: query.values },
    );
    return result.rows as T[];
  } catch (error) {
    // A statement error leaves the connection usable (and its prepared statements
    // with it); only a broken connection is dropped from the pool.
    if (isUnavailable(error)) broken = error as Error;
    throw error;
  } finally {
    client.removeListener('error', onError);
    client.release(broken);
  }
}
