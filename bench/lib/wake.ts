import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Pool } from 'pg';
import { encodeValue, IdempotencyEngine, parseDuration } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { queriesOf } from './driver-count';
import { sleep, until } from './stats';

export const WAKE_REQUEST = { lease: '30s', waitTimeout: '10s', ttl: '24h' } as const;
/** WAKE_REQUEST's lease and ttl in milliseconds, for calls straight to the store. */
export const LEASE_MS = parseDuration(WAKE_REQUEST.lease, 'lease');
export const TTL_MS = parseDuration(WAKE_REQUEST.ttl, 'ttl');

export interface WakeTrial {
  /** From the clock's start to the waiting duplicate's answer. */
  wakeMs: number;
  /** From the clock's start to the holder's complete() returning. */
  completeMs: number;
  /** Round trips the waiter's instance made for the duplicate. */
  waiterRoundTrips: number;
  /** Whether the record was marked `watched` (by the waiter's own acquire), if checked. */
  watched?: boolean;
}

/** Who holds the key and who waits: the waiter may be on the holder's instance or another. */
export interface WakeSetup {
  scope: string;
  holderStore: TypeOrmIdempotencyStore;
  holderApp: string;
  waiterEngine: IdempotencyEngine;
  waiterApp: string;
  waiterPool: Pool;
  /**
   * Reads the record's `watched` flag after the trial (through a connection that
   * is not counted): the waiter must have marked it in its own acquire, or the
   * holder's complete would not have notified.
   */
  watchedOf?: (scope: string, key: string) => Promise<boolean>;
}

/**
 * The holder holds a key through the store; a duplicate waits through
 * `waiterEngine`; the clock starts just before the holder's complete() and
 * stops when the waiter's execute() resolves with the replay.
 */
export async function wakeTrial(setup: WakeSetup, key: string): Promise<WakeTrial> {
  const { scope, holderStore, holderApp, waiterEngine, waiterApp, waiterPool } = setup;
  const id = { scope, key };
  const held = await holderStore.tryAcquire({
    ...id,
    leaseMs: LEASE_MS,
    waitTimeoutMs: 0,
    ttlMs: TTL_MS,
    fingerprint: null,
  });
  if (held.kind !== 'acquired') throw new Error(`holder got ${held.kind}`);
  const queriesBefore = queriesOf(waiterApp);
  let resolvedAt = 0;
  const waiter = waiterEngine
    .execute({ ...id, ...WAKE_REQUEST }, async () => {
      throw new Error('the waiting duplicate must not execute');
    })
    .then((outcome) => {
      resolvedAt = performance.now();
      return outcome;
    });
  // Parked: it has looked once and handed its connection back.
  await until(
    () => queriesOf(waiterApp) > queriesBefore && waiterPool.idleCount === waiterPool.totalCount,
    'the waiter to park',
  );
  await sleep(2);
  const queriesParked = queriesOf(waiterApp);
  const t0 = performance.now();
  await holderStore.complete(held.lease, encodeValue({ status: 201, body: { id: key } }));
  const completedAt = performance.now();
  const outcome = await waiter;
  if (outcome.kind !== 'replayed') throw new Error(`waiter got ${outcome.kind}`);
  const waiterQueries = queriesOf(waiterApp) - queriesBefore;
  const completeQueries = waiterApp === holderApp ? 1 : 0; // the holder's complete, same counter
  if (queriesOf(waiterApp) - queriesParked - completeQueries < 1)
    throw new Error('the waiter resolved without looking again');
  return {
    wakeMs: resolvedAt - t0,
    completeMs: completedAt - t0,
    waiterRoundTrips: waiterQueries - completeQueries,
    watched: await setup.watchedOf?.(scope, key),
  };
}

/**
 * The holder runs an action of `actionMs` through the engine; a duplicate
 * arrives while it runs and waits. The clock starts when the holder's action
 * returns (the engine then completes the record: one round trip) and stops
 * when the duplicate's execute() resolves with the replay.
 */
export async function wakeAfterActionTrial(
  setup: Omit<WakeSetup, 'holderStore' | 'waiterPool'> & {
    holderEngine: IdempotencyEngine;
    actionMs: number;
  },
  key: string,
): Promise<WakeTrial> {
  const { scope, holderEngine, holderApp, waiterEngine, waiterApp, actionMs } = setup;
  const id = { scope, key };
  let actionStarted!: () => void;
  const started = new Promise<void>((resolve) => (actionStarted = resolve));
  let actionEndedAt = 0;
  let holderDoneAt = 0;
  let waiterQueriesAtEnd = 0;
  let waiterQueriesBefore = 0;
  const holder = holderEngine
    .execute({ ...id, ...WAKE_REQUEST }, async () => {
      actionStarted();
      await sleep(actionMs);
      waiterQueriesAtEnd = queriesOf(waiterApp);
      actionEndedAt = performance.now();
      return { status: 201, body: { id: key } };
    })
    .then((outcome) => {
      holderDoneAt = performance.now();
      return outcome;
    });
  await started;
  waiterQueriesBefore = queriesOf(waiterApp);
  const waiter = waiterEngine
    .execute({ ...id, ...WAKE_REQUEST }, async () => {
      throw new Error('the waiting duplicate must not execute');
    })
    .then((outcome) => ({ outcome, at: performance.now() }));
  const [held, waited] = await Promise.all([holder, waiter]);
  if (held.kind !== 'executed') throw new Error(`holder got ${held.kind}`);
  if (waited.outcome.kind !== 'replayed') throw new Error(`waiter got ${waited.outcome.kind}`);
  // The holder makes no query while its action runs (the heartbeat is at lease / 2),
  // so every query counted in that window is the waiter's first look.
  if (waiterQueriesAtEnd <= waiterQueriesBefore)
    throw new Error('the duplicate had not looked before the action ended');
  const completeQueries = waiterApp === holderApp ? 1 : 0;
  return {
    wakeMs: waited.at - actionEndedAt,
    completeMs: holderDoneAt - actionEndedAt,
    waiterRoundTrips: queriesOf(waiterApp) - waiterQueriesBefore - completeQueries,
    watched: await setup.watchedOf?.(scope, key),
  };
}

export type WakeAfterActionSetup = Parameters<typeof wakeAfterActionTrial>[0];

/**
 * Three warm-up trials per placement, then `trials` per placement, the
 * duplicate on the holder's instance and on another in turn, one at a time.
 */
export async function alternatingWakeTrials(
  placements: { same: WakeAfterActionSetup; other: WakeAfterActionSetup },
  trials: number,
  log: (line: string) => void,
): Promise<Record<'same' | 'other', WakeTrial[]>> {
  const run = randomBytes(3).toString('hex');
  log('warm-up');
  for (let t = 0; t < 3; t++) {
    await wakeAfterActionTrial(placements.same, `${run}-warm-a-${t}`);
    await wakeAfterActionTrial(placements.other, `${run}-warm-b-${t}`);
  }
  const out: Record<'same' | 'other', WakeTrial[]> = { same: [], other: [] };
  for (let t = 0; t < trials; t++) {
    if (t % 20 === 0) log(`trials ${t + 1}–${Math.min(t + 20, trials)}`);
    out.same.push(await wakeAfterActionTrial(placements.same, `${run}-a-${t}`));
    out.other.push(await wakeAfterActionTrial(placements.other, `${run}-b-${t}`));
  }
  return out;
}
