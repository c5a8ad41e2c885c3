import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { IdempotencyEngine } from '../core/engine';
import {
  IdempotencyLeaseLostError,
  IdempotencyNotExecutedError,
  IdempotencyOutcomeUnknownError,
  IdempotencyPayloadError,
} from '../core/errors';
import { encodeHttpResponse, encodeValue } from '../core/payload';
import type {
  AcquireRequest,
  AcquireResult,
  AmbiguousRecord,
  IdempotencyStore,
  Lease,
  ReplayedRecord,
  StoredPayload,
} from '../core/store';
import type { ContractHarness, ContractScale } from './harness';

/** What a scenario works with: the instances, a scope of its own, and helpers. */
export interface ScenarioContext {
  store: IdempotencyStore;
  other: IdempotencyStore;
  harness: ContractHarness;
  scale: ContractScale;
  scope: string;
  request(key: string, overrides?: Partial<AcquireRequest>): AcquireRequest;
  /** Acquires `key` (on `store` unless told), failing the scenario if it is not acquired. */
  acquire(key: string, overrides?: Partial<AcquireRequest>, on?: IdempotencyStore): Promise<Lease>;
  /** The harness's raw snapshot of a scope, or the records as reads show them. */
  snapshot(scope?: string): Promise<string>;
}

/**
 * One behaviour of the contract. `run` throws (an `AssertionError`) when the
 * store breaks it, and otherwise returns what it measured, for `verify`.
 */
export interface ContractScenario {
  /** Stable: `verify --json` and the docs name scenarios by it. */
  id: string;
  group: string;
  title: (scale: ContractScale) => string;
  /** Why the scenario cannot run against this harness, or undefined when it can. */
  notApplicable?: (harness: ContractHarness) => string | undefined;
  run: (ctx: ScenarioContext) => Promise<string>;
}

const TTL_MS = 600_000;

/**
 * A scenario could not set up what it checks (the store refused an
 * acquisition the scenario needs first). `verify` grades it N/A: it is not a
 * pass, but the store did not break the behaviour under test either.
 */
export class ScenarioSetupError extends Error {}
const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const bytes = (value: unknown) => encodeValue(value);

function duplicate(result: AcquireResult, what = 'the result'): ReplayedRecord {
  assert.equal(result.kind, 'duplicate', `expected a replay of ${what}, got ${result.kind}`);
  return result as ReplayedRecord;
}

async function leaseLost(call: Promise<unknown>, what: string): Promise<void> {
  await assert.rejects(
    call,
    IdempotencyLeaseLostError,
    `${what} was not refused with IdempotencyLeaseLostError`,
  );
}

/** Resolves once a duplicate waits inside `store.tryAcquire`, or after `fallbackMs` for a store that cannot say. */
function nextWait(store: IdempotencyStore, scope: string, fallbackMs = 150): Promise<void> {
  if (!store.onWait) return delay(fallbackMs).then(() => undefined);
  return new Promise((resolve) => {
    const stop = store.onWait!((waiting) => {
      if (waiting !== scope) return;
      stop();
      resolve();
    });
  });
}

const round = (ms: number) => (Math.abs(ms) < 10 ? Math.round(ms * 10) / 10 : Math.round(ms));
const median = (values: number[]) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

const scenarios: ContractScenario[] = [];
const scenario = (s: ContractScenario) => scenarios.push(s);

// --- acquire, complete, replay ------------------------------------------------

scenario({
  id: 'acquire.new-key',
  group: 'acquire, complete, replay',
  title: () => 'acquires a new key, IN_PROGRESS under a live lease',
  async run({ store, scope, request }) {
    const result = await store.tryAcquire(request('k'));
    assert.equal(result.kind, 'acquired');
    const lease = (result as { lease: Lease }).lease;
    assert.equal(typeof lease.leaseId, 'string');
    assert.equal(lease.leaseMs, 10_000);
    assert.equal(lease.ttlMs, 60_000);
    const view = await store.find({ scope, key: 'k' });
    assert.ok(view, 'find shows nothing for an acquired key');
    assert.equal(view.state, 'IN_PROGRESS');
    assert.equal(view.leaseExpired, false);
    return 'IN_PROGRESS, lease live';
  },
});

scenario({
  id: 'replay.byte-for-byte',
  group: 'acquire, complete, replay',
  title: () =>
    'replays a completed key: the stored bytes, completion time, remaining TTL and fingerprint',
  async run({ store, other, acquire, request, snapshot }) {
    const payload = bytes({ zeta: 1, alpha: { b: [1, 2], a: null }, text: 'ünïcødé ✓ "q" \\ b' });
    const lease = await acquire('k', { fingerprint: 'f', ttlMs: 60_000 });
    await store.complete(lease, payload);
    const before = await snapshot();
    const started = performance.now();
    const replay = duplicate(await other.tryAcquire(request('k', { fingerprint: 'f' })));
    const elapsed = performance.now() - started;
    assert.ok(replay.payload.equals(payload), 'the replayed bytes differ from the stored ones');
    assert.ok(replay.completedAt instanceof Date, 'completedAt is not a Date');
    assert.ok(
      replay.expiresInMs > 50_000 && replay.expiresInMs <= 60_000,
      `expiresInMs ${replay.expiresInMs} is not within the 60 s TTL`,
    );
    assert.equal(replay.fingerprint, 'f');
    assert.equal(await snapshot(), before, 'the replay wrote to the record');
    return `the same ${payload.length} bytes on the other instance in ${round(elapsed)} ms; nothing written`;
  },
});

