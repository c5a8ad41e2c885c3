import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { postgresHarness } from './pg-harness';

for (const preparedStatements of [true, false]) {
  describeIdempotencyStoreContract(
    `TypeOrmIdempotencyStore (PostgreSQL, preparedStatements: ${preparedStatements})`,
    () => postgresHarness('contract', { preparedStatements }),
    { strictMode: true, steps: true, continuations: true },
  );
}
