import { Command, Option } from 'commander';
import { storedKeyDigest } from '../core/key';
import { IdempotencyRecordView } from '../core/store';
import { STATE_ARGUMENTS, StateArgument, wholeNumber } from './arguments';
import { withStore } from './connection';
import { CommandContext } from './context';
import {
  formatDuration,
  formatInstant,
  instantWithRelative,
  leaseLabel,
  plural,
  renderTable,
  stateLabel,
} from './format';

interface ListOptions {
  scope?: string;
  state?: StateArgument;
  limit: number;
  json?: boolean;
}

export const LIST_DEFAULT_LIMIT = 100;

/**
 * `list`: records, newest first. A read: it changes nothing, so an expired
 * lease that nobody has taken over is shown as it is, `IN_PROGRESS (lease expired)`.
 * The table shows key digests only; `--json` carries the raw key for scripts.
 */
export function addListCommand(program: Command, context: CommandContext): void {
  program
    .command('list')
    .description('list records, newest first (reads only; the table shows key digests, never keys)')
    .option('--scope <scope>', 'only records of this scope')
    .addOption(
      new Option('--state <state>', 'only records in this state').choices(
        Object.keys(STATE_ARGUMENTS),
      ),
    )
    .option('--limit <n>', 'at most this many records', wholeNumber(1, 100_000), LIST_DEFAULT_LIMIT)
    .option('--json', 'print JSON instead of a table; includes the raw keys')
    .action(async (options: ListOptions, command: Command) => {
      const connection = context.connection(command);
      await withStore(connection, async ({ store, where, serverNow }) => {
        const records = await store.list({
          scope: options.scope,
          state: options.state && STATE_ARGUMENTS[options.state],
          limit: options.limit,
        });
        const now = await serverNow();
        if (options.json) {
          context.printJson({
            table: where,
            serverTime: now.toISOString(),
            records: records.map((record) => recordJson(record, now)),
          });
          return;
        }
        context.print(
          renderTable(
            ['Scope', 'Key digest', 'State', 'Lease', 'Expires', 'Age'],
            records.map((record) => [
              record.scope,
              storedKeyDigest(record.scope, record.key),
              stateLabel(record, now),
              leaseLabel(record, now),
              instantWithRelative(record.expiresAt, now),
              formatAge(record, now),
            ]),
          ),
        );
        const more = records.length === options.limit ? '; there may be more: raise --limit' : '';
        context.print(
          `${plural(records.length, 'record')} in ${where}, newest first (server time ${formatInstant(now)})${more}`,
        );
      });
    });
}

function formatAge(record: IdempotencyRecordView, now: Date): string {
  return formatDuration(Math.max(0, now.getTime() - record.createdAt.getTime()));
}

/** One record for `--json`: times as ISO strings, plus what is left of them at `serverTime`. */
export function recordJson(record: IdempotencyRecordView, now: Date): Record<string, unknown> {
  const left = (at: Date | null) => (at ? at.getTime() - now.getTime() : null);
  return {
    scope: record.scope,
    key: record.key,
    keyDigest: storedKeyDigest(record.scope, record.key),
    state: record.state,
    leaseExpired: record.leaseExpired,
    leaseExpiresAt: record.leaseExpiresAt?.toISOString() ?? null,
    leaseRemainingMs: record.state === 'IN_PROGRESS' ? left(record.leaseExpiresAt) : null,
    expiresAt: record.expiresAt.toISOString(),
    expiresInMs: left(record.expiresAt),
    createdAt: record.createdAt.toISOString(),
    ageMs: now.getTime() - record.createdAt.getTime(),
    completedAt: record.completedAt?.toISOString() ?? null,
    fingerprint: record.fingerprint,
    ...(record.ambiguousSince
      ? {
          ambiguousSince: record.ambiguousSince.toISOString(),
          ambiguousReason: record.ambiguousReason,
        }
      : {}),
    ...(record.resolvedBy
      ? { resolvedBy: record.resolvedBy, resolvedAt: record.resolvedAt?.toISOString() ?? null }
      : {}),
  };
}
