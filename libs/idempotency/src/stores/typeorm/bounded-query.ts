import type { DataSource } from 'typeorm';
import { IdempotencyStoreUnavailableError } from '../../core/errors';

/**
 * Settles like `work`, unless `timeoutMs` passes first: then it rejects with
 * `IdempotencyStoreUnavailableError`. `work` itself is not cancelled.
 */
export async function withinTimeout<T>(
  work: Promise<T>,
  timeoutMs: number,
  operation: string,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new IdempotencyStoreUnavailableError(
            `PostgreSQL did not answer ${operation} within ${timeoutMs} ms`,
          ),
        ),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * One statement through the DataSource, given up after `timeoutMs` (waiting for
 * a pooled connection included) with `IdempotencyStoreUnavailableError`. The
 * statement itself is not cancelled on the server.
 */
export function boundedQuery<T>(
  dataSource: DataSource,
  timeoutMs: number,
  operation: string,
  sql: string,
  params: unknown[] = [],
): Promise<T[]> {
  return withinTimeout(dataSource.query(sql, params) as Promise<T[]>, timeoutMs, operation);
}
