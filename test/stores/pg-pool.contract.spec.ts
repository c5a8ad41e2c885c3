import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { pgPoolHarness } from './pg-pool-harness';

for (const preparedStatements of [true, false]) {
  describeIdempotencyStoreContract(
    `PgIdempotencyStore (a pg Pool, preparedStatements: ${preparedStatements})`,
    () => pgPoolHarness('pgpool', { preparedStatements }),
    { strictMode: true, steps: true, continuations: true },
  );
}
