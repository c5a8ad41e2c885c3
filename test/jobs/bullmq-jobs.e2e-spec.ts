import { INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, OnWorkerEvent, Processor, WorkerHost } from '@nestjs/bullmq';
import { Job, Queue, QueueEvents, UnrecoverableError } from 'bullmq';
import { randomBytes } from 'node:crypto';
import {
  IdempotencyModule,
  IdempotencyStoreUnavailableError,
  Idempotent,
  IdempotentOptions,
  JobKeySource,
} from 'nest-idempotency';
import { DEFAULT_MAX_KEY_LENGTH } from 'nest-idempotency/core';
import { CuttableStore, openCuttableStore } from '../support/cuttable-store';
import { Gate } from '../support/gate';
import { describeIfRedis, probeRedisSync, redisUrl } from '../support/redis';
import { openStore, OpenedStore, storeFromEnv } from '../support/stores';

/**
 * `@Idempotent` on a BullMQ processor's `process(job)`, on the real Redis:
 * two applications (two workers) consume one queue, each with its own
 * connections to one store. IdempotencyModule is imported after BullModule,
 * whose explorer starts the workers in its own onModuleInit: the method it
 * binds is the decorator's wrapper.
 */

type Order = { orderId?: string; amount?: number; fail?: boolean };
type Effect = { orderId: string; jobId: string | undefined; worker: number };

const url = new URL(redisUrl());
const connection = { host: url.hostname, port: Number(url.port || 6379) };

let effects: Effect[] = [];
/** Holds every run until the test opens it (null: runs go straight through). */
let hold: Gate | null = null;
/** Resolved when a run starts. */
let started = new Gate();
/** Each failed attempt's error, and a gate resolved by the next one. */
let failures: { jobId: string | undefined; error: Error }[] = [];
let failed = new Gate();

function appModule(
  worker: number,
  queueName: string,
  options: IdempotentOptions,
  store: () => Promise<OpenedStoreLike>,
) {
  @Processor(queueName, { concurrency: 4 })
  class Payments extends WorkerHost {
    @Idempotent(options)
    async process(job: Job<Order>): Promise<{ charged: string; by: number }> {
      effects.push({ orderId: job.data.orderId ?? '', jobId: job.id, worker });
      started.open();
      if (hold) await hold.promise;
      if (job.data.fail) throw new Error('the provider timed out');
      return { charged: job.data.orderId ?? '', by: worker };
    }

    @OnWorkerEvent('failed')
    onFailed(job: Job<Order>, error: Error): void {
      failures.push({ jobId: job.id, error });
      failed.open();
    }
  }

  @Module({
    imports: [
      BullModule.forRoot({ connection }),
      BullModule.registerQueue({ name: queueName }),
      IdempotencyModule.forRootAsync({
        useFactory: async () => ({ store: (await store()).store }),
      }),
    ],
    providers: [Payments],
  })
  class AppModule {}
  return AppModule;
}

type OpenedStoreLike = Pick<OpenedStore, 'store'>;

