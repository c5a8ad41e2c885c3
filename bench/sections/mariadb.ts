/**
 * The MySQL/MariaDB store (TypeOrmIdempotencyStore on a `mariadb` DataSource,
 * mysql2) against the machine's MariaDB (IDEMPOTENCY_BENCH_MYSQL_URL, default
 * mysql://root@127.0.0.1:3306/test), in a scratch table dropped afterwards.
 * Skipped, with how to start MariaDB, when the server does not answer.
 *
 * - mariadb-floor: the store against the minimum SQL on MariaDB, in
 *   alternating rounds: a first execution is one prepared
 *   `INSERT … ON DUPLICATE KEY UPDATE id = id` (the new IN_PROGRESS record)
 *   and one prepared fenced `UPDATE … WHERE id = ? AND lease_id = ? AND
 *   state = 'IN_PROGRESS'`; a replay one prepared `SELECT` by primary key.
 *   A diagnostic variant sends the store's own statements through the same
 *   kind of pool (what the SQL costs, apart from the library's work in Node).
 * - mariadb-http: fresh keys and replays over HTTP against the undecorated
 *   handler (./store-http.ts).
 * - mariadb-memory: the application's memory after many requests (./memory.ts).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createConnection, createPool, Pool, ResultSetHeader, RowDataPacket } from 'mysql2/promise';
import { encodeValue, IdempotencyEngine } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { bind, mysqlQualified, Statement } from '../../libs/idempotency/src/stores/sql/mysql/sql';
import { buildMysqlStatements } from '../../libs/idempotency/src/stores/sql/mysql/statements';
import { recordIdOf } from '../../libs/idempotency/src/stores/sql/table';
import {
  cpuPerOp,
  rateOf,
  ratiosOf,
  ratioText,
  Run,
  runsOf,
  timedRun,
  tripsAre,
  tripsOf,
  us,
  warmAndAlternate,
} from '../lib/compare';
import { CpuSource } from '../lib/cpu';
import { installMysqlCounter, mysqlAttributes } from '../lib/driver-count';
import {
  MYSQL_URL,
  mysqlServerInfo,
  openMysqlDataSource,
  reasonOf,
  shown,
  START_MARIADB,
} from '../lib/servers';
import {
  countingLogger,
  executeFresh,
  LEASE_MS,
  quietLogger,
  replayCompleted,
  resultFor,
  ResultRow,
  SCOPE,
  SectionContext,
  SectionResult,
  skipped,
  TTL_MS,
  verdict,
} from './context';
import { measureMemory } from './memory';
import { storeHttp } from './store-http';

/** From the issue: the store's rate ÷ the floor's, median of the rounds' ratios. */
export const MARIADB_TARGETS = { first: 0.85, replay: 0.85, firstTrips: 2, replayTrips: 1 };

const APPS = {
  store: 'idem-bench-maria-store',
  floor: 'idem-bench-maria-floor',
  'store-sql': 'idem-bench-maria-store-sql',
} as const;
type Variant = keyof typeof APPS;

const LABELS: Record<Variant, string> = {
  store: 'store (IdempotencyEngine.run + TypeOrmIdempotencyStore, mariadb DataSource)',
  floor: 'floor (minimum SQL, prepared, through a mysql2 pool)',
  'store-sql': "the store's own statements, prepared, through a mysql2 pool",
};

type Admin = Awaited<ReturnType<typeof createConnection>>;

/** The part of mysql2's core (callback) pool the benchmark uses. */
interface CorePool {
  /** Its connections' server thread ids. */
  _allConnections: { length: number; get(i: number): { threadId: number } };
  getConnection(callback: (error: Error | null, connection: CoreConnection) => void): void;
}

interface CoreConnection {
  execute(
    sql: string,
    values: unknown[],
    callback: (error: Error | null, result: unknown) => void,
  ): void;
  release(): void;
}

/**
 * One prepared statement the cheapest way mysql2 offers, as the store sends
 * its own: a pooled connection, `execute` with positional arguments and a
 * callback, the connection handed back in that callback (mysql2/promise's
 * `pool.execute` adds a Promise wrapper, an 'end' listener and, unless
 * `trace: false`, a captured stack per call).
 */
