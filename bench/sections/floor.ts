/**
 * 1. The store against its floor: the very statements the store sends
 * (buildStatements(), imported, not retyped), under the names the store
 * prepares them by, sent straight through a `pg` Pool of the same size with the
 * same concurrency and parameters. A third variant sends them unnamed (as the
 * store does with `preparedStatements: false`): it shows what parsing and
 * planning each statement costs PostgreSQL.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { Pool, QueryConfig } from 'pg';
import { IdempotencyEngine } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { preparedName } from '../../libs/idempotency/src/stores/typeorm/prepared-query';
import { buildStatements } from '../../libs/idempotency/src/stores/typeorm/statements';
import { channelFor, recordIdOf } from '../../libs/idempotency/src/stores/typeorm/table';
import { CpuSplit, withCpu } from '../lib/cpu';
import { openDataSource } from '../lib/postgres';
import { fmtRange, median, pairedRatios } from '../lib/stats';
import { alternate, measure, Throughput } from '../lib/throughput';
import {
  BenchContext,
  countingLogger,
  executeFresh,
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
const APP_FLOOR = 'idem-bench-floor';
const APP_UNNAMED = 'idem-bench-floor-unnamed';

type Variant = 'store' | 'floor' | 'unnamed';
type Raw = Exclude<Variant, 'store'>;
type Run = Throughput & { cpu: CpuSplit };

export async function floorSection(ctx: BenchContext): Promise<SectionResult> {
  const { config } = ctx;
  const schema = ctx.schema('bench_floor');
  const dataSource = await openDataSource(ctx.url, APP_STORE, config.pool);
  const store = new TypeOrmIdempotencyStore(dataSource, {
    schema,
    ensureSchema: true,
    logger: quietLogger,
  });
  const pools = {
    floor: new Pool({ connectionString: ctx.url, max: config.pool, application_name: APP_FLOOR }),
    unnamed: new Pool({
      connectionString: ctx.url,
      max: config.pool,
      application_name: APP_UNNAMED,
    }),
  };
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
    /** One statement through a raw pool: named as the store sends it (prepared once per connection), or unnamed. */
    const send = (variant: Raw, operation: 'acquire' | 'complete', values: unknown[]) => {
      const text = sql[operation];
      const query: QueryConfig =
        variant === 'floor'
          ? { name: preparedName(operation, text), text, values }
          : { text, values };
      return pools[variant].query(query);
    };

    const first: Record<Variant, (tag: string) => (caller: number, i: number) => Promise<void>> = {
      store: (tag) => async (caller, i) => {
        const key = `${run}-${tag}-${caller}-${i}`;
        await executeFresh(engine, key);
        remember(key);
      },
      floor: (tag) => rawFirst('floor', tag),
      unnamed: (tag) => rawFirst('unnamed', tag),
    };
    function rawFirst(variant: Raw, tag: string) {
      return async (caller: number, i: number) => {
        const key = `${run}-${tag}-${caller}-${i}`;
        const id = recordIdOf(SCOPE, key);
        const leaseId = randomUUID();
        const acquired = await send(variant, 'acquire', [
          id,
          SCOPE,
          key,
          leaseId,
          LEASE_MS,
          TTL_MS,
          null,
        ]);
        if (acquired.rows[0]?.outcome !== 'acquired')
          throw new Error(`${variant}: fresh key not acquired`);
        const done = await send(variant, 'complete', [
          id,
          leaseId,
          JSON.stringify({ v: resultFor(key) }),
          TTL_MS,
          channel,
          id.toString('hex'),
        ]);
        if (done.rowCount !== 1) throw new Error(`${variant}: complete refused`);
        remember(key);
      };
    }
    const pick = (caller: number, i: number) =>
      completed[(caller * 7919 + i * 31) % completed.length];
    const rawReplay = (variant: Raw) => async (caller: number, i: number) => {
      const key = pick(caller, i);
      const { rows } = await send(variant, 'acquire', [
        recordIdOf(SCOPE, key),
        SCOPE,
        key,
        randomUUID(),
        LEASE_MS,
        TTL_MS,
        null,
      ]);
      if (rows[0]?.state !== 'COMPLETE') throw new Error(`${variant}: completed key not replayed`);
    };
    const replay: Record<Variant, (caller: number, i: number) => Promise<void>> = {
      store: async (caller, i) => {
        const key = pick(caller, i);
        const outcome = await engine.execute({ scope: SCOPE, key, ...REQUEST }, async () => {
          throw new Error('a replay must not execute');
        });
        if (outcome.kind !== 'replayed') throw new Error(`store: completed key ${outcome.kind}`);
      },
      floor: rawReplay('floor'),
      unnamed: rawReplay('unnamed'),
    };

    const apps: Record<Variant, string> = {
      store: APP_STORE,
      floor: APP_FLOOR,
      unnamed: APP_UNNAMED,
    };
    const variants: Variant[] = ['store', 'floor', 'unnamed'];
    let phase = 0;
    const timed = async (
      variant: Variant,
      operation: (caller: number, i: number) => Promise<void>,
      seconds = config.seconds,
    ): Promise<Run> => {
      const { value, cpu } = await withCpu(() =>
        measure({ seconds, concurrency: config.concurrency, app: apps[variant] }, operation),
      );
      return { ...value, cpu };
    };

    ctx.log('floor: first executions, warm-up');
    for (const v of variants) await timed(v, first[v](`w${v}`), config.warmupSeconds);
    const firsts = await alternate(
      config.rounds,
      Object.fromEntries(
        variants.map((v) => [v, () => timed(v, first[v](`${v}${phase++}`))]),
      ) as Record<Variant, () => Promise<Run>>,
      (round, name) => ctx.log(`floor: first executions, round ${round + 1}, ${name}`),
    );
    ctx.log('floor: replays, warm-up');
    for (const v of variants) await timed(v, replay[v], config.warmupSeconds);
    const replays = await alternate(
      config.rounds,
      Object.fromEntries(variants.map((v) => [v, () => timed(v, replay[v])])) as Record<
        Variant,
        () => Promise<Run>
      >,
      (round, name) => ctx.log(`floor: replays, round ${round + 1}, ${name}`),
    );

    const rate = (xs: Run[]) => median(xs.map((x) => x.perSecond));
    const runs = (xs: Run[]) => xs.map((x) => x.perSecond.toFixed(0)).join(' / ');
    const paired = (samples: Record<string, Run[]>, a: Variant, b: Variant) =>
      pairedRatios(
        samples[a].map((x) => x.perSecond),
        samples[b].map((x) => x.perSecond),
      );
    const ratioRow = (label: string, samples: Record<string, Run[]>): ResultRow => {
      const ratio = paired(samples, 'store', 'floor');
      return {
        section: '1. Floor',
        measurement: label,
        result: `${ratio.median.toFixed(2)} (${rate(samples.store).toFixed(0)}/s vs ${rate(samples.floor).toFixed(0)}/s)`,
        target: '≥ 0.80',
        verdict: verdict(ratio.median >= 0.8),
        how: `ratio: median of the rounds' ratios ${ratio.each.map((x) => x.toFixed(2)).join(' / ')}; rates: medians; store (IdempotencyEngine + TypeOrmIdempotencyStore) runs ${runs(samples.store)}; floor (same SQL, same statement names, through pg.Pool) runs ${runs(samples.floor)}`,
      };
    };
    const tripsRow = (label: string, samples: Record<string, Run[]>, target: number) => {
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
    const perOp = (xs: Run[]) => ({
      node: median(xs.map((x) => x.cpu.nodeUs / x.operations)),
      pg: xs.every((x) => x.cpu.othersUs !== undefined)
        ? median(xs.map((x) => x.cpu.othersUs! / x.operations))
        : undefined,
    });
    const cpuText = (samples: Record<string, Run[]>, v: Variant) => {
      const c = perOp(samples[v]);
      return `${c.node.toFixed(0)} + ${c.pg === undefined ? '?' : c.pg.toFixed(0)} µs`;
    };
    const cpuRow = (label: string, samples: Record<string, Run[]>): ResultRow => ({
      section: '1. Floor',
      measurement: label,
      result: `store ${cpuText(samples, 'store')}; floor ${cpuText(samples, 'floor')}`,
      target: '',
      verdict: '',
      how: `Node (this process) + PostgreSQL (the embedded server's processes), CPU microseconds per operation, medians of the runs; the same statements unnamed: ${cpuText(samples, 'unnamed')}`,
    });
    const unnamedRow = (label: string, samples: Record<string, Run[]>): ResultRow => {
      const ratio = paired(samples, 'unnamed', 'floor');
      return {
        section: '1. Floor',
        measurement: label,
        result: `${ratio.median.toFixed(2)} (${rate(samples.unnamed).toFixed(0)}/s)`,
        target: '',
        verdict: '',
        how: `the floor's statements sent unnamed (PostgreSQL parses and plans every one), as the store sends them with preparedStatements: false: rounds' ratios to the floor ${ratio.each.map((x) => x.toFixed(2)).join(' / ')}; runs ${runs(samples.unnamed)}`,
      };
    };
    const ratios = {
      first: paired(firsts, 'store', 'floor').median,
      replay: paired(replays, 'store', 'floor').median,
      unnamedFirst: paired(firsts, 'unnamed', 'floor').median,
      unnamedReplay: paired(replays, 'unnamed', 'floor').median,
    };
    return {
      rows: [
        ratioRow('First executions/s, store ÷ raw-SQL floor', firsts),
        ratioRow('Replays/s, store ÷ raw-SQL floor', replays),
        tripsRow('Round trips per first execution', firsts, 2),
        tripsRow('Round trips per replay', replays, 1),
        cpuRow('CPU per first execution, Node + PostgreSQL', firsts),
        cpuRow('CPU per replay, Node + PostgreSQL', replays),
        unnamedRow('First executions/s, unnamed statements ÷ floor', firsts),
        unnamedRow('Replays/s, unnamed statements ÷ floor', replays),
      ],
      method: [
        `Floor: ${config.concurrency} callers, pool ${config.pool} on every side, one table. The floor sends \`acquire\` then \`complete\` (a first execution) or \`acquire\` alone (a replay) from \`buildStatements()\`, imported from the library, with the parameters the store passes (sha256 record id, scope, key, a fresh lease UUID, lease and ttl in ms, fingerprint null; the payload JSON, the NOTIFY channel and hex id), named as the store names them (\`preparedName()\`, imported), so each connection prepares them once. A third variant sends the same statements unnamed, so PostgreSQL parses and plans each one, as with \`preparedStatements: false\`. ${config.warmupSeconds} s warm-up each, then ${config.rounds} rounds of store / floor / unnamed, ${config.seconds} s each. CPU per operation: this process's \`process.cpuUsage()\`, and the embedded PostgreSQL's processes from /proc (utime + stime of the benchmark's process tree minus this process).`,
      ],
      notes: floorNotes(
        ratios,
        { first: perOp(firsts.store), replay: perOp(replays.store) },
        { first: perOp(firsts.floor), replay: perOp(replays.floor) },
        { first: perOp(firsts.unnamed), replay: perOp(replays.unnamed) },
        Buffer.byteLength(sql.acquire),
        { storeReplay: rate(replays.store), floorReplay: rate(replays.floor) },
      ),
    };
  } finally {
    await store.close().catch(() => undefined);
    await Promise.all(Object.values(pools).map((p) => p.end().catch(() => undefined)));
    await dataSource.destroy().catch(() => undefined);
  }
}

