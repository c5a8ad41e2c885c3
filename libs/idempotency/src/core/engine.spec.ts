import { setTimeout as delay } from 'node:timers/promises';
import { InMemoryIdempotencyStore } from '../stores/memory/in-memory.store';
import { ExecuteRequest, IdempotencyEngine, IdempotencyEngineOptions } from './engine';
import {
  IdempotencyCompletionError,
  IdempotencyConfigError,
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyKeyError,
  IdempotencyLeaseLostError,
  IdempotencyPayloadError,
  IdempotencyStoreUnavailableError,
} from './errors';
import * as errors from './errors';
import { IdempotencyEvent } from './events';
import { keyDigest } from './key';
import { decodeValue, encodeValue, notStorableReason } from './payload';
import { Lease, RecordId, StoredPayload } from './store';

/** A key that must never show up in a log line, an event or an error message. */
const KEY = 'raw-key-5b1f0c7e-secret';
const SCOPE = 'OrdersController.create';
const ID: RecordId = { scope: SCOPE, key: KEY };
const DIGEST = keyDigest(SCOPE, KEY);

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

function request(overrides: Partial<ExecuteRequest> = {}): ExecuteRequest {
  return { scope: SCOPE, key: KEY, lease: '10s', waitTimeout: 0, ttl: '1h', ...overrides };
}

/** Everything the engine said in a test; checked for the raw key after each test. */
let said: string[] = [];

function setup(store = new InMemoryIdempotencyStore(), options: IdempotencyEngineOptions = {}) {
  const lines: string[] = [];
  const logger = {
    warn: (m: string) => void lines.push(`warn: ${m}`),
    error: (m: string) => void lines.push(`error: ${m}`),
  };
  const engine = new IdempotencyEngine(store, { logger, ...options });
  // What operators are told about; every edge's event has tests of its own below.
  const events: IdempotencyEvent[] = [];
  const all: IdempotencyEvent[] = [];
  engine.onEvent((event) => {
    all.push(event);
    if (['lease-lost', 'completion-retry', 'release-failed'].includes(event.type))
      events.push(event);
  });
  afterEachHooks.push(() => said.push(...lines, ...events.map((e) => JSON.stringify(e))));
  return { store, engine, lines, events, all };
}

const afterEachHooks: Array<() => void> = [];
afterEach(() => {
  for (const hook of afterEachHooks.splice(0)) hook();
  const texts = said;
  said = [];
  for (const text of texts) expect(text).not.toContain(KEY);
});

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    said.push((error as Error).message);
    return error as Error;
  }
  throw new Error('expected a rejection');
}

/** Fails `complete` with "store unavailable" for the first `failures` calls. */
class FlakyCompletionStore extends InMemoryIdempotencyStore {
  completeCalls = 0;

  constructor(private readonly failures: number) {
    super();
  }

  override async complete(lease: Lease, payload: StoredPayload) {
    this.completeCalls++;
    if (this.completeCalls <= this.failures) {
      throw new IdempotencyStoreUnavailableError('PostgreSQL did not answer complete within 5 ms');
    }
    return super.complete(lease, payload);
  }
}

