import type { SqlTransaction } from '../dialect';
import { notInTransaction } from './not-in-transaction';

interface PrismaTransactionClient {
  $queryRawUnsafe(text: string, ...values: unknown[]): Promise<unknown[]>;
}

/** Where Prisma 7 marks a client of an interactive transaction (which may open nested ones). */
const SCOPE = Symbol.for('prisma.client.transaction.scope_context');

/**
 * A Prisma interactive transaction's client (`prisma.$transaction(async (tx) => …)`,
 * or `TransactionHost.tx` with the Prisma adapter): `$queryRawUnsafe`, which
 * hands back rows and no count. The root client is refused, as each of its
 * statements commits on its own: it has `$transaction`, which before Prisma 7
 * a transaction's client had not, and from Prisma 7 on has no scope mark.
 */
export function prismaTransaction(tx: unknown): SqlTransaction | undefined {
  const client = tx as Partial<PrismaTransactionClient> & {
    $transaction?: unknown;
    [SCOPE]?: unknown;
  };
  if (typeof client.$queryRawUnsafe !== 'function') return undefined;
  if (typeof client.$transaction === 'function' && client[SCOPE] === undefined) {
    throw notInTransaction('the PrismaClient itself (each of its statements commits alone)');
  }
  return async (text, values) => {
    const rows = await (client as PrismaTransactionClient).$queryRawUnsafe(text, ...values);
    return { rows, affected: rows.length };
  };
}
