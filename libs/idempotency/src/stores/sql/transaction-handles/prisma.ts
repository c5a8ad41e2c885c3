import type { SqlTransaction } from '../dialect';
import { notInTransaction } from './not-in-transaction';

interface PrismaTransactionClient {
  $queryRawUnsafe(text: string, ...values: unknown[]): Promise<unknown[]>;
}

/**
 * A Prisma interactive transaction's client (`prisma.$transaction(async (tx) => …)`,
 * or `TransactionHost.tx` with the Prisma adapter): `$queryRawUnsafe`, which
 * hands back rows and no count; the root client (which has `$transaction`)
 * is refused, as each of its statements commits on its own.
 */
export function prismaTransaction(tx: unknown): SqlTransaction | undefined {
  const client = tx as Partial<PrismaTransactionClient> & { $transaction?: unknown };
  if (typeof client.$queryRawUnsafe !== 'function') return undefined;
  if (typeof client.$transaction === 'function') {
    throw notInTransaction('the PrismaClient itself (each of its statements commits alone)');
  }
  return async (text, values) => {
    const rows = await (client as PrismaTransactionClient).$queryRawUnsafe(text, ...values);
    return { rows, affected: rows.length };
  };
}
