import { DataSource } from 'typeorm';
import { schemaSql } from 'nest-idempotency/typeorm';
import { runCli } from '../../libs/idempotency/src/cli';
import type { Interrupt } from '../../libs/idempotency/src/cli';
import { testDatabaseUrl } from '../support/postgres';

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the CLI in this process, with DATABASE_URL pointing at the test server unless `env` says otherwise. */
export async function cli(
  args: string[],
  options: { env?: Record<string, string | undefined>; interrupt?: Interrupt } = {},
): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(args, {
    stdout: (text) => void (stdout += text),
    stderr: (text) => void (stderr += text),
    env: options.env ?? { DATABASE_URL: testDatabaseUrl() },
    interrupt: options.interrupt,
  });
  return { code, stdout, stderr };
}

/** Creates the records table in `schema`, as the migration would. */
export async function createRecordsTable(
  dataSource: DataSource,
  schema: string,
  table = 'idempotency_records',
): Promise<void> {
  for (const sql of schemaSql({ schema, table })) await dataSource.query(sql);
}

/**
 * Every row of a table, byte for byte, with its row version (`xmin`) and
 * place (`ctid`): any write, even one that changes no value, changes them.
 */
export async function tableSnapshot(
  dataSource: DataSource,
  schema: string,
  table = 'idempotency_records',
): Promise<string> {
  const rows = await dataSource.query(
    `SELECT xmin::text AS xmin, ctid::text AS ctid, row_to_json(r)::text AS row
     FROM "${schema}"."${table}" r ORDER BY id`,
  );
  return JSON.stringify(rows);
}

export async function schemaExists(dataSource: DataSource, schema: string): Promise<boolean> {
  const rows = await dataSource.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [schema]);
  return rows.length > 0;
}

/** The lines of a table that mention `text`. */
export function rowsMentioning(output: string, text: string): string[] {
  return output.split('\n').filter((line) => line.includes(text));
}

export const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
