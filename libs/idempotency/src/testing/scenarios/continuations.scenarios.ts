import assert from 'node:assert/strict';
import { recordLocator } from '../../core/key';
import type { AcquireResult, Lease, ResumeResult, SuspendedRecord } from '../../core/store';
import type { ContractHarness } from '../harness';
import { bytes, delay, duplicate, leaseLost, nextWait } from './support';
import type { ContractScenario, ScenarioContext } from './support';

/** Continuations are an optional capability: a store that does not declare them grades these N/A. */
function noContinuations(harness: ContractHarness): string | undefined {
  const declared = harness.continuations ?? Boolean(harness.store?.continuations);
  return declared
    ? undefined
    : 'the store does not declare continuations (store.continuations); ctx.suspend is refused on it';
}

function suspended(result: AcquireResult, what: string): SuspendedRecord {
  assert.equal(result.kind, 'suspended', `${what}: expected suspended, got ${result.kind}`);
  return result as SuspendedRecord;
}

type Admitted = Extract<ResumeResult, { kind: 'admitted' }>;

function admitted(result: ResumeResult, what: string): Admitted {
  assert.equal(result.kind, 'admitted', `${what}: expected admitted, got ${result.kind}`);
  return result as Admitted;
}

/** Suspends `key`'s record under a fresh lease; answers the lease and what was kept. */
async function suspendNew(
  ctx: ScenarioContext,
  key: string,
  holdMs = 10_000,
  continuation = 'c-1',
): Promise<{ lease: Lease; answer: Buffer; state: Buffer }> {
  const lease = await ctx.acquire(key);
  const answer = bytes({ status: 'challenge', url: '/3ds/1' });
  const state = bytes({ intent: 'pi_1', amount: 5 });
  await ctx.store.continuations!.suspend(lease, { continuation, answer, state, holdMs });
  return { lease, answer, state };
}

function resumeOf(ctx: ScenarioContext, key: string, continuation = 'c-1') {
  return {
    scope: ctx.scope,
    locator: recordLocator(ctx.scope, key),
    continuation,
    leaseMs: 10_000,
    ttlMs: 60_000,
  };
}

