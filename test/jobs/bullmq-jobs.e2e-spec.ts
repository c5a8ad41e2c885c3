import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Job, Queue, QueueEvents } from 'bullmq';
import { randomBytes } from 'node:crypto';
import { IdempotencyModule, Idempotent, IdempotentOptions } from 'nest-idempotency';
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

type Order = { orderId: string };
type Effect = { orderId: string; jobId: string | undefined; worker: number };

const url = new URL(redisUrl());
const connection = { host: url.hostname, port: Number(url.port || 6379) };

let effects: Effect[] = [];
/** Holds every run until the test opens it (null: runs go straight through). */
let hold: Gate | null = null;
/** Resolved when a run starts. */
let started = new Gate();

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
      effects.push({ orderId: job.data.orderId, jobId: job.id, worker });
      started.open();
      if (hold) await hold.promise;
      return { charged: job.data.orderId, by: worker };
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

    async function startWorkers(options: IdempotentOptions, count = 2): Promise<void> {
      for (let worker = 0; worker < count; worker++) {
        const own = await storeFromEnv(opened.env);
        closers.push(own.close);
        apps.push(
          await NestFactory.createApplicationContext(
            appModule(worker, queueName, options, async () => own),
            { logger: false },
          ),
        );
      }
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
  },
);
