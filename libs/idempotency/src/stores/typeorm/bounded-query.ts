import type { DataSource } from 'typeorm';
import { IdempotencyStoreUnavailableError } from '../../core/errors';

/**
 * One statement through the DataSource, given up after `timeoutMs` (waiting for
 * a pooled connection included) with `IdempotencyStoreUnavailableError`. The
 * statement itself is not cancelled on the server.
 */
export async function boundedQuery<T>(
  dataSource: DataSource,
  timeoutMs: number,
  operation: string,
  sql: string,
  params: unknown[] = [],
): Promise<T[]> {
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
    return (await Promise.race([dataSource.query(sql, params), timeout])) as T[];
  } finally {
    clearTimeout(timer);
  }
}
