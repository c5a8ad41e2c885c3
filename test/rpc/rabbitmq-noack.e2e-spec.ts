import { Controller, INestMicroservice } from '@nestjs/common';
import { Ctx, EventPattern, Payload, RmqContext, Transport } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import * as amqp from 'amqplib';
import { randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import { Idempotent, IdempotencyModule, IdempotencyModuleOptions } from 'nest-idempotency';
import { InMemoryIdempotencyStore } from 'nest-idempotency/core';
import { observeSettlements } from '../support/amqp-settlements';
import { CapturedLogs } from '../support/captured-logs';

/**
 * Issue 21, item 8: the consumer's `noAck` is the RMQ transport's own setting,
 * read at the delivery; the library's `rmq.noAck` no longer has to repeat it,
 * and a contradiction says which setting to change (one warning line) instead
 * of closing the channel with 406 PRECONDITION_FAILED or leaving replays
 * unacknowledged. A delivery refused for its key logs one line, no stack.
 */
const AMQP_URL = process.env.IDEMPOTENCY_TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const describeWithBroker = describe.runIf(process.env.IDEMPOTENCY_TEST_RABBITMQ === 'available');

const runs = new Map<string, number>();
const ran = new EventEmitter();
const settlements = observeSettlements();

@Controller()
class ManualConsumer {
  @EventPattern<string>('noack.manual')
  @Idempotent({ key: 'message.properties.messageId' })
  pay(@Payload() data: { id: string }, @Ctx() context: RmqContext) {
    runs.set(data.id, (runs.get(data.id) ?? 0) + 1);
    context.getChannelRef().ack(context.getMessage());
    ran.emit(data.id);
  }
}

@Controller()
class AutoConsumer {
  @EventPattern<string>('noack.auto')
  @Idempotent({ key: 'message.properties.messageId' })
  pay(@Payload() data: { id: string }) {
    runs.set(data.id, (runs.get(data.id) ?? 0) + 1);
    ran.emit(data.id);
  }
}

describeWithBroker("RabbitMQ: the consumer's own noAck, against the real broker", () => {
  const store = new InMemoryIdempotencyStore();
  const queues: string[] = [];
  const apps: INestMicroservice[] = [];
  let connection: amqp.ChannelModel;
  let channel: amqp.Channel;

  const start = async (
    controller: new () => unknown,
    transportNoAck: boolean | undefined,
    module: Partial<IdempotencyModuleOptions>,
    logs: CapturedLogs,
  ) => {
    const queue = `nest-idempotency-noack-${randomUUID()}`;
    queues.push(queue);
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store, purge: false, ...module })],
      controllers: [controller],
    })
      .setLogger(logs)
      .compile();
    const app = moduleRef.createNestMicroservice({
      transport: Transport.RMQ,
      options: {
        urls: [AMQP_URL],
        queue,
        ...(transportNoAck === undefined ? {} : { noAck: transportNoAck }),
        // One unsettled delivery at a time: a replay left unacked stalls the consumer.
        prefetchCount: 1,
        queueOptions: { durable: false },
      },
      logger: logs,
    });
    apps.push(app);
    await app.listen();
    return queue;
  };

  beforeAll(async () => {
    connection = await amqp.connect(AMQP_URL);
    channel = await connection.createChannel();
  });
  afterAll(async () => {
    for (const app of apps) await app.close();
    for (const queue of queues) await channel?.deleteQueue(queue).catch(() => undefined);
    await connection?.close();
  });

  const publish = (queue: string, pattern: string, id: string, messageId?: string) =>
    channel.sendToQueue(queue, Buffer.from(JSON.stringify({ pattern, data: { id } })), {
      messageId,
    });

  /** Publishes a message and its duplicate, then a sentinel; resolves once the sentinel ran. */
  const duplicateThenSentinel = async (queue: string, pattern: string) => {
    const id = randomUUID();
    const first = once(ran, id);
    publish(queue, pattern, id, id);
    await first;
    publish(queue, pattern, id, id);
    const sentinel = randomUUID();
    const after = once(ran, sentinel);
    publish(queue, pattern, sentinel, sentinel);
    await after;
    expect(runs.get(id)).toBe(1);
    return id;
  };

  it('acks a replay for a transport with noAck: false, without rmq.noAck in the module options', async () => {
    const logs = new CapturedLogs();
    const queue = await start(ManualConsumer, false, {}, logs);
    const id = await duplicateThenSentinel(queue, 'noack.manual');
    // The duplicate was acked by the library (the handler, which acks, did not run).
    expect(settlements.seen.filter((s) => s === `ack:${id}`)).toHaveLength(2);
    expect(logs.text()).not.toContain('noAck');
  });

  it("follows the transport's noAck: true over a contradicting rmq.noAck: false, and says so once", async () => {
    const logs = new CapturedLogs();
    const queue = await start(AutoConsumer, undefined, { rmq: { noAck: false } }, logs);
    const id = await duplicateThenSentinel(queue, 'noack.auto');
    // An ack would have closed the channel (406), and the sentinel would never have run.
    expect(settlements.seen.filter((s) => s.endsWith(`:${id}`))).toEqual([]);
    await duplicateThenSentinel(queue, 'noack.auto');
    const warnings = logs.lines.filter((line) => line.includes('noAck'));
    expect(warnings).toEqual([
      expect.stringContaining(
        "AutoConsumer.pay: rmq.noAck is false, but its RabbitMQ consumer has noAck: true (the RMQ transport's options.noAck), which wins",
      ),
    ]);
    expect(warnings[0]).not.toMatch(/\n\s+at /);
  });

  it('logs one line, without a stack, for a delivery without a key', async () => {
    const logs = new CapturedLogs();
    const queue = await start(ManualConsumer, false, {}, logs);
    const id = randomUUID();
    const settled = once(settlements, `dead-letter:undefined`);
    publish(queue, 'noack.manual', id);
    await settled;
    // Anything Nest would log after the refusal has had its chance.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const lines = logs.lines.filter((line) => !/\[log\]/.test(line));
    expect(lines).toEqual([
      '[warn] ManualConsumer.pay: delivery refused (idempotency-key-missing): ManualConsumer.pay: the message has no idempotency key Idempotency',
    ]);
    expect(runs.get(id)).toBeUndefined();
  });
});
