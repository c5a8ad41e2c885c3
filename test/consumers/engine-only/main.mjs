import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { IdempotencyEngine, InMemoryIdempotencyStore } from 'nest-idempotency/core';

const require = createRequire(import.meta.url);
for (const absent of ['@nestjs/common', '@nestjs/core', 'rxjs', 'reflect-metadata']) {
  assert.throws(() => require.resolve(absent), `${absent} should not be installed`);
}

const engine = new IdempotencyEngine(new InMemoryIdempotencyStore());
const charges = engine.policy({ scope: 'charges', ttl: 'P1D' });
let runs = 0;
const charge = () => engine.run(charges, { key: 'order-42' }, async () => ({ charged: ++runs }));
assert.deepEqual(await charge(), { kind: 'executed', value: { charged: 1 } });
const replay = await charge();
assert.equal(replay.kind, 'replayed');
assert.deepEqual(replay.value, { charged: 1 });
assert.equal(runs, 1);
// The CommonJS entry point is the same module, not a second copy.
assert.equal(require('nest-idempotency/core').IdempotencyEngine, IdempotencyEngine);
console.log('consumer-engine-only: ok (no Nest installed)');