describe('IdempotencyEngine', () => {
  describe('execute and replay', () => {
    it('executes once, then replays the stored value without calling the action', async () => {
      let clock = Date.parse('2025-06-01T12:00:00.000Z');
      const { engine } = setup(new InMemoryIdempotencyStore({ now: () => clock }));
      const action = vi.fn(async (_signal: AbortSignal) => ({ id: 7, tags: ['a'] }));

      await expect(engine.execute(request(), action)).resolves.toEqual({
        kind: 'executed',
        value: { id: 7, tags: ['a'] },
      });
      clock += 5000;
      const replay = await engine.execute(request(), action);

      expect(replay).toEqual({
        kind: 'replayed',
        value: { id: 7, tags: ['a'] },
        completedAt: new Date('2025-06-01T12:00:00.000Z'),
      });
      expect((replay as { completedAt: unknown }).completedAt).toBeInstanceOf(Date);
      expect(action).toHaveBeenCalledTimes(1);
      expect(action.mock.calls[0][0]).toBeInstanceOf(AbortSignal);
      expect(action.mock.calls[0][0].aborted).toBe(false);
    });

    it('replays undefined and null results as such', async () => {
      const { engine } = setup();
      await engine.execute(request({ key: 'a' }), async () => undefined);
      await engine.execute(request({ key: 'b' }), async () => null);
      const never = vi.fn();
      await expect(engine.execute(request({ key: 'a' }), never)).resolves.toMatchObject({
        kind: 'replayed',
        value: undefined,
      });
      await expect(engine.execute(request({ key: 'b' }), never)).resolves.toMatchObject({
        kind: 'replayed',
        value: null,
      });
      expect(never).not.toHaveBeenCalled();
    });

    it('lets a waiting duplicate replay the holder value once the holder completes', async () => {
      const { engine } = setup();
      const started = deferred();
      const finish = deferred<string>();
      const first = engine.execute(request(), async () => {
        started.resolve();
        return finish.promise;
      });
      await started.promise;
      const duplicateAction = vi.fn();
      const second = engine.execute(request({ waitTimeout: '10s' }), duplicateAction);
      finish.resolve('value');

      await expect(first).resolves.toEqual({ kind: 'executed', value: 'value' });
      await expect(second).resolves.toMatchObject({ kind: 'replayed', value: 'value' });
      expect(duplicateAction).not.toHaveBeenCalled();
    });
  });

  describe('when the action throws', () => {
    it('releases the record, rethrows the very same error, and the next call executes', async () => {
      const { engine, store, events } = setup();
      const failure = new TypeError('payment gateway said no');

      const error = await rejection(
        engine.execute(request(), async () => {
          throw failure;
        }),
      );

      expect(error).toBe(failure);
      await expect(store.find(ID)).resolves.toBeNull();
      await expect(engine.execute(request(), async () => 'second try')).resolves.toEqual({
        kind: 'executed',
        value: 'second try',
      });
      expect(events).toEqual([]);
    });

    it('rethrows a non-Error throw value untouched', async () => {
      const { engine, store } = setup();
      const thrown = { code: 'E_CUSTOM' };
      await expect(
        engine.execute(request(), async () => {
          throw thrown;
        }),
      ).rejects.toBe(thrown);
      await expect(store.find(ID)).resolves.toBeNull();
    });

    it('still rethrows the action error when the release fails, and says so', async () => {
      class FailingRelease extends InMemoryIdempotencyStore {
        override async release(): Promise<void> {
          throw new IdempotencyStoreUnavailableError('PostgreSQL is unavailable during release');
        }
      }
      const { engine, store, events, lines } = setup(new FailingRelease());
      const failure = new Error('boom');
      await expect(
        engine.execute(request(), async () => {
          throw failure;
        }),
      ).rejects.toBe(failure);
      expect(events).toEqual([
        {
          type: 'release-failed',
          scope: SCOPE,
          keyDigest: DIGEST,
          error: expect.stringContaining('IdempotencyStoreUnavailableError'),
        },
      ]);
      expect(lines).toEqual([expect.stringContaining(`release of ${DIGEST} failed`)]);
      await expect(store.find(ID)).resolves.toMatchObject({ state: 'IN_PROGRESS' });
    });
  });

  describe('retry advice', () => {
    it("advises a duplicate in flight to come back after the scope's typical action time, not the whole lease", async () => {
      const { engine } = setup();
      for (let i = 0; i < 3; i++) {
        await engine.execute(request({ key: `earlier-${i}` }), async () => {
          await delay(20);
          return i;
        });
      }
      const started = deferred();
      const finish = deferred();
      const held = engine.execute(request({ lease: '60s' }), async () => {
        started.resolve();
        await finish.promise;
        return 'done';
      });
      await started.promise;

      const error = await rejection(engine.execute(request({ lease: '60s' }), vi.fn()));

      expect(error).toBeInstanceOf(IdempotencyInFlightError);
      const { retryAfterMs } = error as IdempotencyInFlightError;
      // About 20 ms per action, raised to the 100 ms floor; the lease left is close to 60 s.
      expect(retryAfterMs).toBeGreaterThanOrEqual(100);
      expect(retryAfterMs).toBeLessThan(1000);
      finish.resolve();
      await held;
    });
  });

  describe("the run's abort signal", () => {
    it('is made only when the work reads it: a door that never does makes no AbortController', async () => {
      const { engine } = setup();
      const Real = globalThis.AbortController;
      let made = 0;
      globalThis.AbortController = class extends Real {
        constructor() {
          super();
          made++;
        }
      };
      try {
        const outcome = await engine.perform(
          engine.policy(request()),
          { identity: { kind: 'key', key: KEY }, required: true },
          {
            invoke: async () => 'done',
            capture: () => ({ kind: 'stored', payload: encodeValue('done') }),
          },
        );
        expect(outcome.kind).toBe('executed');
        expect(made).toBe(0);
        await engine.execute(request({ key: `${KEY}-2` }), async (signal) => signal.aborted);
        expect(made).toBe(1);
      } finally {
        globalThis.AbortController = Real;
      }
    });
  });

  describe('heartbeat', () => {
    it('keeps the key through an action running 3.5 times its lease', async () => {
      const store = new InMemoryIdempotencyStore();
      const extend = vi.spyOn(store, 'extend');
      const { engine, events } = setup(store);
      const started = deferred();
      const finish = deferred();
      const first = engine.execute(request({ lease: 100 }), async () => {
        started.resolve();
        await finish.promise;
        return 'done';
      });
      await started.promise;
      await delay(350); // the lease would have run out three times over without a heartbeat

      const duplicateAction = vi.fn();
      const error = await rejection(engine.execute(request({ lease: 100 }), duplicateAction));

      expect(error).toBeInstanceOf(IdempotencyInFlightError);
      const inFlight = error as IdempotencyInFlightError;
      expect(inFlight.scope).toBe(SCOPE);
      expect(inFlight.keyDigest).toBe(DIGEST);
      expect(inFlight.retryAfterMs).toBeGreaterThan(0);
      expect(inFlight.retryAfterMs).toBeLessThanOrEqual(100);
      expect(inFlight.message).toBe(
        `Idempotency key ${DIGEST} is still in flight; retry after ${inFlight.retryAfterMs} ms`,
      );
      expect(duplicateAction).not.toHaveBeenCalled();
      expect(extend).toHaveBeenCalled();

      finish.resolve();
      await expect(first).resolves.toEqual({ kind: 'executed', value: 'done' });
      expect(events).toEqual([]);
    });

    it('aborts the signal, emits lease-lost and warns when the lease is stolen; the new owner result stands', async () => {
      let clock = Date.parse('2025-06-01T12:00:00.000Z');
      const store = new InMemoryIdempotencyStore({ now: () => clock });
      const { engine, events, lines } = setup(store);
      const started = deferred<AbortSignal>();
      const newOwner: { lease?: Lease } = {};

      const stale = engine.execute(request({ lease: 100 }), async (signal) => {
        started.resolve(signal);
        await aborted(signal);
        // The new owner finishes while the stale action is still winding down.
        await store.complete(newOwner.lease!, encodeValue('from the new owner'));
        return 'from the stale owner';
      });
      const signal = await started.promise;

      clock += 1000; // past the 100 ms lease on the store's clock
      const stolen = await store.tryAcquire({
        ...ID,
        leaseMs: 10_000,
        waitTimeoutMs: 0,
        ttlMs: 60_000,
        fingerprint: null,
      });
      expect(stolen.kind).toBe('acquired');
      newOwner.lease = (stolen as { lease: Lease }).lease;

      await expect(stale).resolves.toEqual({ kind: 'executed', value: 'from the stale owner' });
      expect(signal.aborted).toBe(true);
      expect(signal.reason).toBeInstanceOf(IdempotencyLeaseLostError);
      expect(events).toEqual([
        { type: 'lease-lost', scope: SCOPE, keyDigest: DIGEST, during: 'heartbeat' },
        { type: 'lease-lost', scope: SCOPE, keyDigest: DIGEST, during: 'complete' },
      ]);
      expect(lines[0]).toBe(
        `warn: lease on ${DIGEST} was lost while the action ran; aborting its signal`,
      );
      const record = await store.find(ID);
      expect(record?.state).toBe('COMPLETE');
      expect(decodeValue(record!.payload!)).toBe('from the new owner');
      await expect(engine.execute(request(), vi.fn())).resolves.toMatchObject({
        kind: 'replayed',
        value: 'from the new owner',
      });
    });

    it('reports no lost lease when a heartbeat is refused because its own completion just landed', async () => {
      // The completion is committed but its answer is still on the wire when the
      // next heartbeat is refused (the record is COMPLETE): that is not a lost lease.
      class SlowAnswerStore extends InMemoryIdempotencyStore {
        private committed = false;
        private readonly answer = deferred();

        override async complete(lease: Lease, payload: StoredPayload) {
          await super.complete(lease, payload);
          this.committed = true;
          await this.answer.promise;
        }

        override async extend(lease: Lease) {
          const kept = await super.extend(lease);
          if (this.committed) setImmediate(() => this.answer.resolve());
          return kept;
        }
      }
      const store = new SlowAnswerStore();
      const { engine, events, lines } = setup(store);
      let signal: AbortSignal | undefined;

      const outcome = await engine.execute(request({ lease: 40 }), async (s) => {
        signal = s;
        return 'v';
      });

      expect(outcome).toEqual({ kind: 'executed', value: 'v' });
      expect(events).toEqual([]);
      expect(lines).toEqual([]);
      expect(signal?.aborted).toBe(false);
      const record = await store.find(ID);
      expect(record?.state).toBe('COMPLETE');
      expect(decodeValue(record!.payload!)).toBe('v');
    });

    describe('timer', () => {
      afterEach(() => vi.useRealTimers());

      it.each([['resolves'], ['throws']])(
        'is cleared when the action %s: no extend afterwards',
        async (how) => {
          vi.useFakeTimers();
          const store = new InMemoryIdempotencyStore();
          const extend = vi.spyOn(store, 'extend');
          const { engine } = setup(store);

          const outcome = engine
            .execute(request({ lease: 1000 }), async () => {
              await vi.advanceTimersByTimeAsync(1600); // three beats, every 500 ms
              if (how === 'throws') throw new Error('boom');
              return 'v';
            })
            .catch((error: Error) => error.message);
          await expect(outcome).resolves.toEqual(
            how === 'throws' ? 'boom' : { kind: 'executed', value: 'v' },
          );

          expect(extend).toHaveBeenCalledTimes(3);
          expect(vi.getTimerCount()).toBe(0);
          await vi.advanceTimersByTimeAsync(10_000);
          expect(extend).toHaveBeenCalledTimes(3);
        },
      );
    });
  });

  describe('completion', () => {
    it('retries a completion the store could not take, with backoff, until it succeeds', async () => {
      const store = new FlakyCompletionStore(3);
      const { engine, events, lines } = setup(store, {
        completionRetry: { attempts: 5, initialDelayMs: 5, maxDelayMs: 15 },
      });

      await expect(engine.execute(request(), async () => 'paid')).resolves.toEqual({
        kind: 'executed',
        value: 'paid',
      });

      expect(store.completeCalls).toBe(4);
      expect(events).toEqual(
        [1, 2, 3].map((attempt) => ({
          type: 'completion-retry',
          scope: SCOPE,
          keyDigest: DIGEST,
          attempt,
          error: 'IdempotencyStoreUnavailableError: PostgreSQL did not answer complete within 5 ms',
        })),
      );
      expect(lines.map((l) => /retrying in (\d+) ms/.exec(l)?.[1])).toEqual(['5', '10', '15']);
      await expect(engine.execute(request(), vi.fn())).resolves.toMatchObject({
        kind: 'replayed',
        value: 'paid',
      });
    });

    it('gives up after the configured attempts with IdempotencyCompletionError and leaves the record IN_PROGRESS', async () => {
      const store = new FlakyCompletionStore(Infinity);
      const release = vi.spyOn(store, 'release');
      const { engine } = setup(store, {
        completionRetry: { attempts: 3, initialDelayMs: 1, maxDelayMs: 2 },
      });

      const error = await rejection(engine.execute(request(), async () => 'paid'));

      expect(error).toBeInstanceOf(IdempotencyCompletionError);
      const completion = error as IdempotencyCompletionError;
      expect(completion.scope).toBe(SCOPE);
      expect(completion.keyDigest).toBe(DIGEST);
      expect(completion.cause).toBeInstanceOf(IdempotencyStoreUnavailableError);
      expect(completion.message).toContain(`${DIGEST} ran but its result could not be stored`);
      expect(completion.message).toContain('after 3 attempts');
      expect(store.completeCalls).toBe(3);
      expect(release).not.toHaveBeenCalled();
      await expect(store.find(ID)).resolves.toMatchObject({
        state: 'IN_PROGRESS',
        leaseExpired: false,
      });
    });

    const circular: Record<string, unknown> = { id: 1 };
    circular.self = circular;
    it.each([
      ['a circular structure', circular],
      ['a BigInt', { amount: BigInt(10) }],
    ])(
      'refuses %s with IdempotencyPayloadError, and keeps the record so the action never runs twice',
      async (_label, value) => {
        const { engine, store } = setup();
        const again = vi.fn(async () => 'ok');

        const error = await rejection(engine.execute(request(), async () => value));

        expect(error).toBeInstanceOf(IdempotencyPayloadError);
        expect(error.message).toContain(DIGEST);
        expect(error.message).toContain(
          'the action ran, so its record is completed without a result',
        );
        expect(error.cause).toBeInstanceOf(IdempotencyPayloadError);
        const record = await store.find(ID);
        expect(record?.state).toBe('COMPLETE');
        expect(notStorableReason(record!.payload!)).toContain('not JSON-serializable');
        const retry = await rejection(engine.execute(request(), again));
        expect(retry).toBeInstanceOf(IdempotencyPayloadError);
        expect(retry.message).toContain(
          'the action already ran, but its result could not be stored',
        );
        expect(again).not.toHaveBeenCalled();
      },
    );
  });

  describe('refusals', () => {
    it('throws IdempotencyFingerprintMismatchError for a key reused with another request', async () => {
      const { engine } = setup();
      const started = deferred();
      const finish = deferred();
      const first = engine.execute(request({ fingerprint: 'sha256:aaa' }), async () => {
        started.resolve();
        await finish.promise;
        return 1;
      });
      await started.promise;
      const other = vi.fn();

      const whileRunning = await rejection(
        engine.execute(request({ fingerprint: 'sha256:bbb', waitTimeout: '5s' }), other),
      );
      finish.resolve();
      await first;
      const afterwards = await rejection(
        engine.execute(request({ fingerprint: 'sha256:bbb' }), other),
      );

      for (const error of [whileRunning, afterwards]) {
        expect(error).toBeInstanceOf(IdempotencyFingerprintMismatchError);
        expect(error).toMatchObject({ scope: SCOPE, keyDigest: DIGEST });
        expect(error.message).toBe(
          `Idempotency key ${DIGEST} was first used with a different request`,
        );
      }
      expect(other).not.toHaveBeenCalled();
      await expect(
        engine.execute(request({ fingerprint: 'sha256:aaa' }), other),
      ).resolves.toMatchObject({ kind: 'replayed', value: 1 });
    });

    it.each([
      [{ lease: -1 }, 'lease', '-1'],
      [{ lease: 0 }, 'lease', '0'],
      [{ lease: 'abc' }, 'lease', '"abc"'],
      [{ ttl: 'P1Y' }, 'ttl', '"P1Y"'],
      [{ waitTimeout: -5 }, 'waitTimeout', '-5'],
      [{ waitTimeout: '10 minutes' }, 'waitTimeout', '"10 minutes"'],
    ] as Array<[Partial<ExecuteRequest>, string, string]>)(
      'refuses %p with IdempotencyConfigError naming the option and value, before touching the store',
      async (overrides, option, shown) => {
        const store = new InMemoryIdempotencyStore();
        const tryAcquire = vi.spyOn(store, 'tryAcquire');
        const { engine } = setup(store);
        const action = vi.fn();

        const error = await rejection(engine.execute(request(overrides), action));

        expect(error).toBeInstanceOf(IdempotencyConfigError);
        expect(error.message).toContain(`${SCOPE}: option "${option}"`);
        expect(error.message).toContain(shown);
        expect(tryAcquire).not.toHaveBeenCalled();
        expect(action).not.toHaveBeenCalled();
      },
    );

    it('accepts PT0S as waitTimeout and ISO or shorthand for lease and ttl', async () => {
      const { engine, store } = setup();
      await engine.execute(
        request({ waitTimeout: 'PT0S', lease: 'PT30S', ttl: 'P1D' }),
        async () => 1,
      );
      const view = await store.find(ID);
      expect(view!.expiresAt.getTime() - view!.completedAt!.getTime()).toBe(86_400_000);
    });

    it.each([
      ['empty', ''],
      ['256 characters long', `${KEY}${'k'.repeat(256 - KEY.length)}`],
      ['not a string', 12345 as unknown as string],
      ['holding a control character', `${KEY}\n`],
    ])(
      'refuses a key %s with IdempotencyKeyError, never echoing it, before touching the store',
      async (_label, key) => {
        const store = new InMemoryIdempotencyStore();
        const tryAcquire = vi.spyOn(store, 'tryAcquire');
        const { engine } = setup(store);
        const action = vi.fn();

        const error = await rejection(engine.execute(request({ key }), action));

        expect(error).toBeInstanceOf(IdempotencyKeyError);
        expect(error.message).not.toContain(KEY);
        expect(error.message).not.toContain('12345');
        expect(tryAcquire).not.toHaveBeenCalled();
        expect(action).not.toHaveBeenCalled();
      },
    );

    it('honours a configured maxKeyLength', async () => {
      const longKey = `${KEY}${'k'.repeat(300 - KEY.length)}`;
      const { engine: strict } = setup();
      await expect(strict.execute(request({ key: longKey }), async () => 1)).rejects.toThrow(
        IdempotencyKeyError,
      );
      await expect(
        strict.execute(request({ key: longKey, maxKeyLength: 300 }), async () => 1),
      ).resolves.toEqual({ kind: 'executed', value: 1 });
      const error = await rejection(
        strict.execute(request({ key: 'nine-char', maxKeyLength: 8 }), async () => 1),
      );
      expect(error).toBeInstanceOf(IdempotencyKeyError);
      expect(error.message).toContain('the maximum is 8');
      expect(error.message).not.toContain('nine-char');
    });
  });

  describe('events', () => {
    it('survives a listener that throws, logs it, and stops calling an unsubscribed listener', async () => {
      const { engine, lines } = setup(new FlakyCompletionStore(1), {
        completionRetry: { initialDelayMs: 1 },
      });
      const seen: string[] = [];
      engine.onEvent(() => {
        throw new Error('listener bug');
      });
      const unsubscribe = engine.onEvent((e) => void seen.push(e.type));

      await expect(engine.execute(request({ key: 'a' }), async () => 1)).resolves.toMatchObject({
        kind: 'executed',
      });
      unsubscribe();
      (engine.store as FlakyCompletionStore).completeCalls = 0;
      await engine.execute(request({ key: 'b' }), async () => 2);

      expect(seen).toEqual(['acquired', 'completion-retry', 'completed']);
      expect(lines).toContain('error: idempotency event listener threw: Error: listener bug');
    });
  });
});

