import { Command, Option } from 'commander';
import { scopeOfStored, storedKeyDigest } from '../core/key';
import { IdempotencyRecordView, RecordId } from '../core/store';
import { STATE_ARGUMENTS, StateArgument, wholeNumber } from './arguments';
import { withStore } from './connection';
import { CommandContext } from './context';
import { formatInstant, formatShortDuration, plural, renderColumns } from './format';

interface ListOptions {
  scope?: string;
  state?: StateArgument;
  limit: number;
  json?: boolean;
}

export const LIST_DEFAULT_LIMIT = 100;

/**
 * `list`: records, newest first. A read: it changes nothing, so an expired
 * lease that nobody has taken over is shown as it is, `expired … ago`.
 * The table fits an 80-column terminal and shows key digests only; `--json`
 * carries the raw key for scripts.
 */
export function addListCommand(program: Command, context: CommandContext): void {
  program
    .command('list')
    .description('list records, newest first (reads only; the table shows key digests, never keys)')
    .option(
      '--scope <scope>',
      'only records of this scope (with a tenant: <scope>#tenant:<tenant>)',
    )
    .addOption(
      new Option('--state <state>', 'only records in this state').choices(
        Object.keys(STATE_ARGUMENTS),
      ),
    )
    .option('--limit <n>', 'at most this many records', wholeNumber(1, 100_000), LIST_DEFAULT_LIMIT)
    .option('--json', 'print JSON instead of a table; includes the raw keys')
    .action(async (options: ListOptions, command: Command) => {
      const connection = context.connection(command);
      const progress = context.progress(options);
      await withStore(connection, async ({ store, where, serverNow }) => {
        progress.show(`reading records from ${where}`);
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
        context.print(renderRecords(records, now));
        // Two short lines rather than one that an 80-column terminal would wrap.
        const more = records.length === options.limit ? '; there may be more: raise --limit' : '';
        context.print(`${plural(records.length, 'record')} in ${where}, newest first`);
        context.print(`server time ${formatInstant(now)}${more}`);
      });
    });
}

/**
 * The records as columns that fit 80 terminal columns for a scope of up to
 * 29 characters. Each record is named as logs name it: the handler's scope
 * (without a tenant: the digest covers it) and the digest on its own, so
 * `<scope>/#<digest>` is what a log line prints. Times are relative to the
 * server's clock, in one unit. LEASE/TTL is the lease of an IN_PROGRESS
 * record and the TTL of a COMPLETE one; an AMBIGUOUS record has neither and
 * is kept until it is resolved. `inspect` and `--json` have the rest.
 */
export function renderRecords(records: IdempotencyRecordView[], now: Date): string {
  return renderColumns(
    ['SCOPE', 'DIGEST', 'STATE', 'LEASE/TTL', 'AGE'],
    records.map((record) => [
      scopeOfStored(record.scope),
      digestOnly(record),
      record.state,
      endsLabel(record, now),
      formatShortDuration(Math.max(0, now.getTime() - record.createdAt.getTime())),
    ]),
  );
}

/** `#` and the 12 hex digits of the record's digest, without the scope. */
function digestOnly(record: RecordId): string {
  const digest = storedKeyDigest(record.scope, record.key);
  return digest.slice(digest.lastIndexOf('/#') + 1);
}

function endsLabel(record: IdempotencyRecordView, now: Date): string {
  const relative = (at: Date, expired: boolean) => {
    const ms = at.getTime() - now.getTime();
    return expired
      ? `expired ${formatShortDuration(Math.max(0, -ms))} ago`
      : `${formatShortDuration(Math.max(0, ms))} left`;
  };
  switch (record.state) {
    case 'IN_PROGRESS':
      // Whether the lease ran out is the store's call, by its clock.
      return record.leaseExpiresAt ? relative(record.leaseExpiresAt, record.leaseExpired) : '-';
    case 'COMPLETE':
      return relative(record.expiresAt, record.expiresAt.getTime() <= now.getTime());
    case 'AMBIGUOUS':
      return 'until resolved';
  }
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
