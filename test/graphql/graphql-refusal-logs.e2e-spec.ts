import { INestApplication } from '@nestjs/common';
import { ApolloDriver, ApolloDriverConfig } from '@nestjs/apollo';
import { Args, GraphQLModule, Int, Mutation, Query, Resolver } from '@nestjs/graphql';
import { MercuriusDriver, MercuriusDriverConfig } from '@nestjs/mercurius';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyModule, InMemoryIdempotencyStore } from 'nest-idempotency';
import { CapturedLogs, startLoggedHttpApp } from '../support/captured-logs';
import type { AdapterName } from '../support/http-app';

/**
 * Issue 21, item 8: a refusal is the client's mistake (no key, a key reused
 * with other arguments), answered as a GraphQL error with `extensions.code`;
 * it is not a server error, so Nest must not log it as one, with its stack.
 */
@Resolver()
class RefusalsResolver {
  @Query(() => String)
  ping(): string {
    return 'pong';
  }

  @Mutation(() => Int)
  @Idempotent()
  charge(@Args('amount', { type: () => Int }) amount: number): number {
    return amount;
  }

  @Mutation(() => Int)
  explode(): number {
    throw new Error('a real server error');
  }
}

const DRIVERS: { name: string; adapter: AdapterName; graphql: () => unknown }[] = [
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

interface Reply {
  data: Record<string, unknown> | null;
  errors?: { message: string; extensions?: Record<string, unknown> }[];
}

async function post(url: string, query: string, key?: string): Promise<Reply> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (key !== undefined) headers['idempotency-key'] = key;
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ query }),
  });
  return (await response.json()) as Reply;
}

describe.each(DRIVERS)('GraphQL refusals in the logs, $name', ({ adapter, graphql }) => {
  const logs = new CapturedLogs();
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    ({ app, url } = await startLoggedHttpApp(
      adapter,
      {
        imports: [
          IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore(), purge: false }),
          graphql() as never,
        ],
        providers: [RefusalsResolver],
      },
      logs,
    ));
  });
  afterAll(async () => {
    await app?.close();
  });
  beforeEach(() => {
    logs.lines.length = 0;
  });

  const errorLines = () => logs.lines.filter((line) => /^\[(error|warn)\]/.test(line));

  it('answers a missing key with extensions.code and logs no error', async () => {
    const reply = await post(url, 'mutation { charge(amount: 1) }');
    expect(reply.errors?.[0]).toMatchObject({
      message: 'RefusalsResolver.charge requires the Idempotency-Key header',
      extensions: { code: 'IDEMPOTENCY_KEY_MISSING' },
    });
    expect(errorLines()).toEqual([]);
  });

  it('answers a key reused with other arguments with extensions.code and logs no error', async () => {
    const key = randomUUID();
    expect((await post(url, 'mutation { charge(amount: 1) }', key)).data).toEqual({ charge: 1 });
    const reply = await post(url, 'mutation { charge(amount: 2) }', key);
    expect(reply.errors?.[0]?.extensions?.code).toBe('IDEMPOTENCY_KEY_REUSED');
    expect(errorLines()).toEqual([]);
  });

  it("still logs a resolver's own error", async () => {
    await post(url, 'mutation { explode }');
    expect(errorLines().join('\n')).toContain('a real server error');
  });
});