/** The contract on continuations (`ctx.suspend`, `resumes`). */
export const continuationScenarios: readonly ContractScenario[] = [
  {
    id: 'continuations.suspended-answers-at-once',
    group: 'continuations',
    title: () =>
      'a suspended record answers every duplicate at once with its answer and continuation, and reads show its hold',
    notApplicable: noContinuations,
    async run(ctx) {
      const { other, request, scope } = ctx;
      const { answer } = await suspendNew(ctx, 'k', 20_000);
      const startedAt = performance.now();
      const found = suspended(
        await other.tryAcquire(request('k', { waitTimeoutMs: 30_000 })),
        'a duplicate',
      );
      const tookMs = performance.now() - startedAt;
      assert.ok(tookMs < 15_000, `the duplicate waited for the hold (${Math.round(tookMs)} ms)`);
      assert.ok(answer.equals(found.answer), 'the answer did not come back byte for byte');
      assert.equal(found.continuation, 'c-1');
      assert.ok(
        found.holdRemainingMs > 0 && found.holdRemainingMs <= 20_000,
        `holdRemainingMs ${found.holdRemainingMs} is outside (0, 20000]`,
      );
      const view = await other.find({ scope, key: 'k' });
      assert.equal(view?.state, 'IN_PROGRESS', 'a suspended record does not read IN_PROGRESS');
      assert.ok(view?.suspendedUntil instanceof Date, 'a read does not show suspendedUntil');
      const mismatch = await other.tryAcquire(request('k', { fingerprint: 'other' }));
      assert.equal(mismatch.kind, 'suspended', 'a record taken without a fingerprint refused one');
      return `answered in ${Math.round(tookMs)} ms with the answer and continuation`;
    },
  },
  {
    id: 'continuations.fingerprint-checked',
    group: 'continuations',
    title: () => 'a suspended record refuses an acquirer with another fingerprint',
    notApplicable: noContinuations,
    async run(ctx) {
      const { store, request } = ctx;
      const lease = await ctx.acquire('k', { fingerprint: 'fp-a' });
      await store.continuations!.suspend(lease, {
        continuation: 'c-1',
        answer: bytes('a'),
        state: bytes(null),
        holdMs: 10_000,
      });
      const result = await ctx.other.tryAcquire(request('k', { fingerprint: 'fp-b' }));
      assert.equal(result.kind, 'fingerprint-mismatch');
      suspended(
        await ctx.other.tryAcquire(request('k', { fingerprint: 'fp-a' })),
        'same fingerprint',
      );
      return 'fingerprint-mismatch for another fingerprint; suspended for the same';
    },
  },
  {
    id: 'continuations.wakes-waiters',
    group: 'continuations',
    title: () =>
      'a duplicate waiting for the holder is woken by the suspension and answered suspended',
    notApplicable: noContinuations,
    async run(ctx) {
      const { store, other, request, scope } = ctx;
      const lease = await ctx.acquire('k');
      const waiting = nextWait(other, scope);
      const startedAt = performance.now();
      const duplicateCall = other.tryAcquire(request('k', { waitTimeoutMs: 20_000 }));
      await waiting;
      await store.continuations!.suspend(lease, {
        continuation: 'c-1',
        answer: bytes('wait for it'),
        state: bytes(null),
        holdMs: 60_000,
      });
      const found = suspended(await duplicateCall, 'the waiting duplicate');
      const tookMs = performance.now() - startedAt;
      assert.ok(tookMs < 15_000, `the waiter was not woken (${Math.round(tookMs)} ms)`);
      assert.equal(found.continuation, 'c-1');
      return `woken after ${Math.round(tookMs)} ms`;
    },
  },
  {
    id: 'continuations.admitted-once',
    group: 'continuations',
    title: () =>
      'of many concurrent resumptions of one continuation, from two instances, exactly one is admitted; its completion answers duplicates, and later resumptions are consumed',
    notApplicable: noContinuations,
    async run(ctx) {
      const { store, other, request, scope } = ctx;
      const { state } = await suspendNew(ctx, 'k');
      const results = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          (i % 2 === 0 ? store : other).continuations!.resume(resumeOf(ctx, 'k')),
        ),
      );
      const winners = results.filter((r) => r.kind === 'admitted') as Admitted[];
      assert.equal(winners.length, 1, `${winners.length} of 12 resumptions were admitted`);
      for (const r of results) {
        if (r.kind !== 'admitted') assert.equal(r.kind, 'consumed', 'a losing resumption');
      }
      const [winner] = winners;
      assert.ok(state.equals(winner.state), 'the state did not come back byte for byte');
      assert.deepEqual({ ...winner.id }, { scope, key: 'k' }, 'the admitted id is not the record');
      const held = await other.tryAcquire(request('k'));
      assert.equal(held.kind, 'in-flight', 'a resumed record is not in flight for duplicates');
      assert.equal(await store.extend(winner.lease), true, 'the resumed lease cannot be extended');
      const result = bytes({ status: 'paid' });
      await store.complete(winner.lease, result);
      const replay = duplicate(await other.tryAcquire(request('k')), 'the resumed result');
      assert.ok(result.equals(replay.payload), 'the duplicate did not get the resumed result');
      const late = await other.continuations!.resume(resumeOf(ctx, 'k'));
      assert.equal(late.kind, 'consumed', 'a resumption after completion was not consumed');
      return '1 of 12 admitted; completion replays; later resumptions consumed';
    },
  },
  {
    id: 'continuations.fenced',
    group: 'continuations',
    title: () =>
      "a suspended record is no longer the suspender's: its old lease cannot complete, extend or suspend again, and a stale lease cannot suspend",
    notApplicable: noContinuations,
    async run(ctx) {
      const { store, other, request } = ctx;
      const { lease } = await suspendNew(ctx, 'k');
      await leaseLost(store.complete(lease, bytes('late')), 'complete by the suspender');
      assert.equal(await store.extend(lease), false, 'the suspender extended its hold');
      await leaseLost(
        store.continuations!.suspend(lease, {
          continuation: 'c-2',
          answer: bytes('again'),
          state: bytes(null),
          holdMs: 10_000,
        }),
        'a second suspension by the suspender',
      );
      const stale = await ctx.acquire('s', { leaseMs: 300 });
      await delay(450);
      const taken = await other.tryAcquire(request('s'));
      assert.equal(taken.kind, 'acquired', 'the expired lease was not taken over');
      await leaseLost(
        store.continuations!.suspend(stale, {
          continuation: 'c-3',
          answer: bytes('stale'),
          state: bytes(null),
          holdMs: 10_000,
        }),
        'a suspension by a stale lease',
      );
      const admitted2 = admitted(await other.continuations!.resume(resumeOf(ctx, 'k')), 'resume');
      await store.release(admitted2.lease);
      assert.equal(await other.find({ scope: ctx.scope, key: 'k' }), null, 'release left a record');
      return 'old and stale leases fenced; a resumed lease releases the record';
    },
  },
  {
    id: 'continuations.lapsed',
    group: 'continuations',
    title: () =>
      'a resumption after the hold lapsed is refused (lapsed), and the record goes the ordinary way: taken over, its continuation gone',
    notApplicable: noContinuations,
    async run(ctx) {
      const { other, request } = ctx;
      await suspendNew(ctx, 'k', 300);
      await delay(450);
      const late = await other.continuations!.resume(resumeOf(ctx, 'k'));
      assert.equal(late.kind, 'lapsed', `a resumption after the hold was ${late.kind}`);
      const next = await other.tryAcquire(request('k'));
      assert.equal(next.kind, 'acquired', `the next attempt after the hold got ${next.kind}`);
      assert.equal((next as { stolen?: boolean }).stolen, true, 'the takeover did not say stolen');
      const after = await other.continuations!.resume(resumeOf(ctx, 'k'));
      assert.notEqual(after.kind, 'admitted', 'a resumption was admitted after the takeover');
      const view = await other.find({ scope: ctx.scope, key: 'k' });
      assert.equal(view?.suspendedUntil, undefined, 'the takeover kept the suspension');
      return `lapsed, then taken over; a later resumption is ${after.kind}`;
    },
  },
  {
    id: 'continuations.lapsed-strict',
    group: 'continuations',
    title: () => 'in strict mode a record whose hold lapsed becomes AMBIGUOUS, not taken over',
    notApplicable: (harness) =>
      noContinuations(harness) ??
      ((harness.strictMode ?? Boolean(harness.store?.strictMode))
        ? undefined
        : 'the store does not declare strict-mode support (store.strictMode)'),
    async run(ctx) {
      const { other, request } = ctx;
      await suspendNew(ctx, 'k', 300);
      await delay(450);
      const next = await other.tryAcquire(request('k', { onExpiredLease: 'refuse' }));
      assert.equal(next.kind, 'ambiguous', `strict mode after the hold got ${next.kind}`);
      const late = await other.continuations!.resume(resumeOf(ctx, 'k'));
      assert.notEqual(late.kind, 'admitted', 'an AMBIGUOUS record admitted a resumption');
      return `AMBIGUOUS; a late resumption is ${late.kind}`;
    },
  },
  {
    id: 'continuations.unknown',
    group: 'continuations',
    title: () =>
      'a resumption with another continuation, another scope, or no record is unknown, and changes nothing',
    notApplicable: noContinuations,
    async run(ctx) {
      const { other, scope } = ctx;
      await suspendNew(ctx, 'k');
      const wrong = await other.continuations!.resume(resumeOf(ctx, 'k', 'c-other'));
      assert.equal(wrong.kind, 'unknown', `another continuation was ${wrong.kind}`);
      const elsewhere = await other.continuations!.resume({
        ...resumeOf(ctx, 'k'),
        scope: `${scope}-elsewhere`,
      });
      assert.equal(elsewhere.kind, 'unknown', `another scope was ${elsewhere.kind}`);
      const none = await other.continuations!.resume(resumeOf(ctx, 'absent'));
      assert.equal(none.kind, 'unknown', `no record was ${none.kind}`);
      admitted(await other.continuations!.resume(resumeOf(ctx, 'k')), 'the right continuation');
      return 'unknown three ways; the right one still admitted';
    },
  },
  {
    id: 'continuations.keeps-steps',
    group: 'continuations',
    title: () => "the steps recorded before a suspension are the resumption's",
    notApplicable: (harness) =>
      noContinuations(harness) ??
      ((harness.steps ?? Boolean(harness.store?.steps))
        ? undefined
        : 'the store does not declare recorded steps (store.steps)'),
    async run(ctx) {
      const { store, other } = ctx;
      const lease = await ctx.acquire('k');
      const value = bytes({ charge: 'ch_1' });
      await store.steps!.begin(lease, 'charge');
      await store.steps!.record(lease, 'charge', value);
      await store.continuations!.suspend(lease, {
        continuation: 'c-1',
        answer: bytes('challenge'),
        state: bytes(null),
        holdMs: 10_000,
      });
      const resumed = admitted(await other.continuations!.resume(resumeOf(ctx, 'k')), 'resume');
      const replayed = await other.steps!.begin(resumed.lease, 'charge');
      assert.ok(replayed && value.equals(replayed), 'the resumption lost the recorded step');
      return 'the recorded step replays after the resumption';
    },
  },
];
