import { Command } from 'commander';
import { parseDuration } from '../core/duration';
import { IdempotencyConfigError, IdempotencyStoreSchemaError } from '../core/errors';
import { appendReceipt, chainOfRecord } from '../core/receipt-writer';
import type { IdempotencyStore } from '../core/store';
import type { IdempotencyEvent } from '../core/events';
import { storedKeyDigest, scopeOfStored } from '../core/key';
import { encodeValue } from '../core/payload';
import { BUILT_IN_DEFAULTS } from '../core/policy';
import { withStore } from './connection';
import { CommandContext } from './context';
import { CliError, ExitCode } from './exit-codes';
import { formatInstant } from './format';
import { requireOneRecord } from './locate-record';
import {
  KEY_ARGUMENT,
  parseRecordReference,
  RECORD_REFERENCE_HELP,
  SCOPE_ARGUMENT,
} from './record-reference';

/** Who a resolution from this CLI is recorded as: somebody at an operator's terminal, never a name. */
export const CLI_RESOLVER = 'cli:local';

interface ResolveOptions {
  completed?: boolean;
  notExecuted?: boolean;
  payload?: string;
  ttl: string;
  json?: boolean;
}

/**
 * `resolve <scope> <key> --completed [--payload <json>] | --not-executed`
 * (or the record named by its digest, as `inspect` takes it):
 * ends an AMBIGUOUS record (strict mode), atomically, on a store that supports
 * strict mode. `--completed` makes it COMPLETE with that payload (a JSON
 * value; an HTTP route replays it as a JSON body with its status), replayable
 * for `--ttl` from now; `--not-executed` deletes it, so the next attempt runs.
 * The resolver is recorded as `cli:local`. A not-executed record is gone, so
 * this command's output (with `--json`, the `resolved` event it prints) is
 * the only trace of the resolution: keep it.
 */
export function addResolveCommand(program: Command, context: CommandContext): void {
  program
    .command('resolve')
    .description(
      'resolve an AMBIGUOUS record (strict mode): --completed [--payload <json>] or --not-executed',
    )
    .argument('<scope>', SCOPE_ARGUMENT)
    .argument('[key]', KEY_ARGUMENT)
    .option('--completed', 'the action ran: the record becomes COMPLETE and is replayed')
    .option('--payload <json>', 'with --completed: the result to replay, as JSON (default: none)')
    .option(
      '--not-executed',
      'the action did not run: the record is deleted and the next attempt runs',
    )
    .option('--ttl <duration>', 'with --completed: how long it is replayed', BUILT_IN_DEFAULTS.ttl)
    .option('--json', 'print JSON; includes the raw key')
    .addHelpText('after', RECORD_REFERENCE_HELP)
    .action(
      async (
        first: string,
        second: string | undefined,
        options: ResolveOptions,
        command: Command,
      ) => {
        const reference = parseRecordReference(first, second);
        if (options.completed === options.notExecuted) {
          throw new CliError('pass exactly one of --completed and --not-executed', ExitCode.USAGE);
        }
        if (options.notExecuted && options.payload !== undefined) {
          throw new CliError('--payload goes with --completed, not --not-executed', ExitCode.USAGE);
        }
        const payload = options.completed ? parsePayload(options.payload) : undefined;
        const ttlMs = parseTtl(options.ttl);
        const connection = context.connection(command);
        await withStore(connection, async (handle) => {
          const { store, where } = handle;
          const strict = store.strictMode;
          if (!strict) {
            throw new CliError(
              `the store in ${where} does not support strict mode, so it has no AMBIGUOUS records to resolve`,
              ExitCode.ERROR,
            );
          }
          // Exactly one record, named by its raw key, or never anything: see requireOneRecord.
          const { scope, key } = await requireOneRecord(context, handle, reference, options);
          const digest = storedKeyDigest(scope, key);
          const result = await strict.resolve(
            { scope, key },
            payload === undefined
              ? { outcome: 'not-executed', resolvedBy: CLI_RESOLVER }
              : { outcome: 'completed', payload, ttlMs, resolvedBy: CLI_RESOLVER },
          );
          if (result.kind === 'not-ambiguous') {
            if (result.state === null) {
              throw new CliError(`no record for ${digest} in ${where}`, ExitCode.NOT_FOUND);
            }
            throw new CliError(
              `${digest} in ${where} is ${result.state}, not AMBIGUOUS: nothing was changed (only an AMBIGUOUS record is resolved)`,
              ExitCode.ERROR,
            );
          }
          const outcome = payload === undefined ? 'not-executed' : 'completed';
          await appendResolutionReceipt(context, store, { scope, key }, payload ?? null);
          const event: IdempotencyEvent = {
            type: 'resolved',
            scope: scopeOfStored(scope),
            keyDigest: digest,
            outcome,
            resolver: CLI_RESOLVER,
          };
          if (options.json) {
            context.printJson({
              table: where,
              scope,
              key,
              keyDigest: digest,
              outcome,
              resolvedBy: CLI_RESOLVER,
              resolvedAt: result.resolvedAt.toISOString(),
              expiresAt:
                outcome === 'completed'
                  ? new Date(result.resolvedAt.getTime() + ttlMs).toISOString()
                  : null,
              event,
            });
            return;
          }
          context.print(
            outcome === 'completed'
              ? `resolved ${digest} in ${where} as completed by ${CLI_RESOLVER} at ${formatInstant(result.resolvedAt)}: it is COMPLETE and replayed until ${formatInstant(new Date(result.resolvedAt.getTime() + ttlMs))}`
              : `resolved ${digest} in ${where} as not executed by ${CLI_RESOLVER} at ${formatInstant(result.resolvedAt)}: the record was deleted and the next attempt runs; this line is the only record of the resolution`,
          );
        });
      },
    );
}

/**
 * A store whose receipts tables exist keeps receipts: the resolution appends
 * its own (it never rewrites an earlier one). Without them (receipts off),
 * nothing is appended; a failed append is reported on stderr, and the
 * resolution stands.
 */
async function appendResolutionReceipt(
  context: CommandContext,
  store: IdempotencyStore,
  id: { scope: string; key: string },
  payload: Buffer | null,
): Promise<void> {
  if (!store.receipts) return;
  try {
    await store.receipts.check();
  } catch (error) {
    if (error instanceof IdempotencyStoreSchemaError) return;
    throw error;
  }
  const warn = (message: string) => context.io.stderr(`warning: ${message}\n`);
  await appendReceipt(
    { store, logger: { warn, error: warn }, emit: () => undefined },
    {
      scope: scopeOfStored(id.scope),
      keyDigest: storedKeyDigest(id.scope, id.key),
      chain: chainOfRecord(id.scope, id.key),
    },
    payload === null ? 'resolved-not-executed' : 'resolved-completed',
    payload,
  );
}

function parsePayload(text: string | undefined): Buffer {
  if (text === undefined) return encodeValue(undefined);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new CliError(`--payload is not JSON: ${(error as Error).message}`, ExitCode.USAGE);
  }
  return encodeValue(value);
}

function parseTtl(text: string): number {
  try {
    return parseDuration(text, 'ttl', 'ttl', 'resolve');
  } catch (error) {
    if (error instanceof IdempotencyConfigError) {
      throw new CliError(`--ttl: ${error.message}`, ExitCode.USAGE);
    }
    throw error;
  }
}
