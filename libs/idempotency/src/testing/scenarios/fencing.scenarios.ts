import assert from 'node:assert/strict';
import { delay, bytes, duplicate, leaseLost } from './support';
import type { ContractScenario } from './support';

/** The contract on fencing. */
export const fencingScenarios: readonly ContractScenario[] = [
  {
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
  },
  {
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
  },
];
