import assert from 'node:assert/strict';
import { IdempotencyPayloadError } from '../../core/errors';
import type { AcquireRequest, Lease } from '../../core/store';
import { bytes, duplicate } from './support';
import type { ContractScenario } from './support';

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

/** The contract on inputs, payload size. */
export const inputScenarios: readonly ContractScenario[] = [
  {
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
  },
  {
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
      await typeError(
        () => store.list({ scope, limit: Number.NaN }),
        'limit',
        'list with limit NaN',
      );
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
  },
  {
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
  },
];
