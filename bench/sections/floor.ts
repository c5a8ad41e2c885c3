/**
 * 1. The store against its floor: the very statements the store sends
 * (buildStatements(), imported, not retyped), sent straight through a `pg` Pool
 * of the same size with the same concurrency and parameters.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { IdempotencyEngine, TypeOrmIdempotencyStore } from 'nest-idempotency';
import { buildStatements } from '../../libs/idempotency/src/stores/typeorm/statements';
import { channelFor, recordIdOf } from '../../libs/idempotency/src/stores/typeorm/table';
import { openDataSource } from '../lib/postgres';
import { fmtRange, median, pairedRatios } from '../lib/stats';
import { alternate, measure, Throughput } from '../lib/throughput';
import {
  BenchContext,
  countingLogger,
  LEASE_MS,
  quietLogger,
  REQUEST,
  resultFor,
  ResultRow,
  SCOPE,
  SectionResult,
  TTL_MS,
  verdict,
} from './context';

const APP_STORE = 'idem-bench-store';

function floorNotes(first: number, replay: number): string[] {
  const notes = [
    `Against the floor, the store keeps ${first.toFixed(2)} of the raw SQL's rate for first executions and ${replay.toFixed(2)} for replays. Both sides send the same statements and make the same round trips, so the difference is the library's own work in Node per call (key validation and two SHA-256 digests of the key, the waiter ticket, TypeORM's query runner and the operation-timeout race on every call; the payload check and the heartbeat timer on a first execution), competing with PostgreSQL for the same cores. A first execution also waits for two commits (WAL flushes, fsync on) that cost the same on both sides, which dilutes that work; a replay is one read and no commit, so it shows more.`,
  ];
  return notes;
}
const APP_FLOOR = 'idem-bench-floor';

export async function floorSection(ctx: BenchContext): Promise<SectionResult> {
  const { config } = ctx;
  const schema = ctx.schema('bench_floor');
  const dataSource = await openDataSource(ctx.url, APP_STORE, config.pool);
  const store = new TypeOrmIdempotencyStore(dataSource, {
    schema,
    ensureSchema: true,
    logger: quietLogger,
  });
  const pool = new Pool({
    connectionString: ctx.url,
    max: config.pool,
    application_name: APP_FLOOR,
  });
  try {
    await store.init();
    const engine = new IdempotencyEngine(store, { logger: countingLogger });
    // The same table, so the same statements, byte for byte.
    const sql = buildStatements(store.tableName);
    const channel = channelFor(store.tableName);
    const run = randomBytes(3).toString('hex');
    const completed: string[] = [];
    const remember = (key: string) => {
      if (completed.length < 50_000) completed.push(key);
    };

    const storeFirst = (phase: string) => async (caller: number, i: number) => {
      const key = `${run}-s${phase}-${caller}-${i}`;
      const outcome = await engine.execute({ scope: SCOPE, key, ...REQUEST }, async () =>
        resultFor(key),
      );
      if (outcome.kind !== 'executed') throw new Error(`store: fresh key ${outcome.kind}`);
      remember(key);
    };
    const floorFirst = (phase: string) => async (caller: number, i: number) => {
      const key = `${run}-f${phase}-${caller}-${i}`;
      const id = recordIdOf(SCOPE, key);
      const leaseId = randomUUID();
      const acquired = await pool.query(sql.acquire, [
        id,
        SCOPE,
        key,
        leaseId,
        LEASE_MS,
        TTL_MS,
        null,
      ]);
      if (acquired.rows[0]?.outcome !== 'acquired')
        throw new Error('floor: fresh key not acquired');
      const done = await pool.query(sql.complete, [
        id,
        leaseId,
        JSON.stringify({ v: resultFor(key) }),
        TTL_MS,
        channel,
        id.toString('hex'),
      ]);
      if (done.rowCount !== 1) throw new Error('floor: complete refused');
      remember(key);
    };
    const pick = (caller: number, i: number) =>
      completed[(caller * 7919 + i * 31) % completed.length];
    const storeReplay = async (caller: number, i: number) => {
      const key = pick(caller, i);
      const outcome = await engine.execute({ scope: SCOPE, key, ...REQUEST }, async () => {
        throw new Error('a replay must not execute');
      });
      if (outcome.kind !== 'replayed') throw new Error(`store: completed key ${outcome.kind}`);
    };
    const floorReplay = async (caller: number, i: number) => {
      const key = pick(caller, i);
      const { rows } = await pool.query(sql.acquire, [
        recordIdOf(SCOPE, key),
        SCOPE,
        key,
        randomUUID(),
        LEASE_MS,
        TTL_MS,
        null,
      ]);
      if (rows[0]?.state !== 'COMPLETE') throw new Error('floor: completed key not replayed');
    };

    const on = (app: string, seconds = config.seconds) => ({
      seconds,
      concurrency: config.concurrency,
      app,
    });
    ctx.log('floor: first executions, warm-up');
    await measure(on(APP_STORE, config.warmupSeconds), storeFirst('warm'));
    await measure(on(APP_FLOOR, config.warmupSeconds), floorFirst('warm'));
    let phase = 0;
    const firsts = await alternate(
      config.rounds,
      {
        store: () => measure(on(APP_STORE), storeFirst(String(phase++))),
        floor: () => measure(on(APP_FLOOR), floorFirst(String(phase++))),
      },
      (round, name) => ctx.log(`floor: first executions, round ${round + 1}, ${name}`),
    );
    ctx.log('floor: replays, warm-up');
    await measure(on(APP_STORE, config.warmupSeconds), storeReplay);
    await measure(on(APP_FLOOR, config.warmupSeconds), floorReplay);
    const replays = await alternate(
      config.rounds,
      {
        store: () => measure(on(APP_STORE), storeReplay),
        floor: () => measure(on(APP_FLOOR), floorReplay),
      },
      (round, name) => ctx.log(`floor: replays, round ${round + 1}, ${name}`),
    );

    const rate = (xs: Throughput[]) => median(xs.map((x) => x.perSecond));
    const runs = (xs: Throughput[]) => xs.map((x) => x.perSecond.toFixed(0)).join(' / ');
    const ratioRow = (label: string, samples: Record<string, Throughput[]>): ResultRow => {
      const paired = pairedRatios(
        samples.store.map((x) => x.perSecond),
        samples.floor.map((x) => x.perSecond),
      );
      const ratio = paired.median;
      return {
        section: '1. Floor',
        measurement: label,
        result: `${ratio.toFixed(2)} (${rate(samples.store).toFixed(0)}/s vs ${rate(samples.floor).toFixed(0)}/s)`,
        target: '≥ 0.80',
        verdict: verdict(ratio >= 0.8),
        how: `ratio: median of the rounds' ratios ${paired.each.map((x) => x.toFixed(2)).join(' / ')}; rates: medians; store (IdempotencyEngine + TypeOrmIdempotencyStore) runs ${runs(samples.store)}; floor (same SQL through pg.Pool) runs ${runs(samples.floor)}`,
      };
    };
    const tripsRow = (label: string, samples: Record<string, Throughput[]>, target: number) => {
      const store = samples.store.map((x) => x.roundTrips);
      const floor = samples.floor.map((x) => x.roundTrips);
      return {
        section: '1. Floor',
        measurement: label,
        result: `${fmtRange(store)} (floor ${fmtRange(floor)})`,
        target: String(target),
        verdict: verdict(store.every((x) => Math.abs(x - target) < 0.005)),
        how: 'pg Client.query calls per operation on the connections of each pool, every run',
      };
    };
    return {
      rows: [
        ratioRow('First executions/s, store ÷ raw-SQL floor', firsts),
        ratioRow('Replays/s, store ÷ raw-SQL floor', replays),
        tripsRow('Round trips per first execution', firsts, 2),
        tripsRow('Round trips per replay', replays, 1),
      ],
      method: [
        `Floor: ${config.concurrency} callers, pool ${config.pool} on both sides, one table. The floor sends \`acquire\` then \`complete\` (a first execution) or \`acquire\` alone (a replay) from \`buildStatements()\`, imported from the library, with the parameters the store passes (sha256 record id, scope, key, a fresh lease UUID, lease and ttl in ms, fingerprint null; the payload JSON, the NOTIFY channel and hex id). ${config.warmupSeconds} s warm-up each, then ${config.rounds} rounds of store / floor, ${config.seconds} s each; medians.`,
      ],
      notes: floorNotes(
        pairedRatios(
          firsts.store.map((x) => x.perSecond),
          firsts.floor.map((x) => x.perSecond),
        ).median,
        pairedRatios(
          replays.store.map((x) => x.perSecond),
          replays.floor.map((x) => x.perSecond),
        ).median,
      ),
    };
  } finally {
    await store.close().catch(() => undefined);
    await pool.end().catch(() => undefined);
    await dataSource.destroy().catch(() => undefined);
  }
}
