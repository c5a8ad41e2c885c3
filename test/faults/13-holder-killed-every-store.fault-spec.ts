/**
 * Case 13: the kill points of a holder, on each store an application can bring
 * its own client or pool to: PgIdempotencyStore on a `pg` Pool,
 * MysqlIdempotencyStore on a mysql2 pool (MariaDB), RedisIdempotencyStore on
 * ioredis (standalone and Cluster) and on node-redis. Per store, two engine
 * worker processes on one shared store, and two keys:
 *
 * - killed in the action (before its completion): the other process, waiting,
 *   takes the key over once the lease lapses and runs it (the second and last
 *   execution); every later duplicate replays its result;
 * - killed right after its completion was acknowledged: nothing runs again;
 *   every duplicate replays the killed holder's result.
 *
 * Executions are rows the actions insert into PostgreSQL, so a killed
 * process's work still counts.
 */
import { randomUUID } from 'node:crypto';
import { createConnection } from 'mysql2/promise';
import { DataSource } from 'typeorm';
import { mariadbAvailable, mysqlTestUrl, scratchTable } from '../support/mariadb';
import { scratchSchema, testDatabaseUrl } from '../support/postgres';
import {
  connectStandalone,
  deletePrefix,
  probeRedisSync,
  redisRequired,
  redisUrl,
  scratchPrefix,
  START_REDIS_HINT,
} from '../support/redis';
import { hasRedisBinaries, RedisServers, startCluster } from '../support/redis-server';
import {
  Child,
  executionsOf,
  expectNoRawKeys,
  is,
  recordResult,
  setUpFaultCase,
  startChild,
  tearDownFaultCase,
} from './support/harness';
import { openStoreEngine, StoreConfig } from './support/stores';

const LEASE_MS = 1000;
const SCOPE = 'faults.every-store';
const OP_TIMEOUT_MS = 5000;

interface StoreCase {
  name: string;
  /** Why it cannot run on this machine, or undefined (each probe throws where the suite requires the service). */
  missing: () => string | undefined;
  config: (context: { schema: string; cluster?: RedisServers }) => StoreConfig;
  cluster?: true;
}

const redisMissing = () => {
  const probe = probeRedisSync();
  if (probe.available) return undefined;
  if (redisRequired()) {
    throw new Error(
      `Redis is required (IDEMPOTENCY_TEST_REQUIRE_REDIS=1) but unreachable (${probe.reason}); ${START_REDIS_HINT}`,
    );
  }
  return probe.reason;
};

/** Removes what a case left in a store that outlives the run (the PostgreSQL schema goes in afterAll). */
async function cleanUp(config: StoreConfig): Promise<void> {
  if (config.kind === 'mysql-pool') {
    const connection = await createConnection({ uri: config.url });
    await connection.query(`DROP TABLE IF EXISTS \`${config.table}\``);
    await connection.end();
  } else if (config.kind === 'redis') {
    const client = await connectStandalone(config.url);
    await deletePrefix(client, config.prefix);
    client.destroy();
  }
}

const STORES: StoreCase[] = [
  {
    name: 'PgIdempotencyStore on a pg Pool',
    missing: () => undefined,
    config: ({ schema }) => ({
      kind: 'pg-pool',
      url: testDatabaseUrl(),
      schema,
      operationTimeoutMs: OP_TIMEOUT_MS,
    }),
  },
  {
    name: 'MysqlIdempotencyStore on a mysql2 pool (MariaDB)',
    missing: () => (mariadbAvailable() ? undefined : 'MariaDB is not reachable'),
    config: () => ({
      kind: 'mysql-pool',
      url: mysqlTestUrl(),
      table: scratchTable('fault13'),
      operationTimeoutMs: OP_TIMEOUT_MS,
    }),
  },
  {
    name: 'RedisIdempotencyStore on ioredis',
    missing: redisMissing,
    config: () => ({
      kind: 'redis',
      client: 'ioredis',
      url: redisUrl(),
      prefix: scratchPrefix('fault13'),
      operationTimeoutMs: OP_TIMEOUT_MS,
    }),
  },
  {
    name: 'RedisIdempotencyStore on an ioredis Cluster',
    cluster: true,
    missing: () => {
      const binaries = hasRedisBinaries();
      return binaries.available ? undefined : binaries.reason;
    },
    config: ({ cluster }) => ({
      kind: 'redis-cluster',
      client: 'ioredis',
      urls: cluster!.ports.map((port) => `redis://127.0.0.1:${port}`),
      prefix: scratchPrefix('fault13'),
      operationTimeoutMs: OP_TIMEOUT_MS,
    }),
  },
  {
    name: 'RedisIdempotencyStore on node-redis',
    missing: redisMissing,
    config: () => ({
      kind: 'redis',
      url: redisUrl(),
      prefix: scratchPrefix('fault13'),
      operationTimeoutMs: OP_TIMEOUT_MS,
    }),
  },
];

interface Figures {
  executions: number;
  recoveryMs: number;
  replays: number;
}