type PerOp = { node: number; pg?: number };

function floorNotes(
  r: { first: number; replay: number; unnamedFirst: number; unnamedReplay: number },
  store: { first: PerOp; replay: PerOp },
  floor: { first: PerOp; replay: PerOp },
  unnamed: { first: PerOp; replay: PerOp },
  acquireBytes: number,
  rates: { storeReplay: number; floorReplay: number },
): string[] {
  const us = (x?: number) => (x === undefined ? '?' : `${x.toFixed(0)} µs`);
  const total = (x: PerOp) => (x.pg === undefined ? undefined : x.node + x.pg);
  const missed = [
    ...(r.first < 0.8 ? [`first executions (${r.first.toFixed(2)})`] : []),
    ...(r.replay < 0.8 ? [`replays (${r.replay.toFixed(2)})`] : []),
  ];
  const cores = (x: PerOp, perSecond: number) => {
    const t = total(x);
    return t === undefined ? '?' : ((t * perSecond) / 1e6).toFixed(2);
  };
  return [
    `Against the floor, the store keeps ${r.first.toFixed(2)} of the raw SQL's rate for first executions and ${r.replay.toFixed(2)} for replays${missed.length ? `; under the 0.80 target: ${missed.join(', ')}` : ''}. Both send the same named statements with the same round trips; PostgreSQL spends about the same on either (per replay ${us(store.replay.pg)} for the store, ${us(floor.replay.pg)} for the floor; per first execution ${us(store.first.pg)} and ${us(floor.first.pg)}). The difference is on the Node side: per replay ${us(store.replay.node)} in the store against ${us(floor.replay.node)} in the floor, per first execution ${us(store.first.node)} against ${us(floor.first.node)}. That extra work is the engine's validation of the request, the store's SHA-256 record id, a waiter ticket, the pool checkout with its error listener, the DataSource logger call and the operation-timeout race; on a first execution also the key's digest for the engine's messages, the payload check and the heartbeat timer. During replays Node and PostgreSQL together kept ${cores(store.replay, rates.storeReplay)} cores busy for the store and ${cores(floor.replay, rates.floorReplay)} for the floor.`,
    `Prepared statements are what the floor is made of: sent unnamed (as with \`preparedStatements: false\`), PostgreSQL parses and plans every statement, \`acquire\` alone being ${(acquireBytes / 1024).toFixed(1)} KiB of SQL, and the same SQL ran at ${r.unnamedReplay.toFixed(2)} of the floor's rate for replays and ${r.unnamedFirst.toFixed(2)} for first executions; PostgreSQL's CPU per replay was ${us(unnamed.replay.pg)} unnamed against ${us(floor.replay.pg)} named, per first execution ${us(unnamed.first.pg)} against ${us(floor.first.pg)}.`,
  ];
}
