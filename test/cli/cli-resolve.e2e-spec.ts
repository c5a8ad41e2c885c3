import { DataSource } from 'typeorm';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { cli, createRecordsTable } from './cli-harness';
import { expectResolveOnSql } from './resolve-scenario';

describe('nest-idempotency resolve on PostgreSQL', () => {
  let admin: DataSource;
  let store: TypeOrmIdempotencyStore;
  const schema = scratchSchema('cli_resolve');

  beforeAll(async () => {
    admin = await openDataSource();
    await createRecordsTable(admin, schema);
    store = new TypeOrmIdempotencyStore(admin, { schema });
  });
  afterAll(async () => {
    await store?.close();
    if (admin) await dropSchema(admin, schema);
    await admin?.destroy();
  });

  it('an AMBIGUOUS record becomes COMPLETE (replayed) or is deleted (the next attempt runs), recorded as cli:local', async () => {
    await expectResolveOnSql(
      store,
      (...args) => cli(['--schema', schema, ...args]),
      `${schema}.idempotency_records`,
      async (scope, key) => {
        await admin.query(
          `UPDATE "${schema}".idempotency_records SET lease_expires_at = now() - interval '1 second' WHERE scope = $1 AND "key" = $2`,
          [scope, key],
        );
      },
    );
  });
});
