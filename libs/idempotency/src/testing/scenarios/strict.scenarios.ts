import assert from 'node:assert/strict';
import { IdempotencyEngine } from '../../core/engine';
import { IdempotencyNotExecutedError, IdempotencyOutcomeUnknownError } from '../../core/errors';
import type { AcquireResult, AmbiguousRecord } from '../../core/store';
import type { ContractHarness } from '../harness';
import { delay, bytes, duplicate, leaseLost, round } from './support';
import type { ContractScenario } from './support';

/** Strict mode is an optional capability: a store that does not declare it grades these N/A. */
function notStrict(harness: ContractHarness): string | undefined {
  const declared = harness.strictMode ?? Boolean(harness.store?.strictMode);
  return declared
    ? undefined
    : 'the store does not declare strict-mode support (store.strictMode); strict mode is refused at bootstrap';
}

function ambiguous(result: AcquireResult, what: string): AmbiguousRecord {
  assert.equal(result.kind, 'ambiguous', `${what}: expected ambiguous, got ${result.kind}`);
  return result as AmbiguousRecord;
}

/** The contract on strict mode. */
export const strictScenarios: readonly ContractScenario[] = [
  {
    id: 'strict.expired-lease-refused',
    group: 'strict mode',
    title: () =>
      "refuses an expired lease in strict mode: the contender's look makes the record AMBIGUOUS, and the stale holder is fenced out",
    notApplicable: notStrict,
    async run({ store, other, scope, acquire, request }) {
      const leaseMs = 300;
      const stale = await acquire('k', { leaseMs });
      const early = await other.tryAcquire(request('k', { onExpiredLease: 'refuse' }));
      assert.equal(
        early.kind,
        'in-flight',
        `a contender got ${early.kind} while the lease was live`,
      );
      await delay(leaseMs + 150);
      const before = await store.find({ scope, key: 'k' });
      assert.equal(before?.state, 'IN_PROGRESS', 'a read moved the record');
      assert.equal(before?.leaseExpired, true);
      const started = performance.now();
      const refused = ambiguous(
        await other.tryAcquire(request('k', { onExpiredLease: 'refuse', waitTimeoutMs: 5000 })),
        'the contender after the lease ran out',
      );
      const elapsed = performance.now() - started;
      assert.equal(refused.reason, 'lease-expired');
      assert.equal(refused.transitioned, true, 'the look that moved the record did not say so');
      assert.ok(elapsed < 1000, `the refusal took ${round(elapsed)} ms: it must not wait`);
      const view = await store.find({ scope, key: 'k' });
      assert.equal(view?.state, 'AMBIGUOUS');
      assert.equal(view?.ambiguousReason, 'lease-expired');
      assert.ok(view?.ambiguousSince instanceof Date, 'an AMBIGUOUS view has no ambiguousSince');
      assert.equal(view?.leaseExpired, false);
      assert.equal(await store.extend(stale), false, 'the stale holder could extend');
      await leaseLost(store.complete(stale, bytes('late')), 'complete by the stale holder');
      await leaseLost(store.release(stale), 'release by the stale holder');
      const again = ambiguous(
        await store.tryAcquire(request('k', { onExpiredLease: 'refuse' })),
        'the next attempt',
      );
      assert.equal(again.transitioned, undefined, 'a second look claims it moved the record');
      return `refused in ${round(elapsed)} ms after a ${leaseMs} ms lease ran out; AMBIGUOUS, the stale holder fenced out`;
    },
  },
  {
    id: 'strict.blind-retry-blocked',
    group: 'strict mode',
    title: () =>
      'keeps an AMBIGUOUS record: every retry is refused (strict or not, on both instances), writes nothing, and neither TTL nor purge removes it',
    notApplicable: notStrict,
    async run({ store, other, scope, acquire, request, snapshot }) {
      // Short lease and TTL: a store that let the record expire (a Redis key's PEXPIREAT) would lose it.
      const lease = await acquire('k', { ttlMs: 100, leaseMs: 150, fingerprint: 'f' });
      await store.strictMode!.markAmbiguous(lease, 'action-failed');
      await leaseLost(
        store.strictMode!.markAmbiguous(lease, 'action-failed'),
        'a second markAmbiguous under the same lease',
      );
      await delay(300); // past its TTL and its lease
      while ((await store.purgeExpired()) > 0);
      const before = await snapshot();
      for (const [on, onExpiredLease] of [
        [store, 'refuse'],
        [other, 'refuse'],
        [other, 'steal'],
        [store, undefined],
      ] as const) {
        const result = ambiguous(
          await on.tryAcquire(
            request('k', { onExpiredLease, fingerprint: 'f', waitTimeoutMs: 2000 }),
          ),
          `a retry (onExpiredLease ${onExpiredLease ?? 'absent'})`,
        );
        assert.equal(result.reason, 'action-failed');
      }
      assert.equal(
        (await other.tryAcquire(request('k', { fingerprint: 'g', onExpiredLease: 'refuse' }))).kind,
        'fingerprint-mismatch',
      );
      assert.equal(await snapshot(), before, 'a refused retry wrote to the record');
      const view = await other.find({ scope, key: 'k' });
      assert.equal(view?.state, 'AMBIGUOUS', 'the record went after its TTL or a purge');
      assert.deepEqual(
        (await store.list({ scope, state: 'AMBIGUOUS' })).map((r) => r.key),
        ['k'],
      );
      return '4 retries refused, nothing written; AMBIGUOUS past its TTL and a purge';
    },
  },
  {
    id: 'strict.unknown-exception-ambiguous',
    group: 'strict mode',
    title: () =>
      "makes an action's unknown exception AMBIGUOUS (through the engine), and releases one marked IdempotencyNotExecutedError",
    notApplicable: notStrict,
    async run({ store, other, scope }) {
      // Which errors count as executions is the engine's rule; the store's part is the fenced markAmbiguous.
      const engine = new IdempotencyEngine(store, { logger: { warn: () => {}, error: () => {} } });
      const policy = engine.policy({ scope, onExpiredLease: 'refuse', waitTimeout: 0 });
      const failure = new Error('the provider timed out');
      await assert.rejects(
        engine.run(policy, { key: 'unknown' }, async () => {
          throw failure;
        }),
        (error) => error === failure,
      );
      const view = await other.find({ scope, key: 'unknown' });
      assert.equal(
        view?.state,
        'AMBIGUOUS',
        `an unknown exception left the record ${view?.state ?? 'absent'}`,
      );
      assert.equal(view?.ambiguousReason, 'action-failed');
      let ran = false;
      await assert.rejects(
        engine.run(policy, { key: 'unknown' }, async () => (ran = true)),
        IdempotencyOutcomeUnknownError,
      );
      assert.equal(ran, false, 'a retry ran the action again');
      await assert.rejects(
        engine.run(policy, { key: 'declined' }, async () => {
          throw new IdempotencyNotExecutedError('declined before any effect');
        }),
        IdempotencyNotExecutedError,
      );
      assert.equal(await other.find({ scope, key: 'declined' }), null);
      return 'unknown exception: AMBIGUOUS, retry refused; IdempotencyNotExecutedError: released';
    },
  },
  {
    id: 'strict.resolution-recorded',
    group: 'strict mode',
    title: () =>
      'resolves an AMBIGUOUS record once: completed is COMPLETE with who and when, and replays; not-executed frees the key',
    notApplicable: notStrict,
    async run({ store, other, scope, acquire, request }) {
      const payload = bytes({ charged: true });
      const completed = await acquire('completed');
      await store.strictMode!.markAmbiguous(completed, 'action-failed');
      const since = (await store.find({ scope, key: 'completed' }))!.ambiguousSince!;
      const resolved = await other.strictMode!.resolve(
        { scope, key: 'completed' },
        { outcome: 'completed', payload, ttlMs: 60_000, resolvedBy: 'cli:local' },
      );
      assert.equal(resolved.kind, 'resolved');
      const resolvedAt = (resolved as { resolvedAt: Date }).resolvedAt;
      assert.ok(
        resolvedAt.getTime() >= since.getTime(),
        'resolvedAt is before the record became AMBIGUOUS',
      );
      const view = await store.find({ scope, key: 'completed' });
      assert.equal(view?.state, 'COMPLETE');
      assert.equal(view?.resolvedBy, 'cli:local');
      assert.equal(view?.resolvedAt?.getTime(), resolvedAt.getTime());
      assert.ok(view?.payload?.equals(payload));
      assert.equal(view?.ambiguousSince, undefined, 'a resolved record still shows ambiguousSince');
      const replay = duplicate(await store.tryAcquire(request('completed')), 'the resolved result');
      assert.ok(replay.payload.equals(payload));
      assert.ok(
        replay.expiresInMs > 50_000 && replay.expiresInMs <= 60_000,
        `expiresInMs ${replay.expiresInMs} is not the resolution's 60 s TTL from now`,
      );
      const twice = await store.strictMode!.resolve(
        { scope, key: 'completed' },
        { outcome: 'not-executed', resolvedBy: 'cli:local' },
      );
      assert.deepEqual(twice, { kind: 'not-ambiguous', state: 'COMPLETE' });

      const notRun = await acquire('not-executed');
      await store.strictMode!.markAmbiguous(notRun, 'action-failed');
      assert.equal(
        (
          await store.strictMode!.resolve(
            { scope, key: 'not-executed' },
            { outcome: 'not-executed', resolvedBy: 'reconcile' },
          )
        ).kind,
        'resolved',
      );
      assert.equal(await other.find({ scope, key: 'not-executed' }), null);
      assert.equal((await other.tryAcquire(request('not-executed'))).kind, 'acquired');
      const live = await acquire('live');
      assert.deepEqual(
        await store.strictMode!.resolve(
          { scope, key: 'live' },
          { outcome: 'not-executed', resolvedBy: 'cli:local' },
        ),
        { kind: 'not-ambiguous', state: 'IN_PROGRESS' },
      );
      await store.release(live);
      return 'completed: COMPLETE, resolvedBy cli:local, replayed for 60 s; not-executed: gone, acquired again; a live record left alone';
    },
  },
];