function executeCheapest(pool: CorePool, sql: string, values: unknown[]): Promise<unknown> {
  return new Promise((resolve, reject) => {
    pool.getConnection((error, connection) => {
      if (error) return reject(error);
      connection.execute(sql, values, (failure, result) => {
        connection.release();
        if (failure) reject(failure);
        else resolve(result);
      });
    });
  });
}

/**
 * Runs `body` with an admin connection and a scratch table name (the table
 * dropped afterwards), or returns the skipped section when MariaDB does not answer.
 */
async function withMariadb(
  ctx: SectionContext,
  section: string,
  body: (admin: Admin, table: string, pid?: number) => Promise<SectionResult>,
): Promise<SectionResult> {
  let admin: Admin;
  try {
    admin = await createConnection({ uri: MYSQL_URL, connectTimeout: 2000 });
  } catch (error) {
    ctx.log(
      `${section}: skipped, MariaDB at ${shown(MYSQL_URL)} does not answer; ${START_MARIADB}`,
    );
    return skipped(section, `MariaDB at ${shown(MYSQL_URL)}`, reasonOf(error), START_MARIADB);
  }
  const table = `idem_bench_${randomBytes(4).toString('hex')}`;
  try {
    const info = await mysqlServerInfo(async (sql) => (await admin.query(sql))[0]);
    const result = await body(admin, table, info.pid);
    return { ...result, machine: [['MariaDB', `${info.version} at ${shown(MYSQL_URL)}`]] };
  } finally {
    await admin.query(`DROP TABLE IF EXISTS ${mysqlQualified({ table })}`).catch(() => undefined);
    ctx.log(`${section}: dropped table ${table}`);
    await admin.end().catch(() => undefined);
  }
}

/** The PIDs whose CPU is the MariaDB sections' own (the server), for bench.ts's load accounting. */
export async function mariadbServerPids(): Promise<number[]> {
  try {
    const admin = await createConnection({ uri: MYSQL_URL, connectTimeout: 2000 });
    try {
      const { pid } = await mysqlServerInfo(async (sql) => (await admin.query(sql))[0]);
      return pid ? [pid] : [];
    } finally {
      await admin.end();
    }
  } catch {
    return [];
  }
}

/** The minimum SQL: what any implementation of the same contract has to send. */
export function mariadbFloorStatements(table: string) {
  const t = mysqlQualified({ table });
  const plus = (p: string) => `(UTC_TIMESTAMP(6) + INTERVAL (${p} * 1000) MICROSECOND)`;
  return {
    /** id, scope, key, lease id, lease ms, ttl ms, fingerprint. */
    insert: `INSERT INTO ${t} (id, scope, \`key\`, state, lease_id, lease_expires_at, expires_at, fingerprint, created_at)
      VALUES (?, ?, ?, 'IN_PROGRESS', ?, ${plus('?')}, ${plus('?')}, ?, UTC_TIMESTAMP(6))
      ON DUPLICATE KEY UPDATE id = id`,
    /** payload, ttl ms, id, lease id: fenced by the lease id. */
    complete: `UPDATE ${t} SET state = 'COMPLETE', payload = ?, completed_at = UTC_TIMESTAMP(6),
        expires_at = ${plus('?')}, lease_id = NULL, lease_expires_at = NULL
      WHERE id = ? AND lease_id = ? AND state = 'IN_PROGRESS'`,
    /** id. */
    select: `SELECT state, fingerprint, payload, completed_at, expires_at, lease_expires_at
      FROM ${t} WHERE id = ?`,
  };
}