const PAYLOADS: Array<[string, StoredPayload]> = [
  ['undefined', encodeValue(undefined)],
  ['null', encodeValue(null)],
  ['zero', encodeValue(0)],
  ['an empty array', encodeValue([])],
  ['a string with U+0000', encodeValue('a\u0000b')],
  ['a lone surrogate', encodeValue('x\ud800y')],
  ['keys in non-alphabetical order', encodeValue({ b: 1, a: 2, c: { z: 1, y: 2 } })],
  [
    'an HTTP response with every byte value',
    encodeHttpResponse({
      status: 201,
      headers: { 'content-type': 'application/octet-stream' },
      body: Buffer.from(Array.from({ length: 256 }, (_, i) => i)),
    }),
  ],
  ['an empty payload', Buffer.alloc(0)],
];

scenario({
  id: 'replay.payloads',
  group: 'acquire, complete, replay',
  title: () =>
    'stores every payload byte for byte (U+0000, lone surrogates, key order, binary bodies)',
  async run({ store, acquire, request }) {
    for (const [label, payload] of PAYLOADS) {
      const key = `payload-${label}`;
      const lease = await acquire(key);
      await store.complete(lease, payload);
      const replay = duplicate(await store.tryAcquire(request(key)), label);
      assert.ok(replay.payload.equals(payload), `${label}: the replayed bytes differ`);
    }
    return `${PAYLOADS.length} payloads round-tripped exactly`;
  },
});

scenario({
  id: 'acquire.independent',
  group: 'acquire, complete, replay',
  title: () => 'keeps different keys and scopes independent',
  async run({ store, scope, acquire, request }) {
    const a = await acquire('a');
    await acquire('b');
    await store.complete(a, bytes('A'));
    const elsewhere = await store.tryAcquire({ ...request('a'), scope: `${scope}-other` });
    assert.equal(elsewhere.kind, 'acquired', 'the same key in another scope was not free');
    assert.equal((await store.tryAcquire(request('b'))).kind, 'in-flight');
    assert.ok(duplicate(await store.tryAcquire(request('a'))).payload.equals(bytes('A')));
    return 'two keys, two scopes: no interference';
  },
});

scenario({
  id: 'acquire.verbatim',
  group: 'acquire, complete, replay',
  title: () => 'stores keys and scopes verbatim: SQL metacharacters, unicode, 10 kB',
  async run({ store, scope, request }) {
    const keys = [
      `'; DROP TABLE idempotency_records; --`,
      `"quoted" \\ back`,
      'ключ-🔑',
      'x'.repeat(10_240),
    ];
    const longScope = `${scope}-${'s'.repeat(10_240)}`;
    for (const key of keys) {
      const result = await store.tryAcquire({ ...request(key), scope: longScope });
      assert.equal(result.kind, 'acquired');
      await store.complete((result as { lease: Lease }).lease, bytes(key.length));
    }
    for (const key of keys) {
      const replay = duplicate(await store.tryAcquire({ ...request(key), scope: longScope }));
      assert.ok(replay.payload.equals(bytes(key.length)));
      const view = await store.find({ scope: longScope, key });
      assert.equal(view?.key, key);
      assert.equal(view?.scope, longScope);
    }
    assert.equal(await store.find({ scope: longScope, key: keys[3].slice(1) }), null);
    return `${keys.length} keys under a 10 kB scope, found as written`;
  },
});

// --- release and expiry -------------------------------------------------------

scenario({
  id: 'release.as-if-never-used',
  group: 'release and expiry',
  title: () => 'makes a released key acquirable again, as if never used',
  async run({ store, scope, acquire, request }) {
    const lease = await acquire('k');
    await store.release(lease);
    assert.equal(await store.find({ scope, key: 'k' }), null, 'a released record is still there');
    assert.equal((await store.tryAcquire(request('k'))).kind, 'acquired');
    return 'no trace after release';
  },
});

scenario({
  id: 'expiry.ttl-before-purge',
  group: 'release and expiry',
  title: () => 'treats a COMPLETE record past its TTL as absent, before any purge',
  async run({ store, acquire, request }) {
    const lease = await acquire('k', { ttlMs: 100 });
    await store.complete(lease, bytes('old'));
    await delay(200);
    assert.equal((await store.tryAcquire(request('k'))).kind, 'acquired');
    return 'acquired again 200 ms after a 100 ms TTL';
  },
});