describe('an event for every edge and outcome, naming the record by digest only', () => {
  it('acquired and completed (with the action time), then replayed', async () => {
    const { engine, all } = setup();
    await engine.execute(request(), async () => 'v');
    await engine.execute(request(), async () => 'never');
    expect(all.map((e) => e.type)).toEqual(['acquired', 'completed', 'replayed']);
    for (const event of all) expect(event).toMatchObject({ scope: SCOPE, keyDigest: DIGEST });
    expect((all[1] as { actionMs: number }).actionMs).toBeGreaterThanOrEqual(0);
  });

  it('released when the action throws, in-flight and fingerprint-mismatch when refused', async () => {
    const { engine, all } = setup();
    await rejection(
      engine.execute(request({ key: 'fails' }), async () => {
        throw new Error('declined');
      }),
    );
    const holding = deferred();
    const running = engine.execute(
      request({ key: 'held', fingerprint: 'f1' }),
      () => holding.promise,
    );
    await rejection(engine.execute(request({ key: 'held', fingerprint: 'f1' }), async () => 1));
    await rejection(engine.execute(request({ key: 'held', fingerprint: 'f2' }), async () => 1));
    holding.resolve();
    await running;
    expect(all.map((e) => e.type)).toEqual([
      'acquired',
      'released',
      'acquired',
      'in-flight',
      'fingerprint-mismatch',
      'completed',
    ]);
    expect(all[1]).toMatchObject({ reason: 'action-failed' });
    expect(all[3]).toMatchObject({ retryAfterMs: expect.any(Number) });
  });

  it('completion-failed when every attempt failed', async () => {
    const { engine, all } = setup(new FlakyCompletionStore(10), {
      completionRetry: { attempts: 2, initialDelayMs: 1 },
    });
    await rejection(engine.execute(request(), async () => 1));
    expect(all.map((e) => e.type)).toEqual(['acquired', 'completion-retry', 'completion-failed']);
    expect(all[2]).toMatchObject({ attempts: 2 });
  });

  it('builds no event when nobody listens', async () => {
    const engine = new IdempotencyEngine(new InMemoryIdempotencyStore(), {
      logger: { warn: () => undefined, error: () => undefined },
    });
    const spy = vi.spyOn(engine as unknown as { dispatch: () => void }, 'dispatch');
    await engine.execute(request(), async () => 1);
    expect(spy).not.toHaveBeenCalled();
  });
});

