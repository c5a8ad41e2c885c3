/**
 * 1. The store against the database's floor: the MINIMUM SQL that does the
 * job, not the store's own SQL. A first execution at the floor is one prepared
 * `INSERT … ON CONFLICT DO NOTHING` and one prepared fenced `UPDATE` (no CTE,
 * no NOTIFY); a replay is one prepared `SELECT` by primary key. Both go
 * straight through a `pg` Pool of the same size, at the same concurrency, on
 * the same table.
 *
 * A third variant (BENCH_FLOOR_VARIANTS, default `store,floor,store-sql`)
 * sends the store's own statements (buildStatements(), imported, under the
 * names the store prepares them by) through a raw pool: it splits the gap to
 * the floor into what the store's SQL costs PostgreSQL and what the library
 * costs in Node. `unnamed-sql` sends those statements unnamed, as the store
 * does with `preparedStatements: false`.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { Client, Pool, QueryConfig } from 'pg';
import { IdempotencyEngine } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { preparedName } from '../../libs/idempotency/src/stores/sql/postgres/query';
import { buildStatements } from '../../libs/idempotency/src/stores/sql/postgres/statements';
import {
  channelFor,
  qualified,
  recordIdOf,
  TableName,
} from '../../libs/idempotency/src/stores/sql/table';
import { CpuSplit, withCpu } from '../lib/cpu';
import { backendPids, openDataSource } from '../lib/postgres';
import { fmtRange, median, pairedRatios, sleep } from '../lib/stats';
import { alternate, measure, Throughput } from '../lib/throughput';
import {
  BenchContext,
  countingLogger,
  executeFresh,
  LEASE_MS,
  quietLogger,
  replayCompleted,
  resultFor,
  ResultRow,
  SCOPE,
  SectionResult,
  TTL_MS,
  verdict,
} from './context';

const APPS = {
  store: 'idem-bench-store',
  floor: 'idem-bench-floor',
  'store-sql': 'idem-bench-store-sql',
  'unnamed-sql': 'idem-bench-store-sql-unnamed',
} as const;

type Variant = keyof typeof APPS;
type Raw = Exclude<Variant, 'store'>;
type Run = Throughput & { cpu: CpuSplit };

/** Targets from the issue: the store's rate ÷ the floor's, median of the rounds' ratios. */
const TARGETS = { first: 0.85, replay: 0.9 };

const LABELS: Record<Variant, string> = {
  store: 'store (IdempotencyEngine.run + TypeOrmIdempotencyStore)',
  floor: 'floor (minimum SQL through pg.Pool)',
  'store-sql': "the store's own statements, named, through pg.Pool",
  'unnamed-sql': "the store's own statements, unnamed, through pg.Pool",
};

/** The minimum SQL: what any implementation of the same contract has to send. */
export function floorStatements(name: TableName) {
  const t = qualified(name);
  const ms = (p: string) => `(${p}::double precision * interval '1 millisecond')`;
  return {
    /** $1 id, $2 scope, $3 key, $4 lease id, $5 lease ms, $6 ttl ms, $7 fingerprint. */
    insert: `INSERT INTO ${t} (id, scope, "key", state, lease_id, lease_expires_at, expires_at, fingerprint, created_at)
      VALUES ($1, $2, $3, 'IN_PROGRESS', $4, now() + ${ms('$5')}, now() + ${ms('$6')}, $7, now())
      ON CONFLICT (id) DO NOTHING`,
    /** $1 id, $2 lease id, $3 payload, $4 ttl ms: fenced by the lease id. */
    complete: `UPDATE ${t} SET state = 'COMPLETE', payload = $3, completed_at = now(),
        expires_at = now() + ${ms('$4')}, lease_id = NULL, lease_expires_at = NULL
      WHERE id = $1 AND lease_id = $2 AND state = 'IN_PROGRESS'`,
    /** $1 id. */
    select: `SELECT state, fingerprint, payload, completed_at, expires_at, lease_expires_at
      FROM ${t} WHERE id = $1`,
  };
}

function variantsFromEnv(): Variant[] {
  const raw = (process.env.BENCH_FLOOR_VARIANTS ?? 'store,floor,store-sql')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const v of raw)
    if (!(v in APPS)) throw new Error(`BENCH_FLOOR_VARIANTS: unknown variant "${v}"`);
  const set = new Set<Variant>(['store', 'floor', ...(raw as Variant[])]);
  return [...set];
}