describeIfRedis(probeRedisSync(), `Redis at ${redisUrl()}`)(
  '@Idempotent BullMQ jobs on Redis',
  () => {
    let opened: OpenedStore;
    let queueName: string;
    let queue: Queue;
    let events: QueueEvents;
    const apps: INestApplicationContext[] = [];
    const closers: (() => Promise<void>)[] = [];

    /** `shared`: one store for every worker (else each opens its own on the Redis namespace). */
    async function startWorkers(
      options: IdempotentOptions,
      count = 2,
      shared?: OpenedStoreLike,
    ): Promise<void> {
      for (let worker = 0; worker < count; worker++) {
        let own = shared;
        if (!own) {
          const fromEnv = await storeFromEnv(opened.env);
          closers.push(fromEnv.close);
          own = fromEnv;
        }
        const store = own;
        apps.push(
          await NestFactory.createApplicationContext(
            appModule(worker, queueName, options, async () => store),
            { logger: false },
          ),
        );
      }
    }

    /** Waits for the next failed attempt and returns its error. */
    async function nextFailure(): Promise<Error> {
      await failed.promise;
      failed = new Gate();
      return failures[failures.length - 1].error;
    }

    beforeAll(async () => {
      opened = await openStore('redis', 'jobs');
    });
    afterAll(async () => {
      await opened?.cleanup();
    });
    beforeEach(async () => {
      effects = [];
      hold = null;
      started = new Gate();
      failures = [];
      failed = new Gate();
      queueName = `idem-jobs-${randomBytes(4).toString('hex')}`;
      queue = new Queue(queueName, { connection });
      events = new QueueEvents(queueName, { connection });
      await events.waitUntilReady();
    });
    afterEach(async () => {
      hold?.open();
      for (const app of apps.splice(0)) await app.close();
      for (const close of closers.splice(0)) await close().catch(() => undefined);
      await events.close();
      await queue.obliterate({ force: true });
      await queue.close();
    });

    it('runs the same work enqueued under many ids once, concurrently, and completes every job with its value', async () => {
      // Jobs queued before the workers exist: the first ones are picked up as the workers start.
      const jobs = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          queue.add('charge', { orderId: 'order-1' }, { jobId: `charge-a-${i}` }),
        ),
      );
      await startWorkers({ key: 'data.orderId', lease: '10s' });
      const results = await Promise.all(jobs.map((job) => job.waitUntilFinished(events, 20_000)));
      expect(effects).toHaveLength(1);
      for (const result of results) expect(result).toEqual(results[0]);
      expect(results[0]).toEqual({ charged: 'order-1', by: effects[0].worker });
    });

    it('keys by job.id by default: a job processed again replays its stored value', async () => {
      await startWorkers({ lease: '10s' });
      const first = await queue.add('charge', { orderId: 'order-2' }, { jobId: 'charge-b' });
      const value = (await first.waitUntilFinished(events, 20_000)) as unknown;
      // The same job id again (the job was removed): BullMQ runs it again, the effect does not.
      await first.remove();
      const again = await queue.add('charge', { orderId: 'order-2' }, { jobId: 'charge-b' });
      expect(await again.waitUntilFinished(events, 20_000)).toEqual(value);
      // Another id for the same order is other work under the default key.
      const other = await queue.add('charge', { orderId: 'order-2' }, { jobId: 'charge-c' });
      await other.waitUntilFinished(events, 20_000);
      expect(effects.map((e) => e.jobId)).toEqual(['charge-b', 'charge-c']);
    });

    it('delays a twin found in flight (using up none of its attempts) and completes it with the stored value', async () => {
      await startWorkers({ key: 'data.orderId', lease: '3s', waitTimeout: 0 });
      hold = new Gate();
      const first = await queue.add('charge', { orderId: 'order-3' }, { jobId: 'charge-d' });
      await started.promise;
      const twin = await queue.add(
        'charge',
        { orderId: 'order-3' },
        { jobId: 'charge-e', attempts: 1 },
      );
      // The twin is refused in flight and goes back to the delayed set, not to failed.
      const delayed = new Promise<void>((resolve) =>
        events.on('delayed', ({ jobId }) => {
          if (jobId === 'charge-e') resolve();
        }),
      );
      await delayed;
      hold.open();
      const [value, replayed] = await Promise.all([
        first.waitUntilFinished(events, 20_000),
        twin.waitUntilFinished(events, 30_000),
      ]);
      expect(replayed).toEqual(value);
      expect(effects).toHaveLength(1);
      const finished = await queue.getJob('charge-e');
      // One attempt, the one that completed: the delay used none (with attempts: 1 it would have failed).
      expect(finished?.attemptsMade).toBe(1);
      expect(await finished?.getState()).toBe('completed');
    });

    const refundOptions: IdempotentOptions = {
      key: 'data.orderId',
      fingerprint: (source) => String(((source as JobKeySource).data as Order).amount),
      onExpiredLease: 'refuse',
      lease: '10s',
    };

    it('fails a job with other data under a used key for good (UnrecoverableError), running nothing', async () => {
      await startWorkers(refundOptions, 1);
      const first = await queue.add('refund', { orderId: 'order-4', amount: 10 }, { jobId: 'r-1' });
      await first.waitUntilFinished(events, 20_000);
      const failing = nextFailure();
      await queue.add('refund', { orderId: 'order-4', amount: 99 }, { jobId: 'r-2', attempts: 5 });
      const error = await failing;
      expect(error).toBeInstanceOf(UnrecoverableError);
      expect(error.message).toContain('was already used by a job with other data');
      expect(error.message).not.toContain('order-4');
      const refused = await queue.getJob('r-2');
      expect(await refused?.getState()).toBe('failed');
      expect(refused?.attemptsMade).toBe(1);
      expect(effects.map((e) => e.jobId)).toEqual(['r-1']);
    });

    it('fails a job without a key, or with one over the limit, for good (UnrecoverableError), running nothing', async () => {
      await startWorkers(refundOptions, 1);
      let failing = nextFailure();
      await queue.add('refund', { amount: 1 }, { jobId: 'r-3', attempts: 5 });
      expect(await failing).toBeInstanceOf(UnrecoverableError);
      failing = nextFailure();
      const orderId = 'k'.repeat(DEFAULT_MAX_KEY_LENGTH + 1);
      await queue.add('refund', { orderId, amount: 1 }, { jobId: 'r-3b', attempts: 5 });
      expect(await failing).toBeInstanceOf(UnrecoverableError);
      for (const id of ['r-3', 'r-3b']) expect((await queue.getJob(id))?.attemptsMade).toBe(1);
      expect(effects).toEqual([]);
    });

    it('in strict mode, fails a job whose earlier outcome is unknown for good (UnrecoverableError)', async () => {
      await startWorkers(refundOptions, 1);
      // The first job's process threw (its only attempt): in strict mode the outcome is unknown.
      let failing = nextFailure();
      await queue.add('refund', { orderId: 'order-5', amount: 5, fail: true }, { jobId: 'r-4' });
      expect((await failing).message).toBe('the provider timed out');
      failing = nextFailure();
      await queue.add('refund', { orderId: 'order-5', amount: 5 }, { jobId: 'r-5', attempts: 5 });
      const error = await failing;
      expect(error).toBeInstanceOf(UnrecoverableError);
      expect(error.message).toContain('is unknown');
      expect((await queue.getJob('r-5'))?.attemptsMade).toBe(1);
      expect(effects.map((e) => e.jobId)).toEqual(['r-4']);
    });

    it("a process that throws fails the attempt and frees the key: BullMQ's next attempt runs it", async () => {
      await startWorkers({ key: 'data.orderId', lease: '10s' }, 1);
      const failing = nextFailure();
      const job = await queue.add(
        'charge',
        { orderId: 'order-6', fail: true },
        { jobId: 'c-1', attempts: 2 },
      );
      expect((await failing).message).toBe('the provider timed out');
      // The second attempt runs again (and throws again): the key was free.
      await expect(job.waitUntilFinished(events, 20_000)).rejects.toThrow('the provider timed out');
      expect(effects.map((e) => e.jobId)).toEqual(['c-1', 'c-1']);
    });

    describe('when the store is down', () => {
      let cuttable: CuttableStore;
      beforeAll(async () => {
        cuttable = await openCuttableStore('jobs_down');
      });
      afterAll(async () => {
        await cuttable?.close();
      });

      it("fails the attempt with IdempotencyStoreUnavailableError; BullMQ's attempts and backoff run the job once the store is back", async () => {
        await startWorkers({ key: 'data.orderId', lease: '10s' }, 1, cuttable);
        await cuttable.cut();
        let restored = false;
        try {
          const failing = nextFailure();
          const job = await queue.add(
            'charge',
            { orderId: 'order-7' },
            { jobId: 'c-2', attempts: 20, backoff: { type: 'fixed', delay: 200 } },
          );
          const error = await failing;
          expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
          expect(error.message).not.toContain('order-7');
          expect(effects).toEqual([]);
          await cuttable.restore();
          restored = true;
          expect(await job.waitUntilFinished(events, 30_000)).toEqual({
            charged: 'order-7',
            by: 0,
          });
          expect(effects.map((e) => e.jobId)).toEqual(['c-2']);
        } finally {
          if (!restored) await cuttable.restore();
        }
      });
    });
  },
);
