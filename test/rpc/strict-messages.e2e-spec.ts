import { Controller, INestMicroservice } from '@nestjs/common';
import {
  Ctx,
  EventPattern,
  KafkaContext,
  KafkaRetriableException,
  MessagePattern,
  Payload,
  RmqContext,
  ServerKafka,
  Transport,
} from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import * as amqp from 'amqplib';
import { randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import {
  Idempotent,
  IdempotencyModule,
  IdempotencyOutcomeUnknownError,
  InMemoryIdempotencyStore,
} from 'nest-idempotency';
import { observeSettlements } from '../support/amqp-settlements';

/**
 * Strict mode on message handlers: a record whose outcome is unknown is never
 * left for a blind redelivery. Kafka through Nest's own ServerKafka handler
 * (the function kafkajs' eachMessage calls, with a real KafkaContext, as
 * kafka.e2e-spec.ts does); RabbitMQ on the real broker.
 */
const runs = new Map<string, number>();
const ran = (name: string) => runs.set(name, (runs.get(name) ?? 0) + 1);
const clock = { now: Date.UTC(2030, 0, 1) };

/** A holder that took the key and died: once the clock moves past its lease, a strict contender finds it AMBIGUOUS. */
async function deadHolder(store: InMemoryIdempotencyStore, scope: string, key: string) {
  const held = await store.tryAcquire({
    scope,
    key,
    leaseMs: 30_000,
    waitTimeoutMs: 0,
    ttlMs: 86_400_000,
    fingerprint: null,
  });
  expect(held.kind).toBe('acquired');
  clock.now += 31_000;
}

@Controller()
class StrictKafkaConsumer {
  @EventPattern<string>('payments.capture')
  @Idempotent({ key: 'message.key', onExpiredLease: 'refuse' })
  capture(@Payload() data: { id: string }, @Ctx() context: KafkaContext) {
    expect(context).toBeInstanceOf(KafkaContext);
    ran(`capture:${data.id}`);
    throw new Error('the acquirer did not answer');
  }

  @MessagePattern('payments.refund')
  @Idempotent({ key: 'message.key', onExpiredLease: 'refuse' })
  refund(@Payload() data: { id: string }) {
    ran(`refund:${data.id}`);
    return { refunded: data.id };
  }
}

describe('strict mode on Kafka handlers, through Nest ServerKafka', () => {
  const store = new InMemoryIdempotencyStore({ now: () => clock.now });
  const logged: string[] = [];
  const published: { topic: string; messages: { headers: Record<string, unknown> }[] }[] = [];
  const onPublish = new EventEmitter();
  let server: ServerKafka;
  let app: INestMicroservice;

  beforeAll(async () => {
    server = new ServerKafka({ client: { brokers: ['127.0.0.1:1'] } });
    (server as unknown as { producer: unknown }).producer = {
      send: async (record: (typeof published)[number]) => {
        published.push(record);
        onPublish.emit('published');
        return [];
      },
      disconnect: async () => undefined,
    };
    const moduleRef = await Test.createTestingModule({
      imports: [
        IdempotencyModule.forRoot({
          store,
          purge: false,
          logger: {
            warn: (m) => void logged.push(`warn: ${m}`),
            error: (m) => void logged.push(`error: ${m}`),
          },
        }),
      ],
      controllers: [StrictKafkaConsumer],
    }).compile();
    app = moduleRef.createNestMicroservice({ strategy: server, logger: false });
    await app.init();
  });
  afterAll(() => app?.close());

  const deliver = (
    topic: string,
    key: string,
    data: unknown,
    headers: Record<string, string> = {},
  ) =>
    server.handleMessage({
      topic,
      partition: 0,
      heartbeat: async () => undefined,
      pause: () => () => undefined,
      message: {
        key: Buffer.from(key),
        value: Buffer.from(JSON.stringify(data)),
        headers: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, Buffer.from(v)])),
        offset: '0',
        timestamp: String(Date.now()),
        attributes: 0,
        size: 0,
      },
    } as never);

  it('an event whose handler threw is AMBIGUOUS: the redelivery is skipped (offset committed), not run again', async () => {
    const id = randomUUID();
    // The handler's own failure reaches kafkajs (as Nest's RPC error), which redelivers the message.
    await expect(deliver('payments.capture', id, { id })).rejects.toBeDefined();
    expect((await store.find({ scope: 'StrictKafkaConsumer.capture', key: id }))?.state).toBe(
      'AMBIGUOUS',
    );
    for (let i = 0; i < 2; i++)
      await expect(deliver('payments.capture', id, { id })).resolves.toBeUndefined();
    expect(runs.get(`capture:${id}`)).toBe(1);
    expect(
      logged.filter((line) =>
        line.startsWith(
          'error: StrictKafkaConsumer.capture: Kafka event skipped (idempotency-outcome-unknown)',
        ),
      ),
    ).toHaveLength(2);
  });

  it('a request (@MessagePattern) on an AMBIGUOUS record is answered with idempotency-outcome-unknown, not retried', async () => {
    const id = randomUUID();
    await deadHolder(store, 'StrictKafkaConsumer.refund', id);
    const replies = () => published.filter((p) => p.topic === 'payments.refund.reply');
    const before = replies().length;
    const answered = once(onPublish, 'published');
    const error = await deliver(
      'payments.refund',
      id,
      { id },
      { kafka_correlationId: randomUUID(), kafka_replyTopic: 'payments.refund.reply' },
    ).catch((e: unknown) => e);
    await answered;
    expect(error === undefined || !(error instanceof KafkaRetriableException)).toBe(true);
    expect(replies()).toHaveLength(before + 1);
    expect(String(replies()[before].messages[0].headers['kafka_nest-err'])).toContain(
      'idempotency-outcome-unknown',
    );
    expect(runs.get(`refund:${id}`)).toBeUndefined();
  });

  it('the typed exception is an IdempotencyOutcomeUnknownError whatever the transport', () => {
    // What a hybrid application's own code (or an exception filter) can catch.
    const unknown = new IdempotencyOutcomeUnknownError(
      'S.m',
      'S.m/#abc',
      new Date(0),
      'lease-expired',
    );
    expect(unknown).toBeInstanceOf(IdempotencyOutcomeUnknownError);
    expect(new Error('other')).not.toBeInstanceOf(IdempotencyOutcomeUnknownError);
  });
});