/** Counts notifications on a channel; `settle()` waits until everything sent so far has arrived. */
async function channelSpy(url: string, channel: string) {
  const client = new Client({ connectionString: url, application_name: 'idem-bench-spy' });
  await client.connect();
  let count = 0;
  const markers = new Set<string>();
  client.on('notification', (n) => {
    if (n.payload?.startsWith('bench-marker-')) markers.add(n.payload);
    else count++;
  });
  await client.query(`LISTEN "${channel}"`);
  return {
    get count() {
      return count;
    },
    /** Notifications arrive in commit order: once our marker is in, every earlier one is. */
    async settle(): Promise<void> {
      const marker = `bench-marker-${randomUUID()}`;
      await client.query('SELECT pg_notify($1, $2)', [channel, marker]);
      const deadline = Date.now() + 5000;
      while (!markers.has(marker)) {
        if (Date.now() > deadline) throw new Error('the marker notification never came');
        await sleep(1);
      }
    },
    close: () => client.end(),
  };
}

export async function floorSection(ctx: BenchContext): Promise<SectionResult> {
  const { config } = ctx;
  const variants = variantsFromEnv();
  const schema = ctx.schema('bench_floor');
  const dataSource = await openDataSource(ctx.url, APPS.store, config.pool, true);
  const store = new TypeOrmIdempotencyStore(dataSource, {
    schema,
    ensureSchema: true,
    logger: quietLogger,
  });
  const pools: Partial<Record<Raw, Pool>> = {};
  for (const v of variants) {
    if (v === 'store') continue;
    pools[v] = new Pool({
      connectionString: ctx.url,
      max: config.pool,
      application_name: APPS[v],
      idleTimeoutMillis: 0,
    });
  }
  let spy: Awaited<ReturnType<typeof channelSpy>> | undefined;
  try {
    await store.init();
    const engine = new IdempotencyEngine(store, { logger: countingLogger });
    const floorSql = floorStatements(store.tableName);
    // The same table, so the store's statements byte for byte.
    const storeSql = buildStatements(store.tableName);
    const channel = channelFor(store.tableName);
    spy = await channelSpy(ctx.url, channel);
    const names = {
      insert: preparedName('bench_floor_insert', floorSql.insert),
      complete: preparedName('bench_floor_complete', floorSql.complete),
      select: preparedName('bench_floor_select', floorSql.select),
      storeInsert: preparedName('insert', storeSql.insert),
      peek: preparedName('peek', storeSql.peek),
      storeComplete: preparedName('complete', storeSql.complete),
    };
    const run = randomBytes(3).toString('hex');
    const completed: string[] = [];
    const remember = (key: string) => {
      if (completed.length < 50_000) completed.push(key);
    };
    const send = (variant: Raw, name: string, text: string, values: unknown[]) => {
      const query: QueryConfig =
        variant === 'unnamed-sql' ? { text, values } : { name, text, values };
      return pools[variant]!.query(query);
    };
    /** The payload as the engine stores it (encodeValue: 'v' + JSON), without its checks. */
    const payloadOf = (key: string) => Buffer.from(`v${JSON.stringify(resultFor(key))}`, 'utf8');

    const rawFirst = (variant: Raw, tag: string) => async (caller: number, i: number) => {
      const key = `${run}-${tag}-${caller}-${i}`;
      const id = recordIdOf(SCOPE, key);
      const leaseId = randomUUID();
      if (variant === 'floor') {
        const inserted = await send(variant, names.insert, floorSql.insert, [
          id,
          SCOPE,
          key,
          leaseId,
          LEASE_MS,
          TTL_MS,
          null,
        ]);
        if (inserted.rowCount !== 1) throw new Error('floor: fresh key not inserted');
        const done = await send(variant, names.complete, floorSql.complete, [
          id,
          leaseId,
          payloadOf(key),
          TTL_MS,
        ]);
        if (done.rowCount !== 1) throw new Error('floor: complete refused');
      } else {
        // As the store sends them on a fresh key once the scope's traffic is mostly fresh
        // keys: the insert first, then the completion (which notifies only when watched).
        const inserted = await send(variant, names.storeInsert, storeSql.insert, [
          id,
          SCOPE,
          key,
          leaseId,
          LEASE_MS,
          TTL_MS,
          null,
        ]);
        if (inserted.rowCount !== 1) throw new Error(`${variant}: fresh key not inserted`);
        const done = await send(variant, names.storeComplete, storeSql.complete, [
          id,
          leaseId,
          payloadOf(key),
          TTL_MS,
        ]);
        if (done.rows.length !== 1) throw new Error(`${variant}: complete refused`);
      }
      remember(key);
    };
    const first: Record<Variant, (tag: string) => (caller: number, i: number) => Promise<void>> = {
      store: (tag) => async (caller, i) => {
        const key = `${run}-${tag}-${caller}-${i}`;
        await executeFresh(engine, key);
        remember(key);
      },
      floor: (tag) => rawFirst('floor', tag),
      'store-sql': (tag) => rawFirst('store-sql', tag),
      'unnamed-sql': (tag) => rawFirst('unnamed-sql', tag),
    };

    const pick = (caller: number, i: number) =>
      completed[(caller * 7919 + i * 31) % completed.length];
    const rawReplay = (variant: Raw) => async (caller: number, i: number) => {
      const key = pick(caller, i);
      const id = recordIdOf(SCOPE, key);
      const { rows } =
        variant === 'floor'
          ? await send(variant, names.select, floorSql.select, [id])
          : // As the store sends it once the scope's traffic is mostly replays: the peek alone.
            await send(variant, names.peek, storeSql.peek, [id]);
      if (rows[0]?.state !== 'COMPLETE') throw new Error(`${variant}: completed key not replayed`);
    };
    const replay: Record<Variant, (caller: number, i: number) => Promise<void>> = {
      store: (caller, i) => replayCompleted(engine, pick(caller, i)),
      floor: rawReplay('floor'),
      'store-sql': rawReplay('store-sql'),
      'unnamed-sql': rawReplay('unnamed-sql'),
    };

    let phase = 0;
    const timed = async (
      variant: Variant,
      operation: (caller: number, i: number) => Promise<void>,
      seconds = config.seconds,
    ): Promise<Run> => {
      const { value, cpu } = await withCpu(
        () => measure({ seconds, concurrency: config.concurrency, app: APPS[variant] }, operation),
        () => backendPids(ctx.admin, APPS[variant]),
      );
      return { ...value, cpu };
    };

    ctx.log(`floor: variants ${variants.join(', ')}; first executions, warm-up`);
    for (const v of variants) await timed(v, first[v](`w${v}`), config.warmupSeconds);
    const firsts = (await alternate(
      config.rounds,
      Object.fromEntries(variants.map((v) => [v, () => timed(v, first[v](`${v}${phase++}`))])),
      (round, name) => ctx.log(`floor: first executions, round ${round + 1}, ${name}`),
    )) as Record<Variant, Run[]>;
    await spy.settle();
    const notifiedFirst = spy.count;
    ctx.log('floor: replays, warm-up');
    for (const v of variants) await timed(v, replay[v], config.warmupSeconds);
    const replays = (await alternate(
      config.rounds,
      Object.fromEntries(variants.map((v) => [v, () => timed(v, replay[v])])),
      (round, name) => ctx.log(`floor: replays, round ${round + 1}, ${name}`),
    )) as Record<Variant, Run[]>;
    await spy.settle();
    const notified = spy.count;

    const rate = (xs: Run[]) => median(xs.map((x) => x.perSecond));
    const runs = (xs: Run[]) => xs.map((x) => x.perSecond.toFixed(0)).join(' / ');
    const paired = (samples: Record<Variant, Run[]>, a: Variant, b: Variant) =>
      pairedRatios(
        samples[a].map((x) => x.perSecond),
        samples[b].map((x) => x.perSecond),
      );
    const ratioRow = (
      label: string,
      samples: Record<Variant, Run[]>,
      target: number,
    ): ResultRow => {
      const ratio = paired(samples, 'store', 'floor');
      return {
        section: '1. Floor',
        measurement: label,
        result: `${ratio.median.toFixed(2)} (${rate(samples.store).toFixed(0)}/s vs ${rate(samples.floor).toFixed(0)}/s)`,
        target: `≥ ${target.toFixed(2)}`,
        verdict: verdict(ratio.median >= target),
        how: `ratio: median of the rounds' ratios ${ratio.each.map((x) => x.toFixed(2)).join(' / ')}; rates: medians; ${LABELS.store} runs ${runs(samples.store)}; ${LABELS.floor} runs ${runs(samples.floor)}`,
      };
    };
    const tripsRow = (label: string, samples: Record<Variant, Run[]>, target: number) => {
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
    const perOp = (xs: Run[]) => {
      const of = (f: (c: CpuSplit) => number | undefined) =>
        xs.every((x) => f(x.cpu) !== undefined)
          ? median(xs.map((x) => f(x.cpu)! / x.operations))
          : undefined;
      return {
        node: of((c) => c.nodeUs)!,
        backends: of((c) => c.backendsUs),
        server: ctx.external ? undefined : of((c) => c.othersUs),
      };
    };
    const us = (x?: number) => (x === undefined ? '?' : `${x.toFixed(0)} µs`);
    const cpuRow = (label: string, samples: Record<Variant, Run[]>): ResultRow => {
      const s = perOp(samples.store);
      const f = perOp(samples.floor);
      const others = variants
        .filter((v) => v !== 'store' && v !== 'floor')
        .map((v) => {
          const c = perOp(samples[v]);
          return `${LABELS[v]}: PostgreSQL ${us(c.backends)} (server ${us(c.server)}), Node ${us(c.node)}`;
        });
      return {
        section: '1. Floor',
        measurement: label,
        result: `store ${us(s.backends)}; floor ${us(f.backends)}${s.backends && f.backends ? ` (${(s.backends / f.backends).toFixed(2)}×)` : ''}`,
        target: '',
        verdict: '',
        how: `PostgreSQL CPU per operation: the backends serving each pool's connections (pg_stat_activity pids, /proc utime + stime), medians of the runs${ctx.external ? '' : `; the whole embedded server (every process under this one, minus this process): store ${us(s.server)}, floor ${us(f.server)}`}; Node (this process): store ${us(s.node)}, floor ${us(f.node)}${others.length ? `; ${others.join('; ')}` : ''}`,
      };
    };
    const diagnosticRow = (
      label: string,
      samples: Record<Variant, Run[]>,
      v: Variant,
    ): ResultRow => {
      const toFloor = paired(samples, v, 'floor');
      const storeTo = paired(samples, 'store', v);
      return {
        section: '1. Floor',
        measurement: label,
        result: `${toFloor.median.toFixed(2)} (${rate(samples[v]).toFixed(0)}/s)`,
        target: '',
        verdict: '',
        how: `${LABELS[v]} ÷ floor, rounds' ratios ${toFloor.each.map((x) => x.toFixed(2)).join(' / ')}; the store ÷ this variant (the library's cost in Node on the same SQL): ${storeTo.median.toFixed(2)} (${storeTo.each.map((x) => x.toFixed(2)).join(' / ')}); runs ${runs(samples[v])}`,
      };
    };
    const extra = variants.filter((v) => v !== 'store' && v !== 'floor');
    const ratios = {
      first: paired(firsts, 'store', 'floor'),
      replay: paired(replays, 'store', 'floor'),
    };
    return {
      rows: [
        ratioRow('First executions/s, store ÷ minimum-SQL floor', firsts, TARGETS.first),
        ratioRow('Replays/s, store ÷ minimum-SQL floor', replays, TARGETS.replay),
        tripsRow('Round trips per first execution', firsts, 2),
        tripsRow('Round trips per replay', replays, 1),
        cpuRow('PostgreSQL CPU per first execution', firsts),
        cpuRow('PostgreSQL CPU per replay', replays),
        {
          section: '1. Floor',
          measurement: 'NOTIFY sent with nobody waiting',
          result: String(notified),
          target: '0',
          verdict: verdict(notified === 0),
          how: `notifications on the store's channel during the section (first executions ${notifiedFirst}, replays ${notified - notifiedFirst}), seen by a separate LISTEN connection; only a record a waiter marked watched may notify`,
        },
        ...extra.flatMap((v) => [
          diagnosticRow(`First executions/s, ${LABELS[v]} ÷ floor`, firsts, v),
          diagnosticRow(`Replays/s, ${LABELS[v]} ÷ floor`, replays, v),
        ]),
      ],
      method: [
        `Floor: ${config.concurrency} callers, pool ${config.pool} on every side (connections kept open), one table. The floor is the minimum SQL, not the store's: a first execution is one prepared \`INSERT … ON CONFLICT (id) DO NOTHING\` (the new IN_PROGRESS record) and one prepared \`UPDATE … WHERE id = $1 AND lease_id = $2 AND state = 'IN_PROGRESS'\` (the fenced completion storing the payload), with no CTE and no NOTIFY; a replay is one prepared \`SELECT\` of the record's columns by primary key. The floor computes the same sha256 record id, a fresh lease UUID and the same payload bytes as the store. The store runs through \`IdempotencyEngine.run\` with a policy compiled once (lease 30 s, waitTimeout 10 s, ttl 24 h). ${extra.length ? `Diagnostic variants: ${extra.map((v) => LABELS[v]).join('; ')}, sending the statements the store sends on its settled path: \`insert\` and \`complete\` for a fresh key, \`peek\` for a replay (the store tries the insert or the peek first by what the scope's recent acquisitions found, so after the warm-up these are its only statements). ` : ''}${config.warmupSeconds} s warm-up each, then ${config.rounds} rounds of ${variants.join(' / ')}, ${config.seconds} s each; a ratio is the median of the rounds' ratios (store ÷ floor in the same round). PostgreSQL CPU per operation: the server backends of each pool's connections, found by application_name in \`pg_stat_activity\`, utime + stime from /proc before and after each run${ctx.external ? '' : ', and the whole embedded server (the benchmark process tree minus this process)'}; Node: \`process.cpuUsage()\`.`,
      ],
      notes: floorNotes({
        variants,
        ratios: { first: ratios.first.median, replay: ratios.replay.median },
        storeSql: extra.includes('store-sql')
          ? {
              first: paired(firsts, 'store-sql', 'floor').median,
              replay: paired(replays, 'store-sql', 'floor').median,
              storeFirst: paired(firsts, 'store', 'store-sql').median,
              storeReplay: paired(replays, 'store', 'store-sql').median,
            }
          : undefined,
        cpu: Object.fromEntries(
          variants.map((v) => [v, { first: perOp(firsts[v]), replay: perOp(replays[v]) }]),
        ) as Record<Variant, { first: PerOp; replay: PerOp }>,
      }),
    };
  } finally {
    await spy?.close().catch(() => undefined);
    await store.close().catch(() => undefined);
    await Promise.all(Object.values(pools).map((p) => p.end().catch(() => undefined)));
    await dataSource.destroy().catch(() => undefined);
  }
}

