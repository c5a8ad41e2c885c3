import { optionalPeer } from '../../../core/optional-peer';
import type { SqlTransaction } from '../dialect';
import { notInTransaction } from './not-in-transaction';

interface KyselyExecutor {
  readonly isTransaction: boolean;
  executeQuery(query: unknown): Promise<{ rows: unknown[]; numAffectedRows?: bigint }>;
}

interface KyselyModule {
  CompiledQuery: { raw(sql: string, parameters: unknown[]): unknown };
}

/** A Kysely `Transaction` (`db.transaction().execute(async (trx) => …)`): `executeQuery` of a raw compiled query. */
export function kyselyTransaction(tx: unknown): SqlTransaction | undefined {
  const trx = tx as Partial<KyselyExecutor> & { selectFrom?: unknown };
  if (typeof trx.executeQuery !== 'function' || typeof trx.selectFrom !== 'function') {
    return undefined;
  }
  if (trx.isTransaction !== true) {
    throw notInTransaction('a Kysely instance outside a transaction (db.transaction().execute)');
  }
  const { CompiledQuery } = optionalPeer<KyselyModule>('kysely');
  return async (text, values) => {
    const done = await (trx as KyselyExecutor).executeQuery(CompiledQuery.raw(text, values));
    return { rows: done.rows, affected: Number(done.numAffectedRows ?? done.rows.length) };
  };
}
