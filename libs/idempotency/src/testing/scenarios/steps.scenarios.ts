import assert from 'node:assert/strict';
import { IdempotencyEngine } from '../../core/engine';
import { IdempotencyOutcomeUnknownError } from '../../core/errors';
import type { AcquireResult, Lease } from '../../core/store';
import type { ContractHarness } from '../harness';
import { bytes, delay, leaseLost } from './support';
import type { ContractScenario } from './support';

/** Recorded steps are an optional capability: a store that does not declare them grades these N/A. */
function noSteps(harness: ContractHarness): string | undefined {
  const declared = harness.steps ?? Boolean(harness.store?.steps);
  return declared
    ? undefined
    : 'the store does not declare recorded steps (store.steps); ctx.step is refused on it';
}

function notStrict(harness: ContractHarness): string | undefined {
  return (noSteps(harness) ?? harness.strictMode ?? Boolean(harness.store?.strictMode))
    ? undefined
    : 'the store does not declare strict-mode support (store.strictMode)';
}

function takenOver(result: AcquireResult, what: string): Lease {
  assert.equal(result.kind, 'acquired', `${what}: expected acquired, got ${result.kind}`);
  const acquired = result as Extract<AcquireResult, { kind: 'acquired' }>;
  assert.equal(acquired.stolen, true, `${what}: the takeover did not say stolen`);
  return acquired.lease;
}

const quiet = { logger: { warn: () => {}, error: () => {} } };