type PerOp = { node: number; backends?: number; server?: number };

function floorNotes(x: {
  variants: Variant[];
  ratios: { first: number; replay: number };
  storeSql?: { first: number; replay: number; storeFirst: number; storeReplay: number };
  cpu: Record<Variant, { first: PerOp; replay: PerOp }>;
}): string[] {
  const us = (v?: number) => (v === undefined ? '?' : `${v.toFixed(0)} µs`);
  const missed = [
    ...(x.ratios.first < TARGETS.first
      ? [`first executions ${x.ratios.first.toFixed(2)} (target ${TARGETS.first})`]
      : []),
    ...(x.ratios.replay < TARGETS.replay
      ? [`replays ${x.ratios.replay.toFixed(2)} (target ${TARGETS.replay})`]
      : []),
  ];
  const { store, floor } = x.cpu;
  const notes = [
    `Against the minimum-SQL floor the store keeps ${x.ratios.first.toFixed(2)} of the rate for first executions and ${x.ratios.replay.toFixed(2)} for replays${missed.length ? `; under target: ${missed.join(', ')}` : ' (both targets met)'}. PostgreSQL's CPU per first execution: ${us(store.first.backends)} for the store, ${us(floor.first.backends)} at the floor; per replay ${us(store.replay.backends)} against ${us(floor.replay.backends)}. Node's CPU per first execution ${us(store.first.node)} against ${us(floor.first.node)}, per replay ${us(store.replay.node)} against ${us(floor.replay.node)}.`,
  ];
  if (x.storeSql) {
    const sql = x.cpu['store-sql'];
    notes.push(
      `Where the gap is: the store's own statements sent straight through \`pg\` run at ${x.storeSql.first.toFixed(2)} of the floor for first executions and ${x.storeSql.replay.toFixed(2)} for replays (PostgreSQL CPU ${us(sql.first.backends)} and ${us(sql.replay.backends)} per operation), and the store runs at ${x.storeSql.storeFirst.toFixed(2)} and ${x.storeSql.storeReplay.toFixed(2)} of its own SQL sent that way (Node CPU ${us(store.first.node)} against ${us(sql.first.node)} per first execution, ${us(store.replay.node)} against ${us(sql.replay.node)} per replay). The first split is the SQL (the store's insert, completion and peek against the floor's: RETURNING watched on the completion, the times relative to the server's clock in the peek), the second the library's work in Node (engine, record-id hash, waiter ticket, pool checkout, logger check, deadline queue, heartbeat timer).`,
    );
  }
  if (x.variants.includes('unnamed-sql')) {
    const u = x.cpu['unnamed-sql'];
    notes.push(
      `Sent unnamed (as with \`preparedStatements: false\`), PostgreSQL parses and plans the store's statements on every call: ${us(u.first.backends)} of its CPU per first execution and ${us(u.replay.backends)} per replay.`,
    );
  }
  return notes;
}