export async function mariadbFloorSection(ctx: SectionContext): Promise<SectionResult> {
  const section = 'MariaDB floor';
  return withMariadb(ctx, section, async (admin, table, pid) => {
    const { config } = ctx;
    installMysqlCounter();
    const variants = variantsFromEnv();
    const dataSource = await openMysqlDataSource(APPS.store, config.pool);
    const store = new TypeOrmIdempotencyStore(dataSource, {
      table,
      ensureSchema: true,
      logger: quietLogger,
    });
    const pools: Partial<Record<Variant, Pool>> = {};
    for (const v of variants)
      if (v !== 'store')
        pools[v] = createPool({
          uri: MYSQL_URL,
          connectionLimit: config.pool,
          maxIdle: config.pool,
          idleTimeout: 3_600_000,
          // No call-site stack captured per statement (mysql2's default): the floor pays
          // only for what any client has to do.
          trace: false,
          ...mysqlAttributes(APPS[v]),
        });
    try {
      await store.init();
      const engine = new IdempotencyEngine(store, { logger: countingLogger });
      const floorSql = mariadbFloorStatements(table);
      const storeSql = buildMysqlStatements(
        { schema: store.tableName.schema, table },
        { returning: true },
      );
      // The server threads of each side's connections (one thread per connection), by their
      // connection ids in information_schema.PROCESSLIST; and the whole server beside them.
      const connectionIds = (v: Variant): number[] => {
        const pool =
          v === 'store'
            ? (dataSource.driver as unknown as { pool: CorePool }).pool
            : (pools[v] as unknown as { pool: CorePool }).pool;
        const all = pool._allConnections;
        return Array.from({ length: all.length }, (_, i) => all.get(i).threadId);
      };
      const threads = (v: Variant) => async (): Promise<CpuSource[]> => {
        const ids = connectionIds(v);
        if (!pid || ids.length === 0) return [];
        const [rows] = await admin.query<RowDataPacket[]>(
          `SELECT TID AS tid FROM information_schema.PROCESSLIST WHERE ID IN (${ids.map(Number).join(',')})`,
        );
        return rows.map((r) => ({ pid, tid: Number(r.tid) }));
      };
      const run = randomBytes(3).toString('hex');
      const completed: Record<Variant, string[]> = { store: [], floor: [], 'store-sql': [] };
      const remember = (v: Variant, key: string) => {
        if (completed[v].length < 50_000) completed[v].push(key);
      };
      const pick = (v: Variant, caller: number, i: number) =>
        completed[v][(caller * 7919 + i * 31) % completed[v].length];
      const exec = (v: Variant, sql: string, values: unknown[]) =>
        executeCheapest((pools[v] as unknown as { pool: CorePool }).pool, sql, values);
      const execStatement = (v: Variant, s: Statement, values: Record<string, unknown>) =>
        exec(v, s.text, bind(s, values));

      const first: Record<Variant, (tag: string) => (caller: number, i: number) => Promise<void>> =
        {
          store: (tag) => async (caller, i) => {
            const key = `${run}-${tag}-${caller}-${i}`;
            await executeFresh(engine, key);
            remember('store', key);
          },
          floor: (tag) => async (caller, i) => {
            const key = `${run}-${tag}-${caller}-${i}`;
            const id = recordIdOf(SCOPE, key);
            const lease = randomUUID();
            const inserted = (await exec('floor', floorSql.insert, [
              id,
              SCOPE,
              key,
              lease,
              LEASE_MS,
              TTL_MS,
              null,
            ])) as ResultSetHeader;
            if (inserted.affectedRows !== 1) throw new Error('floor: fresh key not inserted');
            const done = (await exec('floor', floorSql.complete, [
              encodeValue(resultFor(key)),
              TTL_MS,
              id,
              lease,
            ])) as ResultSetHeader;
            if (done.affectedRows !== 1) throw new Error('floor: complete refused');
            remember('floor', key);
          },
          'store-sql': (tag) => async (caller, i) => {
            const key = `${run}-${tag}-${caller}-${i}`;
            const id = recordIdOf(SCOPE, key);
            const lease = randomUUID();
            const look = { id, scope: SCOPE, key, lease, leaseMs: LEASE_MS, ttlMs: TTL_MS };
            // As the store sends it in a scope of fresh keys: the minimum insert.
            const inserted = (await execStatement('store-sql', storeSql.insert, {
              ...look,
              fingerprint: null,
            })) as ResultSetHeader;
            if (Number(inserted.insertId) !== 3)
              throw new Error('store-sql: fresh key not inserted');
            const done = (await execStatement('store-sql', storeSql.complete, {
              id,
              lease,
              payload: encodeValue(resultFor(key)),
              ttlMs: TTL_MS,
            })) as ResultSetHeader;
            if (done.affectedRows !== 1) throw new Error('store-sql: complete refused');
            remember('store-sql', key);
          },
        };
      const replay: Record<Variant, (caller: number, i: number) => Promise<void>> = {
        store: (caller, i) => replayCompleted(engine, pick('store', caller, i)),
        floor: async (caller, i) => {
          const rows = (await exec('floor', floorSql.select, [
            recordIdOf(SCOPE, pick('floor', caller, i)),
          ])) as RowDataPacket[];
          if (rows[0]?.state !== 'COMPLETE') throw new Error('floor: completed key not replayed');
        },
        // As the store sends it in a scope of replays: the peek.
        'store-sql': async (caller, i) => {
          const key = pick('store-sql', caller, i);
          const rows = (await execStatement('store-sql', storeSql.peek, {
            id: recordIdOf(SCOPE, key),
            lease: randomUUID(),
          })) as RowDataPacket[];
          if (rows[0]?.state !== 'COMPLETE')
            throw new Error('store-sql: completed key not replayed');
        },
      };
      const timed = (
        v: Variant,
        op: (caller: number, i: number) => Promise<void>,
        seconds = config.seconds,
      ) =>
        timedRun(
          { seconds, concurrency: config.concurrency, app: APPS[v] },
          op,
          threads(v),
          pid ? [pid] : undefined,
        );
      const each = <T>(f: (v: Variant) => T) =>
        Object.fromEntries(variants.map((v) => [v, () => f(v)])) as Record<Variant, () => T>;
      let phase = 0;
      ctx.log(`${section}: variants ${variants.join(', ')}; first executions, warm-up`);
      const firsts = await warmAndAlternate(
        config.rounds,
        each((v) => timed(v, first[v](`${v}${phase++}`))),
        each((v) => timed(v, first[v](`w${v}`), config.warmupSeconds)),
        (round, name) => ctx.log(`${section}: first executions, round ${round + 1}, ${name}`),
      );
      ctx.log(`${section}: replays, warm-up`);
      const replays = await warmAndAlternate(
        config.rounds,
        each((v) => timed(v, replay[v])),
        each((v) => timed(v, replay[v], config.warmupSeconds)),
        (round, name) => ctx.log(`${section}: replays, round ${round + 1}, ${name}`),
      );
      return mariadbFloorResult(section, config, variants, firsts, replays);
    } finally {
      await store.close().catch(() => undefined);
      await Promise.all(Object.values(pools).map((p) => p.end().catch(() => undefined)));
      await dataSource.destroy().catch(() => undefined);
    }
  });
}