scenario({
  id: 'steal.expired-lease',
  group: 'release and expiry',
  title: () => 'lets the next caller steal an expired lease, with a new lease id',
  async run({ other, acquire, request }) {
    const leaseMs = 300;
    const first = await acquire('k', { leaseMs });
    const acquiredAt = performance.now();
    const early = await other.tryAcquire(request('k'));
    assert.equal(early.kind, 'in-flight', `a contender got ${early.kind} while the lease was live`);
    await delay(leaseMs + 150);
    const late = await other.tryAcquire(request('k'));
    assert.equal(late.kind, 'acquired', `a contender got ${late.kind} after the lease ran out`);
    assert.notEqual((late as { lease: Lease }).lease.leaseId, first.leaseId);
    return `refused while live; taken over ${round(performance.now() - acquiredAt)} ms after a ${leaseMs} ms lease began`;
  },
});

scenario({
  id: 'steal.extended-lease',
  group: 'release and expiry',
  title: () => 'does not let anyone steal a lease that was extended',
  async run({ store, other, acquire, request }) {
    const lease = await acquire('k', { leaseMs: 300 });
    await delay(150);
    assert.equal(await store.extend({ ...lease, leaseMs: 1000 } as Lease), true);
    await delay(300);
    assert.equal((await other.tryAcquire(request('k'))).kind, 'in-flight');
    return 'in flight past the original lease, within the extension';
  },
});

// --- fencing ------------------------------------------------------------------

scenario({
  id: 'fencing.stale-owner',
  group: 'fencing',
  title: () =>
    'refuses a stale owner after a steal (complete, release, extend); the new owner result stands',
  async run({ store, other, acquire, request }) {
    const stale = await acquire('k', { leaseMs: 100 });
    await delay(200);
    const fresh = await acquire('k', {}, other);
    assert.equal(await store.extend(stale), false, 'a stale owner could extend');
    await leaseLost(store.complete(stale, bytes('stale')), 'complete by a stale owner');
    await leaseLost(store.release(stale), 'release by a stale owner');
    await other.complete(fresh, bytes('fresh'));
    await leaseLost(
      store.complete(stale, bytes('stale')),
      'complete by a stale owner after the new one finished',
    );
    assert.ok(
      duplicate(await store.tryAcquire(request('k'))).payload.equals(bytes('fresh')),
      "the new owner's result does not stand",
    );
    return "4/4 stale calls refused; the new owner's result stands";
  },
});

scenario({
  id: 'fencing.settled-record',
  group: 'fencing',
  title: () => 'refuses complete, release and extend once the record is complete or absent',
  async run({ store, scope, acquire, request }) {
    const lease = await acquire('k');
    await store.complete(lease, bytes(1));
    await leaseLost(store.complete(lease, bytes(2)), 'a second complete');
    await leaseLost(store.release(lease), 'release of a complete record');
    assert.equal(await store.extend(lease), false);
    const absent = await acquire('gone');
    await store.release(absent);
    await leaseLost(store.complete(absent, bytes(1)), 'complete of an absent record');
    await leaseLost(store.release(absent), 'release of an absent record');
    assert.equal(await store.extend(absent), false);
    assert.ok(duplicate(await store.tryAcquire(request('k'))).payload.equals(bytes(1)));
    assert.equal(await store.find({ scope, key: 'gone' }), null);
    return 'refused on a complete and on an absent record';
  },
});

// --- waiting ------------------------------------------------------------------

scenario({
  id: 'wait.woken-by-completion',
  group: 'waiting',
  title: () =>
    'wakes a waiting duplicate, on this instance and on the other, within 250 ms of the completion (not at its next poll)',
  async run({ store, other, scope, acquire, request }) {
    const samples: number[] = [];
    for (const waiter of [store, other, other]) {
      const key = randomUUID();
      const lease = await acquire(key);
      const waiting = nextWait(waiter, scope);
      let settledAt = 0;
      const result = waiter
        .tryAcquire(request(key, { waitTimeoutMs: 10_000 }))
        .finally(() => (settledAt = performance.now()));
      await waiting;
      assert.equal(settledAt, 0, 'the waiter returned before the holder completed');
      const completing = performance.now();
      await store.complete(lease, bytes({ key }));
      assert.ok(duplicate(await result).payload.equals(bytes({ key })));
      samples.push(settledAt - completing);
    }
    const worst = Math.max(...samples);
    // A bound for a wake-up, not a speed target (the benchmarks measure that): a
    // waiter left to its poll takes the poll interval (1 s by default), while a
    // loaded machine can delay a woken one by tens of milliseconds.
    assert.ok(worst < 250, `a waiter woke ${round(worst)} ms after the completion`);
    return `woken ${round(median(samples))} ms after complete() (median of ${samples.length}, max ${round(worst)} ms)`;
  },
});

