import { IdempotencyStoreUnavailableError } from '../../core/errors';
import { errorText } from '../../core/error-text';

/**
 * A failed statement as a SQL store reports it: an error its driver says
 * means the server cannot be reached or was lost (`isUnavailable`, the
 * dialect's own test) becomes `IdempotencyStoreUnavailableError`, which
 * callers may retry after its `Retry-After`; any other error goes up as it came.
 */
export function storeError(
  error: unknown,
  product: string,
  operation: string,
  isUnavailable: (error: unknown) => boolean,
): unknown {
  if (error instanceof IdempotencyStoreUnavailableError || !isUnavailable(error)) return error;
  return new IdempotencyStoreUnavailableError(
    `${product} is unavailable during ${operation}: ${errorText(error)}`,
    1000,
    { cause: error },
  );
}
