import { Job, Queue, QueueEvents } from 'bullmq';
import { ChildProcess, fork } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import path from 'node:path';
import { DataSource } from 'typeorm';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';
import { describeIfRedis, probeRedisSync, redisUrl } from '../support/redis';
import { openStore, OpenedStore } from '../support/stores';
import type { ChargeData, ChargeResult, WorkerMessage } from './bullmq-worker-app';

/**
 * `@Idempotent` on a BullMQ processor, with two worker processes on one queue
 * (the real Redis) and one record store (PostgreSQL). Each effect is a row in
 * a PostgreSQL ledger, written by whichever process ran the handler; a worker
 * dies by SIGKILL, and the other one finds its job stalled and takes it.
 */

const ROOT = path.resolve(__dirname, '../..');
const SCRIPT = path.join(__dirname, 'bullmq-worker-app.ts');
const url = new URL(redisUrl());
const connection = { host: url.hostname, port: Number(url.port || 6379) };

interface WorkerProcess {
  child: ChildProcess;
  pid: number;
  messages: WorkerMessage[];
  output: () => string;
}

interface EffectRow {
  order_id: string;
  job_id: string;
  pid: number;
  effect: string;
}

describeIfRedis(probeRedisSync(), `Redis at ${redisUrl()}`)(
  '@Idempotent BullMQ jobs across two worker processes',
  () => {
    let opened: OpenedStore;
    let dataSource: DataSource;
    const ledger = scratchSchema('jobs_mp');
    let queueName: string;
    let queue: Queue<ChargeData, ChargeResult>;
    let events: QueueEvents;
    let workers: WorkerProcess[] = [];

    async function startWorker(): Promise<WorkerProcess> {
      const child = fork(SCRIPT, [], {
        cwd: ROOT,
        execArgv: ['-r', '@swc-node/register'],
        env: {
          ...process.env,
          SWC_NODE_PROJECT: path.join(ROOT, 'tsconfig.json'),
          ...opened.env,
          JOBS_QUEUE: queueName,
          JOBS_REDIS_URL: redisUrl(),
          JOBS_LEDGER_URL: testDatabaseUrl(),
          JOBS_LEDGER_SCHEMA: ledger,
        },
        stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      });
      const chunks: Buffer[] = [];
      child.stdout!.on('data', (c: Buffer) => chunks.push(c));
      child.stderr!.on('data', (c: Buffer) => chunks.push(c));
      const output = () => Buffer.concat(chunks).toString('utf8');
      const worker: WorkerProcess = { child, pid: child.pid!, messages: [], output };
      child.on('message', (message: WorkerMessage) => worker.messages.push(message));
      await new Promise<void>((resolve, reject) => {
        child.on('message', (message: WorkerMessage) => {
          if ('ready' in message) resolve();
        });
        child.once('exit', (code, signal) =>
          reject(new Error(`worker exited (${code ?? signal}) before it was ready:\n${output()}`)),
        );
        child.once('error', reject);
      });
      return worker;
    }

    /** Resolves with the worker that reports `match` first. */
    function nextMessage(match: (m: WorkerMessage) => boolean): Promise<WorkerProcess> {
      return new Promise((resolve) => {
        for (const worker of workers) {
          const listener = (message: WorkerMessage) => {
            if (!match(message)) return;
            for (const w of workers) w.child.off('message', listener);
            resolve(worker);
          };
          worker.child.on('message', listener);
        }
      });
    }

    async function stopWorker(worker: WorkerProcess): Promise<void> {
      const { child } = worker;
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      const force = setTimeout(() => child.kill('SIGKILL'), 10_000);
      try {
        await exited;
      } finally {
        clearTimeout(force);
      }
    }

    async function kill(worker: WorkerProcess): Promise<void> {
      const exited = once(worker.child, 'exit');
      worker.child.kill('SIGKILL');
      await exited;
    }

    const effectsOf = (orderId: string) =>
      dataSource.query<EffectRow[]>(
        `SELECT order_id, job_id, pid, effect FROM "${ledger}".effects WHERE order_id = $1`,
        [orderId],
      );

    beforeAll(async () => {
      opened = await openStore('postgres', 'jobs_mp');
      dataSource = await openDataSource();
      await dataSource.query(`CREATE SCHEMA "${ledger}"`);
      await dataSource.query(
        `CREATE TABLE "${ledger}".effects (order_id text NOT NULL, job_id text NOT NULL, pid int NOT NULL, effect uuid NOT NULL)`,
      );
      await dataSource.query(
        `CREATE TABLE "${ledger}".starts (job_id text PRIMARY KEY, pid int NOT NULL)`,
      );
    });
    afterAll(async () => {
      await opened?.cleanup();
      if (dataSource) {
        await dropSchema(dataSource, ledger);
        await dataSource.destroy();
      }
    });
    beforeEach(async () => {
      queueName = `idem-jobs-mp-${randomBytes(4).toString('hex')}`;
      queue = new Queue(queueName, { connection });
      events = new QueueEvents(queueName, { connection });
      await events.waitUntilReady();
      workers = await Promise.all([startWorker(), startWorker()]);
    }, 120_000);
    afterEach(async () => {
      await Promise.all(workers.map(stopWorker));
      await events.close();
      await queue.obliterate({ force: true });
      await queue.close();
    });

    /** Every job's return value, and that no process wrote the raw key to its output. */
    async function expectCompleted(orderId: string, jobs: Job<ChargeData, ChargeResult>[]) {
      const values: ChargeResult[] = [];
      for (const job of jobs) {
        const done = await queue.getJob(job.id!);
        expect(await done!.getState()).toBe('completed');
        values.push(done!.returnvalue);
      }
      for (const worker of workers) expect(worker.output()).not.toContain(orderId);
      return values;
    }

    it('recovers a stalled job whose worker was killed mid-job: the other process runs the effect once and completes it', async () => {
      const orderId = `order-${randomUUID()}`;
      const holding = nextMessage((m) => 'holding' in m);
      // attempts: 1, so a failed attempt would fail the job for good.
      const job = await queue.add(
        'charge',
        { orderId, point: 'mid-job' },
        { jobId: 'stall-mid', attempts: 1 },
      );
      const victim = await holding;
      const survivor = workers.find((w) => w !== victim)!;
      await kill(victim);

      const value = await job.waitUntilFinished(events, 30_000);
      const effects = await effectsOf(orderId);
      expect(effects).toHaveLength(1);
      expect(effects[0].pid).toBe(survivor.pid);
      expect(value).toEqual({ charged: orderId, effect: effects[0].effect, pid: survivor.pid });
      // The survivor took the job the victim held (BullMQ's stalled-job recovery).
      expect(survivor.messages).toContainEqual({ active: 'stall-mid', pid: survivor.pid });
      const [finished] = await expectCompleted(orderId, [job]);
      expect(finished).toEqual(value);
      const records = await opened.store.list({ scope: 'Charges.process' });
      expect(records.filter((r) => r.key === orderId).map((r) => r.state)).toEqual(['COMPLETE']);
    }, 60_000);

    it('recovers a stalled job whose worker died after its result was recorded: the effect is not run again, the job completes with the stored value', async () => {
      const orderId = `order-${randomUUID()}`;
      const died = Promise.race(
        workers.map((w) =>
          once(w.child, 'exit').then(([, signal]) => ({ worker: w, signal: signal as string })),
        ),
      );
      const job = await queue.add(
        'charge',
        { orderId, point: 'after-record' },
        { jobId: 'stall-after', attempts: 1 },
      );
      const { worker: victim, signal } = await died;
      expect(signal).toBe('SIGKILL');
      const survivor = workers.find((w) => w !== victim)!;

      const value = await job.waitUntilFinished(events, 30_000);
      const effects = await effectsOf(orderId);
      expect(effects).toHaveLength(1);
      // The effect ran in the process that died; the survivor handed BullMQ its stored value.
      expect(effects[0].pid).toBe(victim.pid);
      expect(value).toEqual({ charged: orderId, effect: effects[0].effect, pid: victim.pid });
      expect(survivor.messages).toContainEqual({ active: 'stall-after', pid: survivor.pid });
      const [finished] = await expectCompleted(orderId, [job]);
      expect(finished).toEqual(value);
    }, 60_000);

    it('runs the same work enqueued twice under two ids once: the twin, taken by the other process while the first runs, completes with the same value', async () => {
      const orderId = `order-${randomUUID()}`;
      const holding = nextMessage((m) => 'holding' in m);
      const first = await queue.add('charge', { orderId, point: 'hold' }, { jobId: 'twin-1' });
      const holder = await holding;
      const other = workers.find((w) => w !== holder)!;

      // The holder runs one job at a time (concurrency: 1): the twin goes to the other process.
      const twinTaken = nextMessage((m) => 'active' in m && m.active === 'twin-2');
      const twinDelayed = new Promise<void>((resolve) =>
        events.on('delayed', ({ jobId }) => {
          if (jobId === 'twin-2') resolve();
        }),
      );
      const twin = await queue.add('charge', { orderId }, { jobId: 'twin-2', attempts: 1 });
      expect(await twinTaken).toBe(other);
      // Refused in flight, the twin waits in BullMQ's delayed set (not failed, though attempts: 1).
      await twinDelayed;
      holder.child.send({ go: 'twin-1' });

      const [value, replayed] = await Promise.all([
        first.waitUntilFinished(events, 30_000),
        twin.waitUntilFinished(events, 30_000),
      ]);
      const effects = await effectsOf(orderId);
      expect(effects).toHaveLength(1);
      expect(effects[0]).toMatchObject({ job_id: 'twin-1', pid: holder.pid });
      expect(replayed).toEqual(value);
      expect(await expectCompleted(orderId, [first, twin])).toEqual([value, value]);
    }, 60_000);
  },
);
