import assert from 'node:assert/strict';
import type { Lease } from '../../core/store';
import { delay, bytes } from './support';
import type { ContractScenario } from './support';

/** The contract on purge. */
export const purgeScenarios: readonly ContractScenario[] = [
  {
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
  },
  {
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
  },
];
