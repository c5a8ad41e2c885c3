/**
 * Case 9: a standalone Redis is SIGKILLed while calls are in their action and
 * in their completion, and started again on the same port and folder. The
 * server is a private one this spec starts from the redis-server binary, never
 * the machine's. Run twice: without persistence (the test servers' and this
 * machine's setting), where a restart loses every record, and with AOF
 * `appendfsync always`, where nothing acknowledged is lost; each on both
 * clients the store takes (node-redis and ioredis).
 *
 * Both runs: callers (engine in this process, a Nest app in a child) are
 * refused promptly while Redis is down (unavailable / 503, within
 * operationTimeoutMs plus slack) and both recover without a process restart.
 * The executions, counted in PostgreSQL, match what each setting allows
 * exactly (see support/restart-scenario.ts): with AOF every key ran once;
 * without persistence every key that had a record when Redis died runs once
 * more on its next call, and no key runs a third time.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DataSource } from 'typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { describeIfRedis, scratchPrefix } from '../support/redis';
import { freePort, hasRedisBinaries, RedisServer, startRedisServer } from '../support/redis-server';
import { recordResult, stopAllChildren } from './support/harness';
import { RestartFigures, runRestartScenario } from './support/restart-scenario';
import { createExecutionsTable, RedisClientName } from './support/stores';

const OP_TIMEOUT_MS = 1000;
const REFUSAL_BOUND_MS = OP_TIMEOUT_MS + 1500;

/** A private redis-server that can be SIGKILLed and started again on the same port and folder. */
class RestartableRedis {
  private server?: RedisServer;
  private constructor(
    readonly dir: string,
    readonly port: number,
    readonly args: string[],
  ) {}

  static async start(args: string[]): Promise<RestartableRedis> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nest-idempotency-redis-restart-'));
    const redis = new RestartableRedis(dir, await freePort(), args);
    await redis.start();
    return redis;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    this.server ??= await startRedisServer(this.dir, this.port, this.args);
  }

  async kill(): Promise<void> {
    await this.server?.kill();
    this.server = undefined;
  }

  async remove(): Promise<void> {
    await this.kill();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

const AOF_ALWAYS = ['--appendonly', 'yes', '--appendfsync', 'always'];
/** Each persistence setting on node-redis, and again on ioredis (the store's other client). */
const MODES: Array<{ name: string; args: string[]; durable: boolean; client: RedisClientName }> = [
  { name: 'no persistence', args: [], durable: false, client: 'node-redis' },
  { name: 'AOF appendfsync always', args: AOF_ALWAYS, durable: true, client: 'node-redis' },
  { name: 'ioredis, no persistence', args: [], durable: false, client: 'ioredis' },
  { name: 'ioredis, AOF appendfsync always', args: AOF_ALWAYS, durable: true, client: 'ioredis' },
];

describeIfRedis(hasRedisBinaries(), 'the redis-server binary')(
  'fault 9: Redis (standalone) restarted during actions and completions',
  () => {
    const schema = scratchSchema('fault_redis_restart');
    let pg: DataSource;
    const servers: RestartableRedis[] = [];
    const figures = new Map<string, RestartFigures>();
    const started = Date.now();

    beforeAll(async () => {
      pg = await openDataSource({ extra: { max: 5 } });
      await createExecutionsTable(pg, schema);
    });

    afterAll(async () => {
      await stopAllChildren();
      await Promise.all(servers.map((s) => s.remove()));
      if (pg) {
        await dropSchema(pg, schema);
        await pg.destroy();
      }
    });

    for (const mode of MODES) {
      it(`${mode.name}: refused while down, recovered after; executions as the setting allows`, async () => {
        const redis = await RestartableRedis.start(mode.args);
        servers.push(redis);
        figures.set(
          mode.name,
          await runRestartScenario({
            label: `redis, ${mode.name}`,
            target: redis,
            config: {
              kind: 'redis',
              url: redis.url,
              prefix: scratchPrefix('fault9'),
              operationTimeoutMs: OP_TIMEOUT_MS,
              client: mode.client,
            },
            durable: mode.durable,
            pg,
            schema,
            refusalBoundMs: REFUSAL_BOUND_MS,
          }),
        );
      }, 90_000);
    }

    it('records its figures', () => {
      expect([...figures.keys()]).toEqual(MODES.map((m) => m.name));
      const all = [...figures.values()];
      const sum = (pick: (f: RestartFigures) => number) =>
        all.reduce((total, f) => total + pick(f), 0);
      const summary = (name: string, f: RestartFigures) =>
        `${name}: ${f.recordsLost} of 8 records lost, ${f.ranTwice} keys ran twice ` +
        `(${f.executionsObserved} executions for ${f.executionsExpected} allowed), ` +
        `${f.refusals} refusals in at most ${f.slowestRefusalMs} ms, completion retried ` +
        `${f.completionRetries}x, Redis back in ${f.restartMs} ms, recovered in ${f.maxRecoveryMs} ms`;
      recordResult({
        case: 9,
        title: 'Redis restarted (no persistence; AOF always; node-redis and ioredis)',
        executionsExpected: sum((f) => f.executionsExpected),
        executionsObserved: sum((f) => f.executionsObserved),
        recordsLost: sum((f) => f.recordsLost),
        maxRecoveryMs: Math.max(...all.map((f) => f.maxRecoveryMs)),
        notes:
          `private redis-server SIGKILLed and started again (engine in the test process + Nest ` +
          `app in a child, operationTimeoutMs ${OP_TIMEOUT_MS}, refusal bound ${REFUSAL_BOUND_MS} ms; ` +
          `no 500); ` +
          MODES.map((m) => summary(m.name, figures.get(m.name)!)).join('; ') +
          `; the records lost without persistence are what that setting loses by design; ` +
          `${Math.round((Date.now() - started) / 1000)} s`,
      });
    });
  },
);