scenario({
  id: 'wait.handed-on-release',
  group: 'waiting',
  title: () => 'hands the key to a waiting duplicate when the holder releases',
  async run({ store, other, scope, acquire, request }) {
    const lease = await acquire('k');
    const waiting = nextWait(other, scope);
    const result = other.tryAcquire(request('k', { waitTimeoutMs: 10_000 }));
    await waiting;
    await store.release(lease);
    assert.equal((await result).kind, 'acquired');
    return 'acquired by the waiter';
  },
});

scenario({
  id: 'wait.handed-on-expiry',
  group: 'waiting',
  title: () => "hands the key to a waiting duplicate when the holder's lease expires",
  async run({ other, acquire, request }) {
    await acquire('k', { leaseMs: 300 });
    const started = performance.now();
    assert.equal(
      (await other.tryAcquire(request('k', { waitTimeoutMs: 10_000 }))).kind,
      'acquired',
    );
    return `taken over ${round(performance.now() - started)} ms into a 300 ms lease`;
  },
});

scenario({
  id: 'wait.in-flight-after-wait',
  group: 'waiting',
  title: () => "answers in-flight after the wait, retryAfterMs being the holder's remaining lease",
  async run({ other, acquire, request }) {
    await acquire('k', { leaseMs: 5000 });
    const started = Date.now();
    const result = await other.tryAcquire(request('k', { waitTimeoutMs: 300 }));
    const waited = Date.now() - started;
    assert.equal(result.kind, 'in-flight');
    assert.ok(waited >= 290, `answered after ${waited} ms of a 300 ms wait`);
    const retryAfterMs = (result as { retryAfterMs: number }).retryAfterMs;
    assert.ok(
      retryAfterMs > 5000 - waited - 1000 && retryAfterMs <= 5000 - 290,
      `retryAfterMs ${retryAfterMs}`,
    );
    return `in flight after ${waited} ms, retry after ${retryAfterMs} ms`;
  },
});

scenario({
  id: 'wait.zero',
  group: 'waiting',
  title: () => 'looks once and answers at once when waitTimeoutMs is 0',
  async run({ other, acquire, request }) {
    await acquire('k', { leaseMs: 20_000 });
    const started = performance.now();
    assert.equal((await other.tryAcquire(request('k', { waitTimeoutMs: 0 }))).kind, 'in-flight');
    const elapsed = performance.now() - started;
    assert.ok(elapsed < 1000, `took ${round(elapsed)} ms`);
    return `in flight in ${round(elapsed)} ms`;
  },
});

scenario({
  id: 'wait.one-winner',
  group: 'waiting',
  title: ({ concurrency }) =>
    `gives exactly one of ${concurrency} concurrent acquirers (two instances) the key; the rest replay its result`,
  async run({ store, other, scale, request }) {
    const instances = [store, other];
    let executions = 0;
    const started = performance.now();
    const results = await Promise.all(
      Array.from({ length: scale.concurrency }, async (_, i) => {
        const on = instances[i % 2];
        const result = await on.tryAcquire(
          request('hot', { waitTimeoutMs: 20_000, leaseMs: 30_000 }),
        );
        if (result.kind === 'acquired') {
          executions++;
          await delay(50);
          await on.complete(result.lease, bytes({ winner: result.lease.leaseId }));
        }
        return result;
      }),
    );
    const winners = results.filter(
      (r): r is Extract<AcquireResult, { kind: 'acquired' }> => r.kind === 'acquired',
    );
    assert.equal(winners.length, 1, `${winners.length} acquirers got the key`);
    assert.equal(executions, 1);
    const expected = bytes({ winner: winners[0].lease.leaseId });
    const replays = results.filter(
      (r) => r.kind === 'duplicate' && r.payload.equals(expected),
    ).length;
    assert.equal(
      replays,
      scale.concurrency - 1,
      `${replays} of ${scale.concurrency - 1} others replayed the result`,
    );
    return `1 winner, ${replays} replays of ${scale.concurrency} acquirers on 2 instances in ${round(performance.now() - started)} ms`;
  },
});