describe('fault 13: the holder killed in its action and after its completion, on every store', () => {
  const schema = scratchSchema('fault_every_store');
  let admin: DataSource;
  let cluster: RedisServers | undefined;
  const figures = new Map<string, Figures>();
  const skipped = new Map(
    STORES.flatMap((s) => {
      const why = s.missing();
      return why ? [[s.name, why] as const] : [];
    }),
  );

  beforeAll(async () => {
    // The executions table, and the records table the pg Pool store uses; the others keep theirs.
    ({ admin } = await setUpFaultCase(schema, []));
  }, 120_000);

  afterAll(async () => {
    await cluster?.stop();
    await tearDownFaultCase(admin, schema);
  });

  for (const store of STORES) {
    const missing = skipped.get(store.name);
    it.skipIf(missing !== undefined)(
      `${store.name}: the key killed mid-action runs once more, never a third time; the key killed after completing never again${missing ? ` (not run: ${missing})` : ''}`,
      async () => {
        if (store.cluster) cluster ??= await startCluster();
        const config = store.config({ schema, cluster });
        const env = {
          PG_URL: testDatabaseUrl(),
          SCHEMA: schema,
          STORE: JSON.stringify(config),
        };
        const [holder, successor] = await Promise.all([
          startChild('worker', `${store.name}: holder`, env),
          startChild('worker', `${store.name}: successor`, env),
        ]);
        const local = await openStoreEngine(config);
        try {
          figures.set(store.name, await killPoints(holder, successor, local));
        } finally {
          await local.close();
          await successor.kill();
          await cleanUp(config);
        }
      },
      90_000,
    );
  }

  async function killPoints(
    holder: Child,
    successor: Child,
    local: Awaited<ReturnType<typeof openStoreEngine>>,
  ): Promise<Figures> {
    const midAction = randomUUID();
    const completed = randomUUID();
    const request = (key: string) => ({ scope: SCOPE, key, lease: `${LEASE_MS}ms`, ttl: '1h' });

    // Key 1 completes in the holder; key 2 is held in its action.
    holder.send({ cmd: 'execute', id: 'done', ...request(completed), waitTimeout: '0s' });
    const done = await holder.waitFor('the completed call', is.result('done'), 20_000);
    expect(done.result.kind).toBe('executed');
    holder.send({ cmd: 'execute', id: 'h', ...request(midAction), waitTimeout: '0s', hold: true });
    await holder.waitFor('the holder entering its action', is.entered('h'), 20_000);

    // The successor sees key 2 in flight, then waits for it.
    successor.send({ cmd: 'execute', id: 'probe', ...request(midAction), waitTimeout: '0s' });
    const probe = await successor.waitFor('the probe', is.result('probe'), 10_000);
    expect(probe.result).toMatchObject({
      kind: 'error',
      error: { name: 'IdempotencyInFlightError' },
    });
    successor.send({ cmd: 'execute', id: 's', ...request(midAction), waitTimeout: '15s' });

    const killedAt = Date.now();
    holder.proc.kill('SIGKILL');
    expect((await holder.exited).signal).toBe('SIGKILL');

    const stolen = await successor.waitFor('the successor', is.result('s'), 20_000);
    const recoveryMs = stolen.result.endedAt - killedAt;
    expect(stolen.result.kind).toBe('executed');
    expect(stolen.result.value!.pid).toBe(successor.pid);
    // It took over once the lease lapsed (the last heartbeat renewed it at most lease/2 earlier).
    expect(recoveryMs).toBeLessThan(LEASE_MS + 2000);

    // Duplicates, from the successor's process and from this one: replays, nothing runs.
    let replays = 0;
    for (const [key, value] of [
      [midAction, stolen.result.value],
      [completed, done.result.value],
    ] as const) {
      successor.send({ cmd: 'execute', id: `dup-${key}`, ...request(key), waitTimeout: '5s' });
      const dup = await successor.waitFor('a duplicate', is.result(`dup-${key}`), 10_000);
      expect(dup.result).toMatchObject({ kind: 'replayed', value });
      replays++;
      for (let i = 0; i < 3; i++) {
        const outcome = await local.engine.execute(
          { ...request(key), waitTimeout: '5s' },
          async () => {
            throw new Error('a duplicate must not run the action');
          },
        );
        expect(outcome).toMatchObject({ kind: 'replayed', value });
        replays++;
      }
    }

    const ranMidAction = await executionsOf(admin, schema, SCOPE, midAction);
    expect(ranMidAction.map((e) => e.pid)).toEqual([holder.pid, successor.pid]);
    expect(ranMidAction[1].token).toBe(stolen.result.value!.token);
    const ranCompleted = await executionsOf(admin, schema, SCOPE, completed);
    expect(ranCompleted.map((e) => e.pid)).toEqual([holder.pid]);
    expectNoRawKeys(holder.output() + successor.output() + local.logs.join('\n'), [
      midAction,
      completed,
    ]);
    return { executions: ranMidAction.length + ranCompleted.length, recoveryMs, replays };
  }

  it('records its figures', () => {
    const ran = STORES.filter((s) => !skipped.has(s.name));
    expect([...figures.keys()]).toEqual(ran.map((s) => s.name));
    const all = [...figures.values()];
    recordResult({
      case: 13,
      title: 'Holder killed, on every store (pg, mysql2, ioredis, Cluster, node-redis)',
      executionsExpected: 3 * all.length,
      executionsObserved: all.reduce((sum, f) => sum + f.executions, 0),
      recordsLost: 0,
      maxRecoveryMs: Math.max(...all.map((f) => f.recoveryMs)),
      notes:
        `lease ${LEASE_MS} ms, two engine worker processes per store and two keys: one killed in ` +
        `its action (run again once by the waiting process, never a third time), one killed after ` +
        `its completion (never run again); ` +
        [...figures]
          .map(
            ([name, f]) =>
              `${name}: taken over ${f.recoveryMs} ms after the kill, ${f.replays} duplicates replayed`,
          )
          .join('; ') +
        (skipped.size
          ? `; not run here: ${[...skipped].map(([n, why]) => `${n} (${why})`).join(', ')}`
          : ''),
    });
  });
});
