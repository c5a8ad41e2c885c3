import { ClassSerializerInterceptor, Controller, INestMicroservice } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { Exclude } from 'class-transformer';
import {
  Ctx,
  EventPattern,
  KafkaContext,
  KafkaRetriableException,
  MessagePattern,
  Payload,
  ServerKafka,
} from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import {
  Idempotent,
  IdempotencyEvent,
  IdempotencyInFlightError,
  IdempotencyModule,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { Gate } from '../support/gate';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * No Kafka broker can run here. These tests drive Nest's own ServerKafka
 * message handler (the function kafkajs' eachMessage calls) with a real
 * KafkaContext and check what the consumer loop would see: a resolved
 * handler (offset committed) or a rejection (kafkajs retries the message).
 */
const runs = new Map<string, number>();
const gates = new Map<string, { entered: Gate; release: Gate }>();
const ran = (name: string) => runs.set(name, (runs.get(name) ?? 0) + 1);
const events: IdempotencyEvent[] = [];
const logged: string[] = [];

class Customer {
  constructor(
    readonly id: string,
    readonly email: string,
    passwordHash: string,
  ) {
    this.passwordHash = passwordHash;
  }
  @Exclude()
  passwordHash: string;
}

@Controller()
class OrdersConsumer {
  @EventPattern<string>('orders.placed')
  @Idempotent({ key: 'message.key', waitTimeout: 'PT0S' })
  async placed(@Payload() data: { orderId: string }, @Ctx() context: KafkaContext) {
    ran('placed');
    expect(context).toBeInstanceOf(KafkaContext);
    const gate = gates.get(data.orderId);
    if (gate) {
      gate.entered.open();
      await gate.release.promise;
    }
  }

  @EventPattern<string>('orders.flaky')
  @Idempotent({ key: 'data.orderId' })
  flaky(@Payload() data: { orderId: string }) {
    ran(`flaky:${data.orderId}`);
    if (runs.get(`flaky:${data.orderId}`) === 1) throw new Error('downstream timeout');
  }

  @EventPattern<string>('orders.observed')
  @Idempotent({ key: 'message.key', mode: 'observe' })
  observed() {
    ran('observed');
  }

  @MessagePattern('orders.customer')
  @Idempotent({ key: 'data.requestId' })
  customer(@Payload() data: { requestId: string }) {
    ran('customer');
    return new Customer(data.requestId, 'ann@example.com', 'hash-of-secret-password');
  }

  @MessagePattern('orders.quote')
  @Idempotent({ key: 'message.headers["x-request-id"]', waitTimeout: 'PT0S' })
  async quote(@Payload() data: { orderId: string }) {
    ran('quote');
    const gate = gates.get(data.orderId);
    if (gate) {
      gate.entered.open();
      await gate.release.promise;
    }
    // Keys out of alphabetical order: a replay must keep them as they were (jsonb would not).
    return { token: randomUUID(), price: 42, orderId: data.orderId, zeta: { b: 1, a: 2 } };
  }
}

describe('Kafka message handlers through Nest ServerKafka', () => {
  let app: INestMicroservice;
  let server: ServerKafka;
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  const schema = scratchSchema('kafka');
  const published: {
    topic: string;
    messages: { value: unknown; headers: Record<string, unknown> }[];
  }[] = [];
  const onPublish = new EventEmitter();
  const repliesOn = async (topic: string, count: number) => {
    const matching = () => published.filter((p) => p.topic === topic);
    while (matching().length < count) await once(onPublish, 'published');
    return matching().map((p) => JSON.parse(String(p.messages[0].value)));
  };

  beforeAll(async () => {
    dataSource = await openDataSource();
    store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
    server = new ServerKafka({ client: { brokers: ['127.0.0.1:1'] } });
    // Replies of @MessagePattern go out through the producer; record them instead of sending.
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
          onEvent: (event) => events.push(event),
          logger: {
            warn: (m) => void logged.push(`warn: ${m}`),
            error: (m) => void logged.push(`error: ${m}`),
          },
        }),
      ],
      controllers: [OrdersConsumer],
      // As Nest's docs register it: the reply is serialized after the library's interceptor.
      providers: [{ provide: APP_INTERCEPTOR, useClass: ClassSerializerInterceptor }],
    }).compile();
    app = moduleRef.createNestMicroservice({ strategy: server, logger: false });
    await app.init();
  });
  afterAll(async () => {
    await app?.close();
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });

  const deliver = (
    topic: string,
    key: string | Buffer | null,
    data: unknown,
    headers: Record<string, string> = {},
  ) =>
    server.handleMessage({
      topic,
      partition: 0,
      heartbeat: async () => undefined,
      pause: () => () => undefined,
      message: {
        key: key === null ? null : Buffer.isBuffer(key) ? key : Buffer.from(key),
        value: Buffer.from(JSON.stringify(data)),
        headers: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, Buffer.from(v)])),
        offset: '0',
        timestamp: String(Date.now()),
        attributes: 0,
        size: 0,
      },
    } as never);

  it('runs an event once per message key; a redelivery resolves without running it', async () => {
    const orderId = randomUUID();
    for (let i = 0; i < 3; i++)
      await expect(deliver('orders.placed', orderId, { orderId })).resolves.toBeUndefined();
    expect(runs.get('placed')).toBe(1);
  });

  it('rejects a duplicate arriving mid-flight with a retriable in-flight error, then replays it', async () => {
    const before = runs.get('placed') ?? 0;
    const orderId = randomUUID();
    const gate = { entered: new Gate(), release: new Gate() };
    gates.set(orderId, gate);
    const first = deliver('orders.placed', orderId, { orderId });
    await gate.entered.promise;
    const duplicate = deliver('orders.placed', orderId, { orderId });
    await expect(duplicate).rejects.toBeInstanceOf(KafkaRetriableException);
    const error = await duplicate.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyInFlightError);
    expect(error).toMatchObject({ code: 'idempotency-in-flight' });
    expect((error as IdempotencyInFlightError).retryAfterMs).toBeGreaterThan(0);
    expect((error as IdempotencyInFlightError).keyDigest).not.toContain(orderId);
    gate.release.open();
    await first;
    await deliver('orders.placed', orderId, { orderId }); // kafkajs' retry
    expect(runs.get('placed')).toBe(before + 1);
  });

  it('replies to a @MessagePattern replay with the stored value, and makes an in-flight duplicate retriable', async () => {
    const orderId = randomUUID();
    const requestId = randomUUID();
    const headers = {
      kafka_correlationId: randomUUID(),
      kafka_replyTopic: 'orders.quote.reply',
      'x-request-id': requestId,
    };
    const gate = { entered: new Gate(), release: new Gate() };
    gates.set(orderId, gate);
    const first = deliver('orders.quote', orderId, { orderId }, headers);
    await gate.entered.promise;
    await expect(deliver('orders.quote', orderId, { orderId }, headers)).rejects.toBeInstanceOf(
      IdempotencyInFlightError,
    );
    gate.release.open();
    await first;
    await deliver(
      'orders.quote',
      orderId,
      { orderId },
      { ...headers, kafka_correlationId: randomUUID() },
    );
    const replies = await repliesOn('orders.quote.reply', 2);
    expect(replies).toHaveLength(2);
    expect(replies[1]).toEqual(replies[0]);
    expect(replies[0]).toMatchObject({ orderId, price: 42 });
    const raw = published
      .filter((p) => p.topic === 'orders.quote.reply')
      .map((p) => String(p.messages[0].value));
    expect(raw[1]).toBe(raw[0]);
    expect(raw[0].indexOf('"token"')).toBeLessThan(raw[0].indexOf('"orderId"'));
    expect(runs.get('quote')).toBe(1);
  });

  it('releases the key when the handler throws, so the redelivery runs it again', async () => {
    const orderId = randomUUID();
    await expect(deliver('orders.flaky', orderId, { orderId })).rejects.toBeDefined();
    await expect(store.find({ scope: 'OrdersConsumer.flaky', key: orderId })).resolves.toBeNull();
    await expect(deliver('orders.flaky', orderId, { orderId })).resolves.toBeUndefined();
    await deliver('orders.flaky', orderId, { orderId });
    expect(runs.get(`flaky:${orderId}`)).toBe(2);
    await expect(
      store.find({ scope: 'OrdersConsumer.flaky', key: orderId }),
    ).resolves.toMatchObject({ state: 'COMPLETE' });
  });

  it('skips an event without a key (its offset committed, an error logged) rather than stall the partition, without running the handler', async () => {
    const before = runs.get('placed') ?? 0;
    logged.length = 0;
    await expect(
      deliver('orders.placed', null, { orderId: randomUUID() }),
    ).resolves.toBeUndefined();
    expect(runs.get('placed') ?? 0).toBe(before);
    expect(logged).toEqual([
      'error: OrdersConsumer.placed: Kafka event skipped (idempotency-key-missing), it can never be processed as sent: OrdersConsumer.placed: the message has no idempotency key',
    ]);
  });

  it('answers a request (@MessagePattern) without a key with an idempotency-key-missing error, not a retriable one', async () => {
    const before = published.filter((p) => p.topic === 'orders.quote.reply').length;
    const error = await deliver(
      'orders.quote',
      randomUUID(),
      { orderId: randomUUID() },
      { kafka_correlationId: randomUUID(), kafka_replyTopic: 'orders.quote.reply' },
    ).catch((e: unknown) => e);
    await repliesOn('orders.quote.reply', before + 1);
    const reply = published.filter((p) => p.topic === 'orders.quote.reply')[before].messages[0];
    expect(error === undefined || !(error instanceof KafkaRetriableException)).toBe(true);
    // Nest sends a request's error in the reply's kafka_nest-err header, with no response.
    expect(String(reply.headers['kafka_nest-err'])).toContain('idempotency-key-missing');
    expect(String(reply.value)).not.toContain('price');
  });

  it('tells binary message keys apart: two keys that are not UTF-8 are two records, each run once', async () => {
    const before = runs.get('placed') ?? 0;
    const a = Buffer.from('9fa1' + randomUUID().replace(/-/g, ''), 'hex');
    const b = Buffer.from('8ea1' + a.subarray(2).toString('hex'), 'hex');
    expect(a.toString('utf8')).toBe(b.toString('utf8')); // what a lossy decode would make of them
    await deliver('orders.placed', a, { orderId: 'a' });
    await deliver('orders.placed', b, { orderId: 'b' });
    await deliver('orders.placed', a, { orderId: 'a' });
    await deliver('orders.placed', b, { orderId: 'b' });
    expect(runs.get('placed')).toBe(before + 2);
    const records = await store.list({ scope: 'OrdersConsumer.placed', limit: 1000 });
    const keys = records.map((r) => r.key);
    expect(keys).toContain(`hex:${a.toString('hex')}`);
    expect(keys).toContain(`hex:${b.toString('hex')}`);
  });

  it('takes a key framed by a schema registry (a leading 0x00) and runs it once', async () => {
    const before = runs.get('placed') ?? 0;
    const framed = Buffer.concat([Buffer.from([0, 0, 0, 0, 1]), Buffer.from(randomUUID())]);
    await expect(deliver('orders.placed', framed, { orderId: 'framed' })).resolves.toBeUndefined();
    await expect(deliver('orders.placed', framed, { orderId: 'framed' })).resolves.toBeUndefined();
    expect(runs.get('placed')).toBe(before + 1);
  });

  it('never stores (nor replays) a field ClassSerializerInterceptor excludes from a @MessagePattern reply', async () => {
    const requestId = randomUUID();
    const headers = { kafka_replyTopic: 'orders.customer.reply' };
    for (let i = 0; i < 2; i++) {
      await deliver(
        'orders.customer',
        requestId,
        { requestId },
        { ...headers, kafka_correlationId: randomUUID() },
      );
    }
    const raw = (await repliesOn('orders.customer.reply', 2)).map((reply) => JSON.stringify(reply));
    expect(raw[0]).not.toContain('hash-of-secret-password');
    expect(raw[1]).toBe(raw[0]);
    const record = await store.find({ scope: 'OrdersConsumer.customer', key: requestId });
    expect(record!.payload!.toString('utf8')).not.toContain('hash-of-secret-password');
    expect(runs.get('customer')).toBe(1);
  });

  it('observe mode runs a redelivered message again and reports that enforce would have replayed it', async () => {
    const key = randomUUID();
    await deliver('orders.observed', key, {});
    await deliver('orders.observed', key, {});
    expect(runs.get('observed')).toBe(2);
    expect(
      events.filter((e) => e.type === 'observed' && e.scope === 'OrdersConsumer.observed'),
    ).toMatchObject([{ wouldHave: 'replayed' }]);
    expect(
      events.filter((e) => e.type === 'replayed' && e.scope === 'OrdersConsumer.observed'),
    ).toEqual([]);
  });
});
