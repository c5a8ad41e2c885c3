import { InMemoryIdempotencyStore } from '../stores/memory/in-memory.store';
import { IdempotencyEngine } from './engine';
import { IdempotencyConfigError, IdempotencyError, IdempotencyPayloadError } from './errors';
import type { IdempotencyEvent } from './events';
import type { IdempotencyStore } from './store';

const quiet = { warn: () => undefined, error: () => undefined };

function engineOn(store: IdempotencyStore = new InMemoryIdempotencyStore()) {
  return new IdempotencyEngine(store, { logger: quiet });
}

describe('ctx.step', () => {
  it('refuses a bad step name with an IdempotencyError naming the step and the record', async () => {
    const engine = engineOn();
    const policy = engine.policy({ scope: 'orders' });
    for (const name of ['', 'x'.repeat(101), 'has space', 'a/b', 'ünï', 42, undefined]) {
      const run = engine.run(policy, { key: `k-${String(name)}` }, (_signal, ctx) =>
        ctx.step(name as string, () => 1),
      );
      await expect(run).rejects.toThrow(IdempotencyError);
    }
    await expect(
      engine.run(policy, { key: 'named' }, (_signal, ctx) => ctx.step('has space', () => 1)),
    ).rejects.toThrow(/orders\/#[0-9a-f]{12}: step\(name, fn\): the step name "has space"/);
  });

  it('runs once per record and name, and answers the value as JSON gives it back', async () => {
    const engine = engineOn();
    const events: IdempotencyEvent[] = [];
    engine.onEvent((event) => events.push(event));
    let runs = 0;
    const outcome = await engine.run(
      engine.policy({ scope: 'orders' }),
      { key: 'k' },
      async (_signal, ctx) => {
        const first = await ctx.step('charge', () => (runs++, { at: new Date(0) }));
        const again = await ctx.step('charge', () => (runs++, { at: new Date(1) }));
        return [first, again];
      },
    );
    expect(runs).toBe(1);
    expect(outcome.value).toEqual([
      { at: '1970-01-01T00:00:00.000Z' },
      { at: '1970-01-01T00:00:00.000Z' },
    ]);
    const steps = events.filter((e) => e.type.startsWith('step-')).map((e) => e.type);
    expect(steps).toEqual(['step-recorded', 'step-replayed']);
    expect(JSON.stringify(events)).not.toContain('"k"');
  });

  it('records nothing for a value JSON cannot hold, and reruns the step next time', async () => {
    const engine = engineOn();
    const policy = engine.policy({ scope: 'orders' });
    let runs = 0;
    const failing = engine.run(policy, { key: 'k' }, async (_signal, ctx) => {
      await ctx.step('charge', () => (runs++, 10n as unknown as number));
    });
    await expect(failing).rejects.toThrow(IdempotencyPayloadError);
    await engine.run(policy, { key: 'k' }, (_signal, ctx) => ctx.step('charge', () => runs++));
    expect(runs).toBe(2);
  });

  it('throws IdempotencyConfigError on a store without the steps capability', async () => {
    const inner = new InMemoryIdempotencyStore();
    const store: IdempotencyStore = {
      tryAcquire: (r) => inner.tryAcquire(r),
      complete: (l, p) => inner.complete(l, p),
      release: (l) => inner.release(l),
      extend: (l) => inner.extend(l),
      purgeExpired: (o) => inner.purgeExpired(o),
      find: (id) => inner.find(id),
      list: (f) => inner.list(f),
    };
    const engine = engineOn(store);
    await expect(
      engine.run(engine.policy({ scope: 'orders' }), { key: 'k' }, (_signal, ctx) =>
        ctx.step('charge', () => 1),
      ),
    ).rejects.toThrow(IdempotencyConfigError);
  });
});
