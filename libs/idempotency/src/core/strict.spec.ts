import { InMemoryIdempotencyStore } from '../stores/memory/in-memory.store';
import { ExecuteRequest, IdempotencyEngine } from './engine';
import {
  IdempotencyCompletionError,
  IdempotencyConfigError,
  IdempotencyNotExecutedError,
  IdempotencyOutcomeUnknownError,
  IdempotencyStoreUnavailableError,
} from './errors';
import { IdempotencyEvent } from './events';
import { keyDigest } from './key';
import { decodeValue, encodeValue } from './payload';
import type { ReconcileHook } from './policy';
import { IdempotencyStore, RecordId } from './store';

const SCOPE = 'PaymentsController.charge';
const KEY = 'raw-key-strict-7d1e';
const ID: RecordId = { scope: SCOPE, key: KEY };
const DIGEST = keyDigest(SCOPE, KEY);
const quiet = { warn: () => undefined, error: () => undefined };

/** An engine over an in-memory store whose clock the test moves. */
function setup(engineStore?: (store: InMemoryIdempotencyStore) => IdempotencyStore) {
  const clock = { now: 1_000_000 };
  const store = new InMemoryIdempotencyStore({ now: () => clock.now });
  const engine = new IdempotencyEngine(engineStore ? engineStore(store) : store, {
    logger: quiet,
    completionRetry: { attempts: 1 },
  });
  const events: IdempotencyEvent[] = [];
  engine.onEvent((event) => events.push(event));
  return { clock, store, engine, events };
}

function strict(overrides: Partial<ExecuteRequest> = {}): ExecuteRequest {
  return {
    scope: SCOPE,
    key: KEY,
    lease: 'PT10S',
    waitTimeout: 0,
    ttl: 'PT1H',
    onExpiredLease: 'refuse',
    ...overrides,
  };
}

/** A holder that took the key and then went silent (no heartbeat): its lease runs out when the clock moves. */
async function abandonedHolder(store: InMemoryIdempotencyStore, clock: { now: number }) {
  const acquired = await store.tryAcquire({
    ...ID,
    leaseMs: 10_000,
    waitTimeoutMs: 0,
    ttlMs: 3_600_000,
    fingerprint: null,
  });
  expect(acquired.kind).toBe('acquired');
  clock.now += 11_000;
}

