import { InMemoryIdempotencyStore } from 'nest-idempotency';
import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';

describeIdempotencyStoreContract('InMemoryIdempotencyStore', async () => ({
  store: new InMemoryIdempotencyStore(),
}));
