import { InMemoryIdempotencyStore } from '../stores/memory/in-memory.store';
import { IdempotencyEngine } from './engine';
import {
  IdempotencyConfigError,
  IdempotencyOutcomeUnknownError,
  IdempotencyResumptionRefusedError,
} from './errors';
import type { IdempotencyEvent } from './events';

const quiet = { warn: () => undefined, error: () => undefined };

function setup() {
  const store = new InMemoryIdempotencyStore();
  const engine = new IdempotencyEngine(store, { logger: quiet });
  const events: IdempotencyEvent[] = [];
  engine.onEvent((event) => events.push(event));
  return { store, engine, events };
}

async function suspended(engine: IdempotencyEngine, scope: string, key: string, strict = false) {
  const policy = engine.policy({
    scope,
    ttl: '1h',
    ...(strict ? { onExpiredLease: 'refuse' } : {}),
  });
  const outcome = await engine.run(policy, { key }, async (_signal, ctx) =>
    ctx.suspend({ waiting: true }, { hold: '1m', state: { n: 1 } }),
  );
  if (outcome.kind !== 'suspended') throw new Error(`expected suspended, got ${outcome.kind}`);
  return { policy, token: outcome.continuation };
}

describe('ctx.suspend and engine.resume', () => {
  it('refuses a suspension without a hold, or with an unknown option, naming the record', async () => {
    const { engine } = setup();
    const policy = engine.policy({ scope: 'pay' });
    await expect(
      engine.run(policy, { key: 'a' }, async (_s, ctx) =>
        ctx.suspend('x', {} as unknown as { hold: string }),
      ),
    ).rejects.toThrow(/pay\/#[0-9a-f]{12}: suspend\(answer, \{ hold \}\): the hold is required/);
    await expect(
      engine.run(policy, { key: 'b' }, async (_s, ctx) =>
        ctx.suspend('x', { hold: '1m', hodl: 1 } as unknown as { hold: string }),
      ),
    ).rejects.toThrow(/unknown option "hodl"/);
    await expect(
      engine.run(policy, { key: 'c' }, async (_s, ctx) => ctx.suspend('x', { hold: 'soon' })),
    ).rejects.toThrow(IdempotencyConfigError);
    // Nothing was kept: each key runs again.
    const again = await engine.run(policy, { key: 'a' }, async () => 'ran');
    expect(again).toEqual({ kind: 'executed', value: 'ran' });
  });

  it('releases the suspended record when the resumption throws, so the original key starts over', async () => {
    const { engine, events } = setup();
    const { policy, token } = await suspended(engine, 'pay', 'k');
    await expect(
      engine.resume(policy, token, async () => {
        throw new Error('declined');
      }),
    ).rejects.toThrow('declined');
    expect(events.map((e) => e.type)).toContain('resumed');
    const next = await engine.run(policy, { key: 'k' }, async (_s, ctx) => ctx.attempt);
    expect(next).toEqual({ kind: 'executed', value: 'first' });
    await expect(engine.resume(policy, token, async () => 1)).rejects.toBeInstanceOf(
      IdempotencyResumptionRefusedError,
    );
  });

  it('in strict mode makes the record AMBIGUOUS when the resumption throws', async () => {
    const { engine } = setup();
    const { policy, token } = await suspended(engine, 'pay', 'k', true);
    await expect(
      engine.resume(policy, token, async () => {
        throw new Error('lost at sea');
      }),
    ).rejects.toThrow('lost at sea');
    await expect(engine.run(policy, { key: 'k' }, async () => 1)).rejects.toBeInstanceOf(
      IdempotencyOutcomeUnknownError,
    );
  });

  it('lets a resumption suspend again, with a new token; the old one no longer resumes', async () => {
    const { engine } = setup();
    const { policy, token } = await suspended(engine, 'pay', 'k');
    const second = await engine.resume(policy, token, async (_s, ctx) =>
      ctx.suspend({ step: 2 }, { hold: '1m', state: { n: (ctx.resumed as { n: number }).n + 1 } }),
    );
    expect(second.kind).toBe('suspended');
    const next = (second as { continuation: string }).continuation;
    expect(next).not.toBe(token);
    const final = await engine.resume(policy, next, async (_s, ctx) => ctx.resumed);
    expect(final).toEqual({ kind: 'executed', value: { n: 2 } });
    const reason = await engine
      .resume(policy, token, async () => 0)
      .catch((e: IdempotencyResumptionRefusedError) => e.reason);
    // The record holds its newer continuation now: the old token names nothing resumable.
    expect(reason).toBe('unknown');
  });

  it('emits suspended, suspension-replayed and resumption-refused, named by digest', async () => {
    const { engine, events } = setup();
    const { policy, token } = await suspended(engine, 'pay', 'k');
    await engine.run(policy, { key: 'k' }, async () => 1);
    await engine.resume(policy, 'nope', async () => 1).catch(() => undefined);
    const types = events.map((e) => e.type);
    expect(types).toEqual(
      expect.arrayContaining(['suspended', 'suspension-replayed', 'resumption-refused']),
    );
    expect(JSON.stringify(events)).not.toContain('"k"');
    expect(token).toMatch(/^[0-9a-f]{64}\.[A-Za-z0-9_-]{22}$/);
  });

  it('appends no receipt for a suspension, and one when the resumption completes the record', async () => {
    const store = new InMemoryIdempotencyStore();
    const engine = new IdempotencyEngine(store, { logger: quiet, receipts: true });
    const receipts: IdempotencyEvent[] = [];
    engine.onEvent((event) => {
      if (event.type === 'receipt-appended') receipts.push(event);
    });
    const { policy, token } = await suspended(engine, 'pay', 'k');
    expect(receipts).toEqual([]);
    await engine.resume(policy, token, async () => 'paid');
    expect(receipts).toEqual([expect.objectContaining({ scope: 'pay', outcome: 'completed' })]);
  });
});
