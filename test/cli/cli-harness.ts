import { DataSource } from 'typeorm';
import { schemaSql } from 'nest-idempotency/typeorm';
import { ContractHarness, STORE_CONTRACT } from 'nest-idempotency/testing';
import { runCli } from '../../libs/idempotency/src/cli';
import type { CliIo, Interrupt } from '../../libs/idempotency/src/cli';
import { testDatabaseUrl } from '../support/postgres';

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the CLI in this process, with DATABASE_URL pointing at the test server unless `env` says otherwise. */
export async function cli(
  args: string[],
  options: {
    env?: Record<string, string | undefined>;
    interrupt?: Interrupt;
    /** Stands for a terminal on stderr (its width): the CLI then draws progress. */
    terminal?: CliIo['terminal'];
  } = {},
): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(args, {
    stdout: (text) => void (stdout += text),
    stderr: (text) => void (stderr += text),
    env: options.env ?? { DATABASE_URL: testDatabaseUrl() },
    interrupt: options.interrupt,
    // Not a terminal, whatever the test runner's stderr is: no progress line unless a test asks.
    terminal: options.terminal,
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

/**
 * What verify must grade on a store that keeps every guarantee: PASS, or N/A
 * for a scenario that says it does not apply to `harness` (built as the CLI
 * builds its own: the kind of store, its clock, its expiry).
 */
export function expectedGrades(harness: ContractHarness): Array<[string, 'PASS' | 'N/A']> {
  return STORE_CONTRACT.map((s) => [s.id, s.notApplicable?.(harness) ? 'N/A' : 'PASS']);
}

/** verify's summary line for those grades, with `unchecked` more N/A that do count against it. */
export function summaryLine(grades: Array<[string, string]>, unchecked = 0): string {
  const pass = grades.filter(([, grade]) => grade === 'PASS').length - unchecked;
  const apart = grades.length - pass - unchecked;
  const notApplicable =
    apart > 0 ? ` (${apart} of them ${apart === 1 ? 'does' : 'do'} not apply to this store)` : '';
  const verdict =
    unchecked > 0
      ? 'NOT VERIFIED: a guarantee could not be checked (N/A is not a pass).'
      : 'verified.';
  return `${pass} PASS, 0 FAIL, ${apart + unchecked} N/A${notApplicable}: ${verdict}`;
}

/** verify --json's summary for those grades. */
export function summaryJson(grades: Array<[string, string]>): Record<string, number> {
  const apart = grades.filter(([, grade]) => grade === 'N/A').length;
  return { pass: grades.length - apart, fail: 0, notApplicable: apart, doesNotApply: apart };
}
