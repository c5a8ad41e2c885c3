import assert from 'node:assert/strict';
import type { Lease } from '../../core/store';
import { TTL_MS, delay, bytes, duplicate } from './support';
import type { ContractScenario } from './support';

/** The contract on reads. */
export const readScenarios: readonly ContractScenario[] = [
  {
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
  },
  {
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
  },
  {
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
  },
];