scenario({
  id: 'wait.no-lost-wakeup',
  group: 'waiting',
  title: ({ raceIterations }) =>
    `loses no wake-up when a waiter arrives at the instant of completion (${raceIterations} iterations, two instances)`,
  async run({ store, other, scale, request }) {
    const batch = 20;
    let slowest = 0;
    for (let done = 0; done < scale.raceIterations; done += batch) {
      const size = Math.min(batch, scale.raceIterations - done);
      await Promise.all(
        Array.from({ length: size }, async (_, i) => {
          const key = `race-${done + i}`;
          const acquired = await store.tryAcquire(request(key, { leaseMs: 30_000 }));
          assert.equal(acquired.kind, 'acquired');
          const lease = (acquired as { lease: Lease }).lease;
          const payload = bytes(done + i);
          const waiter = () => other.tryAcquire(request(key, { waitTimeoutMs: 10_000 }));
          const started = performance.now();
          // In the same tick, in either order: the waiter's look and the completion race.
          let waited: AcquireResult;
          if ((done + i) % 2 === 0) {
            [waited] = await Promise.all([waiter(), store.complete(lease, payload)]);
          } else {
            const completing = store.complete(lease, payload);
            waited = await waiter();
            await completing;
          }
          slowest = Math.max(slowest, performance.now() - started);
          const replay = duplicate(waited, `iteration ${done + i}`);
          assert.ok(replay.payload.equals(payload));
        }),
      );
    }
    // A lost wake-up waits for the other instance's fallback poll (a minute, if the harness
    // follows the advice), so the waiter answers in flight after its 10 s and fails above. This
    // bound catches a wake-up found only by a slower fallback; it leaves room for a loaded machine
    // (a CI run of the whole suite on 2 cores once took 1.8 s for one race on MariaDB).
    assert.ok(
      slowest < 5000,
      `a waiter answered ${round(slowest)} ms after the race: a wake-up was lost`,
    );
    return `${scale.raceIterations} races, every waiter replayed; slowest ${round(slowest)} ms`;
  },
});

// --- fingerprints ------------------------------------------------------------

scenario({
  id: 'fingerprint.mismatch',
  group: 'fingerprints',
  title: () =>
    'reports a mismatch for a record first taken with another fingerprint, live or complete',
  async run({ store, acquire, request }) {
    const lease = await acquire('k', { fingerprint: 'f1' });
    assert.equal(
      (await store.tryAcquire(request('k', { fingerprint: 'f2' }))).kind,
      'fingerprint-mismatch',
    );
    await store.complete(lease, bytes('v'));
    assert.equal(
      (await store.tryAcquire(request('k', { fingerprint: 'f2' }))).kind,
      'fingerprint-mismatch',
    );
    assert.ok(
      duplicate(await store.tryAcquire(request('k', { fingerprint: 'f1' }))).payload.equals(
        bytes('v'),
      ),
    );
    return 'mismatch while live and once complete';
  },
});

scenario({
  id: 'fingerprint.one-sided',
  group: 'fingerprints',
  title: () => 'reports no mismatch unless both sides carry a fingerprint',
  async run({ store, acquire, request }) {
    const a = await acquire('a');
    await store.complete(a, bytes('A'));
    assert.equal((await store.tryAcquire(request('a', { fingerprint: 'f' }))).kind, 'duplicate');
    const b = await acquire('b', { fingerprint: 'f' });
    await store.complete(b, bytes('B'));
    assert.equal((await store.tryAcquire(request('b'))).kind, 'duplicate');
    return 'replayed both ways';
  },
});

// --- purge --------------------------------------------------------------------

scenario({
  id: 'purge.rules',
  group: 'purge',
  title: () =>
    'purges COMPLETE past its TTL and IN_PROGRESS past TTL and lease; keeps everything else',
  async run({ store, scope, acquire }) {
    const short = 150;
    const completeExpired = await acquire('complete-expired', { ttlMs: short });
    await store.complete(completeExpired, bytes(1));
    const completeLive = await acquire('complete-live');
    await store.complete(completeLive, bytes(2));
    await acquire('in-progress-both-out', { leaseMs: short, ttlMs: short });
    const longRunning = await acquire('in-progress-lease-live', { leaseMs: short, ttlMs: short });
    await acquire('in-progress-ttl-live', { leaseMs: short, ttlMs: 60_000 });
    assert.equal(await store.extend({ ...longRunning, leaseMs: 60_000 } as Lease), true);
    await delay(short + 150);
    let purged = 0;
    for (let batch = await store.purgeExpired(); batch > 0; batch = await store.purgeExpired())
      purged += batch;
    const expectations: Array<[string, boolean]> = [
      ['complete-expired', false],
      ['in-progress-both-out', false],
      ['complete-live', true],
      ['in-progress-lease-live', true],
      ['in-progress-ttl-live', true],
    ];
    for (const [key, kept] of expectations) {
      const present = (await store.find({ scope, key })) !== null;
      assert.equal(present, kept, `${key} was ${present ? 'kept' : 'purged'}`);
    }
    const lapsed = await store.find({ scope, key: 'in-progress-ttl-live' });
    assert.equal(lapsed?.leaseExpired, true);
    return `${purged} purged in all; the 2 due went, the 3 others stayed`;
  },
});

scenario({
  id: 'purge.batch-limit',
  group: 'purge',
  title: () => 'deletes at most `limit` records per batch',
  notApplicable: (harness) =>
    harness.expiry === 'backend'
      ? 'the backend expires records itself; purgeExpired has nothing to delete'
      : undefined,
  async run({ store, acquire }) {
    while ((await store.purgeExpired()) > 0); // anything other scenarios left due
    for (const key of ['a', 'b', 'c']) {
      const lease = await acquire(key, { ttlMs: 50 });
      await store.complete(lease, bytes(key));
    }
    await delay(120);
    assert.equal(await store.purgeExpired({ limit: 2 }), 2);
    assert.equal(await store.purgeExpired({ limit: 2 }), 1);
    assert.equal(await store.purgeExpired({ limit: 2 }), 0);
    return '2, then 1, then 0 with limit 2';
  },
});

