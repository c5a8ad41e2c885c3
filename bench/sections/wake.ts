/**
 * 3. Wake latency: a duplicate waits on a holder whose action takes
 * `wakeActionMs`; from the action's end (the holder then completes the record)
 * to the duplicate's answer.
 */
import { IdempotencyEngine } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { qualified, recordIdOf } from '../../libs/idempotency/src/stores/sql/table';
import { openDataSource, poolOf } from '../lib/postgres';
import { fmtMs, fmtP50P99, fmtRange, percentile } from '../lib/stats';
import { alternatingWakeTrials, WakeTrial } from '../lib/wake';
import { BenchContext, countingLogger, quietLogger, SCOPE, SectionResult } from './context';

const APP_A = 'idem-bench-wake-a';
const APP_B = 'idem-bench-wake-b';

export async function wakeSection(ctx: BenchContext): Promise<SectionResult> {
  const { config } = ctx;
  const schema = ctx.schema('bench_wake');
  const a = await openDataSource(ctx.url, APP_A, 8);
  const b = await openDataSource(ctx.url, APP_B, 8);
  const storeA = new TypeOrmIdempotencyStore(a, {
    schema,
    ensureSchema: true,
    logger: quietLogger,
  });
  const storeB = new TypeOrmIdempotencyStore(b, { schema, logger: quietLogger });
  try {
    await storeA.init();
    await storeB.init();
    const engineA = new IdempotencyEngine(storeA, { logger: countingLogger });
    const engineB = new IdempotencyEngine(storeB, { logger: countingLogger });
    const table = qualified(storeA.tableName);
    // Read through the admin connections, which no trial counts.
    const watchedOf = async (scope: string, key: string) => {
      const rows: { watched: boolean }[] = await ctx.admin.query(
        `SELECT watched FROM ${table} WHERE id = $1`,
        [recordIdOf(scope, key)],
      );
      return rows[0]?.watched === true;
    };
    const holder = {
      watchedOf,
      scope: SCOPE,
      holderStore: storeA,
      holderApp: APP_A,
      holderEngine: engineA,
      actionMs: config.wakeActionMs,
    };
    const same = { ...holder, waiterEngine: engineA, waiterApp: APP_A, waiterPool: poolOf(a) };
    const other = { ...holder, waiterEngine: engineB, waiterApp: APP_B, waiterPool: poolOf(b) };
    const trials = await alternatingWakeTrials({ same, other }, config.wakeTrials, (line) =>
      ctx.log(`wake: ${line}`),
    );
    const row = (label: string, xs: WakeTrial[]) => ({
      section: '3. Wake',
      measurement: label,
      result: fmtP50P99(xs.map((x) => x.wakeMs)),
      target: '',
      verdict: '' as const,
      how: `n = ${xs.length}, ${config.wakeActionMs} ms action; the holder's complete() itself: p50 ${fmtMs(
        percentile(
          xs.map((x) => x.completeMs),
          50,
        ),
      )}; from complete() returning to the answer: ${fmtP50P99(
        xs.map((x) => x.wakeMs - x.completeMs),
      )}; waiter round trips ${fmtRange(
        xs.map((x) => x.waiterRoundTrips),
        0,
      )}; records marked watched by the waiter's acquire: ${xs.filter((x) => x.watched).length} of ${xs.length}`,
    });
    const unwatched = [...trials.same, ...trials.other].filter((x) => !x.watched).length;
    return {
      rows: [
        row('Wake latency, duplicate on the holder’s instance', trials.same),
        row('Wake latency, duplicate on another instance (NOTIFY)', trials.other),
      ],
      method: [
        `Wake latency: the holder runs an action of ${config.wakeActionMs} ms through \`IdempotencyEngine.execute\` on instance A; once the action has started, a duplicate calls \`execute\` (waitTimeout 10 s) through A, or through a second DataSource and store, B; its look (acquire with watch = true) marks the record \`watched\`, and it parks. The clock starts when the holder's action returns (the engine then sends \`complete\`, which notifies because the record is watched, and the NOTIFY wakes the duplicate) and stops when the duplicate's \`execute()\` resolves with the replay. ${config.wakeTrials} trials per placement, alternating A and B, one at a time; percentiles are nearest-rank${config.wakeTrials < 100 ? ` (with n = ${config.wakeTrials}, p99 is the largest sample)` : ''}.`,
      ],
      notes: unwatched
        ? [
            `**Wake:** ${unwatched} of ${trials.same.length + trials.other.length} records were not marked watched after their trial: the holder's complete then sends no NOTIFY and the duplicate waits for the poll (1 s) instead.`,
          ]
        : [],
    };
  } finally {
    await storeA.close().catch(() => undefined);
    await storeB.close().catch(() => undefined);
    await Promise.all([a.destroy(), b.destroy()]).catch(() => undefined);
  }
}
