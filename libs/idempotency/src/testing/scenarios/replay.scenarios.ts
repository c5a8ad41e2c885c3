import assert from 'node:assert/strict';
import { encodeHttpResponse, encodeValue } from '../../core/payload';
import type { Lease, StoredPayload } from '../../core/store';
import { bytes, duplicate, round } from './support';
import type { ContractScenario } from './support';

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

/** The contract on acquire, complete, replay. */
export const replayScenarios: readonly ContractScenario[] = [
  {
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
  },
  {
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
  },
  {
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
  },
  {
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
  },
  {
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
  },
];