function variantsFromEnv(): Variant[] {
  const raw = (process.env.BENCH_MARIADB_VARIANTS ?? 'store,floor,store-sql')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const v of raw)
    if (!(v in APPS)) throw new Error(`BENCH_MARIADB_VARIANTS: unknown variant "${v}"`);
  return [...new Set<Variant>(['store', 'floor', ...(raw as Variant[])])];
}

function mariadbFloorResult(
  section: string,
  config: SectionContext['config'],
  variants: Variant[],
  firsts: Record<Variant, Run[]>,
  replays: Record<Variant, Run[]>,
): SectionResult {
  const ratioRow = (label: string, samples: Record<Variant, Run[]>, target: number): ResultRow => {
    const ratio = ratiosOf(samples.store, samples.floor);
    return {
      section,
      measurement: label,
      result: `${ratio.median.toFixed(2)} (${rateOf(samples.store).toFixed(0)}/s vs ${rateOf(samples.floor).toFixed(0)}/s)`,
      target: `≥ ${target.toFixed(2)}`,
      verdict: verdict(ratio.median >= target),
      how: `ratio: median of the rounds' ratios ${ratioText(ratio)}; rates: medians; ${LABELS.store} runs ${runsOf(samples.store)}; ${LABELS.floor} runs ${runsOf(samples.floor)}`,
    };
  };
  const tripsRow = (label: string, samples: Record<Variant, Run[]>, n: number): ResultRow => ({
    section,
    measurement: label,
    result: `${tripsOf(samples.store)} (floor ${tripsOf(samples.floor)})`,
    target: String(n),
    verdict: verdict(tripsAre(samples.store, n)),
    how: "commands each pool's mysql2 connections started per operation (a prepare counts: none after the warm-up), every run",
  });
  const cpuRow = (label: string, samples: Record<Variant, Run[]>): ResultRow => {
    const cells = variants.map((v) => {
      const c = cpuPerOp(samples[v]);
      return `${v}: MariaDB ${us(c.server)} (whole server ${us(c.whole)}), Node ${us(c.node)}`;
    });
    const short = (['store', 'floor'] as const).map((v) => {
      const c = cpuPerOp(samples[v]);
      return `${v}: MariaDB ${us(c.server)}, Node ${us(c.node)}`;
    });
    return {
      section,
      measurement: label,
      result: short.join('; '),
      target: '',
      verdict: '',
      how: `MariaDB: utime + stime (/proc, 10 ms ticks) of the server threads serving each side's connections (/proc/<mariadbd>/task/<TID>, TID from information_schema.PROCESSLIST); whole server: the mariadbd process (InnoDB's background threads, and any other user of the server, included); Node: this process.cpuUsage(); over each run ÷ its operations, medians of the runs; ${cells.join('; ')}`,
    };
  };
  const diagnosticRow = (label: string, samples: Record<Variant, Run[]>): ResultRow => {
    const toFloor = ratiosOf(samples['store-sql'], samples.floor);
    const storeTo = ratiosOf(samples.store, samples['store-sql']);
    return {
      section,
      measurement: label,
      result: `${toFloor.median.toFixed(2)} (${rateOf(samples['store-sql']).toFixed(0)}/s)`,
      target: '',
      verdict: '',
      how: `${LABELS['store-sql']} ÷ floor, ${ratioText(toFloor)}; the store ÷ this variant (the library's cost in Node on the same SQL): ${ratioText(storeTo)}; round trips ${tripsOf(samples['store-sql'])}; runs ${runsOf(samples['store-sql'])}`,
    };
  };
  const withSql = variants.includes('store-sql');
  const ratios = {
    first: ratiosOf(firsts.store, firsts.floor).median,
    replay: ratiosOf(replays.store, replays.floor).median,
  };
  const cpu = (v: Variant) => ({ first: cpuPerOp(firsts[v]), replay: cpuPerOp(replays[v]) });
  const [s, f] = [cpu('store'), cpu('floor')];
  const notes = [
    `MariaDB: against the minimum SQL the store keeps ${ratios.first.toFixed(2)} of the rate for first executions and ${ratios.replay.toFixed(2)} for replays (target ${MARIADB_TARGETS.first}). MariaDB's CPU per first execution: ${us(s.first.server)} for the store, ${us(f.first.server)} at the floor; per replay ${us(s.replay.server)} against ${us(f.replay.server)}. Node's CPU per first execution ${us(s.first.node)} against ${us(f.first.node)}, per replay ${us(s.replay.node)} against ${us(f.replay.node)}.`,
  ];
  if (withSql) {
    const q = cpu('store-sql');
    notes.push(
      `Where the gap is: the store's own statements through a plain mysql2 pool run at ${ratiosOf(firsts['store-sql'], firsts.floor).median.toFixed(2)} of the floor for first executions and ${ratiosOf(replays['store-sql'], replays.floor).median.toFixed(2)} for replays (MariaDB CPU ${us(q.first.server)} and ${us(q.replay.server)} per operation); the store runs at ${ratiosOf(firsts.store, firsts['store-sql']).median.toFixed(2)} and ${ratiosOf(replays.store, replays['store-sql']).median.toFixed(2)} of its own SQL sent that way (Node CPU ${us(s.first.node)} against ${us(q.first.node)} per first execution, ${us(s.replay.node)} against ${us(q.replay.node)} per replay). The first split is the SQL (the store's minimum insert marks the insert id with LAST_INSERT_ID, its peek reads the times back as TIMESTAMPDIFF and the AMBIGUOUS columns), the second the library's work in Node and TypeORM's.`,
    );
  }
  return {
    rows: [
      ratioRow('First executions/s, store ÷ minimum-SQL floor', firsts, MARIADB_TARGETS.first),
      ratioRow('Replays/s, store ÷ minimum-SQL floor', replays, MARIADB_TARGETS.replay),
      tripsRow('Round trips per first execution', firsts, MARIADB_TARGETS.firstTrips),
      tripsRow('Round trips per replay', replays, MARIADB_TARGETS.replayTrips),
      cpuRow('CPU per first execution', firsts),
      cpuRow('CPU per replay', replays),
      ...(withSql
        ? [
            diagnosticRow(`First executions/s, ${LABELS['store-sql']} ÷ floor`, firsts),
            diagnosticRow(`Replays/s, ${LABELS['store-sql']} ÷ floor`, replays),
          ]
        : []),
    ],
    method: [
      `${section}: ${config.concurrency} callers, pool ${config.pool} on every side (connections kept open), one InnoDB table (the store's, created by \`ensureSchema\`). The floor is the minimum SQL on MariaDB: a first execution is one prepared \`INSERT … ON DUPLICATE KEY UPDATE id = id\` (the new IN_PROGRESS record, times from UTC_TIMESTAMP(6)) and one prepared \`UPDATE … WHERE id = ? AND lease_id = ? AND state = 'IN_PROGRESS'\` (the fenced completion storing the payload); a replay is one prepared \`SELECT\` of the record's columns by primary key; it computes the same sha256 record id, a fresh lease UUID and the same payload bytes as the store. The store runs through \`IdempotencyEngine.run\` on a \`mariadb\` DataSource (prepared statements); the scope's recent acquisitions decide its first statement (the minimum insert for fresh keys, the peek for replays). ${withSql ? `Diagnostic: ${LABELS['store-sql']} (its insert and complete for a fresh key, its peek for a replay). ` : ''}${config.warmupSeconds} s warm-up each, then ${config.rounds} rounds of ${variants.join(' / ')}, ${config.seconds} s each; a ratio is the median of the rounds' ratios (store ÷ floor in the same round). MariaDB CPU: utime + stime from /proc of the server threads serving each side's connections (one thread per connection; found by connection id in information_schema.PROCESSLIST), and of the whole mariadbd process beside it (InnoDB's background threads, and other users of the machine's server, included); Node: \`process.cpuUsage()\`.`,
    ],
    notes,
  };
}

/** The table, made here; the application's store checks it at init(). */
async function makeTable(table: string): Promise<void> {
  const setupSource = await openMysqlDataSource('idem-bench-maria-setup', 2);
  try {
    const setup = new TypeOrmIdempotencyStore(setupSource, { table, ensureSchema: true });
    await setup.init();
    await setup.close();
  } finally {
    await setupSource.destroy();
  }
}

export async function mariadbHttpSection(ctx: SectionContext): Promise<SectionResult> {
  const section = 'MariaDB HTTP';
  return withMariadb(ctx, section, async (_admin, table, pid) => {
    await makeTable(table);
    return storeHttp(ctx, {
      section,
      store: 'mariadb',
      url: MYSQL_URL,
      schema: table,
      targets: {},
      serverPids: pid ? [pid] : [],
    });
  });
}

export async function mariadbMemorySection(ctx: SectionContext): Promise<SectionResult> {
  const section = 'MariaDB memory';
  return withMariadb(ctx, section, async (_admin, table) => {
    await makeTable(table);
    return measureMemory(ctx, {
      section,
      storeName: 'MySQL/MariaDB store',
      store: 'mariadb',
      databaseUrl: MYSQL_URL,
      schema: table,
    });
  });
}
