import assert from 'node:assert/strict';
import { bytes, delay } from './support';
import type { ContractScenario } from './support';

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

/** The contract on the store's clock. */
export const clockScenarios: readonly ContractScenario[] = [
  {
    id: 'clock.store-decides',
    group: "the store's clock",
    title: () =>
      "the store's clock, not the process's, decides leases and TTLs (process clock moved ±1 h)",
    notApplicable: (harness) =>
      harness.clock === 'process'
        ? 'an in-process store keeps time by the process clock'
        : undefined,
    async run({ store, other, acquire, request }) {
      const hour = 3_600_000;
      // A holder whose clock is an hour slow, a contender whose clock is an hour fast:
      // if either clock decided, the contender would take a live lease over.
      const lease = await shiftedClock(-hour, () =>
        acquire('live', { leaseMs: 5000, ttlMs: 5000 }),
      );
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
  },
];
