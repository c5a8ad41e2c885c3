import 'reflect-metadata';
import { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Transport } from '@nestjs/microservices';
import * as amqp from 'amqplib';
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { IdempotencyEngine } from 'nest-idempotency';
import { AppModule } from '../src/app.module';
import { executions } from '../src/payments.controller';

describe('a Nest 11 CommonJS application with nest-idempotency', () => {
  let app: INestApplication;
  let url: string;
  const queue = `consumer-nest11-${randomUUID()}`;

  beforeAll(async () => {
    app = await NestFactory.create(AppModule, { logger: false });
    app.connectMicroservice({
      transport: Transport.RMQ,
      options: {
        urls: [process.env.AMQP_URL!],
        queue,
        noAck: false,
        queueOptions: { durable: false },
      },
    });
    await app.startAllMicroservices();
    await app.listen(0, '127.0.0.1');
    url = `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await app?.close();
  });

  const pay = (key?: string) =>
    fetch(`${url}/payments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
      body: JSON.stringify({ amount: 1000 }),
    });

  it('answers a POST, replays its repeat with Idempotent-Replayed: true and the same body, runs once', async () => {
    const key = `consumer-${randomUUID()}`;
    const first = await pay(key);
    const second = await pay(key);
    expect(first.status).toBe(201);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(await second.text()).toBe(await first.text());
    expect(executions.http).toBe(1);
  });

  it('answers a missing key with 400', async () => {
    const reply = await pay();
    expect(reply.status).toBe(400);
    expect(await reply.json()).toMatchObject({ code: 'idempotency-key-missing' });
  });

  it('runs a RabbitMQ message once however often it is delivered (a hybrid app, no inheritAppConfig)', async () => {
    const connection = await amqp.connect(process.env.AMQP_URL!);
    const channel = await connection.createChannel();
    try {
      const id = randomUUID();
      const messageId = randomUUID();
      const body = Buffer.from(JSON.stringify({ pattern: 'payments.requested', data: { id } }));
      // The first copy runs (its handler acks), the other two are replays (the library acks).
      const outcomes: string[] = [];
      const settled = new Promise<void>((resolve) => {
        app.get(IdempotencyEngine).onEvent((event) => {
          if (event.scope !== 'PaymentsConsumer.requested') return;
          outcomes.push(event.type);
          if (outcomes.filter((type) => type === 'replayed').length === 2) resolve();
        });
      });
      for (let i = 0; i < 3; i++) channel.sendToQueue(queue, body, { messageId });
      await settled;
      // The replay's ack goes out right after the store answers: one turn of the event loop.
      await new Promise((resolve) => setImmediate(resolve));
      await app.close();
      expect(outcomes).toEqual(['acquired', 'completed', 'replayed', 'replayed']);
      const { messageCount } = await channel.checkQueue(queue);
      expect(messageCount).toBe(0);
      expect(executions.messages.get(id)).toBe(1);
    } finally {
      await channel.deleteQueue(queue).catch(() => undefined);
      await connection.close();
    }
  });
});
