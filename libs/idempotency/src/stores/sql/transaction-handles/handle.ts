import { IdempotencyConfigError } from '../../../core/errors';
import { describeInput } from '../../../core/store-input';
import type { SqlTransaction } from '../dialect';
import { drizzleTransaction } from './drizzle';
import { kyselyTransaction } from './kysely';
import { pgClientTransaction } from './pg-client';
import { prismaTransaction } from './prisma';
import { typeormTransaction } from './typeorm';

/**
 * One recogniser per kind of transaction handle an application may hold: the
 * statement function over it when `tx` is of that kind, else undefined (and
 * an `IdempotencyConfigError` when it is of that kind but no open transaction).
 * Duck-typed: none imports its ORM; one that needs its ORM's helpers loads it
 * only when a handle of that ORM comes.
 */
export type HandleRecogniser = (tx: unknown) => SqlTransaction | undefined;

/** Most specific first: a pg client is only known by its `query` function, which others have too. */
const RECOGNISERS: readonly HandleRecogniser[] = [
  typeormTransaction,
  prismaTransaction,
  kyselyTransaction,
  drizzleTransaction,
  pgClientTransaction,
];

/**
 * The statements of the caller's open transaction, whatever holds it: a `pg`
 * client after BEGIN, a TypeORM transaction's EntityManager, a Prisma
 * interactive transaction's client, a Drizzle transaction, a Kysely
 * Transaction (what `TransactionHost.tx` of `@nestjs-cls/transactional` is
 * with each adapter). PostgreSQL statements: the store's completion returns
 * its row, so that a handle which gives back rows but no count serves too.
 */
export function transactionQueryOf(tx: unknown, storeName: string): SqlTransaction {
  if (tx && (typeof tx === 'object' || typeof tx === 'function')) {
    for (const recognise of RECOGNISERS) {
      const statement = recognise(tx);
      if (statement) return statement;
    }
  }
  throw new IdempotencyConfigError(
    `${storeName}: completion in a transaction needs the handle of an open transaction (a pg client after BEGIN, a TypeORM EntityManager of a transaction, a Prisma interactive transaction client, a Drizzle or a Kysely transaction: TransactionHost.tx of @nestjs-cls/transactional); got ${describeInput(tx)}`,
  );
}
