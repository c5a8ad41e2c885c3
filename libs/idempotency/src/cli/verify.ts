import { Command } from 'commander';
import type { ContractHarness } from '../testing/harness';
import { runIdempotencyStoreContract, ScenarioResult } from '../testing/run-contract';
import { STORE_CONTRACT } from '../testing/scenarios';
import { wholeNumber } from './arguments';
import { Connection, openBackend, VerifyRun } from './connection';
import { CommandContext } from './context';
import { CliError, ExitCode } from './exit-codes';
import { renderTable } from './format';
import { quoteIdent } from '../stores/sql/table';

/**
 * `verify` grades the store's contract (nest-idempotency/testing's
 * catalogue, the same scenarios the store's own tests run) on the configured
 * database or Redis, in a scratch namespace it creates and always removes: a
 * schema on PostgreSQL, a table on MySQL and MariaDB, a key prefix on Redis.
 * Instance A and instance B have connections of their own, as two
 * application instances would; B polls once a minute, so only a real
 * wake-up (a notification, MySQL's cross-instance poll, pub/sub) wakes it quickly.
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
      "grade the store's guarantees on this database or Redis, in a scratch schema (MySQL/MariaDB: table; Redis: key prefix) that is created and removed",
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
      // Ctrl-C stops between checks; the scratch namespace is still removed.
      if (context.io.interrupt) context.io.interrupt.handled = true;
      const progress = context.progress(options);
      const total = STORE_CONTRACT.length;
      const checking = (done: number) =>
        progress.show(
          done < total
            ? `verify: ${done} of ${total} checks done; now: ${STORE_CONTRACT[done].id}`
            : `verify: ${total} of ${total} checks done; removing the scratch namespace`,
        );
      progress.show(`verify: connecting to ${connection.target}`);
      const outcome = await runVerify(
        connection,
        { concurrency: options.concurrency, raceIterations: options.raceIterations },
        context.io.interrupt?.signal,
        { onCreated: () => checking(0), onResult: (done) => checking(done) },
      );
      const counts = { PASS: 0, FAIL: 0, 'N/A': 0 };
      for (const result of outcome.results) counts[result.grade]++;
      // A scenario the store declares not applicable (Redis expires records itself) is not a
      // guarantee left unchecked: it is not one this store makes.
      const unchecked = counts['N/A'] - outcome.doesNotApply.length;
      const { scratch } = outcome;
      const removed = outcome.removeError === undefined;
      if (options.json) {
        context.printJson({
          store: storeKind(connection),
          target: connection.target,
          serverVersion: outcome.serverVersion,
          roundTripMs: outcome.roundTripMs,
          ...scratchJson(scratch, removed),
          interrupted: outcome.interrupted,
          results: outcome.results,
          summary: {
            pass: counts.PASS,
            fail: counts.FAIL,
            notApplicable: counts['N/A'],
            doesNotApply: outcome.doesNotApply.length,
          },
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
            : unchecked > 0
              ? 'NOT VERIFIED: a guarantee could not be checked (N/A is not a pass)'
              : 'verified';
        const notApplicable =
          outcome.doesNotApply.length > 0
            ? ` (${outcome.doesNotApply.length} of them ${outcome.doesNotApply.length === 1 ? 'does' : 'do'} not apply to this store)`
            : '';
        context.print(
          `${counts.PASS} PASS, ${counts.FAIL} FAIL, ${counts['N/A']} N/A${notApplicable}: ${verdict}. ` +
            `${serverLabel(connection)} ${outcome.serverVersion} at ${connection.target}, round trip ${outcome.roundTripMs} ms; ` +
            scratchLine(scratch, removed),
        );
      }
      if (!removed) throw removalFailed(scratch, outcome.removeError!, outcome.cleanupHint);
      if (outcome.interrupted) throw new CliError('interrupted', ExitCode.INTERRUPTED);
      if (counts.FAIL > 0 || unchecked > 0) context.exitCode = ExitCode.VERIFY_FAILED;
    });
}

interface VerifyOutcome {
  scratch: VerifyRun['scratch'];
  results: GuaranteeResult[];
  /** Ids of the scenarios graded N/A because the store declares they do not apply. */
  doesNotApply: string[];
  serverVersion: string;
  roundTripMs: number;
  interrupted: boolean;
  /** Set when the scratch namespace could not be removed. */
  removeError?: string;
  /** The statement (or command) that removes it by hand. */
  cleanupHint: string;
}

