import {
  Body,
  CanActivate,
  Controller,
  ExecutionContext,
  INestApplication,
  Injectable,
  Post,
  UseGuards,
} from '@nestjs/common';
import { ApolloDriver, ApolloDriverConfig } from '@nestjs/apollo';
import { Args, GraphQLModule, Mutation, Query, Resolver } from '@nestjs/graphql';
import { MercuriusDriver, MercuriusDriverConfig } from '@nestjs/mercurius';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyModule, IdempotencyModuleOptions } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { AdapterName, send, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * Two callers who send the same key (here: the same order id, through a key
 * template) must not be answered from each other's record. Where the
 * application identifies its caller as Nest applications do (`request.user`,
 * set by a guard, with an `id` or `sub`), the record is the caller's by
 * default; `tenant: false` shares it on purpose. A key first used before the
 * default applied is still answered from its record.
 */

/** Sets `request.user` from the `x-user` header, as an authentication guard would. */
@Injectable()
class UserGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request =
      context.getType<string>() === 'graphql'
        ? (context.getArgs()[2] as { req: Record<string, unknown> }).req
        : context.switchToHttp().getRequest<Record<string, unknown>>();
    const headers = request.headers as Record<string, string | undefined>;
    const user = headers['x-user'];
    if (user) request.user = headers['x-claim'] === 'sub' ? { sub: user } : { id: user };
    return true;
  }
}

let runs = 0;

@Controller('orders')
@UseGuards(UserGuard)
class OrdersController {
  @Post()
  @Idempotent({ key: 'order:{body.orderId}' })
  place(@Body() body: { orderId: string }) {
    runs++;
    return { orderId: body.orderId, receipt: randomUUID() };
  }
}

@Resolver()
@UseGuards(UserGuard)
class OrdersResolver {
  @Query(() => String)
  ping(): string {
    return 'pong';
  }

  @Mutation(() => String)
  @Idempotent({ key: 'order:{args.orderId}' })
  placeOrder(@Args('orderId') orderId: string): string {
    runs++;
    return `${orderId}:${randomUUID()}`;
  }
}

const DOORS: {
  name: string;
  adapter: AdapterName;
  graphql: () => ReturnType<typeof GraphQLModule.forRoot>;
}[] = [
  {
    name: 'Express (Apollo)',
    adapter: 'express',
    graphql: () =>
      GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true }),
  },
  {
    name: 'Fastify (Mercurius)',
    adapter: 'fastify',
    graphql: () =>
      GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
      }),
  },
];

describe.each(DOORS)('records belong to their caller, $name', ({ adapter, graphql }) => {
  const schema = scratchSchema('tenant');
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  const apps: INestApplication[] = [];

  async function start(options: Partial<IdempotencyModuleOptions> = {}): Promise<string> {
    const { app, url } = await startHttpApp(adapter, {
      imports: [IdempotencyModule.forRoot({ store, ...options }), graphql()],
      controllers: [OrdersController],
      providers: [OrdersResolver],
    });
    apps.push(app);
    return url;
  }

  const order = (url: string, orderId: string, user?: string, claim?: 'sub') =>
    send(url, 'POST', '/orders', {
      body: { orderId },
      headers: { ...(user ? { 'x-user': user } : {}), ...(claim ? { 'x-claim': claim } : {}) },
    });

  async function mutate(url: string, orderId: string, user: string) {
    const response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-user': user },
      body: JSON.stringify({ query: `mutation { placeOrder(orderId: "${orderId}") }` }),
    });
    const body = (await response.json()) as { data: { placeOrder: string } };
    return { replayed: response.headers.get('idempotent-replayed'), value: body.data.placeOrder };
  }

  beforeAll(async () => {
    dataSource = await openDataSource();
    store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
  });
  afterEach(async () => {
    for (const app of apps.splice(0)) await app.close();
  });
  afterAll(async () => {
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });
  beforeEach(() => {
    runs = 0;
  });

  it("HTTP: another caller's same key runs for them; each caller's retry replays their own", async () => {
    const url = await start();
    const orderId = randomUUID();
    const alice = await order(url, orderId, 'alice');
    const bob = await order(url, orderId, 'bob', 'sub');
    const aliceAgain = await order(url, orderId, 'alice');
    const bobAgain = await order(url, orderId, 'bob', 'sub');
    expect(runs).toBe(2);
    expect(bob.json()).not.toEqual(alice.json());
    expect(aliceAgain.json()).toEqual(alice.json());
    expect(aliceAgain.headers.get('idempotent-replayed')).toBe('true');
    expect(bobAgain.json()).toEqual(bob.json());
  });

  it("GraphQL: another caller's same key runs for them; each caller's retry replays their own", async () => {
    const url = await start();
    const orderId = randomUUID();
    const alice = await mutate(url, orderId, 'alice');
    const bob = await mutate(url, orderId, 'bob');
    const aliceAgain = await mutate(url, orderId, 'alice');
    expect(runs).toBe(2);
    expect(bob.value).not.toBe(alice.value);
    expect(aliceAgain).toEqual({ replayed: 'true', value: alice.value });
  });

  it('tenant: false shares a key between callers on purpose', async () => {
    const url = await start({ tenant: false });
    const orderId = randomUUID();
    const alice = await order(url, orderId, 'alice');
    const bob = await order(url, orderId, 'bob');
    expect(runs).toBe(1);
    expect(bob.json()).toEqual(alice.json());
  });

  it('a key used before the caller scoped its record is answered from that record, not run again', async () => {
    const before = await start({ tenant: false });
    const orderId = randomUUID();
    const first = await order(before, orderId, 'alice');
    for (const app of apps.splice(0)) await app.close();
    const after = await start();
    const retry = await order(after, orderId, 'alice');
    expect(runs).toBe(1);
    expect(retry.json()).toEqual(first.json());
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    // A new key of the same caller runs, under the caller's own record.
    const next = await order(after, randomUUID(), 'alice');
    expect(next.headers.get('idempotent-replayed')).toBeNull();
    expect(runs).toBe(2);
  });

  it('says at bootstrap, once per handler, when a key from the request has no tenant option', async () => {
    const warnings: string[] = [];
    const logger = { warn: (m: string) => warnings.push(m), error: () => undefined };
    await start({ logger });
    const lines = warnings.filter((line) => line.includes('no tenant option'));
    expect(lines.map((line) => line.split(':')[0]).sort()).toEqual([
      'OrdersController.place',
      'OrdersResolver.placeOrder',
    ]);
    warnings.length = 0;
    await start({ logger, tenant: () => undefined });
    expect(warnings.filter((line) => line.includes('no tenant option'))).toEqual([]);
  });
});
