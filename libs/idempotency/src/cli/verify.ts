import { randomBytes } from 'node:crypto';
import { Command } from 'commander';
import type { DataSource } from 'typeorm';
import { schemaSql } from '../stores/typeorm/postgres/schema';
import { qualified, quoteIdent, TableName } from '../stores/typeorm/table';
import { TypeOrmIdempotencyStore } from '../stores/typeorm/typeorm.store';
import type { ContractHarness } from '../testing/harness';
import { runIdempotencyStoreContract, ScenarioResult } from '../testing/run-contract';
import { STORE_CONTRACT } from '../testing/scenarios';
import { wholeNumber } from './arguments';
import {
  boundedQuery,
  Connection,
  describeError,
  openDataSource,
  quietLogger,
  sqlState,
  toCliError,
} from './connection';
import { CommandContext } from './context';
import { CliError, ExitCode } from './exit-codes';
import { renderTable } from './format';

/**
 * `verify` grades the store's contract (nest-idempotency/testing's
 * catalogue, the same scenarios the store's own tests run) on the configured
 * PostgreSQL, in a scratch schema it creates and always drops. Instance A and
 * instance B are separate connection pools, as two application instances
 * would have; B polls once a minute, so only a notification wakes it quickly.
 */
export type { Grade } from '../testing/run-contract';

export interface GuaranteeResult {
  id: string;
  guarantee: string;
  grade: ScenarioResult['grade'];
  /** What was measured, or for N/A why it could not be. */
  measured: string;
}

interface VerifyOptions {
  concurrency: number;
  raceIterations: number;
  json?: boolean;
}

/**
 * `verify`: grades the store's guarantees on the configured PostgreSQL, in a
 * scratch schema it creates and always drops. The configured table is never
 * touched. Exit 0 only when every guarantee is PASS: a FAIL or an N/A exits 1.
 */
export function addVerifyCommand(program: Command, context: CommandContext): void {
  program
    .command('verify')
    .description(
      "grade the store's guarantees on this database, in a scratch schema that is created and dropped",
    )
    .option(
      '--concurrency <n>',
      'concurrent acquirers in the one-winner check',
      wholeNumber(2, 500),
      50,
    )
    .option(
      '--race-iterations <n>',
      'iterations of the completion/arrival race in the lost-wake-up check',
      wholeNumber(1, 100_000),
      1000,
    )
    .option('--json', 'print JSON')
    .action(async (options: VerifyOptions, command: Command) => {
      const connection = context.connection(command);
      // Ctrl-C stops between checks; the scratch schema is still dropped.
      if (context.io.interrupt) context.io.interrupt.handled = true;
      const outcome = await runVerify(
        connection,
        { concurrency: options.concurrency, raceIterations: options.raceIterations },
        context.io.interrupt?.signal,
      );
      const counts = { PASS: 0, FAIL: 0, 'N/A': 0 };
      for (const result of outcome.results) counts[result.grade]++;
      if (options.json) {
        context.printJson({
          target: connection.target,
          serverVersion: outcome.serverVersion,
          roundTripMs: outcome.roundTripMs,
          scratchSchema: outcome.schema,
          scratchSchemaDropped: outcome.dropError === undefined,
          interrupted: outcome.interrupted,
          results: outcome.results,
          summary: { pass: counts.PASS, fail: counts.FAIL, notApplicable: counts['N/A'] },
        });
      } else {
        context.print(
          renderTable(
            ['Guarantee', 'Grade', 'Measured'],
            outcome.results.map((r) => [r.guarantee, r.grade, r.measured]),
            [50, 7, 60],
          ),
        );
        const verdict = outcome.interrupted
          ? `NOT VERIFIED: interrupted after ${outcome.results.length} of ${STORE_CONTRACT.length} checks`
          : counts.FAIL > 0
            ? 'NOT VERIFIED: a guarantee failed'
            : counts['N/A'] > 0
              ? 'NOT VERIFIED: a guarantee could not be checked (N/A is not a pass)'
              : 'verified';
        context.print(
          `${counts.PASS} PASS, ${counts.FAIL} FAIL, ${counts['N/A']} N/A: ${verdict}. ` +
            `PostgreSQL ${outcome.serverVersion} at ${connection.target}, round trip ${outcome.roundTripMs} ms; ` +
            `scratch schema ${outcome.schema} ${outcome.dropError === undefined ? 'dropped' : 'NOT dropped'}.`,
        );
      }
      if (outcome.dropError !== undefined) {
        throw new CliError(
          `could not drop the scratch schema ${outcome.schema}: ${outcome.dropError}; drop it with: DROP SCHEMA ${quoteIdent(outcome.schema)} CASCADE`,
          ExitCode.ERROR,
        );
      }
      if (outcome.interrupted) throw new CliError('interrupted', ExitCode.INTERRUPTED);
      if (counts.FAIL > 0 || counts['N/A'] > 0) context.exitCode = ExitCode.VERIFY_FAILED;
    });
}