/** What `runVerify` reports as it goes: the scratch namespace exists; `done` checks are graded. */
export interface VerifyProgress {
  onCreated?(): void;
  onResult?(done: number): void;
}

export async function runVerify(
  connection: Connection,
  scale: { concurrency: number; raceIterations: number },
  signal?: AbortSignal,
  progress: VerifyProgress = {},
): Promise<VerifyOutcome> {
  const backend = await openBackend(connection);
  const outcome: VerifyOutcome = {
    scratch: { kind: connection.kind === 'redis' ? 'prefix' : 'schema', name: '?' },
    results: [],
    doesNotApply: [],
    serverVersion: '?',
    roundTripMs: 0,
    interrupted: false,
    cleanupHint: '',
  };
  try {
    const run = await backend.verify(
      async ({ harness, serverVersion, roundTripMs }) => {
        outcome.serverVersion = serverVersion;
        outcome.roundTripMs = roundTripMs;
        let done = 0;
        const results = await runIdempotencyStoreContract(harness, {
          scale,
          signal,
          onResult: () => progress.onResult?.(++done),
        });
        outcome.interrupted = signal?.aborted === true && results.length < STORE_CONTRACT.length;
        outcome.doesNotApply = declaredNotApplicable(results, harness);
        outcome.results = results.map((r) => ({
          id: r.id,
          guarantee: r.title,
          grade: r.grade,
          measured: r.measured,
        }));
      },
      (scratch) => {
        outcome.scratch = scratch;
        progress.onCreated?.();
      },
    );
    outcome.removeError = run.removeError;
    outcome.cleanupHint = run.cleanupHint;
  } catch (error) {
    throw backend.toCliError(error);
  }
  return outcome;
}

/** The N/A results whose scenario says it does not apply to this harness (not a setup failure). */
function declaredNotApplicable(results: ScenarioResult[], harness: ContractHarness): string[] {
  return results
    .filter((r) => r.grade === 'N/A')
    .filter((r) => STORE_CONTRACT.find((s) => s.id === r.id)?.notApplicable?.(harness))
    .map((r) => r.id);
}

function storeKind(connection: Connection): string {
  if (connection.kind === 'redis') return connection.cluster ? 'redis-cluster' : 'redis';
  return connection.dialect;
}

function serverLabel(connection: Connection): string {
  return connection.kind === 'redis' ? 'Redis' : connection.label;
}

/** PostgreSQL keeps the fields it always had (scratchSchema, scratchSchemaDropped). */
function scratchJson(scratch: VerifyRun['scratch'], removed: boolean): Record<string, unknown> {
  switch (scratch.kind) {
    case 'schema':
      return { scratchSchema: scratch.name, scratchSchemaDropped: removed };
    case 'table':
      return { scratchTable: scratch.name, scratchTableDropped: removed };
    case 'prefix':
      return { scratchPrefix: scratch.name, scratchPrefixDeleted: removed };
  }
}

function scratchLine(scratch: VerifyRun['scratch'], removed: boolean): string {
  switch (scratch.kind) {
    case 'schema':
      return `scratch schema ${scratch.name} ${removed ? 'dropped' : 'NOT dropped'}.`;
    case 'table':
      return `scratch table ${scratch.name} ${removed ? 'dropped' : 'NOT dropped'}.`;
    case 'prefix':
      return `scratch keys ${scratch.name}* ${removed ? 'deleted' : 'NOT deleted'}.`;
  }
}

function removalFailed(scratch: VerifyRun['scratch'], error: string, hint: string): CliError {
  switch (scratch.kind) {
    case 'schema':
      return new CliError(
        `could not drop the scratch schema ${scratch.name}: ${error}; drop it with: DROP SCHEMA ${quoteIdent(scratch.name)} CASCADE`,
        ExitCode.ERROR,
      );
    case 'table':
      return new CliError(
        `could not drop the scratch table ${scratch.name}: ${error}; drop it with: ${hint}`,
        ExitCode.ERROR,
      );
    case 'prefix':
      return new CliError(
        `could not delete the scratch keys ${scratch.name}*: ${error}; delete them with: ${hint}`,
        ExitCode.ERROR,
      );
  }
}
