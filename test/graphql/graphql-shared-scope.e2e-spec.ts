import { Body, Controller, INestApplication, Post, Res } from '@nestjs/common';
import { ApolloDriver, ApolloDriverConfig } from '@nestjs/apollo';
import {
  Args,
  Field,
  GraphQLModule,
  ID,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { MercuriusDriver, MercuriusDriverConfig } from '@nestjs/mercurius';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyModule, InMemoryIdempotencyStore } from 'nest-idempotency';
import { Probe } from '../http/fixtures';
import { AdapterName, send, startHttpApp } from '../support/http-app';

/**
 * A GraphQL mutation and an HTTP route sharing one explicit scope (issue 20,
 * item 7): a key runs once whichever door it used, and each door replays the
 * other's record as it replays its own.
 */
const probe = new Probe();

@ObjectType()
class Payment {
  @Field(() => ID)
  id!: string;

  @Field(() => String)
  orderId!: string;

  @Field(() => Int)
  amount!: number;
}

@Controller('payments')
class PaymentsController {
  @Post()
  @Idempotent({ scope: 'payments' })
  pay(
    @Body() body: { orderId: string; amount: number },
    @Res({ passthrough: true }) res: { status?: (n: number) => void; code?: (n: number) => void },
  ) {
    probe.ran(body.orderId);
    if (body.amount <= 0) {
      (res.status ?? res.code)!.call(res, 422);
      return { error: 'the amount must be positive' };
    }
    return { id: randomUUID(), orderId: body.orderId, amount: body.amount };
  }
}

@Resolver(() => Payment)
class PaymentsResolver {
  @Query(() => String)
  ping(): string {
    return 'pong';
  }

  /** The route's fingerprint hashes the request, this one would hash arguments: only one compares. */
  @Mutation(() => Payment)
  @Idempotent({ scope: 'payments', fingerprint: false })
  pay(
    @Args('orderId') orderId: string,
    @Args('amount', { type: () => Int }) amount: number,
  ): Payment {
    probe.ran(orderId);
    return { id: randomUUID(), orderId, amount };
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

describe.each(DRIVERS)(
  'a scope shared by a route and a mutation, $name',
  ({ adapter, graphql }) => {
    let app: INestApplication;
    let url: string;

    beforeAll(async () => {
      ({ app, url } = await startHttpApp(adapter, {
        imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore() }), graphql()],
        controllers: [PaymentsController],
        providers: [PaymentsResolver],
      }));
    });
    afterAll(() => app?.close());
    beforeEach(() => probe.executions.clear());

    const mutate = async (key: string, orderId: string, amount: number) => {
      const reply = await send(url, 'POST', '/graphql', {
        key,
        body: {
          query:
            'mutation Pay($orderId: String!, $amount: Int!) { pay(orderId: $orderId, amount: $amount) { id orderId amount } }',
          variables: { orderId, amount },
        },
      });
      return reply.json() as {
        data: { pay: Payment } | null;
        errors?: { message: string; extensions?: { code?: string } }[];
      };
    };

    it('replays through the mutation what the route answered, and through the route what the mutation returned', async () => {
      const httpFirst = randomUUID();
      const first = await send(url, 'POST', '/payments', {
        key: httpFirst,
        body: { orderId: 'o-1', amount: 100 },
      });
      expect((await mutate(httpFirst, 'o-1', 100)).data?.pay).toEqual(first.json());
      expect(probe.count('o-1')).toBe(1);

      const graphqlFirst = randomUUID();
      const paid = await mutate(graphqlFirst, 'o-2', 200);
      const replay = await send(url, 'POST', '/payments', {
        key: graphqlFirst,
        body: { orderId: 'o-2', amount: 200 },
      });
      expect(replay.status).toBe(201);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.json()).toEqual(paid.data?.pay);
      expect(probe.count('o-2')).toBe(1);
    });

    it('answers the mutation with IDEMPOTENCY_REPLAYED_ERROR when the route answered an error status', async () => {
      const key = randomUUID();
      expect(
        (await send(url, 'POST', '/payments', { key, body: { orderId: 'o-3', amount: 0 } })).status,
      ).toBe(422);
      const replay = await mutate(key, 'o-3', 0);
      expect(replay.data).toBeNull();
      expect(replay.errors?.[0]).toMatchObject({
        message:
          'PaymentsResolver.pay: this key was first processed through an HTTP route of the scope "payments", which answered 422; it is not processed again',
        extensions: { code: 'IDEMPOTENCY_REPLAYED_ERROR' },
      });
      expect(probe.count('o-3')).toBe(1);
    });
  },
);