describe('policies: checked once, reused per call', () => {
  it('run() with a compiled policy behaves as execute()', async () => {
    const { engine } = setup();
    const policy = engine.policy({ scope: SCOPE, ttl: 'P1D' });
    expect(policy).toMatchObject({
      scope: SCOPE,
      leaseMs: 30_000,
      waitTimeoutMs: 10_000,
      ttlMs: 86_400_000,
    });
    await expect(engine.run(policy, { key: KEY }, async () => 'v')).resolves.toEqual({
      kind: 'executed',
      value: 'v',
    });
    await expect(engine.run(policy, { key: KEY }, async () => 'w')).resolves.toMatchObject({
      kind: 'replayed',
      value: 'v',
    });
  });

  it('keeps tenants apart under one scope, and never shows the tenant', async () => {
    const { engine, store, lines } = setup();
    const policy = engine.policy({ scope: SCOPE });
    await engine.run(policy, { key: KEY, tenant: 'ann.smith@example.com' }, async () => 'ann');
    await expect(
      engine.run(policy, { key: KEY, tenant: 'bob@example.com' }, async () => 'bob'),
    ).resolves.toEqual({ kind: 'executed', value: 'bob' });
    expect((await store.list({})).map((r) => r.scope).sort()).toEqual([
      `${SCOPE}#tenant:ann.smith@example.com`,
      `${SCOPE}#tenant:bob@example.com`,
    ]);
    expect(lines.join('\n')).not.toContain('ann.smith');
  });
});

