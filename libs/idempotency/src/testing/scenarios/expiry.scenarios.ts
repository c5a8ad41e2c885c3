import assert from 'node:assert/strict';
import type { Lease } from '../../core/store';
import { delay, bytes, round } from './support';
import type { ContractScenario } from './support';

/** The contract on release and expiry. */
export const expiryScenarios: readonly ContractScenario[] = [
  {
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
  },
  {
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
  },
  {
    id: 'steal.expired-lease',
    group: 'release and expiry',
    title: () => 'lets the next caller steal an expired lease, with a new lease id',
    async run({ other, acquire, request }) {
      const leaseMs = 300;
      const first = await acquire('k', { leaseMs });
      const acquiredAt = performance.now();
      const early = await other.tryAcquire(request('k'));
      assert.equal(
        early.kind,
        'in-flight',
        `a contender got ${early.kind} while the lease was live`,
      );
      await delay(leaseMs + 150);
      const late = await other.tryAcquire(request('k'));
      assert.equal(late.kind, 'acquired', `a contender got ${late.kind} after the lease ran out`);
      assert.notEqual((late as { lease: Lease }).lease.leaseId, first.leaseId);
      return `refused while live; taken over ${round(performance.now() - acquiredAt)} ms after a ${leaseMs} ms lease began`;
    },
  },
  {
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
  },
];
