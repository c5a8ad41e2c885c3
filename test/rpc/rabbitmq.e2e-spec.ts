import { Controller, INestMicroservice } from '@nestjs/common';
import {
  Ctx,
  EventPattern,
  MessagePattern,
  Payload,
  RmqContext,
  Transport,
} from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import * as amqp from 'amqplib';
import { randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import { AcquireRequest, AcquireResult, Idempotent, IdempotencyModule } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { observeSettlements } from '../support/amqp-settlements';
import { Gate } from '../support/gate';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

const AMQP_URL = process.env.IDEMPOTENCY_TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
// globalSetup probes the broker; CI makes an unreachable one fatal there.
const describeWithBroker = describe.runIf(process.env.IDEMPOTENCY_TEST_RABBITMQ === 'available');

const runs = new Map<string, number>();

const settlements = observeSettlements();
const gates = new Map<string, { entered: Gate; release: Gate }>();

/** The real PostgreSQL store, reporting each acquisition's outcome so the test can await it. */
class ObservedStore extends TypeOrmIdempotencyStore {
  readonly outcomes = new EventEmitter();
  override async tryAcquire(request: AcquireRequest): Promise<AcquireResult> {
    const result = await super.tryAcquire(request);
    this.outcomes.emit(result.kind, request.key);
    return result;
  }
}

@Controller()
class PaymentsConsumer {
  @EventPattern<string>('payment.captured')
  @Idempotent({ key: 'message.properties.messageId', waitTimeout: 'PT0S' })
  async captured(@Payload() data: { paymentId: string }, @Ctx() context: RmqContext) {
    runs.set(data.paymentId, (runs.get(data.paymentId) ?? 0) + 1);
    const gate = gates.get(data.paymentId);
    if (gate) {
      gate.entered.open();
      await gate.release.promise;
    }
    context.getChannelRef().ack(context.getMessage());
  }

  @MessagePattern('payment.quote')
  @Idempotent({ key: 'data.quoteId' })
  quote(@Payload() data: { quoteId: string }, @Ctx() context: RmqContext) {
    runs.set(data.quoteId, (runs.get(data.quoteId) ?? 0) + 1);
    context.getChannelRef().ack(context.getMessage());
    return { quoteId: data.quoteId, token: randomUUID() };
  }
}

describeWithBroker('RabbitMQ message handlers against the real broker', () => {
  const queue = `nest-idempotency-test-${randomUUID()}`;
  const schema = scratchSchema('rmq');
  let dataSource: DataSource;
  let store: ObservedStore;
  let app: INestMicroservice;
  let connection: amqp.ChannelModel;
  let channel: amqp.Channel;

  const start = async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store, rmq: { noAck: false } })],
      controllers: [PaymentsConsumer],
    }).compile();
    app = moduleRef.createNestMicroservice({
      transport: Transport.RMQ,
      options: {
        urls: [AMQP_URL],
        queue,
        noAck: false,
        prefetchCount: 10,
        queueOptions: { durable: false },
      },
      logger: false,
    });
    await app.listen();
  };

  beforeAll(async () => {
    dataSource = await openDataSource();
    store = new ObservedStore(dataSource, { schema, ensureSchema: true });
    connection = await amqp.connect(AMQP_URL);
    channel = await connection.createChannel();
    await channel.assertQueue(queue, { durable: false });
    await start();
  });
  afterAll(async () => {
    await app?.close();
    await channel?.deleteQueue(queue).catch(() => undefined);
    await connection?.close();
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });

  const publish = (pattern: string, data: unknown, messageId: string) =>
    channel.sendToQueue(queue, Buffer.from(JSON.stringify({ pattern, data })), { messageId });

  /** Everything was acked: after the consumer stops, nothing comes back to the queue. */
  const assertQueueDrained = async () => {
    await app.close();
    const { messageCount } = await channel.checkQueue(queue);
    expect(messageCount).toBe(0);
    await start();
  };

  it('runs the handler once when the same message (same messageId) is delivered twice', async () => {
    const paymentId = randomUUID();
    const messageId = randomUUID();
    const completed = new Gate();
    gates.set(paymentId, { entered: new Gate(), release: completed });
    completed.open();
    const firstAck = once(settlements, `ack:${messageId}`);
    publish('payment.captured', { paymentId }, messageId);
    await firstAck;
    const replayed = once(store.outcomes, 'duplicate');
    const replayAck = once(settlements, `ack:${messageId}`);
    publish('payment.captured', { paymentId }, messageId);
    const [key] = await replayed;
    expect(key).toBe(messageId);
    await replayAck;
    expect(runs.get(paymentId)).toBe(1);
    await assertQueueDrained();
    expect(runs.get(paymentId)).toBe(1);
  });

  it('nacks a duplicate that arrives mid-flight, and replays it on redelivery', async () => {
    const paymentId = randomUUID();
    const messageId = randomUUID();
    const gate = { entered: new Gate(), release: new Gate() };
    gates.set(paymentId, gate);
    publish('payment.captured', { paymentId }, messageId);
    await gate.entered.promise;
    const inFlight = once(store.outcomes, 'in-flight');
    publish('payment.captured', { paymentId }, messageId);
    await inFlight; // refused and requeued while the first holds the key
    const replayed = once(store.outcomes, 'duplicate');
    const acks = new Promise<void>((resolve) => {
      let count = 0;
      settlements.on(`ack:${messageId}`, () => ++count === 2 && resolve());
    });
    gate.release.open();
    await replayed;
    await acks; // the handler's own ack and the replay's
    expect(runs.get(paymentId)).toBe(1);
    await assertQueueDrained();
    expect(runs.get(paymentId)).toBe(1);
  });

  it('replies to a @MessagePattern replay with the stored value', async () => {
    const quoteId = randomUUID();
    const replies = await channel.assertQueue('', { exclusive: true });
    const received: unknown[] = [];
    const arrived = new EventEmitter();
    await channel.consume(
      replies.queue,
      (message) => {
        if (!message) return;
        received.push(JSON.parse(message.content.toString()));
        arrived.emit('reply');
      },
      { noAck: true },
    );
    for (let i = 0; i < 2; i++) {
      const reply = once(arrived, 'reply');
      channel.sendToQueue(
        queue,
        Buffer.from(
          JSON.stringify({ pattern: 'payment.quote', data: { quoteId }, id: randomUUID() }),
        ),
        {
          replyTo: replies.queue,
          correlationId: randomUUID(),
        },
      );
      await reply;
    }
    const [a, b] = received as { response: unknown; err?: unknown }[];
    expect(a.err).toBeUndefined();
    expect(b.response).toEqual(a.response);
    expect(a.response).toMatchObject({ quoteId });
    expect(runs.get(quoteId)).toBe(1);
  });
});
