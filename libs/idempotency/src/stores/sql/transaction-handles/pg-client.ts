import type { SqlTransaction } from '../dialect';

interface PgQueryable {
  query(text: string, values: unknown[]): Promise<{ rows: unknown[]; rowCount: number | null }>;
}

/** A `pg` client (a PoolClient after BEGIN): known only by its `query` function, so tried last. */
export function pgClientTransaction(tx: unknown): SqlTransaction | undefined {
  const client = tx as Partial<PgQueryable>;
  if (typeof client.query !== 'function') return undefined;
  return async (text, values) => {
    const done = await (client as PgQueryable).query(text, values);
    return { rows: done.rows, affected: done.rowCount ?? 0 };
  };
}
