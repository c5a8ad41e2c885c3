import { INestApplication } from '@nestjs/common';
import { ApolloDriver, ApolloDriverConfig } from '@nestjs/apollo';
import {
  Args,
  createUnionType,
  CustomScalar,
  Field,
  GraphQLISODateTime,
  GraphQLModule,
  ID,
  Int,
  InterfaceType,
  Mutation,
  ObjectType,
  Query,
  Resolver,
  Scalar,
} from '@nestjs/graphql';
import { MercuriusDriver, MercuriusDriverConfig } from '@nestjs/mercurius';
import { Kind, ValueNode } from 'graphql';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyModule } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { AdapterName, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * What a replayed mutation answers must be what its first caller received,
 * field for field: the member type of a union or an interface (resolved by
 * Nest's default, by class), fields computed by getters, `DateTime` and a
 * custom scalar whose `serialize` expects its class, and field errors. A
 * resolver that returns an Error is answered as one that throws it.
 */

/** A value class a custom scalar serializes; `serialize` refuses anything else, as such scalars do. */
class Money {
  constructor(
    readonly cents: number,
    readonly currency: string,
  ) {}

  toString(): string {
    return `${(this.cents / 100).toFixed(2)} ${this.currency}`;
  }

  static parse(text: string): Money {
    const [amount, currency] = text.split(' ');
    return new Money(Math.round(Number(amount) * 100), currency);
  }
}

@Scalar('Money', () => Money)
class MoneyScalar implements CustomScalar<string, Money> {
  parseValue(value: unknown): Money {
    return Money.parse(String(value));
  }
  serialize(value: unknown): string {
    if (!(value instanceof Money)) throw new TypeError('Money cannot represent a non-Money value');
    return value.toString();
  }
  parseLiteral(ast: ValueNode): Money {
    if (ast.kind !== Kind.STRING) throw new TypeError('Money literals are strings');
    return Money.parse(ast.value);
  }
}

@ObjectType()
class Paid {
  @Field(() => ID)
  id!: string;

  @Field(() => Int)
  amount!: number;

  @Field(() => GraphQLISODateTime)
  paidAt!: Date;

  @Field(() => Money)
  fee!: Money;

  /** Computed: a prototype getter, which JSON.stringify does not read. */
  @Field(() => String)
  get display(): string {
    return `${this.amount} paid at ${this.paidAt.toISOString()}`;
  }

  @Field(() => String, { nullable: true })
  note?: string;
}

@ObjectType()
class Declined {
  @Field(() => String)
  reason!: string;
}

const PaymentResult = createUnionType({
  name: 'PaymentResult',
  types: () => [Paid, Declined] as const,
});

@InterfaceType()
abstract class Charge {
  @Field(() => ID)
  id!: string;
}

@ObjectType({ implements: () => [Charge] })
class CardCharge extends Charge {
  @Field(() => String)
  last4!: string;
}

@ObjectType({ implements: () => [Charge] })
class BankCharge extends Charge {
  @Field(() => String)
  iban!: string;
}

const runs = new Map<string, number>();
const ran = (name: string) => runs.set(name, (runs.get(name) ?? 0) + 1);

@Resolver()
class PaymentsResolver {
  @Query(() => String)
  ping(): string {
    return 'pong';
  }

  @Mutation(() => PaymentResult)
  @Idempotent()
  pay(@Args('decline', { type: () => Boolean }) decline: boolean): typeof PaymentResult {
    ran('pay');
    if (decline) return Object.assign(new Declined(), { reason: `declined ${randomUUID()}` });
    return Object.assign(new Paid(), {
      id: randomUUID(),
      amount: 1000 + (runs.get('pay') ?? 0),
      paidAt: new Date(Date.now() - 1000 * (runs.get('pay') ?? 0)),
      fee: new Money(125, 'EUR'),
    });
  }

  @Mutation(() => Charge)
  @Idempotent()
  charge(@Args('bank', { type: () => Boolean }) bank: boolean): Charge {
    ran('charge');
    return bank
      ? Object.assign(new BankCharge(), { id: randomUUID(), iban: 'DE02120300000000202051' })
      : Object.assign(new CardCharge(), { id: randomUUID(), last4: '4242' });
  }

  @Mutation(() => Paid)
  @Idempotent()
  payWithNote(): Paid {
    ran('payWithNote');
    // A field whose value is an Error: GraphQL answers null there, with a field error.
    return Object.assign(new Paid(), {
      id: randomUUID(),
      amount: 7,
      paidAt: new Date(),
      fee: new Money(0, 'EUR'),
      note: new Error(`note unavailable ${randomUUID()}`) as unknown as string,
    });
  }

  @Mutation(() => Paid, { nullable: true })
  @Idempotent()
  payOrFail(): Paid | Error {
    ran('payOrFail');
    return new Error(`card declined ${randomUUID()}`);
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

interface Reply {
  replayed: string | null;
  data: unknown;
  errors?: { message: string; path?: unknown[] }[];
}

async function mutate(url: string, query: string, key: string): Promise<Reply> {
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ query }),
  });
  const body = (await response.json()) as Omit<Reply, 'replayed'>;
  return {
    replayed: response.headers.get('idempotent-replayed'),
    data: body.data,
    ...(body.errors ? { errors: body.errors.map(({ message, path }) => ({ message, path })) } : {}),
  };
}