describe('IdempotencyInFlightError', () => {
  it('is what instanceof matches for the engine error and for any branded object', () => {
    class RpcInFlightError extends Error {
      constructor() {
        super('still in flight');
        IdempotencyInFlightError.brand(this);
      }
    }
    const branded = new RpcInFlightError();

    expect(new IdempotencyInFlightError(10, 's', 's/#0')).toBeInstanceOf(IdempotencyInFlightError);
    expect(branded).toBeInstanceOf(IdempotencyInFlightError);
    expect(branded).toBeInstanceOf(RpcInFlightError);
    expect(IdempotencyInFlightError.brand({ plain: true })).toBeInstanceOf(
      IdempotencyInFlightError,
    );
    expect(Object.keys(branded)).toEqual([]);
    for (const other of [new Error('x'), {}, null, undefined, 'in flight', 42]) {
      expect(other instanceof IdempotencyInFlightError).toBe(false);
    }
  });

  it('keeps ordinary instanceof for its subclasses', () => {
    class Sub extends IdempotencyInFlightError {}
    expect(new Sub(1, 's', 's/#0')).toBeInstanceOf(Sub);
    expect(new IdempotencyInFlightError(1, 's', 's/#0') instanceof Sub).toBe(false);
    expect(IdempotencyInFlightError.brand(new Error('x')) instanceof Sub).toBe(false);
  });
});

describe('the deprecated …Exception names', () => {
  it('are the same classes as the …Error names, so either catches the other', () => {
    expect(errors.IdempotencyInFlightException).toBe(IdempotencyInFlightError);
    expect(errors.IdempotencyFingerprintMismatchException).toBe(
      errors.IdempotencyFingerprintMismatchError,
    );
    expect(errors.IdempotencyOutcomeUnknownException).toBe(errors.IdempotencyOutcomeUnknownError);
    const thrown = new errors.IdempotencyInFlightException(5, 's', 's/#0');
    expect(thrown).toBeInstanceOf(IdempotencyInFlightError);
    expect(thrown.name).toBe('IdempotencyInFlightError');
  });
});