interface VerifyOutcome {
  schema: string;
  results: GuaranteeResult[];
  serverVersion: string;
  roundTripMs: number;
  interrupted: boolean;
  /** Set when the scratch schema could not be dropped. */
  dropError?: string;
}

export async function runVerify(
  connection: Connection,
  scale: { concurrency: number; raceIterations: number },
  signal?: AbortSignal,
): Promise<VerifyOutcome> {
  const schema = `nest_idempotency_verify_${randomBytes(6).toString('hex')}`;
  const table: TableName = { schema, table: connection.table };
  const admin = await openDataSource(connection, 6);
  const opened: DataSource[] = [];
  const stores: TypeOrmIdempotencyStore[] = [];
  const outcome: VerifyOutcome = {
    schema,
    results: [],
    serverVersion: '?',
    roundTripMs: 0,
    interrupted: false,
  };
  let created = false;
  try {
    const query = <T>(sql: string, what: string, params: unknown[] = []) =>
      boundedQuery<T>(admin, connection.timeoutMs, what, sql, params);
    const [version] = await query<{ server_version: string }>('SHOW server_version', 'SHOW');
    outcome.serverVersion = version.server_version;
    outcome.roundTripMs = await measureRoundTrip(admin, connection.timeoutMs);
    try {
      await query(`CREATE SCHEMA ${quoteIdent(schema)}`, 'CREATE SCHEMA');
      created = true;
    } catch (error) {
      if (sqlState(error) === '42501') {
        throw new CliError(
          `verify needs to create a scratch schema, and this login may not: ${describeError(error)}`,
          ExitCode.SCHEMA,
        );
      }
      throw error;
    }
    for (const sql of schemaSql(table)) await query(sql, 'CREATE TABLE');

    const store = (dataSource: DataSource, pollIntervalMs?: number) => {
      const instance = new TypeOrmIdempotencyStore(dataSource, {
        schema,
        table: table.table,
        operationTimeoutMs: Math.max(connection.timeoutMs, 5000),
        pollIntervalMs,
        logger: quietLogger,
      });
      stores.push(instance);
      return instance;
    };
    const other = await openDataSource(connection, 6);
    opened.push(other);
    const harness: ContractHarness = {
      store: store(admin),
      other: store(other, 60_000),
      clock: 'store',
      // Every column of a scope's rows and their row version (xmin), which any write changes.
      snapshot: async (scope) =>
        JSON.stringify(
          await query(
            `SELECT xmin::text AS xmin, row_to_json(r)::text AS row FROM ${qualified(table)} r WHERE scope = $1 ORDER BY id`,
            'the snapshot query',
            [scope],
          ),
        ),
    };
    const results = await runIdempotencyStoreContract(harness, { scale, signal });
    outcome.interrupted = signal?.aborted === true && results.length < STORE_CONTRACT.length;
    outcome.results = results.map((r) => ({
      id: r.id,
      guarantee: r.title,
      grade: r.grade,
      measured: r.measured,
    }));
  } catch (error) {
    throw toCliError(error, connection);
  } finally {
    for (const instance of stores) await instance.close().catch(() => undefined);
    for (const dataSource of opened) await dataSource.destroy().catch(() => undefined);
    if (created) {
      try {
        await boundedQuery(
          admin,
          Math.max(connection.timeoutMs, 5000),
          'DROP SCHEMA',
          `DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`,
        );
      } catch (error) {
        outcome.dropError = describeError(error);
      }
    }
    await admin.destroy().catch(() => undefined);
  }
  return outcome;
}

async function measureRoundTrip(dataSource: DataSource, timeoutMs: number): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < 5; i++) {
    const started = performance.now();
    await boundedQuery(dataSource, timeoutMs, 'SELECT 1', 'SELECT 1');
    samples.push(performance.now() - started);
  }
  return round(median(samples));
}

function median(values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.floor(sorted.length / 2)];
}

/** Milliseconds to one decimal below 10, whole above. */
function round(ms: number): number {
  return Math.abs(ms) < 10 ? Math.round(ms * 10) / 10 : Math.round(ms);
}
