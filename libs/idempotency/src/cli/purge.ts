import { Command } from 'commander';
import { DEFAULT_PURGE_BATCH, IdempotencyStore } from '../core/store';
import { wholeNumber } from './arguments';
import { withStore } from './connection';
import { CommandContext } from './context';
import { plural, thousands } from './format';

/**
 * Batches of at most 1000 rows, until one comes back short or `limit` is
 * reached; `onBatch` hears the running total after each.
 */
async function purgeAll(
  store: IdempotencyStore,
  limit = Number.POSITIVE_INFINITY,
  onBatch: (total: number) => void = () => undefined,
): Promise<number> {
  let total = 0;
  for (;;) {
    const batch = Math.min(DEFAULT_PURGE_BATCH, limit - total);
    if (batch <= 0) return total;
    const purged = await store.purgeExpired({ limit: batch });
    total += purged;
    onBatch(total);
    if (purged < batch) return total;
  }
}

interface PurgeOptions {
  dryRun?: boolean;
  limit?: number;
  json?: boolean;
}

export const PURGE_RULE =
  'COMPLETE records past their TTL; IN_PROGRESS records past both their TTL and their lease';

export const EXPIRED_BY_REDIS =
  'Redis expires each record itself once this rule applies (at the later of its TTL and its lease), so there is never anything left to purge';

/**
 * `purge`: `store.purgeExpired` from the command line. `--dry-run` counts what
 * would go by the same rule with a plain SELECT, deleting and locking nothing.
 */
export function addPurgeCommand(program: Command, context: CommandContext): void {
  program
    .command('purge')
    .description(`delete expired records: ${PURGE_RULE}`)
    .option('--dry-run', 'count what would be purged; delete nothing')
    .option('--limit <n>', 'purge (or count) at most this many records', wholeNumber(1, 1e9))
    .option('--json', 'print JSON')
    .action(async (options: PurgeOptions, command: Command) => {
      const connection = context.connection(command);
      const progress = context.progress(options);
      await withStore(connection, async ({ store, where, countExpired }) => {
        const limit = options.limit;
        progress.show(options.dryRun ? `counting expired records in ${where}` : `purging ${where}`);
        // Redis deletes each record itself once it is purgeable: nothing is ever left to count.
        const count = options.dryRun
          ? ((await countExpired?.(limit)) ?? 0)
          : await purgeAll(store, limit, (total) =>
              progress.show(`purging ${where}: ${thousands(total)} deleted`),
            );
        if (options.json) {
          context.printJson({
            table: where,
            dryRun: options.dryRun === true,
            count,
            limit: limit ?? null,
            ...(countExpired ? {} : { expiredByBackend: true }),
          });
          return;
        }
        const bounded = limit === undefined ? '' : ` (limit ${limit})`;
        context.print(
          options.dryRun
            ? `dry run: ${plural(count, 'record')} would be purged from ${where}${bounded}; nothing was deleted`
            : `purged ${plural(count, 'record')} from ${where}${bounded}`,
        );
        context.print(`rule: ${PURGE_RULE}`);
        if (!countExpired) context.print(EXPIRED_BY_REDIS);
      });
    });
}
