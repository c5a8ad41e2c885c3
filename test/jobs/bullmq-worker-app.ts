/**
 * One BullMQ worker process for bullmq-worker-processes.e2e-spec.ts, started with
 *   node -r @swc-node/register test/jobs/bullmq-worker-app.ts
 * Env: the records' store as test/support/stores.ts describes it (IDEM_STORE,
 * IDEM_STORE_URL, IDEM_STORE_NAMESPACE; created by the parent), JOBS_QUEUE,
 * JOBS_REDIS_URL (the queue's Redis), JOBS_LEDGER_URL and JOBS_LEDGER_SCHEMA
 * (the PostgreSQL schema holding `effects`, one row per effect, and `starts`,
 * one row per job whose handler began).
 *
 * The processor (`concurrency: 1`, short locks, so a dead worker's job is
 * found stalled within seconds) charges `data.orderId` once. A job's data may
 * name what its first handler run does (`data.point`):
 *   hold          report `{ holding }` and wait for `{ go: jobId }` from the parent;
 *   mid-job       report `{ holding }` and never go on (the parent SIGKILLs this process);
 *   after-record  write the effect, return, and SIGKILL this process right after the
 *                 store recorded the result: before BullMQ is told the job completed.
 * Reports `{ ready }` once the worker runs and `{ active: jobId }` each time it takes a job.
 */
import 'reflect-metadata';
import { BullModule, OnWorkerEvent, Processor, WorkerHost } from '@nestjs/bullmq';
import { INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Job } from 'bullmq';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyModule, IdempotencyStore } from 'nest-idempotency';
import { DataSource } from 'typeorm';
import { storeFromEnv } from '../support/stores';

export type JobPoint = 'hold' | 'mid-job' | 'after-record';
export interface ChargeData {
  orderId: string;
  point?: JobPoint;
}
export interface ChargeResult {
  charged: string;
  effect: string;
  pid: number;
}
export type WorkerMessage =
  { ready: number } | { active: string; pid: number } | { holding: string; pid: number };

const queueName = required('JOBS_QUEUE');
const redis = new URL(required('JOBS_REDIS_URL'));
const ledger = required('JOBS_LEDGER_SCHEMA');
const dataSource = new DataSource({
  type: 'postgres',
  url: required('JOBS_LEDGER_URL'),
  extra: { max: 4 },
});
let records: { store: IdempotencyStore; close: () => Promise<void> } | undefined;
/** Set by an `after-record` first run: the next completed record ends this process. */
let dieAfterRecord = false;
const released = new Map<string, () => void>();

@Processor(queueName, { concurrency: 1, lockDuration: 1_500, stalledInterval: 500 })
class Charges extends WorkerHost {
  @Idempotent({ key: 'data.orderId', lease: '2s', waitTimeout: 0 })
  async process(job: Job<ChargeData>): Promise<ChargeResult> {
    const [first] = (await dataSource.query(
      `INSERT INTO "${ledger}".starts (job_id, pid) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING job_id`,
      [job.id, process.pid],
    )) as unknown[];
    const point = first ? job.data.point : undefined;
    if (point === 'hold' || point === 'mid-job') {
      const go = new Promise<void>((resolve) => released.set(job.id!, resolve));
      process.send!({ holding: job.id!, pid: process.pid } satisfies WorkerMessage);
      await go;
    }
    const effect = randomUUID();
    await dataSource.query(
      `INSERT INTO "${ledger}".effects (order_id, job_id, pid, effect) VALUES ($1, $2, $3, $4)`,
      [job.data.orderId, job.id, process.pid, effect],
    );
    if (point === 'after-record') dieAfterRecord = true;
    return { charged: job.data.orderId, effect, pid: process.pid };
  }

  @OnWorkerEvent('active')
  onActive(job: Job): void {
    process.send!({ active: job.id!, pid: process.pid } satisfies WorkerMessage);
  }
}

@Module({
  imports: [
    BullModule.forRoot({
      connection: { host: redis.hostname, port: Number(redis.port || 6379) },
    }),
    BullModule.registerQueue({ name: queueName }),
    IdempotencyModule.forRootAsync({
      useFactory: async () => {
        records = await storeFromEnv(process.env);
        const store = records.store;
        const complete = store.complete.bind(store);
        // The `after-record` kill point: the result is recorded, BullMQ has not heard of it.
        store.complete = async (lease, payload) => {
          await complete(lease, payload);
          if (dieAfterRecord) process.kill(process.pid, 'SIGKILL');
        };
        return { store };
      },
    }),
  ],
  providers: [Charges],
})
class WorkerModule {}

let app: INestApplicationContext | undefined;

async function main(): Promise<void> {
  await dataSource.initialize();
  app = await NestFactory.createApplicationContext(WorkerModule, {
    logger: ['error', 'warn'],
    abortOnError: false,
  });
  process.on('message', (message: { go?: string }) => {
    if (message?.go) released.get(message.go)?.();
  });
  process.send!({ ready: process.pid } satisfies WorkerMessage);
}

let stopping = false;
async function stop(code: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  for (const go of released.values()) go();
  await app?.close().catch(() => undefined);
  await records?.close().catch(() => undefined);
  if (dataSource.isInitialized) await dataSource.destroy().catch(() => undefined);
  process.exit(code);
}

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

process.on('SIGTERM', () => void stop(0));
process.on('disconnect', () => void stop(0));
main().catch((error: unknown) => {
  console.error(error);
  void stop(1);
});