// --- reads --------------------------------------------------------------------

scenario({
  id: 'reads.move-nothing',
  group: 'reads',
  title: () =>
    'never changes a record: an expired lease stays IN_PROGRESS (lease expired) until a contender comes',
  async run({ store, other, scope, acquire, snapshot }) {
    await acquire('k', { leaseMs: 100 });
    await delay(200);
    const before = await snapshot();
    const first = await store.find({ scope, key: 'k' });
    const listed = await store.list({ scope });
    await other.find({ scope, key: 'k' });
    await other.list({});
    const second = await store.find({ scope, key: 'k' });
    assert.equal(first?.state, 'IN_PROGRESS');
    assert.equal(first?.leaseExpired, true);
    assert.deepEqual(listed, [first]);
    assert.deepEqual(second, first);
    assert.equal('payload' in first!, false, 'an IN_PROGRESS record shows a payload');
    assert.equal(await snapshot(), before, 'a read changed the record');
    return 'IN_PROGRESS (lease expired) unchanged after find and list on both instances';
  },
});

scenario({
  id: 'reads.list',
  group: 'reads',
  title: () => 'lists by scope and state, newest first, up to the limit',
  async run({ store, scope, acquire }) {
    const a = await acquire('a');
    await store.complete(a, bytes('A'));
    await delay(5);
    await acquire('b');
    assert.deepEqual(
      (await store.list({ scope })).map((r) => r.key),
      ['b', 'a'],
    );
    const complete = await store.list({ scope, state: 'COMPLETE' });
    assert.deepEqual(
      complete.map((r) => r.key),
      ['a'],
    );
    assert.ok(complete[0].payload?.equals(bytes('A')));
    assert.deepEqual(
      (await store.list({ scope, state: 'IN_PROGRESS' })).map((r) => r.key),
      ['b'],
    );
    assert.equal((await store.list({ scope, limit: 1 })).length, 1);
    const view = (await store.find({ scope, key: 'a' }))!;
    assert.deepEqual(Object.keys(view).sort(), [
      'completedAt',
      'createdAt',
      'expiresAt',
      'fingerprint',
      'key',
      'leaseExpired',
      'leaseExpiresAt',
      'payload',
      'scope',
      'state',
    ]);
    return 'filtered, ordered and limited';
  },
});

scenario({
  id: 'reads.exact-match',
  group: 'reads',
  title: () =>
    'compares scopes and keys exactly: a trailing space or another case is another record (find, list, acquire)',
  async run({ store, scope, request }) {
    // PAD SPACE collations (MySQL, MariaDB) would take `k ` for `k`, `acme ` for `acme`.
    const scopes = [scope, `${scope} `, `${scope}  `, scope.toUpperCase()];
    const keys = ['k', 'k ', 'K', 'k\t'];
    for (const [s, of] of scopes.entries()) {
      for (const [k, key] of keys.entries()) {
        const result = await store.tryAcquire({ ...request(key), scope: of, ttlMs: TTL_MS });
        assert.equal(
          result.kind,
          'acquired',
          `key #${k} of scope #${s} was not free: it was taken for a neighbour (${result.kind})`,
        );
        await store.complete((result as { lease: Lease }).lease, bytes([s, k]));
      }
    }
    for (const [s, of] of scopes.entries()) {
      for (const [k, key] of keys.entries()) {
        const replay = duplicate(await store.tryAcquire({ ...request(key), scope: of }));
        assert.ok(
          replay.payload.equals(bytes([s, k])),
          `key #${k} of scope #${s} replayed another record`,
        );
        const view = await store.find({ scope: of, key });
        assert.equal(view?.scope, of, `find of scope #${s} shows another scope`);
        assert.equal(view?.key, key, `find of key #${k} shows another key`);
      }
      const listed = await store.list({ scope: of, limit: 100 });
      assert.deepEqual(
        listed.map((r) => (r.scope === of ? keys.indexOf(r.key) : -1)).sort(),
        keys.map((_, k) => k),
        `list of scope #${s} does not show exactly its own ${keys.length} records`,
      );
    }
    return `${scopes.length} scopes × ${keys.length} keys differing by trailing spaces, a tab or case: ${scopes.length * keys.length} records`;
  },
});

// --- inputs -------------------------------------------------------------------

/** Asserts that `call` is refused with a TypeError naming `argument`, whether it throws or rejects. */
async function typeError(call: () => Promise<unknown>, argument: string, what: string) {
  await assert.rejects(
    async () => call(),
    (error: unknown) => {
      assert.ok(
        error instanceof TypeError,
        `${what}: refused with ${String(error)}, not a TypeError`,
      );
      assert.match(
        error.message,
        new RegExp(`"${argument}"`),
        `${what}: the message does not name "${argument}"`,
      );
      return true;
    },
    `${what} was not refused`,
  );
}

