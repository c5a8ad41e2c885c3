import assert from 'node:assert/strict';
import { bytes, duplicate } from './support';
import type { ContractScenario } from './support';

/** The contract on fingerprints. */
export const fingerprintScenarios: readonly ContractScenario[] = [
  {
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
  },
  {
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
  },
];
