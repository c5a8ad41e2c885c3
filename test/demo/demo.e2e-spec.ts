import { ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as amqp from 'amqplib';
import { Client } from 'pg';
import { freePort } from '../../tools/embedded-postgres';
import { RedisKeys } from '../../libs/idempotency/src/stores/redis/keys';
import { mariadbAvailable, mysqlTestUrl } from '../support/mariadb';
import { testDatabaseUrl } from '../support/postgres';
import {
  connectStandalone,
  deletePrefix,
  describeIfRedis,
  probeRedisSync,
  redisUrl,
  scanAll,
  scratchPrefix,
} from '../support/redis';

const ROOT = path.resolve(__dirname, '../..');

interface Demo {
  child: ChildProcess;
  url: string;
  output: () => string;
  /** Resolves once the demo's output matches `pattern`. */
  waitFor: (pattern: RegExp) => Promise<void>;
}

const running = new Set<ChildProcess>();
afterEach(() => {
  for (const child of running) child.kill('SIGKILL');
  running.clear();
});

/** Starts the demo exactly as `npm start` does, and waits for the curl pair it prints last. */
async function startDemo(env: Record<string, string | undefined>): Promise<Demo> {
  const child = spawn(process.execPath, ['-r', '@swc-node/register', 'apps/demo/src/main.ts'], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', NO_COLOR: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  child.once('exit', () => running.delete(child));
  let output = '';
  const url = await new Promise<string>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /curl -s (http:\/\/\S+)\/payments\n/.exec(output);
      if (match) resolve(match[1]);
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) =>
      reject(new Error(`demo exited with ${code} before listening:\n${output}`)),
    );
  });
  const waitFor = (pattern: RegExp) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (!pattern.test(output)) return;
        child.stdout!.off('data', check);
        child.stderr!.off('data', check);
        resolve();
      };
      child.stdout!.on('data', check);
      child.stderr!.on('data', check);
      child.once('exit', () =>
        reject(new Error(`demo exited before printing ${pattern}:\n${output}`)),
      );
      check();
    });
  return { child, url, output: () => output, waitFor };
}

async function stopDemo(demo: Demo): Promise<number | null> {
  const exited = once(demo.child, 'exit');
  demo.child.kill('SIGINT');
  const [code] = (await exited) as [number | null];
  return code;
}

async function pay(url: string, key: string) {
  const response = await fetch(`${url}/payments`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ amount: 1000 }),
  });
  return {
    status: response.status,
    replayed: response.headers.get('idempotent-replayed'),
    text: await response.text(),
  };
}

const count = async (url: string) =>
  ((await (await fetch(`${url}/payments`)).json()) as { count: number }).count;

/** A fresh database on the run's PostgreSQL, its URL, and what drops it. */
async function scratchPostgres(): Promise<{ url: string; drop: () => Promise<void> }> {
  const admin = new Client({ connectionString: testDatabaseUrl() });
  await admin.connect();
  const database = `demo_${randomBytes(4).toString('hex')}`;
  await admin.query(`CREATE DATABASE ${database}`);
  const url = new URL(testDatabaseUrl());
  url.pathname = `/${database}`;
  return {
    url: url.toString(),
    drop: async () => {
      await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
      await admin.end();
    },
  };
}