scenario({
  id: 'inputs.fingerprint-undefined',
  group: 'inputs',
  title: () => 'treats a fingerprint left undefined as no fingerprint (null)',
  async run({ store, scope, request }) {
    const undefinedFingerprint = { fingerprint: undefined as unknown as null };
    const a = await store.tryAcquire(request('a', undefinedFingerprint));
    assert.equal(a.kind, 'acquired', `acquiring with fingerprint undefined answered ${a.kind}`);
    assert.equal(
      (await store.find({ scope, key: 'a' }))?.fingerprint,
      null,
      'stored fingerprint is not null',
    );
    await store.complete((a as { lease: Lease }).lease, bytes('A'));
    assert.equal((await store.tryAcquire(request('a', { fingerprint: 'f' }))).kind, 'duplicate');
    const b = await store.tryAcquire(request('b', { fingerprint: 'f' }));
    assert.equal(b.kind, 'acquired');
    await store.complete((b as { lease: Lease }).lease, bytes('B'));
    const replay = await store.tryAcquire(request('b', undefinedFingerprint));
    assert.equal(
      replay.kind,
      'duplicate',
      `fingerprint undefined against "f" answered ${replay.kind}, not a replay as null does`,
    );
    return 'acquired, stored as null, and replayed both ways';
  },
});

scenario({
  id: 'inputs.refused',
  group: 'inputs',
  title: () =>
    'refuses inputs of the wrong type with a TypeError naming the argument, writing nothing (scope null, key undefined, NaN, a non-Buffer payload)',
  async run({ store, scope, request, acquire, snapshot }) {
    const bad = <T>(value: unknown) => value as T;
    const before = await snapshot();
    const acquisitions: Array<[string, Partial<AcquireRequest>]> = [
      ['scope', { scope: bad(null) }],
      ['key', { key: bad(undefined) }],
      ['key', { key: bad(42) }],
      ['leaseMs', { leaseMs: Number.NaN }],
      ['leaseMs', { leaseMs: 0 }],
      ['leaseMs', { leaseMs: Number.POSITIVE_INFINITY }],
      ['ttlMs', { ttlMs: -1 }],
      ['ttlMs', { ttlMs: bad('60000') }],
      ['waitTimeoutMs', { waitTimeoutMs: Number.NaN }],
      ['fingerprint', { fingerprint: bad(7) }],
      ['onExpiredLease', { onExpiredLease: bad('ignore') }],
    ];
    for (const [argument, overrides] of acquisitions) {
      await typeError(
        () => store.tryAcquire(request('k', overrides)),
        argument,
        `tryAcquire with a bad ${argument}`,
      );
    }
    assert.equal(await snapshot(), before, 'a refused acquisition wrote something');
    assert.equal(
      await store.find({ scope, key: 'k' }),
      null,
      'a refused acquisition left a record',
    );
    await typeError(
      () => store.find({ scope: bad(undefined), key: 'k' }),
      'scope',
      'find with scope undefined',
    );
    await typeError(() => store.list({ scope: bad(5) }), 'scope', 'list with a numeric scope');
    await typeError(
      () => store.list({ scope, state: bad('DONE') }),
      'state',
      'list with an unknown state',
    );
    await typeError(() => store.list({ scope, limit: Number.NaN }), 'limit', 'list with limit NaN');
    await typeError(
      () => store.purgeExpired({ limit: -5 }),
      'limit',
      'purgeExpired with a negative limit',
    );
    const lease = await acquire('held');
    const circular: Record<string, unknown> = { text: 'not bytes' };
    circular.self = circular;
    for (const [label, payload] of [
      ['a string', 'not bytes'],
      ['an object with a circular value', circular],
      ['a Uint8Array', new Uint8Array([1, 2, 3])],
      ['undefined', undefined],
    ] as Array<[string, unknown]>) {
      await typeError(
        () => store.complete(lease, bad(payload)),
        'payload',
        `complete with ${label}`,
      );
    }
    const view = await store.find({ scope, key: 'held' });
    assert.equal(view?.state, 'IN_PROGRESS', 'a refused completion changed the record');
    // The store still answers (no connection was lost or wedged), and the lease still holds.
    await store.complete(lease, bytes('done'));
    assert.ok(duplicate(await store.tryAcquire(request('held'))).payload.equals(bytes('done')));
    return `${acquisitions.length} acquisitions, 5 reads and 4 payloads refused; nothing written`;
  },
});

// --- payload size -------------------------------------------------------------

