import { Controller, INestMicroservice } from '@nestjs/common';
import { Ctx, EventPattern, Payload, RmqContext, Transport } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import * as amqp from 'amqplib';
import { randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import {
  AcquireRequest,
  AcquireResult,
  Idempotent,
  IdempotencyModule,
  IdempotencyStoreUnavailableError,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { observeSettlements } from '../support/amqp-settlements';
import { Gate } from '../support/gate';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * What happens to a RabbitMQ delivery whose handler does not run, against the
 * real broker: with `noAck: false` every one is settled (none stalls the
 * prefetch window), a requeue waits first (no hot loop), and a consumer with
 * `noAck: true` is never acked (which would close its channel).
 */
const AMQP_URL = process.env.IDEMPOTENCY_TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const describeWithBroker = describe.runIf(process.env.IDEMPOTENCY_TEST_RABBITMQ === 'available');

const runs = new Map<string, number>();
const gates = new Map<string, { entered: Gate; release: Gate }>();
const ran = new EventEmitter();

const settlements = observeSettlements();
const settled = settlements.seen;

/** The real PostgreSQL store, with outcomes observable and an outage switch for acquire. */
class ObservedStore extends TypeOrmIdempotencyStore {
  readonly outcomes = new EventEmitter();
  outageFor = new Set<string>();
  override async tryAcquire(request: AcquireRequest): Promise<AcquireResult> {
    if (this.outageFor.has(request.key)) {
      this.outageFor.delete(request.key);
      this.outcomes.emit('unavailable', request.key);
      throw new IdempotencyStoreUnavailableError(
        'PostgreSQL did not answer acquire within 5000 ms',
        200,
      );
    }
    const result = await super.tryAcquire(request);
    this.outcomes.emit(result.kind, request.key);
    return result;
  }
}

@Controller()
class ManualAckConsumer {
  @EventPattern<string>('manual.pay')
  @Idempotent({ key: 'message.properties.messageId', waitTimeout: 'PT0S' })
  async pay(@Payload() data: { id: string }, @Ctx() context: RmqContext) {
    runs.set(data.id, (runs.get(data.id) ?? 0) + 1);
    const gate = gates.get(data.id);
    if (gate) {
      gate.entered.open();
      await gate.release.promise;
    }
    context.getChannelRef().ack(context.getMessage());
    ran.emit(data.id);
  }
}

@Controller()
class AutoAckConsumer {
  @EventPattern<string>('auto.pay')
  @Idempotent({ key: 'message.properties.messageId', rmq: { noAck: true } })
  async pay(@Payload() data: { id: string }) {
    runs.set(data.id, (runs.get(data.id) ?? 0) + 1);
    ran.emit(data.id);
  }
}

describeWithBroker('RabbitMQ deliveries the library settles, against the real broker', () => {
  const schema = scratchSchema('rmqset');
  const manualQueue = `nest-idempotency-manual-${randomUUID()}`;
  const autoQueue = `nest-idempotency-auto-${randomUUID()}`;
  const deadLetters = `nest-idempotency-dlx-${randomUUID()}`;
  let dataSource: DataSource;
  let store: ObservedStore;
  let manual: INestMicroservice;
  let auto: INestMicroservice;
  let connection: amqp.ChannelModel;
  let channel: amqp.Channel;
  const dead: string[] = [];
  const deadArrived = new EventEmitter();

  const start = async (
    controller: new () => unknown,
    queue: string,
    noAck: boolean,
    moduleNoAck: boolean,
  ) => {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store, rmq: { noAck: moduleNoAck } })],
      controllers: [controller],
    }).compile();
    const app = moduleRef.createNestMicroservice({
      transport: Transport.RMQ,
      options: {
        urls: [AMQP_URL],
        queue,
        noAck,
        // One unsettled delivery at a time: a refusal left unsettled would stall the consumer.
        prefetchCount: 1,
        queueOptions: {
          durable: false,
          arguments: noAck ? {} : { 'x-dead-letter-exchange': deadLetters },
        },
      },
      logger: false,
    });
    await app.listen();
    return app;
  };

  beforeAll(async () => {
    dataSource = await openDataSource();
    store = new ObservedStore(dataSource, { schema, ensureSchema: true });
    connection = await amqp.connect(AMQP_URL);
    channel = await connection.createChannel();
    await channel.assertExchange(deadLetters, 'fanout', { durable: false, autoDelete: true });
    const { queue } = await channel.assertQueue('', { exclusive: true });
    await channel.bindQueue(queue, deadLetters, '');
    await channel.consume(
      queue,
      (message) => {
        if (!message) return;
        dead.push(String(message.properties.messageId));
        deadArrived.emit(String(message.properties.messageId));
      },
      { noAck: true },
    );
    manual = await start(ManualAckConsumer, manualQueue, false, false);
    auto = await start(AutoAckConsumer, autoQueue, true, true);
  });
  afterAll(async () => {
    await manual?.close();
    await auto?.close();
    await channel?.deleteQueue(manualQueue).catch(() => undefined);
    await channel?.deleteQueue(autoQueue).catch(() => undefined);
    await connection?.close();
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });

  const publish = (queue: string, pattern: string, id: string, messageId?: string) =>
    channel.sendToQueue(queue, Buffer.from(JSON.stringify({ pattern, data: { id } })), {
      messageId,
    });

  it('dead-letters a delivery without a key, and the consumer (prefetch 1) goes on with the next', async () => {
    const missing = randomUUID();
    const next = randomUUID();
    const deadLettered = once(settlements, 'dead-letter:undefined');
    publish(manualQueue, 'manual.pay', missing);
    await deadLettered;
    const processed = once(ran, next);
    publish(manualQueue, 'manual.pay', next, next);
    await processed;
    expect(runs.get(missing)).toBeUndefined();
    expect(runs.get(next)).toBe(1);
    expect(dead).toContain('undefined');
  });

  it('requeues a delivery the store could not answer, after a delay, and runs it once the store answers', async () => {
    const id = randomUUID();
    store.outageFor.add(id);
    const requeued = once(settlements, `requeue:${id}`);
    const processed = once(ran, id);
    const sentAt = performance.now();
    publish(manualQueue, 'manual.pay', id, id);
    await requeued;
    const requeuedAfterMs = performance.now() - sentAt;
    await processed;
    expect(requeuedAfterMs).toBeGreaterThanOrEqual(150);
    expect(runs.get(id)).toBe(1);
  });

  it('acks a replayed duplicate (its handler, which would ack, does not run)', async () => {
    const id = randomUUID();
    const processed = once(ran, id);
    publish(manualQueue, 'manual.pay', id, id);
    await processed;
    const replayAck = once(settlements, `ack:${id}`);
    const replayed = once(store.outcomes, 'duplicate');
    publish(manualQueue, 'manual.pay', id, id);
    await replayed;
    await replayAck;
    expect(runs.get(id)).toBe(1);
  });

  it('requeues an in-flight duplicate with a delay: a handful of redeliveries while the twin runs, not thousands', async () => {
    const id = randomUUID();
    const gate = { entered: new Gate(), release: new Gate() };
    gates.set(id, gate);
    // The twin holds the key; its duplicate goes to a second consumer of the same queue.
    const second = await start(ManualAckConsumer, manualQueue, false, false);
    try {
      publish(manualQueue, 'manual.pay', id, id);
      await gate.entered.promise;
      let inFlight = 0;
      const count = (key: string) => key === id && inFlight++;
      store.outcomes.on('in-flight', count);
      const heldFor = 1500;
      const firstRefusal = once(store.outcomes, 'in-flight');
      publish(manualQueue, 'manual.pay', id, id);
      await firstRefusal;
      // The twin's action takes 1.5 s; meanwhile its duplicate keeps coming back.
      await new Promise((resolve) => setTimeout(resolve, heldFor));
      const replayed = once(store.outcomes, 'duplicate');
      gate.release.open();
      await replayed;
      store.outcomes.off('in-flight', count);
      expect(runs.get(id)).toBe(1);
      // 100 ms at least between redeliveries: at most ~16 in 1.5 s (the old hot loop made 1,400–2,900).
      expect(inFlight).toBeGreaterThanOrEqual(2);
      expect(inFlight).toBeLessThanOrEqual(heldFor / 100 + 3);
    } finally {
      await second.close();
    }
  });

  it('never acks for a noAck: true consumer: a replay settles nothing and the channel stays open', async () => {
    const id = randomUUID();
    const first = once(ran, id);
    publish(autoQueue, 'auto.pay', id, id);
    await first;
    const replayed = once(store.outcomes, 'duplicate');
    publish(autoQueue, 'auto.pay', id, id);
    await replayed;
    // A later message is processed on the same channel: an ack would have closed it (406).
    const sentinel = randomUUID();
    const after = once(ran, sentinel);
    publish(autoQueue, 'auto.pay', sentinel, sentinel);
    await after;
    expect(runs.get(id)).toBe(1);
    expect(settled.filter((s) => s.endsWith(`:${id}`))).toEqual([]);
  });
});