const PAID_FIELDS = 'id amount paidAt fee display note';
const PAY = (decline: boolean) =>
  `mutation { pay(decline: ${decline}) { __typename ... on Paid { ${PAID_FIELDS} } ... on Declined { reason } } }`;

describe.each(DRIVERS)(
  'GraphQL replays answer what the first caller got, $name',
  ({ adapter, graphql }) => {
    const schema = scratchSchema('gqlfid');
    let dataSource: DataSource;
    let store: TypeOrmIdempotencyStore;
    let app: INestApplication;
    let url: string;

    beforeAll(async () => {
      dataSource = await openDataSource();
      store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
      ({ app, url } = await startHttpApp(adapter, {
        imports: [IdempotencyModule.forRoot({ store }), graphql()],
        providers: [PaymentsResolver, MoneyScalar],
      }));
    });
    afterAll(async () => {
      await app?.close();
      await dropSchema(dataSource, schema);
      await dataSource.destroy();
    });
    beforeEach(() => runs.clear());

    it.each([
      ['a union member with a getter, a DateTime and a custom scalar', false, 'Paid'],
      ['the other union member', true, 'Declined'],
    ])('replays %s as the same member type, field for field', async (_name, decline, typename) => {
      const key = randomUUID();
      const first = await mutate(url, PAY(decline), key);
      const second = await mutate(url, PAY(decline), key);
      expect(first.errors).toBeUndefined();
      expect((first.data as { pay: { __typename: string } }).pay.__typename).toBe(typename);
      expect(second).toEqual({ ...first, replayed: 'true' });
      expect(runs.get('pay')).toBe(1);
    });

    it('replays an interface result as the implementing type the first caller got', async () => {
      const query = (bank: boolean) =>
        `mutation { charge(bank: ${bank}) { __typename id ... on CardCharge { last4 } ... on BankCharge { iban } } }`;
      for (const bank of [false, true]) {
        const key = randomUUID();
        const first = await mutate(url, query(bank), key);
        const second = await mutate(url, query(bank), key);
        expect(first.errors).toBeUndefined();
        expect(second).toEqual({ ...first, replayed: 'true' });
      }
      expect(runs.get('charge')).toBe(2);
    });

    it('replays a field error inside the result as the same field error', async () => {
      const key = randomUUID();
      const query = `mutation { payWithNote { ${PAID_FIELDS} } }`;
      const first = await mutate(url, query, key);
      const second = await mutate(url, query, key);
      expect(first.errors?.[0]).toMatchObject({ path: ['payWithNote', 'note'] });
      expect(second).toEqual({ ...first, replayed: 'true' });
      expect(runs.get('payWithNote')).toBe(1);
    });

    it('answers a returned Error as a thrown one: nothing is recorded, and a retry runs again', async () => {
      const key = randomUUID();
      const first = await mutate(url, 'mutation { payOrFail { id } }', key);
      expect(first.errors?.[0].message).toMatch(/^card declined /);
      expect(await store.find({ scope: 'PaymentsResolver.payOrFail', key })).toBeNull();
      const second = await mutate(url, 'mutation { payOrFail { id } }', key);
      expect(second.replayed).toBeNull();
      expect(second.errors?.[0].message).toMatch(/^card declined /);
      expect(second.errors?.[0].message).not.toBe(first.errors?.[0].message);
      expect(runs.get('payOrFail')).toBe(2);
    });
  },
);