scenario({
  id: 'payload.too-large',
  group: 'payloads',
  title: () =>
    'refuses a payload over its maximum before writing anything; the record stays releasable',
  async run({ store, harness, scope, acquire }) {
    const max = harness.maxPayloadBytes ?? 1024 * 1024;
    const lease = await acquire('k');
    await assert.rejects(
      store.complete(lease, Buffer.alloc(max + 1, 0x61)),
      IdempotencyPayloadError,
    );
    assert.equal((await store.find({ scope, key: 'k' }))?.state, 'IN_PROGRESS');
    await store.release(lease);
    assert.equal(await store.find({ scope, key: 'k' }), null);
    const exact = await acquire('exact');
    await store.complete(exact, Buffer.alloc(max, 0x61));
    return `${max + 1} bytes refused, ${max} stored`;
  },
});

// --- the store's clock ----------------------------------------------------------

scenario({
  id: 'clock.store-decides',
  group: "the store's clock",
  title: () =>
    "the store's clock, not the process's, decides leases and TTLs (process clock moved ±1 h)",
  notApplicable: (harness) =>
    harness.clock === 'process' ? 'an in-process store keeps time by the process clock' : undefined,
  async run({ store, other, acquire, request }) {
    const hour = 3_600_000;
    // A holder whose clock is an hour slow, a contender whose clock is an hour fast:
    // if either clock decided, the contender would take a live lease over.
    const lease = await shiftedClock(-hour, () => acquire('live', { leaseMs: 5000, ttlMs: 5000 }));
    const contended = await shiftedClock(hour, () => other.tryAcquire(request('live')));
    assert.equal(
      contended.kind,
      'in-flight',
      `a live lease was ${contended.kind} for a contender 1 h fast`,
    );
    await shiftedClock(-hour, () => store.complete(lease, bytes('kept')));
    const replayed = await shiftedClock(hour, () => other.tryAcquire(request('live')));
    assert.equal(
      replayed.kind,
      'duplicate',
      `a result within its TTL was ${replayed.kind} for a clock 1 h fast`,
    );
    await shiftedClock(hour, () => acquire('lapsing', { leaseMs: 300 }));
    await delay(450);
    const taken = await shiftedClock(-hour, () => other.tryAcquire(request('lapsing')));
    assert.equal(
      taken.kind,
      'acquired',
      `an expired lease was ${taken.kind} for a contender 1 h slow`,
    );
    return 'leases and TTLs held and lapsed by the store clock with the process clock an hour off either way';
  },
});

/**
 * Runs `call` with this process's clock (`Date.now()` and `new Date()`) moved
 * by `offsetMs`, as on a host whose clock is wrong. Scenarios run one at a time.
 */
async function shiftedClock<T>(offsetMs: number, call: () => Promise<T>): Promise<T> {
  const RealDate = globalThis.Date;
  class ShiftedDate extends RealDate {
    constructor(...args: unknown[]) {
      if (args.length === 0) super(RealDate.now() + offsetMs);
      else super(...(args as [number]));
    }
    static override now(): number {
      return RealDate.now() + offsetMs;
    }
  }
  globalThis.Date = ShiftedDate as DateConstructor;
  try {
    return await call();
  } finally {
    globalThis.Date = RealDate;
  }
}

// --- strict mode ----------------------------------------------------------------

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

scenario({
  id: 'strict.expired-lease-refused',
  group: 'strict mode',
  title: () =>
    "refuses an expired lease in strict mode: the contender's look makes the record AMBIGUOUS, and the stale holder is fenced out",
  notApplicable: notStrict,
  async run({ store, other, scope, acquire, request }) {
    const leaseMs = 300;
    const stale = await acquire('k', { leaseMs });
    const early = await other.tryAcquire(request('k', { onExpiredLease: 'refuse' }));
    assert.equal(early.kind, 'in-flight', `a contender got ${early.kind} while the lease was live`);
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
});

scenario({
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
});

scenario({
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
});

scenario({
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
});

/** The contract, in order. Behaviour changes land here first. */
export const STORE_CONTRACT: readonly ContractScenario[] = scenarios;

/** Builds a scenario's context over a harness, with a scope of its own. */
export function scenarioContext(
  harness: ContractHarness,
  scale: ContractScale,
  scenarioId: string,
): ScenarioContext {
  const store = harness.store;
  const other = harness.other ?? store;
  const scope = `contract-${scenarioId}-${randomUUID()}`;
  const request = (key: string, overrides: Partial<AcquireRequest> = {}): AcquireRequest => ({
    scope,
    key,
    leaseMs: 10_000,
    waitTimeoutMs: 0,
    ttlMs: 60_000,
    fingerprint: null,
    ...overrides,
  });
  return {
    store,
    other,
    harness,
    scale,
    scope,
    request,
    async acquire(key, overrides = {}, on = store) {
      const result = await on.tryAcquire(request(key, { ttlMs: TTL_MS, ...overrides }));
      if (result.kind !== 'acquired') {
        throw new ScenarioSetupError(`could not set up: acquiring ${key} returned ${result.kind}`);
      }
      return result.lease;
    },
    async snapshot(of = scope) {
      if (harness.snapshot) return harness.snapshot(of);
      return JSON.stringify(await store.list({ scope: of, limit: 1000 }));
    },
  };
}
