import { IdempotencyConfigError } from '../../../core/errors';

/** The error of a handle recognised as an ORM's that is not inside a transaction. */
export function notInTransaction(what: string): IdempotencyConfigError {
  return new IdempotencyConfigError(
    `completion in a transaction got ${what}, not one of its transactions: completion must run inside the transaction it commits with (TransactionHost.tx within withTransaction or @Transactional())`,
  );
}