describe('strict mode (onExpiredLease: refuse) in the engine', () => {
  it('refuses an expired lease instead of stealing it, and the record stays AMBIGUOUS for every later attempt', async () => {
    const { clock, store, engine, events } = setup();
    await abandonedHolder(store, clock);
    // A read moves nothing: the lapse shows, the state does not change.
    expect(await store.find(ID)).toMatchObject({ state: 'IN_PROGRESS', leaseExpired: true });
    let runs = 0;
    const action = async () => ++runs;
    const first = await engine.execute(strict(), action).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(IdempotencyOutcomeUnknownError);
    expect(first).toMatchObject({ scope: SCOPE, keyDigest: DIGEST, reason: 'lease-expired' });
    const view = await store.find(ID);
    expect(view).toMatchObject({ state: 'AMBIGUOUS', ambiguousReason: 'lease-expired' });
    expect(view?.ambiguousSince?.getTime()).toBe(clock.now);
    clock.now += 3_600_000 * 48; // far past its TTL
    await expect(engine.execute(strict(), action)).rejects.toBeInstanceOf(
      IdempotencyOutcomeUnknownError,
    );
    // A caller outside strict mode is refused too: nothing takes an AMBIGUOUS record over.
    await expect(
      engine.execute(strict({ onExpiredLease: 'steal' }), action),
    ).rejects.toBeInstanceOf(IdempotencyOutcomeUnknownError);
    expect(await store.purgeExpired()).toBe(0);
    expect((await store.find(ID))?.state).toBe('AMBIGUOUS');
    expect(runs).toBe(0);
    expect(events.filter((e) => e.type === 'ambiguous')).toEqual([
      { type: 'ambiguous', scope: SCOPE, keyDigest: DIGEST, reason: 'lease-expired' },
    ]);
    expect(events.filter((e) => e.type === 'outcome-unknown')).toHaveLength(3);
  });

  it('still steals an expired lease by default', async () => {
    const { clock, store, engine } = setup();
    await abandonedHolder(store, clock);
    const outcome = await engine.execute(strict({ onExpiredLease: undefined }), async () => 'ran');
    expect(outcome).toEqual({ kind: 'executed', value: 'ran' });
  });

  it('makes the record AMBIGUOUS when the action throws, unless the error says it did not run', async () => {
    const { store, engine, events } = setup();
    const boom = new Error('the payment provider timed out');
    await expect(
      engine.execute(strict(), async () => {
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(await store.find(ID)).toMatchObject({
      state: 'AMBIGUOUS',
      ambiguousReason: 'action-failed',
    });
    expect(events.some((e) => e.type === 'ambiguous' && e.reason === 'action-failed')).toBe(true);
    expect(events.some((e) => e.type === 'released')).toBe(false);

    // The marker, thrown or as a cause: released, and the next attempt runs.
    for (const [key, error] of [
      ['marker', new IdempotencyNotExecutedError('declined before charging')],
      ['wrapped', new Error('402', { cause: new IdempotencyNotExecutedError() })],
    ] as const) {
      await expect(
        engine.execute(strict({ key }), async () => {
          throw error;
        }),
      ).rejects.toBe(error);
      expect(await store.find({ scope: SCOPE, key })).toBeNull();
      expect(await engine.execute(strict({ key }), async () => 'second')).toMatchObject({
        kind: 'executed',
      });
    }
  });

  it('asks the notExecuted predicate; one that throws counts as executed', async () => {
    const { store, engine } = setup();
    const notExecuted = (error: unknown) => (error as Error).message === 'validation';
    await engine
      .execute(strict({ key: 'a', notExecuted }), async () => {
        throw new Error('validation');
      })
      .catch(() => undefined);
    expect(await store.find({ scope: SCOPE, key: 'a' })).toBeNull();
    await engine
      .execute(strict({ key: 'b', notExecuted }), async () => {
        throw new Error('socket hang up');
      })
      .catch(() => undefined);
    expect((await store.find({ scope: SCOPE, key: 'b' }))?.state).toBe('AMBIGUOUS');
    await engine
      .execute(
        strict({
          key: 'c',
          notExecuted: () => {
            throw new Error('bug in the predicate');
          },
        }),
        async () => {
          throw new Error('validation');
        },
      )
      .catch(() => undefined);
    expect((await store.find({ scope: SCOPE, key: 'c' }))?.state).toBe('AMBIGUOUS');
  });

  describe('the reconcile hook', () => {
    async function ambiguous(reconcile: ReconcileHook) {
      const context = setup();
      await context.engine
        .execute(strict(), async () => {
          throw new Error('lost the connection mid-charge');
        })
        .catch(() => undefined);
      expect((await context.store.find(ID))?.state).toBe('AMBIGUOUS');
      let runs = 0;
      const attempt = context.engine
        .execute(strict({ reconcile }), async () => ({ charged: ++runs }))
        .catch((e: unknown) => e);
      return { ...context, attempt, runs: () => runs };
    }

    it('completed: the record is resolved with the value, replayed, and says who resolved it', async () => {
      const questions: unknown[] = [];
      const { attempt, store, events, runs, clock } = await ambiguous((question) => {
        questions.push(question);
        return { outcome: 'completed', value: { charged: 'by the provider' } };
      });
      expect(await attempt).toMatchObject({
        kind: 'replayed',
        value: { charged: 'by the provider' },
      });
      expect(runs()).toBe(0);
      expect(questions).toEqual([
        {
          scope: SCOPE,
          keyDigest: DIGEST,
          key: KEY,
          since: new Date(clock.now),
          reason: 'action-failed',
        },
      ]);
      const view = await store.find(ID);
      expect(view).toMatchObject({ state: 'COMPLETE', resolvedBy: 'reconcile' });
      expect(view?.resolvedAt?.getTime()).toBe(clock.now);
      expect(view?.expiresAt.getTime()).toBe(clock.now + 3_600_000);
      expect(decodeValue(view!.payload!)).toEqual({ charged: 'by the provider' });
      expect(events).toContainEqual({
        type: 'resolved',
        scope: SCOPE,
        keyDigest: DIGEST,
        outcome: 'completed',
        resolver: 'reconcile',
      });
    });

    it('not-executed: the record is resolved (deleted) and the action runs', async () => {
      const { attempt, events, runs, store } = await ambiguous(() => ({
        outcome: 'not-executed',
      }));
      expect(await attempt).toEqual({ kind: 'executed', value: { charged: 1 } });
      expect(runs()).toBe(1);
      expect((await store.find(ID))?.state).toBe('COMPLETE');
      expect(events).toContainEqual(
        expect.objectContaining({
          type: 'resolved',
          outcome: 'not-executed',
          resolver: 'reconcile',
        }),
      );
    });

    it('unknown, or a hook that throws: refused, and the record stays AMBIGUOUS', async () => {
      for (const hook of [
        () => ({ outcome: 'unknown' }) as const,
        () => {
          throw new Error('ledger unreachable');
        },
        () => ({ outcome: 'maybe' }) as never,
      ]) {
        const { attempt, events, runs, store } = await ambiguous(hook);
        expect(await attempt).toBeInstanceOf(IdempotencyOutcomeUnknownError);
        expect(runs()).toBe(0);
        expect((await store.find(ID))?.state).toBe('AMBIGUOUS');
        expect(events.some((e) => e.type === 'resolved')).toBe(false);
      }
    });
  });

  it('refuses strict mode on a store that does not support it, naming where', () => {
    const plain: IdempotencyStore = new InMemoryIdempotencyStore();
    const withoutStrict = Object.assign(Object.create(plain) as IdempotencyStore, {
      strictMode: undefined,
    });
    const engine = new IdempotencyEngine(withoutStrict, { logger: quiet });
    expect(() =>
      engine.policy({ scope: SCOPE, onExpiredLease: 'refuse' }, 'Payments.charge'),
    ).toThrow(
      new IdempotencyConfigError(
        "Payments.charge: onExpiredLease: 'refuse' (strict mode) needs a store that supports it (store.strictMode: the in-memory, Redis and TypeORM stores); this store does not",
      ),
    );
    expect(() =>
      engine.policy({ scope: SCOPE, reconcile: () => ({ outcome: 'unknown' }) }),
    ).toThrow(IdempotencyConfigError);
  });

  it('onCompletionFailure: return hands the value over when the result cannot be recorded', async () => {
    const failing = (store: InMemoryIdempotencyStore): IdempotencyStore =>
      Object.assign(Object.create(store) as IdempotencyStore, {
        complete: () => Promise.reject(new IdempotencyStoreUnavailableError('down')),
      });
    const { engine, store } = setup(failing);
    await expect(
      engine.execute(strict({ onExpiredLease: undefined }), async () => 'charged'),
    ).rejects.toBeInstanceOf(IdempotencyCompletionError);
    const outcome = await engine.execute(
      strict({ key: 'other', onExpiredLease: undefined, onCompletionFailure: 'return' }),
      async () => 'charged',
    );
    expect(outcome).toEqual({ kind: 'executed', value: 'charged' });
    // Not recorded: the record is still in flight, as with 'error'.
    expect((await store.find({ scope: SCOPE, key: 'other' }))?.state).toBe('IN_PROGRESS');
  });
});

describe('strict mode in the in-memory store', () => {
  it('resolves only an AMBIGUOUS record, and only once', async () => {
    const { store, engine } = setup();
    await engine
      .execute(strict(), async () => {
        throw new Error('unknown');
      })
      .catch(() => undefined);
    const resolve = store.strictMode.resolve;
    const payload = encodeValue({ ok: true });
    expect(
      await resolve(ID, { outcome: 'completed', payload, ttlMs: 1000, resolvedBy: 'cli:local' }),
    ).toMatchObject({ kind: 'resolved' });
    expect(await resolve(ID, { outcome: 'not-executed', resolvedBy: 'cli:local' })).toEqual({
      kind: 'not-ambiguous',
      state: 'COMPLETE',
    });
    expect(
      await resolve({ scope: SCOPE, key: 'absent' }, { outcome: 'not-executed', resolvedBy: 'x' }),
    ).toEqual({ kind: 'not-ambiguous', state: null });
    expect(await engine.execute(strict(), async () => 'never')).toMatchObject({
      kind: 'replayed',
      value: { ok: true },
    });
  });
});
