import { INestApplication } from '@nestjs/common';
import { ApolloDriver, ApolloDriverConfig } from '@nestjs/apollo';
import { Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { MercuriusDriver, MercuriusDriverConfig } from '@nestjs/mercurius';
import { randomBytes, randomUUID } from 'node:crypto';
import {
  Idempotent,
  IdempotencyContext,
  IdempotencyCtx,
  IdempotencyModule,
  InMemoryIdempotencyStore,
  keyDigest,
} from 'nest-idempotency';
import { AdapterName, startHttpApp } from '../support/http-app';

/**
 * Issue 25, requirement 1 on GraphQL: `@IdempotencyCtx()` on an
 * `@Idempotent` mutation gives its record's context, on Apollo (Express)
 * and Mercurius (Fastify); on a mutation without `@Idempotent`, nothing.
 */
@ObjectType()
class Seen {
  @Field(() => String, { nullable: true })
  keyDigest!: string | null;

  @Field(() => String, { nullable: true })
  attempt!: string | null;

  @Field(() => String, { nullable: true })
  charge!: string | null;
}

const seen = (ctx: IdempotencyContext | undefined): Seen => ({
  keyDigest: ctx?.keyDigest ?? null,
  attempt: ctx?.attempt ?? null,
  charge: ctx?.deriveKey('charge') ?? null,
});

@Resolver()
class ContextResolver {
  @Query(() => String)
  ping(): string {
    return 'pong';
  }

  @Mutation(() => Seen)
  @Idempotent({ scope: 'ctx-gql-pay' })
  pay(@IdempotencyCtx() ctx: IdempotencyContext | undefined): Seen {
    return seen(ctx);
  }

  @Mutation(() => Seen)
  audit(@IdempotencyCtx() ctx: IdempotencyContext | undefined): Seen {
    return seen(ctx);
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

async function mutate(url: string, field: string, key?: string): Promise<Seen> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (key !== undefined) headers['idempotency-key'] = key;
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ query: `mutation { ${field} { keyDigest attempt charge } }` }),
  });
  const body = (await response.json()) as { data: Record<string, Seen> | null; errors?: unknown };
  expect(body.errors).toBeUndefined();
  return body.data![field];
}

describe.each(DRIVERS)('@IdempotencyCtx() on GraphQL mutations, $name', ({ adapter, graphql }) => {
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    ({ app, url } = await startHttpApp(adapter, {
      imports: [
        IdempotencyModule.forRoot({
          store: new InMemoryIdempotencyStore(),
          purge: false,
          derivedKeys: { secret: randomBytes(32) },
        }),
        graphql() as never,
      ],
      providers: [ContextResolver],
    }));
  });

  afterAll(async () => {
    await app?.close();
  });

  it("hands an idempotent mutation its record's context, and a replay the same answer", async () => {
    const key = `pay-${randomUUID()}`;
    const first = await mutate(url, 'pay', key);
    expect(first).toMatchObject({ keyDigest: keyDigest('ctx-gql-pay', key), attempt: 'first' });
    expect(first.charge).toMatch(/^[\x21-\x7e]{1,64}$/);
    expect(await mutate(url, 'pay', key)).toEqual(first);
  });

  it('gives a mutation without @Idempotent undefined', async () => {
    expect(await mutate(url, 'audit', `audit-${randomUUID()}`)).toEqual({
      keyDigest: null,
      attempt: null,
      charge: null,
    });
  });
});
