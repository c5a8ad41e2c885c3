import type { SqlTransaction } from '../dialect';
import { notInTransaction } from './not-in-transaction';

interface TypeOrmRunner {
  readonly isTransactionActive: boolean;
  readonly connection: unknown;
  query(
    text: string,
    values: unknown[],
    structured: true,
  ): Promise<{ records?: unknown; affected?: number; raw?: unknown }>;
}

/** A TypeORM EntityManager's query runner, when it has one (a transaction's manager does). */
export function runnerOf(tx: unknown): TypeOrmRunner | undefined {
  const runner = (tx as { queryRunner?: Partial<TypeOrmRunner> }).queryRunner;
  return runner && typeof runner.query === 'function' && 'isTransactionActive' in runner
    ? (runner as TypeOrmRunner)
    : undefined;
}

/** A TypeORM EntityManager: the statements on the QueryRunner of its open transaction. */
export function typeormTransaction(tx: unknown): SqlTransaction | undefined {
  const manager = tx as { getRepository?: unknown; transaction?: unknown };
  if (typeof manager.getRepository !== 'function' || typeof manager.transaction !== 'function') {
    return undefined;
  }
  const runner = runnerOf(tx);
  if (!runner?.isTransactionActive) {
    throw notInTransaction(
      'a TypeORM EntityManager outside a transaction (dataSource.transaction(manager => …) or TransactionHost.tx)',
    );
  }
  return typeormStatement(runner);
}

/** The statements on a TypeORM QueryRunner. */
export function typeormStatement(runner: TypeOrmRunner): SqlTransaction {
  return async (text, values) => {
    const done = await runner.query(text, values, true);
    const raw = done.raw as { affectedRows?: number } | undefined;
    return {
      rows: Array.isArray(done.records) ? done.records : [],
      affected: done.affected ?? raw?.affectedRows ?? 0,
    };
  };
}
