import { Controller, INestMicroservice } from '@nestjs/common';
import { Ctx, EventPattern, KafkaContext, Payload, ServerKafka } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { randomBytes, randomUUID } from 'node:crypto';
import {
  Idempotent,
  IdempotencyContext,
  IdempotencyCtx,
  IdempotencyModule,
  InMemoryIdempotencyStore,
  keyDigest,
} from 'nest-idempotency';

/**
 * Issue 25, requirement 1 on a message door: `@IdempotencyCtx()` on Kafka
 * event handlers, driven through Nest's own ServerKafka message handler
 * (the function kafkajs' eachMessage calls) with a real KafkaContext, as
 * kafka.e2e-spec.ts does (no broker can run here).
 */
interface Seen {
  kafka: boolean;
  keyDigest?: string;
  attempt?: string;
  charge?: string;
}
const seen = new Map<string, Seen[]>();
const record = (id: string, ctx: IdempotencyContext | undefined, kafka: unknown) =>
  seen.set(id, [
    ...(seen.get(id) ?? []),
    {
      kafka: kafka instanceof KafkaContext,
      keyDigest: ctx?.keyDigest,
      attempt: ctx?.attempt,
      charge: ctx?.deriveKey('charge'),
    },
  ]);

@Controller()
class PaymentsConsumer {
  @EventPattern<string>('ctx.payments.requested')
  @Idempotent({ scope: 'ctx-payments', key: 'message.key' })
  requested(
    @Payload() data: { id: string; fail?: boolean },
    @IdempotencyCtx() ctx: IdempotencyContext | undefined,
    @Ctx() kafka: KafkaContext,
  ) {
    record(data.id, ctx, kafka);
    // The first delivery fails after the context was read, as a provider's timeout would.
    if (data.fail && seen.get(data.id)!.length === 1) throw new Error('provider timeout');
  }

  @EventPattern<string>('ctx.payments.audited')
  audited(
    @Payload() data: { id: string },
    @IdempotencyCtx() ctx: IdempotencyContext | undefined,
    @Ctx() kafka: KafkaContext,
  ) {
    record(data.id, ctx, kafka);
  }
}

describe('@IdempotencyCtx() on Kafka handlers through Nest ServerKafka', () => {
  let app: INestMicroservice;
  let server: ServerKafka;

  beforeAll(async () => {
    server = new ServerKafka({ client: { brokers: ['127.0.0.1:1'] } });
    const moduleRef = await Test.createTestingModule({
      imports: [
        IdempotencyModule.forRoot({
          store: new InMemoryIdempotencyStore(),
          purge: false,
          derivedKeys: { secret: randomBytes(32) },
          logger: { warn: () => undefined, error: () => undefined },
        }),
      ],
      controllers: [PaymentsConsumer],
    }).compile();
    app = moduleRef.createNestMicroservice({ strategy: server, logger: false });
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
  });

  const deliver = (topic: string, key: string, data: unknown) =>
    server.handleMessage({
      topic,
      partition: 0,
      heartbeat: async () => undefined,
      pause: () => () => undefined,
      message: {
        key: Buffer.from(key),
        value: Buffer.from(JSON.stringify(data)),
        headers: {},
        offset: '0',
        timestamp: String(Date.now()),
        attributes: 0,
        size: 0,
      },
    } as never);

  it("hands the handler its record's context; a redelivery after a failure derives the same key", async () => {
    const id = randomUUID();
    const key = `payment-${id}`;
    await expect(deliver('ctx.payments.requested', key, { id, fail: true })).rejects.toThrow();
    await deliver('ctx.payments.requested', key, { id, fail: true }); // kafkajs' retry
    await deliver('ctx.payments.requested', key, { id, fail: true }); // a duplicate: not run
    const [first, retry, ...more] = seen.get(id)!;
    expect(more).toEqual([]);
    expect(first).toMatchObject({
      kafka: true,
      keyDigest: keyDigest('ctx-payments', key),
      attempt: 'first',
    });
    expect(first.charge).toMatch(/^[\x21-\x7e]{1,64}$/);
    expect(retry).toEqual(first);
  });

  it('gives a handler without @Idempotent undefined', async () => {
    const id = randomUUID();
    await deliver('ctx.payments.audited', `audit-${id}`, { id });
    expect(seen.get(id)).toEqual([{ kafka: true }]);
  });
});