/** The contract on recorded steps (`ctx.step`). */
export const stepScenarios: readonly ContractScenario[] = [
  {
    id: 'steps.recorded-once',
    group: 'recorded steps',
    title: () =>
      'records a step under the lease: begin marks it, record writes it, and a second begin answers the value byte for byte',
    notApplicable: noSteps,
    async run({ store, other, scope, acquire }) {
      const steps = store.steps!;
      const lease = await acquire('k');
      assert.equal(await steps.begin(lease, 'charge'), null, 'a new step had a value');
      const listed = await other.steps!.list({ scope, key: 'k' });
      assert.deepEqual(
        listed,
        [{ name: 'charge', value: null }],
        'a begun step is not listed as begun',
      );
      const value = bytes({ id: 'ch_1', amount: 5 });
      await steps.record(lease, 'charge', value);
      const again = await steps.begin(lease, 'charge');
      assert.ok(again && value.equals(again), 'a recorded step did not come back byte for byte');
      await steps.record(lease, 'mail', bytes(null));
      const both = await other.steps!.list({ scope, key: 'k' });
      assert.deepEqual(
        both.map((step) => step.name),
        ['charge', 'mail'],
        'list is not sorted by name or lost a step',
      );
      assert.ok(both[0].value?.equals(value));
      await store.complete(lease, bytes('done'));
      assert.deepEqual(
        await store.steps!.list({ scope, key: 'k' }),
        [],
        'a COMPLETE record still lists its steps',
      );
      return 'begin → null, record, begin → value; complete drops the steps';
    },
  },
  {
    id: 'steps.takeover-replays',
    group: 'recorded steps',
    title: () =>
      'an attempt that takes over an expired lease gets the recorded value of a step, and a begun-not-recorded step begins again',
    notApplicable: noSteps,
    async run({ store, other, request, acquire }) {
      const leaseMs = 300;
      const first = await acquire('k', { leaseMs });
      const value = bytes({ id: 'ch_1' });
      await store.steps!.begin(first, 'charge');
      await store.steps!.record(first, 'charge', value);
      await store.steps!.begin(first, 'mail');
      await delay(leaseMs + 150);
      const second = takenOver(
        await other.tryAcquire(request('k', { leaseMs: 10_000, ttlMs: 600_000 })),
        'the takeover',
      );
      const replayed = await other.steps!.begin(second, 'charge');
      assert.ok(replayed && value.equals(replayed), 'the takeover did not get the recorded value');
      assert.equal(
        await other.steps!.begin(second, 'mail'),
        null,
        'a step that began and recorded nothing came back with a value',
      );
      await other.steps!.record(second, 'mail', bytes('sent'));
      await other.release(second);
      const fresh = await acquire('k');
      assert.equal(
        await store.steps!.begin(fresh, 'charge'),
        null,
        'a released record kept its steps for the next attempt',
      );
      return 'a takeover replays recorded steps and re-begins the rest; release forgets them';
    },
  },
  {
    id: 'steps.stale-lease-fenced',
    group: 'recorded steps',
    title: () => 'a stale lease cannot begin or record a step once its record was taken over',
    notApplicable: noSteps,
    async run({ store, other, request, acquire }) {
      const leaseMs = 300;
      const stale = await acquire('k', { leaseMs });
      await store.steps!.begin(stale, 'charge');
      await delay(leaseMs + 150);
      const fresh = takenOver(await other.tryAcquire(request('k')), 'the takeover');
      await leaseLost(
        store.steps!.record(stale, 'charge', bytes('late')),
        'record by the stale holder',
      );
      await leaseLost(store.steps!.begin(stale, 'other'), 'begin by the stale holder');
      assert.equal(
        await other.steps!.begin(fresh, 'charge'),
        null,
        'the stale holder recorded a value after all',
      );
      await other.complete(fresh, bytes('done'));
      await leaseLost(
        store.steps!.record(fresh, 'charge', bytes('x')),
        'record on a COMPLETE record',
      );
      return 'stale begin and record refused with IdempotencyLeaseLostError';
    },
  },
  {
    id: 'steps.engine-default-mode',
    group: 'recorded steps',
    title: () =>
      'through the engine: a step runs once per record and name; a takeover gets its value without running it, and reruns a step that recorded nothing',
    notApplicable: noSteps,
    async run({ store, other, scope, acquire }) {
      const engine = new IdempotencyEngine(other, quiet);
      const policy = engine.policy({ scope, waitTimeout: 0 });
      const runs = { charge: 0, mail: 0 };
      const charge = () => (runs.charge++, { id: `ch_${runs.charge}` });
      const mail = () => (runs.mail++, 'sent');
      // One attempt: the same name twice runs once.
      const once = await engine.run(policy, { key: 'once' }, async (_signal, ctx) => {
        const a = await ctx.step('charge', charge);
        const b = await ctx.step('charge', charge);
        return [a, b, ctx.attempt];
      });
      assert.deepEqual(once.value, [{ id: 'ch_1' }, { id: 'ch_1' }, 'first']);
      assert.equal(runs.charge, 1, 'a step ran twice in one attempt');
      // A holder that died after recording `charge` and beginning `mail` (its lease lapses).
      const leaseMs = 300;
      const dead = await acquire('k', { leaseMs });
      await store.steps!.begin(dead, 'charge');
      await store.steps!.record(dead, 'charge', bytes({ id: 'ch_dead' }));
      await store.steps!.begin(dead, 'mail');
      await delay(leaseMs + 150);
      const events: string[] = [];
      const stop = engine.onEvent((event) => {
        if (event.type === 'step-recorded' || event.type === 'step-replayed') {
          events.push(`${event.type}:${event.step}`);
        }
      });
      const taken = await engine.run(policy, { key: 'k' }, async (_signal, ctx) => [
        ctx.attempt,
        await ctx.step('charge', charge),
        await ctx.step('mail', mail),
      ]);
      stop();
      assert.equal(taken.kind, 'executed');
      assert.deepEqual(taken.value, ['takeover', { id: 'ch_dead' }, 'sent']);
      assert.equal(runs.charge, 1, 'the takeover ran a recorded step again');
      assert.equal(runs.mail, 1, 'a step that recorded nothing did not run again');
      assert.deepEqual(events, ['step-replayed:charge', 'step-recorded:mail']);
      return 'recorded steps replayed on takeover; unrecorded ones ran again';
    },
  },
  {
    id: 'steps.strict-step-unknown',
    group: 'recorded steps',
    title: () =>
      'strict mode: a record whose step began and recorded nothing is AMBIGUOUS with reason step-unknown naming the step, unless reconcile answers',
    notApplicable: notStrict,
    async run({ store, other, scope, request, acquire }) {
      const leaseMs = 300;
      const holder = await acquire('k', { leaseMs });
      await store.steps!.begin(holder, 'charge');
      await store.steps!.record(holder, 'charge', bytes('ch_1'));
      await store.steps!.begin(holder, 'mail');
      await delay(leaseMs + 150);
      const engine = new IdempotencyEngine(other, quiet);
      let ran = false;
      const error = await engine
        .run(
          engine.policy({ scope, onExpiredLease: 'refuse', waitTimeout: 0 }),
          { key: 'k' },
          () => {
            ran = true;
            return Promise.resolve('again');
          },
        )
        .then(
          () => undefined,
          (thrown: unknown) => thrown,
        );
      assert.equal(ran, false, 'strict mode ran the action again');
      assert.ok(error instanceof IdempotencyOutcomeUnknownError, `got ${String(error)}`);
      assert.equal(error.reason, 'step-unknown');
      assert.equal(error.step, 'mail');
      assert.equal((await store.find({ scope, key: 'k' }))?.state, 'AMBIGUOUS');
      const questions: Array<{ reason: string; step?: string }> = [];
      const reconciled = await engine.run(
        engine.policy({
          scope,
          onExpiredLease: 'refuse',
          waitTimeout: 0,
          reconcile: (question) => {
            questions.push({ reason: question.reason, step: question.step });
            return { outcome: 'completed', value: 'reconciled' };
          },
        }),
        { key: 'k' },
        () => Promise.resolve('ran'),
      );
      assert.equal(reconciled.kind, 'replayed');
      assert.equal(reconciled.value, 'reconciled');
      assert.deepEqual(questions, [{ reason: 'step-unknown', step: 'mail' }]);
      // All steps recorded: strict mode still refuses the lapse, for the reason the store gives.
      const recorded = await acquire('r', { leaseMs });
      await store.steps!.begin(recorded, 'charge');
      await store.steps!.record(recorded, 'charge', bytes('ch_2'));
      await delay(leaseMs + 150);
      const refused = await other.tryAcquire(request('r', { onExpiredLease: 'refuse' }));
      assert.equal(refused.kind, 'ambiguous');
      return 'step-unknown names the step; reconcile is asked about it';
    },
  },
];