describe('demo application', () => {
  it('on a given DATABASE_URL: the curl pair replays, one row is written, Ctrl-C exits cleanly', async () => {
    const admin = new Client({ connectionString: testDatabaseUrl() });
    await admin.connect();
    const database = `demo_${randomBytes(4).toString('hex')}`;
    await admin.query(`CREATE DATABASE ${database}`);
    const url = new URL(testDatabaseUrl());
    url.pathname = `/${database}`;
    try {
      const demo = await startDemo({ DATABASE_URL: url.toString(), AMQP_URL: undefined });
      expect(demo.output()).toContain('RabbitMQ consumer off');
      expect(demo.output()).toContain('Idempotency-Key: demo-1');
      const key = randomUUID();
      const first = await pay(demo.url, key);
      const second = await pay(demo.url, key);
      expect(first.status).toBe(201);
      expect(second).toEqual({ status: 201, replayed: 'true', text: first.text });
      const order = `${demo.url}/orders/o-1/payment`;
      const body = JSON.stringify({ amount: 500, customerId: 'c-9' });
      for (let i = 0; i < 2; i++) {
        const response = await fetch(order, {
          method: 'PUT',
          headers: { 'content-type': 'application/json' },
          body,
        });
        expect(response.status).toBe(200);
      }
      expect(await count(demo.url)).toBe(2);
      expect(await stopDemo(demo)).toBe(0);
      expect(demo.output()).toContain('SIGINT: shutting down');
    } finally {
      await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
      await admin.end();
    }
  });

  it('with DEMO_METRICS=prometheus: serves the outcome counter, by scope and outcome, at /metrics', async () => {
    const admin = new Client({ connectionString: testDatabaseUrl() });
    await admin.connect();
    const database = `demo_${randomBytes(4).toString('hex')}`;
    await admin.query(`CREATE DATABASE ${database}`);
    const url = new URL(testDatabaseUrl());
    url.pathname = `/${database}`;
    const port = await freePort();
    try {
      const demo = await startDemo({
        DATABASE_URL: url.toString(),
        AMQP_URL: undefined,
        DEMO_METRICS: 'prometheus',
        DEMO_METRICS_PORT: String(port),
      });
      expect(demo.output()).toContain(
        `metrics (OpenTelemetry) served at http://127.0.0.1:${port}/metrics`,
      );
      const key = randomUUID();
      await pay(demo.url, key);
      await pay(demo.url, key);
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      const outcomes = text.split('\n').filter((line) => line.startsWith('idempotency_outcomes'));
      expect(outcomes).toEqual(
        expect.arrayContaining([
          expect.stringMatching(
            /idempotency_scope="PaymentsController\.create",idempotency_outcome="executed".*\} 1( |$)/,
          ),
          expect.stringMatching(
            /idempotency_scope="PaymentsController\.create",idempotency_outcome="replayed".*\} 1( |$)/,
          ),
        ]),
      );
      expect(text).not.toContain(key);
      expect(await stopDemo(demo)).toBe(0);
    } finally {
      await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
      await admin.end();
    }
  });

  it.runIf(process.env.IDEMPOTENCY_TEST_RABBITMQ === 'available')(
    'as a hybrid application (HTTP and RabbitMQ, no inheritAppConfig): one message published three times writes one row',
    async () => {
      const admin = new Client({ connectionString: testDatabaseUrl() });
      await admin.connect();
      const database = `demo_${randomBytes(4).toString('hex')}`;
      await admin.query(`CREATE DATABASE ${database}`);
      const url = new URL(testDatabaseUrl());
      url.pathname = `/${database}`;
      const queue = `demo-payments-${randomUUID()}`;
      const amqpUrl = process.env.IDEMPOTENCY_TEST_AMQP_URL!;
      const connection = await amqp.connect(amqpUrl);
      const channel = await connection.createChannel();
      try {
        const demo = await startDemo({
          DATABASE_URL: url.toString(),
          AMQP_URL: amqpUrl,
          AMQP_QUEUE: queue,
        });
        expect(demo.output()).toContain(`RabbitMQ consumer listening on queue ${queue}`);
        const messageId = randomUUID();
        const message = Buffer.from(
          JSON.stringify({
            pattern: 'payments.requested',
            data: { amount: 700, orderId: 'o-rmq' },
          }),
        );
        for (let i = 0; i < 3; i++) channel.sendToQueue(queue, message, { messageId });
        // The demo logs each outcome: the first copy runs, the other two are replays
        // (the library acks those; the handler acks its own).
        await demo.waitFor(/(replayed PaymentsConsumer\.onRequested\/#[0-9a-f]{12}[\s\S]*){2}/);
        expect(demo.output().match(/acquired PaymentsConsumer\.onRequested/g)).toHaveLength(1);
        expect(await stopDemo(demo)).toBe(0);
        const { messageCount } = await channel.checkQueue(queue);
        expect(messageCount).toBe(0);
        const client = new Client({ connectionString: url.toString() });
        await client.connect();
        const [{ n }] = (
          await client.query(`SELECT count(*)::int AS n FROM demo_payments WHERE source = 'amqp'`)
        ).rows;
        await client.end();
        expect(n).toBe(1);
      } finally {
        await channel.deleteQueue(queue).catch(() => undefined);
        await connection.close();
        await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
        await admin.end();
      }
    },
    60_000,
  );

  it('without DATABASE_URL: starts an embedded PostgreSQL whose data survives a restart', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nest-idempotency-demo-'));
    const env = {
      DATABASE_URL: undefined,
      AMQP_URL: undefined,
      DEMO_DATA_DIR: dataDir,
      DEMO_PG_PORT: String(await freePort()),
    };
    try {
      const first = await startDemo(env);
      expect(first.output()).toContain('embedded PostgreSQL at postgres://');
      const key = randomUUID();
      expect((await pay(first.url, key)).status).toBe(201);
      expect(await stopDemo(first)).toBe(0);

      const second = await startDemo(env);
      expect((await pay(second.url, key)).replayed).toBe('true');
      expect(await count(second.url)).toBe(1);
      expect(await stopDemo(second)).toBe(0);
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  }, 120_000);

  it('refuses DEMO_STORE=redis without REDIS_URL before it starts anything', async () => {
    const failed = await startDemo({ DEMO_STORE: 'redis', REDIS_URL: undefined }).then(
      () => new Error('the demo started'),
      (error: Error) => error,
    );
    expect(failed.message).toMatch(/^demo exited with 1 before listening/);
    expect(failed.message).toContain(
      'DEMO_STORE=redis needs REDIS_URL, e.g. REDIS_URL=redis://127.0.0.1:6379',
    );
    expect(failed.message).not.toContain('embedded PostgreSQL');
  });

  describeIfRedis(probeRedisSync(), `Redis at ${redisUrl()}`)(
    'with DEMO_STORE=redis: idempotency records in Redis, payments in PostgreSQL',
    () => {
      it('the curl pair replays from Redis, one row is written, no records table in the database; Ctrl-C exits cleanly', async () => {
        const database = await scratchPostgres();
        const prefix = scratchPrefix('demo');
        const redis = await connectStandalone(redisUrl());
        try {
          const demo = await startDemo({
            DATABASE_URL: database.url,
            AMQP_URL: undefined,
            DEMO_STORE: 'redis',
            REDIS_URL: redisUrl(),
            DEMO_REDIS_PREFIX: prefix,
          });
          expect(demo.output()).toContain(
            `idempotency records in Redis at REDIS_URL, key prefix ${prefix}; payments in the database`,
          );
          const key = randomUUID();
          const first = await pay(demo.url, key);
          const second = await pay(demo.url, key);
          expect(first.status).toBe(201);
          expect(second).toEqual({ status: 201, replayed: 'true', text: first.text });
          expect(await count(demo.url)).toBe(1);
          // The record is the Redis store's, under the demo's prefix.
          const recordKey = new RedisKeys(prefix).record('PaymentsController.create', key).key;
          expect(await scanAll(redis, `${prefix}*`)).toEqual([recordKey]);
          expect(await redis.hGet(recordKey, 'st')).toBe('COMPLETE');
          expect(await stopDemo(demo)).toBe(0);
          // Only the demo's own table (and TypeORM's migrations) went into PostgreSQL.
          const client = new Client({ connectionString: database.url });
          await client.connect();
          const tables = (
            await client.query(
              `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1`,
            )
          ).rows.map((row: { table_name: string }) => row.table_name);
          await client.end();
          expect(tables).toEqual(['demo_payments', 'migrations']);
        } finally {
          await deletePrefix(redis, prefix);
          redis.destroy();
          await database.drop();
        }
      });
    },
  );

  describe.runIf(mariadbAvailable())('on DATABASE_URL=mysql://… (MariaDB)', () => {
    it('payments and idempotency records in MariaDB: the curl pair replays, one row per payment', async () => {
      const { default: mysql } = await import('mysql2/promise');
      const admin = await mysql.createConnection({ uri: mysqlTestUrl() });
      const database = `demo_${randomBytes(4).toString('hex')}`;
      await admin.query(`CREATE DATABASE \`${database}\``);
      const url = new URL(mysqlTestUrl());
      url.pathname = `/${database}`;
      try {
        const demo = await startDemo({ DATABASE_URL: url.toString(), AMQP_URL: undefined });
        expect(demo.output()).toContain('using DATABASE_URL (MySQL)');
        const key = randomUUID();
        const first = await pay(demo.url, key);
        const second = await pay(demo.url, key);
        expect(first.status).toBe(201);
        expect(second).toEqual({ status: 201, replayed: 'true', text: first.text });
        const order = `${demo.url}/orders/o-1/payment`;
        const body = JSON.stringify({ amount: 500, customerId: 'c-9' });
        for (let i = 0; i < 2; i++) {
          const response = await fetch(order, {
            method: 'PUT',
            headers: { 'content-type': 'application/json' },
            body,
          });
          expect(response.status).toBe(200);
        }
        expect(await count(demo.url)).toBe(2);
        expect(await stopDemo(demo)).toBe(0);
        const [records] = await admin.query(
          `SELECT scope, state FROM \`${database}\`.idempotency_records ORDER BY scope`,
        );
        expect(records).toEqual([
          { scope: 'PaymentsController.create', state: 'COMPLETE' },
          { scope: 'PaymentsController.payOrder', state: 'COMPLETE' },
        ]);
      } finally {
        await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
        await admin.end();
      }
    });
  });
});
