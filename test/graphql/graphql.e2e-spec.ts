import { INestApplication } from '@nestjs/common';
import { ApolloDriver, ApolloDriverConfig } from '@nestjs/apollo';
import {
  Args,
  Field,
  GraphQLModule,
  ID,
  InputType,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { MercuriusDriver, MercuriusDriverConfig } from '@nestjs/mercurius';
import { Test } from '@nestjs/testing';
import { randomUUID } from 'node:crypto';
import {
  Idempotent,
  IdempotencyConfigError,
  IdempotencyEvent,
  IdempotencyModule,
} from 'nest-idempotency';
import { InMemoryIdempotencyStore } from 'nest-idempotency/core';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { Probe } from '../http/fixtures';
import { AdapterName, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

const probe = new Probe();
/** Set by a test to make the next `pay` throw. */
const failNext = { pay: false };

@InputType()
class PaymentInput {
  @Field(() => String)
  orderId!: string;

  @Field(() => Int)
  amount!: number;
}

@ObjectType()
class Payment {
  @Field(() => ID)
  id!: string;

  @Field(() => String)
  orderId!: string;

  @Field(() => Int)
  amount!: number;
}

@Resolver(() => Payment)
class PaymentsResolver {
  @Query(() => String)
  ping(): string {
    return 'pong';
  }

  @Mutation(() => Payment)
  @Idempotent()
  async pay(@Args('input', { type: () => PaymentInput }) input: PaymentInput): Promise<Payment> {
    probe.ran('pay');
    await probe.pass('pay');
    if (failNext.pay) {
      failNext.pay = false;
      throw new Error('card declined');
    }
    return Object.assign(new Payment(), { id: randomUUID(), ...input });
  }

  @Mutation(() => Payment)
  @Idempotent({ waitTimeout: 0 })
  async payImpatiently(
    @Args('input', { type: () => PaymentInput }) input: PaymentInput,
  ): Promise<Payment> {
    probe.ran('impatient');
    await probe.pass('impatient');
    return { id: randomUUID(), ...input };
  }

  @Mutation(() => String)
  @Idempotent()
  receipt(@Args('size', { type: () => Int }) size: number): string {
    probe.ran('receipt');
    return 'r'.repeat(size);
  }

  @Mutation(() => Payment)
  @Idempotent({ key: 'order:{args.input.orderId}' })
  payOrder(@Args('input', { type: () => PaymentInput }) input: PaymentInput): Payment {
    probe.ran('payOrder');
    return { id: randomUUID(), ...input };
  }
}

const DRIVERS: {
  name: string;
  adapter: AdapterName;
  graphql: () => ReturnType<typeof GraphQLModule.forRoot>;
}[] = [
  {
    name: 'Apollo on Express',
    adapter: 'express',
    graphql: () =>
      GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true }),
  },
  {
    name: 'Mercurius on Fastify',
    adapter: 'fastify',
    graphql: () =>
      GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
      }),
  },
];

const PAY = `mutation Pay($input: PaymentInput!) { pay(input: $input) { id orderId amount } }`;
const PAY_IMPATIENTLY = `mutation Pay($input: PaymentInput!) { payImpatiently(input: $input) { id orderId amount } }`;
const PAY_ORDER = `mutation Pay($input: PaymentInput!) { payOrder(input: $input) { id orderId amount } }`;

interface GraphqlReply {
  status: number;
  replayed: string | null;
  data: Record<string, { id: string; orderId: string; amount: number } | null> | null;
  errors?: { message: string; extensions?: Record<string, unknown> }[];
}

async function mutate(
  url: string,
  query: string,
  variables: Record<string, unknown>,
  key?: string,
): Promise<GraphqlReply> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (key !== undefined) headers['idempotency-key'] = key;
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ query, variables }),
  });
  const body = (await response.json()) as Omit<GraphqlReply, 'status' | 'replayed'>;
  return {
    status: response.status,
    replayed: response.headers.get('idempotent-replayed'),
    ...body,
  };
}

