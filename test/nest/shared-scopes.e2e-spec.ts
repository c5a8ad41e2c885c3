import { Body, Controller, INestApplication, Post, Res, Type } from '@nestjs/common';
import { MessagePattern, Payload, Transport } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { Mutation, Resolver } from '@nestjs/graphql';
import * as amqp from 'amqplib';
import { randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import {
  Idempotent,
  IdempotencyConfigError,
  IdempotencyModule,
  IdempotentOptions,
  InMemoryIdempotencyStore,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { CapturedLogs } from '../support/captured-logs';
import { ADAPTERS, AdapterName, send, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { Probe } from '../http/fixtures';

/**
 * One command through several doors (issue 20, item 7): handlers given the
 * same explicit scope share their records, so a key runs once whichever door
 * it used and the other doors replay it as each door replays. Colliding
 * default scopes and doors whose options would break the shared record are
 * still refused at bootstrap.
 */
const AMQP_URL = process.env.IDEMPOTENCY_TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const describeWithBroker = describe.runIf(process.env.IDEMPOTENCY_TEST_RABBITMQ === 'available');
const probe = new Probe();
const SCOPE = 'orders.create';

interface Order {
  orderId: string;
  door: string;
  token: string;
}

@Controller('orders')
class OrdersController {
  /** Fails fast while another attempt holds the key. */
  @Post()
  @Idempotent({ scope: SCOPE, waitTimeout: 0 })
  create(
    @Body() body: { orderId: string },
    @Res({ passthrough: true }) res: { status?: (n: number) => void; code?: (n: number) => void },
  ): Order | { error: string } {
    probe.ran(body.orderId);
    if (body.orderId.startsWith('taken-')) {
      (res.status ?? res.code)!.call(res, 409);
      return { error: 'that order number is taken' };
    }
    return { orderId: body.orderId, door: 'http', token: randomUUID() };
  }

  /** Waits for another attempt's outcome. */
  @Post('wait')
  @Idempotent({ scope: SCOPE, waitTimeout: '10s' })
  createAndWait(@Body() body: { orderId: string }): Order {
    probe.ran(body.orderId);
    return { orderId: body.orderId, door: 'http-wait', token: randomUUID() };
  }

  @MessagePattern('orders.create')
  @Idempotent({ scope: SCOPE, key: 'message.properties.messageId' })
  createFromQueue(@Payload() data: { orderId: string }): Order {
    probe.ran(data.orderId);
    return { orderId: data.orderId, door: 'rabbitmq', token: randomUUID() };
  }
}

describeWithBroker('a scope shared by HTTP routes and a RabbitMQ handler', () => {
  describe.each(ADAPTERS)('over %s', (adapter: AdapterName) => {
    const schema = scratchSchema('shared');
    const queue = `nest-idempotency-shared-${randomUUID()}`;
    let dataSource: DataSource;
    let app: INestApplication;
    let url: string;
    let connection: amqp.ChannelModel;
    let channel: amqp.Channel;
    let replyQueue: string;
    const replies = new EventEmitter();

    beforeAll(async () => {
      dataSource = await openDataSource();
      const store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
      ({ app, url } = await startHttpApp(
        adapter,
        {
          imports: [IdempotencyModule.forRoot({ store })],
          controllers: [OrdersController],
        },
        (hybrid) =>
          hybrid.connectMicroservice({
            transport: Transport.RMQ,
            options: { urls: [AMQP_URL], queue, queueOptions: { durable: false } },
          }),
      ));
      await app.startAllMicroservices();
      connection = await amqp.connect(AMQP_URL);
      channel = await connection.createChannel();
      replyQueue = (await channel.assertQueue('', { exclusive: true })).queue;
      await channel.consume(
        replyQueue,
        (message) => {
          if (message)
            replies.emit(
              message.properties.correlationId as string,
              JSON.parse(String(message.content)),
            );
        },
        { noAck: true },
      );
    });
    afterAll(async () => {
      await app?.close();
      await channel?.deleteQueue(queue).catch(() => undefined);
      await connection?.close();
      await dropSchema(dataSource, schema);
      await dataSource.destroy();
    });
    beforeEach(() => probe.executions.clear());

    /** A request/reply through the broker, as Nest's ClientRMQ sends one, keyed by its messageId. */
    const request = async (data: unknown, messageId: string) => {
      const correlationId = randomUUID();
      const reply = once(replies, correlationId) as Promise<
        [{ response?: unknown; err?: unknown }]
      >;
      channel.sendToQueue(
        queue,
        Buffer.from(JSON.stringify({ pattern: 'orders.create', data, id: correlationId })),
        { messageId, correlationId, replyTo: replyQueue },
      );
      return (await reply)[0];
    };

    it('runs a key that arrives by HTTP and then by a message once; the message gets the response body as its value', async () => {
      const key = randomUUID();
      const orderId = randomUUID();
      const first = await send(url, 'POST', '/orders', { key, body: { orderId } });
      expect(first.status).toBe(201);
      const reply = await request({ orderId }, key);
      expect(reply.err).toBeUndefined();
      expect(reply.response).toEqual(first.json());
      expect(probe.count(orderId)).toBe(1);
    });

    it('runs a key that arrives by a message and then by HTTP once; HTTP replays the value as JSON with the route status', async () => {
      const key = randomUUID();
      const orderId = randomUUID();
      const reply = await request({ orderId }, key);
      expect(reply.response).toMatchObject({ orderId, door: 'rabbitmq' });
      const replay = await send(url, 'POST', '/orders', { key, body: { orderId } });
      expect(replay.status).toBe(201);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.headers.get('content-type')).toMatch(/^application\/json/);
      expect(replay.json()).toEqual(reply.response);
      // The message door has no fingerprint, so the record has none to compare.
      const otherBody = await send(url, 'POST', '/orders/wait', { key, body: { orderId: 'x' } });
      expect(otherBody.json()).toEqual(reply.response);
      expect(probe.count(orderId)).toBe(1);
      expect(probe.count('x')).toBe(0);
    });

    it('answers a message whose key an HTTP route answered with an error status with an error, not a value', async () => {
      const key = randomUUID();
      const orderId = `taken-${randomUUID()}`;
      expect((await send(url, 'POST', '/orders', { key, body: { orderId } })).status).toBe(409);
      const reply = await request({ orderId }, key);
      expect(reply.response).toBeUndefined();
      expect(reply.err).toMatchObject({
        code: 'idempotency-replayed-error',
        message: `OrdersController.createFromQueue: this key was first processed through an HTTP route of the scope "${SCOPE}", which answered 409; it is not processed again`,
      });
      expect(probe.count(orderId)).toBe(1);
    });

    it('lets a fail-fast route and a waiting route share a key: the same request replays, another is 422', async () => {
      const key = randomUUID();
      const orderId = randomUUID();
      const first = await send(url, 'POST', '/orders', { key, body: { orderId } });
      const waited = await send(url, 'POST', '/orders/wait', { key, body: { orderId } });
      expect(waited.headers.get('idempotent-replayed')).toBe('true');
      expect(waited.text).toBe(first.text);
      const other = await send(url, 'POST', '/orders/wait', { key, body: { orderId: 'y' } });
      expect(other.status).toBe(422);
      expect(probe.count(orderId)).toBe(1);
      expect(probe.count('y')).toBe(0);
    });
  });
});

describe('scopes shared on purpose, at bootstrap', () => {
  const boot = async (...controllers: Type[]) => {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore() })],
      controllers: controllers.filter((c) => !Reflect.hasMetadata('graphql:resolver_type', c)),
      providers: controllers.filter((c) => Reflect.hasMetadata('graphql:resolver_type', c)),
    })
      .setLogger(new CapturedLogs())
      .compile();
    const app = moduleRef.createNestApplication({ logger: false });
    try {
      await app.init();
    } finally {
      await app.close().catch(() => undefined);
    }
  };
  const refusal = async (...controllers: Type[]) =>
    boot(...controllers).then(
      () => {
        throw new Error('the application started');
      },
      (error: unknown) => error as Error,
    );

  const route = (name: string, options: IdempotentOptions) => {
    @Controller(name)
    class RouteController {
      @Post()
      @Idempotent(options)
      create() {
        return 1;
      }
    }
    Object.defineProperty(RouteController, 'name', { value: name });
    return RouteController;
  };
  const consumer = (name: string, options: IdempotentOptions) => {
    @Controller()
    class ConsumerController {
      @MessagePattern(`${name}.create`)
      @Idempotent(options)
      create() {
        return 1;
      }
    }
    Object.defineProperty(ConsumerController, 'name', { value: name });
    return ConsumerController;
  };

  it('starts with one explicit scope on a route, a second route and a message handler', async () => {
    await expect(
      boot(
        route('Orders', { scope: 'orders' }),
        route('OrdersSync', { scope: 'orders', waitTimeout: '10s', ttl: '7d' }),
        consumer('OrderEvents', { scope: 'orders', key: 'data.id', completion: 'separate' }),
      ),
    ).resolves.toBeUndefined();
  });

  it('refuses an explicit scope that is another handler default (Class.method)', async () => {
    const error = await refusal(
      route('Orders', {}),
      consumer('OrderEvents', { scope: 'Orders.create', key: 'data.id' }),
    );
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect(error.message).toBe(
      `Orders.create and OrderEvents.create would share the idempotency scope "Orders.create", which is Orders.create's default (Class.method), so one could replay the other's response; to share records on purpose, give both the same explicit scope, @Idempotent({ scope: '…' }); otherwise give OrderEvents.create another`,
    );
  });

  it('refuses a strict door and one that steals expired leases (or observes) in one scope', async () => {
    const strict = route('Orders', { scope: 'orders', onExpiredLease: 'refuse' });
    const error = await refusal(
      strict,
      consumer('OrderEvents', { scope: 'orders', key: 'data.id' }),
    );
    expect(error.message).toBe(
      `Orders.create and OrderEvents.create share the idempotency scope "orders", but Orders.create is in strict mode (onExpiredLease: 'refuse') and OrderEvents.create is not: a record whose lease ran out, which strict mode never runs again, would be taken over and run again through OrderEvents.create; give them the same onExpiredLease and mode, or each its own scope`,
    );
    const observing = await refusal(
      strict,
      consumer('OrderEvents', {
        scope: 'orders',
        key: 'data.id',
        onExpiredLease: 'refuse',
        mode: 'observe',
      }),
    );
    expect(observing.message).toContain('OrderEvents.create is not (observe mode never is)');
  });

  it('refuses fingerprints that can never match, and allows two fingerprint functions', async () => {
    const byData = ({ type, ...rest }: { type: string; [part: string]: unknown }) =>
      JSON.stringify(type === 'rpc' ? rest.data : rest.body);
    const error = await refusal(
      route('Orders', { scope: 'orders' }),
      consumer('OrderEvents', { scope: 'orders', key: 'data.id', fingerprint: byData as never }),
    );
    expect(error.message).toBe(
      'Orders.create and OrderEvents.create share the idempotency scope "orders", but their fingerprints can never match (Orders.create: the default HTTP fingerprint; OrderEvents.create: a fingerprint function), so a key used through one would be refused as reused through the other; give both the same fingerprint function, or fingerprint: false to one of them',
    );
    @Resolver()
    class OrdersResolver {
      @Mutation(() => Number, { name: 'placeOrder' })
      @Idempotent({ scope: 'orders' })
      place() {
        return 1;
      }
    }
    const graphql = await refusal(route('Orders', { scope: 'orders' }), OrdersResolver);
    expect(graphql.message).toContain(
      '(Orders.create: the default HTTP fingerprint; OrdersResolver.place: the default GraphQL fingerprint, which names the mutation placeOrder)',
    );
    await expect(
      boot(
        route('Orders', { scope: 'orders', fingerprint: byData as never }),
        consumer('OrderEvents', { scope: 'orders', key: 'data.id', fingerprint: byData as never }),
      ),
    ).resolves.toBeUndefined();
    await expect(
      boot(route('Orders', { scope: 'orders', fingerprint: false }), OrdersResolver),
    ).resolves.toBeUndefined();
  });
});
