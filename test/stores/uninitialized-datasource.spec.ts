import { IdempotencyStoreSchemaError } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { testDatabaseUrl } from '../support/postgres';

describe('TypeOrmIdempotencyStore on a DataSource that was never initialized', () => {
  it('says what to do instead of failing with a driver error', async () => {
    const dataSource = new DataSource({ type: 'postgres', url: testDatabaseUrl() });
    const store = new TypeOrmIdempotencyStore(dataSource);
    const attempt = store.init();
    await expect(attempt).rejects.toBeInstanceOf(IdempotencyStoreSchemaError);
    await expect(attempt).rejects.toThrow(
      /DataSource is not initialized; call dataSource\.initialize\(\)/,
    );
  });
});