const AMQP_URL = process.env.IDEMPOTENCY_TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const describeWithBroker = describe.runIf(process.env.IDEMPOTENCY_TEST_RABBITMQ === 'available');
const settlements = observeSettlements();
const handled = new EventEmitter();

@Controller()
class StrictRmqConsumer {
  @EventPattern<string>('strict.pay')
  @Idempotent({
    key: 'message.properties.messageId',
    onExpiredLease: 'refuse',
    rmq: { noAck: false },
  })
  pay(@Payload() data: { id: string }, @Ctx() context: RmqContext) {
    ran(`pay:${data.id}`);
    context.getChannelRef().ack(context.getMessage());
    handled.emit(data.id);
  }
}

describeWithBroker('strict mode on RabbitMQ, against the real broker', () => {
  const store = new InMemoryIdempotencyStore({ now: () => clock.now });
  const queue = `nest-idempotency-strict-${randomUUID()}`;
  const deadLetters = `nest-idempotency-strict-dlx-${randomUUID()}`;
  let app: INestMicroservice;
  let connection: amqp.ChannelModel;
  let channel: amqp.Channel;
  const dead = new EventEmitter();

  beforeAll(async () => {
    connection = await amqp.connect(AMQP_URL);
    channel = await connection.createChannel();
    await channel.assertExchange(deadLetters, 'fanout', { durable: false, autoDelete: true });
    const { queue: deadQueue } = await channel.assertQueue('', { exclusive: true });
    await channel.bindQueue(deadQueue, deadLetters, '');
    await channel.consume(
      deadQueue,
      (message) => message && dead.emit(String(message.properties.messageId)),
      { noAck: true },
    );
    const moduleRef = await Test.createTestingModule({
      imports: [
        IdempotencyModule.forRoot({
          store,
          purge: false,
          logger: { warn: () => undefined, error: () => undefined },
        }),
      ],
      controllers: [StrictRmqConsumer],
    }).compile();
    app = moduleRef.createNestMicroservice({
      transport: Transport.RMQ,
      options: {
        urls: [AMQP_URL],
        queue,
        noAck: false,
        prefetchCount: 1,
        queueOptions: { durable: false, arguments: { 'x-dead-letter-exchange': deadLetters } },
      },
      logger: false,
    });
    await app.listen();
  });
  afterAll(async () => {
    await app?.close();
    await channel?.deleteQueue(queue).catch(() => undefined);
    await connection?.close();
  });

  const publish = (id: string) =>
    channel.sendToQueue(
      queue,
      Buffer.from(JSON.stringify({ pattern: 'strict.pay', data: { id } })),
      {
        messageId: id,
      },
    );

  it("dead-letters a delivery whose record is AMBIGUOUS (the 'rejected' rule) without running it; the next goes on", async () => {
    const id = randomUUID();
    await deadHolder(store, 'StrictRmqConsumer.pay', id);
    const deadLettered = once(settlements, `dead-letter:${id}`);
    const arrived = once(dead, id);
    publish(id);
    await deadLettered;
    await arrived;
    expect(runs.get(`pay:${id}`)).toBeUndefined();
    expect((await store.find({ scope: 'StrictRmqConsumer.pay', key: id }))?.state).toBe(
      'AMBIGUOUS',
    );
    const next = randomUUID();
    const processed = once(handled, next);
    publish(next);
    await processed;
    expect(runs.get(`pay:${next}`)).toBe(1);
  });
});
