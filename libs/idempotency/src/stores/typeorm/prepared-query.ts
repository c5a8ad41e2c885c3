import { createHash } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import type { DataSource } from 'typeorm';
import { IdempotencyStoreUnavailableError } from '../../core/errors';
import { withinTimeout } from './bounded-query';
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

/**
 * One statement as a named prepared statement, straight through the `pg` pool
 * under the DataSource: each connection parses and plans it once, later calls
 * send only the parameters (still one round trip). Bounded by `timeoutMs` like
 * `boundedQuery`; the statement is still reported to the DataSource's logger.
 */
export function preparedQuery<T>(
  dataSource: DataSource,
  timeoutMs: number,
  operation: string,
  name: string,
  sql: string,
  params: unknown[],
): Promise<T[]> {
  dataSource.logger.logQuery(sql, params);
  const pool = poolOf(dataSource);
  if (!pool) {
    return Promise.reject(
      new IdempotencyStoreUnavailableError(
        `${operation}: the DataSource is not initialized (destroyed while the application runs?)`,
      ),
    );
  }
  return withinTimeout(send<T>(pool, name, sql, params), timeoutMs, operation);
}

async function send<T>(pool: Pool, name: string, text: string, values: unknown[]): Promise<T[]> {
  const client: PoolClient = await pool.connect();
  let broken: Error | undefined;
  // A connection that fails while checked out reports it as an 'error' event
  // (besides failing the query); unheard, that event would crash the process.
  const onError = (error: Error) => (broken = error);
  client.on('error', onError);
  try {
    const result = await client.query({ name, text, values });
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
