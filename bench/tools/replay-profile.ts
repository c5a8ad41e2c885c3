/**
 * Replays through `IdempotencyEngine.run` on the TypeORM store (PostgreSQL),
 * for profiling the library's work in Node on a replay:
 *
 *   node --cpu-prof --cpu-prof-dir=/tmp/prof -r @swc-node/register \
 *     bench/tools/replay-profile.ts [seconds=5] [callers=32]
 *
 * IDEMPOTENCY_BENCH_PG_URL names the server (default: the machine's,
 * postgres://postgres@127.0.0.1:5432/test); a scratch table, dropped
 * afterwards. Prints the replays answered and the process's CPU per replay.
 */
import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { IdempotencyEngine } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { executeFresh, quietLogger, replayCompleted } from '../sections/context';

async function main() {
  const seconds = Number(process.argv[2] ?? 5);
  const callers = Number(process.argv[3] ?? 32);
  const url = process.env.IDEMPOTENCY_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
  const table = `idem_replay_profile_${process.pid}`;
  const dataSource = await new DataSource({
    type: 'postgres',
    url,
    extra: { max: callers, application_name: 'idem-replay-profile' },
  }).initialize();
  const store = new TypeOrmIdempotencyStore(dataSource, { table, ensureSchema: true });
  await store.init();
  const engine = new IdempotencyEngine(store, { logger: quietLogger });
  try {
    const keys = Array.from({ length: 1000 }, () => randomUUID());
    for (const key of keys) await executeFresh(engine, key);
    const loop = async (until: number, count: { n: number }) => {
      await Promise.all(
        Array.from({ length: callers }, async (_, c) => {
          for (let i = c; Date.now() < until; i += callers) {
            await replayCompleted(engine, keys[i % keys.length]);
            count.n++;
          }
        }),
      );
    };
    await loop(Date.now() + 1000, { n: 0 });
    const count = { n: 0 };
    const before = process.cpuUsage();
    await loop(Date.now() + seconds * 1000, count);
    const used = process.cpuUsage(before);
    console.log(
      `${count.n} replays in ${seconds} s (${Math.round(count.n / seconds)}/s); Node CPU ${((used.user + used.system) / count.n).toFixed(1)} µs/replay`,
    );
  } finally {
    await store.close();
    await dataSource.query(`DROP TABLE IF EXISTS "${table}"`);
    await dataSource.destroy();
  }
}

void main();
