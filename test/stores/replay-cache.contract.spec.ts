import { InMemoryIdempotencyStore, ReplayCachingStore } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

// The replay cache must be invisible: the whole contract holds through it.
describeIdempotencyStoreContract('ReplayCachingStore over InMemoryIdempotencyStore', async () => ({
  store: new ReplayCachingStore(new InMemoryIdempotencyStore()),
}));

describeIdempotencyStoreContract('ReplayCachingStore over TypeOrmIdempotencyStore', async () => {
  const dataSource = await openDataSource();
  const schema = scratchSchema('cache');
  return {
    store: new ReplayCachingStore(
      new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true }),
    ),
    close: async () => {
      await dropSchema(dataSource, schema);
      await dataSource.destroy();
    },
  };
});
