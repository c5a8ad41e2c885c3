import { InMemoryIdempotencyStore } from 'nest-idempotency';
import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';

// An in-process store keeps time by the process clock: the kit leaves out the store-clock scenario.
// It supports strict mode, so the strict-mode scenarios run too.
describeIdempotencyStoreContract(
  'InMemoryIdempotencyStore',
  async () => ({ store: new InMemoryIdempotencyStore(), clock: 'process' }),
  { clock: 'process', strictMode: true, steps: true, continuations: true },
);