describe.each(DRIVERS)('GraphQL mutations, $name', ({ adapter, graphql }) => {
  const schema = scratchSchema('gql');
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  let app: INestApplication;
  let url: string;
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    dataSource = await openDataSource();
    store = new TypeOrmIdempotencyStore(dataSource, {
      schema,
      ensureSchema: true,
      maxPayloadBytes: 4096,
    });
    ({ app, url } = await startHttpApp(adapter, {
      imports: [
        IdempotencyModule.forRoot({ store, onEvent: (event) => events.push(event) }),
        graphql(),
      ],
      providers: [PaymentsResolver],
    }));
  });
  afterAll(async () => {
    await app?.close();
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });
  beforeEach(() => {
    probe.executions.clear();
    probe.gates.clear();
    events.length = 0;
  });

  it('runs a mutation once under concurrent duplicates; each duplicate waits and gets the same result, marked as a replay', async () => {
    const key = randomUUID();
    const input = { orderId: 'o-1', amount: 100 };
    const gate = probe.hold('pay');
    const first = mutate(url, PAY, { input }, key);
    await gate.entered.promise;
    let parked = 0;
    const allParked = new Promise<void>((resolve) => {
      const stop = store.onWait(() => {
        if (++parked === 8) {
          stop();
          resolve();
        }
      });
    });
    const duplicates = Array.from({ length: 8 }, () => mutate(url, PAY, { input }, key));
    await allParked; // all 8 are waiting inside the store while the first still runs
    expect(probe.count('pay')).toBe(1);
    gate.release.open();
    const [original, ...others] = await Promise.all([first, ...duplicates]);
    expect(original.errors).toBeUndefined();
    expect(original.replayed).toBeNull();
    expect(original.data?.pay).toMatchObject(input);
    for (const other of others) {
      expect(other.errors).toBeUndefined();
      expect(other.data).toEqual(original.data);
      expect(other.replayed).toBe('true');
    }
    expect(probe.count('pay')).toBe(1);
    expect(events.filter((e) => e.type === 'completed')).toHaveLength(1);
  });

  it('replays a completed mutation with its stored result', async () => {
    const key = randomUUID();
    const input = { orderId: 'o-2', amount: 5 };
    const first = await mutate(url, PAY, { input }, key);
    const again = await mutate(url, PAY, { input }, key);
    expect(again.data).toEqual(first.data);
    expect(again.replayed).toBe('true');
    expect(probe.count('pay')).toBe(1);
  });

  it('refuses the key reused with other arguments: IDEMPOTENCY_KEY_REUSED (argument order does not count)', async () => {
    const key = randomUUID();
    await mutate(url, PAY, { input: { orderId: 'o-3', amount: 5 } }, key);
    const reordered = await mutate(url, PAY, { input: { amount: 5, orderId: 'o-3' } }, key);
    expect(reordered.errors).toBeUndefined();
    expect(reordered.replayed).toBe('true');
    const other = await mutate(url, PAY, { input: { orderId: 'o-3', amount: 6 } }, key);
    expect(other.data).toBeNull();
    expect(other.errors?.[0].extensions).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' });
    expect(JSON.stringify(other)).not.toContain(key);
    expect(probe.count('pay')).toBe(1);
  });

  it('refuses a mutation without the Idempotency-Key header: IDEMPOTENCY_KEY_MISSING, and nothing runs', async () => {
    const reply = await mutate(url, PAY, { input: { orderId: 'o-4', amount: 1 } });
    expect(reply.data).toBeNull();
    expect(reply.errors?.[0]).toMatchObject({
      message: 'PaymentsResolver.pay requires the Idempotency-Key header',
      extensions: expect.objectContaining({ code: 'IDEMPOTENCY_KEY_MISSING' }),
    });
    expect(probe.count('pay')).toBe(0);
  });

  it('answers a duplicate whose wait runs out with IDEMPOTENCY_IN_FLIGHT and retryAfterMs', async () => {
    const key = randomUUID();
    const input = { orderId: 'o-5', amount: 1 };
    const gate = probe.hold('impatient');
    const first = mutate(url, PAY_IMPATIENTLY, { input }, key);
    await gate.entered.promise;
    const second = await mutate(url, PAY_IMPATIENTLY, { input }, key);
    expect(second.data).toBeNull();
    const extensions = second.errors?.[0].extensions ?? {};
    expect(extensions.code).toBe('IDEMPOTENCY_IN_FLIGHT');
    expect(extensions.retryAfterMs).toEqual(expect.any(Number));
    expect(extensions.retryAfterMs as number).toBeGreaterThan(0);
    gate.release.open();
    expect((await first).errors).toBeUndefined();
    expect(probe.count('impatient')).toBe(1);
  });

  it('releases the key when the resolver throws, so a retry runs it', async () => {
    const key = randomUUID();
    const input = { orderId: 'o-6', amount: 1 };
    failNext.pay = true;
    const failed = await mutate(url, PAY, { input }, key);
    expect(failed.errors?.[0].message).toBe('card declined');
    expect(events.some((e) => e.type === 'released')).toBe(true);
    const retried = await mutate(url, PAY, { input }, key);
    expect(retried.errors).toBeUndefined();
    expect(retried.replayed).toBeNull();
    expect(probe.count('pay')).toBe(2);
  });

  it('a result too large to store: IDEMPOTENCY_RESULT_NOT_STORABLE, and a retry is refused the same way, never run again', async () => {
    const key = randomUUID();
    const RECEIPT = `mutation R($size: Int!) { receipt(size: $size) }`;
    const first = await mutate(url, RECEIPT, { size: 10_000 }, key);
    expect(first.errors?.[0].extensions).toMatchObject({ code: 'IDEMPOTENCY_RESULT_NOT_STORABLE' });
    expect(first.errors?.[0].extensions).not.toHaveProperty('retryAfterMs');
    const retry = await mutate(url, RECEIPT, { size: 10_000 }, key);
    expect(retry.errors?.[0].extensions).toMatchObject({ code: 'IDEMPOTENCY_RESULT_NOT_STORABLE' });
    expect(probe.count('receipt')).toBe(1);
    expect(events.filter((e) => e.type === 'not-storable')).toHaveLength(1);
  });

  it('takes the key from an expression over the arguments', async () => {
    const orderId = randomUUID();
    const first = await mutate(url, PAY_ORDER, { input: { orderId, amount: 3 } });
    const again = await mutate(url, PAY_ORDER, { input: { orderId, amount: 3 } });
    expect(first.errors).toBeUndefined();
    expect(again.data).toEqual(first.data);
    expect(again.replayed).toBe('true');
    expect(probe.count('payOrder')).toBe(1);
  });
});

describe('GraphQL placements refused at bootstrap', () => {
  it('refuses @Idempotent on a @Query(), naming Class.method', async () => {
    @Resolver()
    class ReadResolver {
      @Query(() => String)
      @Idempotent()
      read(): string {
        return 'x';
      }
    }
    const moduleRef = await Test.createTestingModule({
      imports: [
        IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore() }),
        GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true }),
      ],
      providers: [ReadResolver],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    const failure = await app.init().then(
      () => undefined,
      (error: unknown) => error,
    );
    await app.close().catch(() => undefined);
    expect(failure).toBeInstanceOf(IdempotencyConfigError);
    expect((failure as Error).message).toBe(
      'ReadResolver.read: @Idempotent applies to a GraphQL @Mutation(), and this method resolves a query; put it on the mutation',
    );
  });
});
