import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

for (const preparedStatements of [true, false]) {
  describeIdempotencyStoreContract(
    `TypeOrmIdempotencyStore (PostgreSQL, preparedStatements: ${preparedStatements})`,
    async () => {
      const dataSource = await openDataSource();
      const schema = scratchSchema('contract');
      return {
        store: new TypeOrmIdempotencyStore(dataSource, {
          schema,
          ensureSchema: true,
          preparedStatements,
        }),
        close: async () => {
          await dropSchema(dataSource, schema);
          await dataSource.destroy();
        },
      };
    },
  );
}
