/**
 * The Redis store (RedisIdempotencyStore on node-redis, standalone) against
 * the machine's Redis (IDEMPOTENCY_BENCH_REDIS_URL, default
 * redis://127.0.0.1:6379), in a key prefix of this run's own that is deleted
 * afterwards. Skipped, with how to start Redis, when the server does not answer.
 *
 * - redis-store: first executions and replays through IdempotencyEngine.run,
 *   alternating with the minimum the same record layout needs (two short
 *   scripts for a first execution, one HMGET for a replay): rates, round
 *   trips counted at the client, CPU of Redis and of Node per operation.
 * - redis-http: fresh keys and replays over HTTP against the undecorated
 *   handler (./store-http.ts).
 * - redis-wake: wake latency of a waiting duplicate, on the holder's
 *   instance and on another (pub/sub).
 * - redis-memory: the application's memory after many requests (./memory.ts).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { encodeValue, IdempotencyEngine } from 'nest-idempotency';
import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { RedisKeys } from '../../libs/idempotency/src/stores/redis/keys';
import {
  cpuPerOp,
  rateOf,
  ratiosOf,
  ratioText,
  Run,
  runsOf,
  timedRun,
  tripsAre,
  tripsOf,
  us,
  warmAndAlternate,
} from '../lib/compare';
import { countRedis } from '../lib/driver-count';
import {
  connectRedis,
  deleteRedisPrefix,
  reasonOf,
  REDIS_URL,
  RedisClient,
  redisServerInfo,
  scratchPrefix,
  shown,
  START_REDIS,
} from '../lib/servers';
import { fmtMs, fmtP50P99, fmtRange, percentile } from '../lib/stats';
import { alternatingWakeTrials, WakeTrial } from '../lib/wake';
import {
  countingLogger,
  executeFresh,
  LEASE_MS,
  quietLogger,
  replayCompleted,
  resultFor,
  ResultRow,
  SCOPE,
  SectionContext,
  SectionResult,
  skipped,
  TTL_MS,
  verdict,
} from './context';
import { measureMemory } from './memory';
import { storeHttp } from './store-http';

/** From the issue: HTTP ratios to the undecorated handler, wake p50, round trips. */
export const REDIS_TARGETS = { fresh: 0.75, replay: 0.9, wakeP50Ms: 5, first: 2, replayTrips: 1 };

const APPS = {
  store: 'idem-bench-redis-store',
  floor: 'idem-bench-redis-floor',
  wakeA: 'idem-bench-redis-wake-a',
  wakeB: 'idem-bench-redis-wake-b',
};

/**
 * Runs `body` with an uncounted admin client and a scratch prefix (deleted
 * afterwards), or returns the skipped section when Redis does not answer.
 */
async function withRedis(
  ctx: SectionContext,
  section: string,
  body: (admin: RedisClient, prefix: string) => Promise<SectionResult>,
): Promise<SectionResult> {
  let admin: RedisClient;
  try {
    admin = await connectRedis();
  } catch (error) {
    ctx.log(`${section}: skipped, Redis at ${shown(REDIS_URL)} does not answer; ${START_REDIS}`);
    return skipped(section, `Redis at ${shown(REDIS_URL)}`, reasonOf(error), START_REDIS);
  }
  const prefix = scratchPrefix(section);
  try {
    const info = await redisServerInfo(admin);
    const result = await body(admin, prefix);
    return { ...result, machine: [['Redis', `${info.version} at ${shown(REDIS_URL)}`]] };
  } finally {
    const deleted = await deleteRedisPrefix(admin, prefix).catch(() => -1);
    ctx.log(
      `${section}: ${deleted < 0 ? 'could not delete' : `deleted ${deleted} keys under`} ${prefix}`,
    );
    admin.destroy();
  }
}

/** The Redis server's process, whose CPU is the server's side of each run. */
async function redisPids(admin: RedisClient): Promise<() => Promise<number[]>> {
  const { pid } = await redisServerInfo(admin);
  return async () => (pid ? [pid] : []);
}

/** The PIDs whose CPU is the Redis sections' own (the server), for bench.ts's load accounting. */
export async function redisServerPids(): Promise<number[]> {
  try {
    const admin = await connectRedis();
    try {
      const { pid } = await redisServerInfo(admin);
      return pid ? [pid] : [];
    } finally {
      admin.destroy();
    }
  } catch {
    return [];
  }
}

/**
 * The minimum a first execution needs on the store's record layout: a script
 * that creates the hash if it is absent (with its expiry), and a fenced
 * script that completes it; no steal, no watch flag, no fingerprint check,
 * no publish. A replay: one HMGET of what an answer needs.
 */
const FLOOR_SCRIPTS = {
  insert: `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 's', ARGV[1], 'k', ARGV[2], 'st', 'IN_PROGRESS', 'l', ARGV[3], 'le', now + ARGV[4], 'e', now + ARGV[5], 'c', now)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1`,
  complete: `if redis.call('HGET', KEYS[1], 'l') ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
redis.call('HSET', KEYS[1], 'st', 'COMPLETE', 'p', ARGV[2], 'd', now, 'e', now + ARGV[3])
redis.call('HDEL', KEYS[1], 'l', 'le')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`,
};

export async function redisStoreSection(ctx: SectionContext): Promise<SectionResult> {
  const section = 'Redis store';
  return withRedis(ctx, section, async (admin, prefix) => {
    const { config } = ctx;
    const storeClient = countRedis(await connectRedis(), APPS.store);
    const floorClient = countRedis(await connectRedis(), APPS.floor);
    const store = new RedisIdempotencyStore(storeClient, {
      keyPrefix: `${prefix}store:`,
      logger: quietLogger,
    });
    try {
      await store.init();
      const engine = new IdempotencyEngine(store, { logger: countingLogger });
      const keys = new RedisKeys(`${prefix}floor:`);
      const sha = {
        insert: String(await admin.scriptLoad(FLOOR_SCRIPTS.insert)),
        complete: String(await admin.scriptLoad(FLOOR_SCRIPTS.complete)),
      };
      const servers = await redisPids(admin);
      const run = randomBytes(3).toString('hex');
      // The keys completed by each side: each side replays its own.
      const completed = { store: [] as string[], floor: [] as string[] };
      const remember = (side: string[], key: string) => {
        if (side.length < 50_000) side.push(key);
      };
      const pick = (side: string[], caller: number, i: number) =>
        side[(caller * 7919 + i * 31) % side.length];
      const payloadOf = (key: string) => encodeValue(resultFor(key));
      const floorFirst = (tag: string) => async (caller: number, i: number) => {
        const key = `${run}-${tag}-${caller}-${i}`;
        const name = keys.record(SCOPE, key).key;
        const lease = randomUUID();
        const args = [SCOPE, key, lease, String(LEASE_MS), String(TTL_MS)];
        const inserted: unknown = await floorClient.sendCommand([
          'EVALSHA',
          sha.insert,
          '1',
          name,
          ...args,
        ]);
        if (inserted !== 1) throw new Error('floor: fresh key not inserted');
        const done: unknown = await floorClient.sendCommand([
          'EVALSHA',
          sha.complete,
          '1',
          name,
          lease,
          payloadOf(key),
          String(TTL_MS),
        ]);
        if (done !== 1) throw new Error('floor: complete refused');
        remember(completed.floor, key);
      };
      const floorReplay = async (caller: number, i: number) => {
        const name = keys.record(SCOPE, pick(completed.floor, caller, i)).key;
        const reply = (await floorClient.sendCommand(
          ['HMGET', name, 'st', 'f', 'p', 'd', 'e', 'le'],
          { typeMapping: { 36: Buffer } },
        )) as (Buffer | null)[];
        if (reply[0]?.toString() !== 'COMPLETE')
          throw new Error('floor: completed key not replayed');
      };
      const storeFirst = (tag: string) => async (caller: number, i: number) => {
        const key = `${run}-${tag}-${caller}-${i}`;
        await executeFresh(engine, key);
        remember(completed.store, key);
      };
      const storeReplay = (caller: number, i: number) =>
        replayCompleted(engine, pick(completed.store, caller, i));
      const timed = (
        app: string,
        op: (caller: number, i: number) => Promise<void>,
        seconds = config.seconds,
      ) => timedRun({ seconds, concurrency: config.concurrency, app }, op, servers);
      let phase = 0;
      ctx.log(`${section}: first executions, warm-up`);
      const firsts = await warmAndAlternate(
        config.rounds,
        {
          store: () => timed(APPS.store, storeFirst(`s${phase++}`)),
          floor: () => timed(APPS.floor, floorFirst(`f${phase++}`)),
        },
        {
          store: () => timed(APPS.store, storeFirst('ws'), config.warmupSeconds),
          floor: () => timed(APPS.floor, floorFirst('wf'), config.warmupSeconds),
        },
        (round, name) => ctx.log(`${section}: first executions, round ${round + 1}, ${name}`),
      );
      ctx.log(`${section}: replays, warm-up`);
      const replays = await warmAndAlternate(
        config.rounds,
        {
          store: () => timed(APPS.store, storeReplay),
          floor: () => timed(APPS.floor, floorReplay),
        },
        {
          store: () => timed(APPS.store, storeReplay, config.warmupSeconds),
          floor: () => timed(APPS.floor, floorReplay, config.warmupSeconds),
        },
        (round, name) => ctx.log(`${section}: replays, round ${round + 1}, ${name}`),
      );
      return redisStoreResult(section, config, firsts, replays);
    } finally {
      await store.close().catch(() => undefined);
      storeClient.destroy();
      floorClient.destroy();
    }
  });
}

function redisStoreResult(
  section: string,
  config: SectionContext['config'],
  firsts: Record<'store' | 'floor', Run[]>,
  replays: Record<'store' | 'floor', Run[]>,
): SectionResult {
  const rateRow = (label: string, samples: Record<'store' | 'floor', Run[]>): ResultRow => {
    const ratio = ratiosOf(samples.store, samples.floor);
    return {
      section,
      measurement: label,
      result: `${rateOf(samples.store).toFixed(0)}/s; ${ratio.median.toFixed(2)} of the minimal scripts (${rateOf(samples.floor).toFixed(0)}/s)`,
      target: '',
      verdict: '',
      how: `store ÷ minimal scripts, median of the rounds' ratios ${ratioText(ratio)}; store runs ${runsOf(samples.store)}; minimal runs ${runsOf(samples.floor)}`,
    };
  };
  const tripsRow = (
    label: string,
    samples: Record<'store' | 'floor', Run[]>,
    n: number,
  ): ResultRow => ({
    section,
    measurement: label,
    result: `${tripsOf(samples.store)} (minimal ${tripsOf(samples.floor)})`,
    target: String(n),
    verdict: verdict(tripsAre(samples.store, n)),
    how: "node-redis sendCommand calls per operation on the store's client, every run",
  });
  const cpuRow = (label: string, samples: Record<'store' | 'floor', Run[]>): ResultRow => {
    const s = cpuPerOp(samples.store);
    const f = cpuPerOp(samples.floor);
    return {
      section,
      measurement: label,
      result: `Redis ${us(s.server)} (minimal ${us(f.server)}); Node ${us(s.node)} (minimal ${us(f.node)})`,
      target: '',
      verdict: '',
      how: 'redis-server utime + stime (/proc, 10 ms ticks) and this process.cpuUsage() over each run ÷ its operations, medians of the runs',
    };
  };
  const cpu = { first: cpuPerOp(firsts.store), replay: cpuPerOp(replays.store) };
  const floorCpu = { first: cpuPerOp(firsts.floor), replay: cpuPerOp(replays.floor) };
  return {
    rows: [
      rateRow('First executions/s (IdempotencyEngine.run)', firsts),
      rateRow('Replays/s (IdempotencyEngine.run)', replays),
      tripsRow('Round trips per first execution', firsts, REDIS_TARGETS.first),
      tripsRow('Round trips per replay', replays, REDIS_TARGETS.replayTrips),
      cpuRow('CPU per first execution', firsts),
      cpuRow('CPU per replay', replays),
    ],
    method: [
      `${section}: ${config.concurrency} callers in a closed loop on one node-redis client each side (node-redis pipelines what they send), the store through \`IdempotencyEngine.run\` (policy compiled once: lease 30 s, waitTimeout 10 s, ttl 24 h), against the minimum on the same record layout: a first execution is two EVALSHA of short scripts (create the hash if absent, with its expiry; complete it fenced by the lease id), with no steal, no watch flag, no fingerprint and no publish; a replay is one HMGET. ${config.warmupSeconds} s warm-up each, then ${config.rounds} alternating rounds of ${config.seconds} s; ratios are the median of the rounds' ratios. Round trips are the client's sendCommand calls (the store's subscriber connection is a separate client and sends nothing here). Redis CPU: the redis-server process's utime + stime from /proc; it is the machine's server, so other users of it count too.`,
    ],
    notes: [
      `Redis store, closed loop: a first execution costs Redis ${us(cpu.first.server)} of CPU and this process ${us(cpu.first.node)} (minimal scripts: ${us(floorCpu.first.server)} and ${us(floorCpu.first.node)}); a replay ${us(cpu.replay.server)} and ${us(cpu.replay.node)} (HMGET: ${us(floorCpu.replay.server)} and ${us(floorCpu.replay.node)}).`,
    ],
  };
}

export async function redisHttpSection(ctx: SectionContext): Promise<SectionResult> {
  const section = 'Redis HTTP';
  return withRedis(ctx, section, async (admin, prefix) =>
    storeHttp(ctx, {
      section,
      store: 'redis',
      url: REDIS_URL,
      schema: prefix,
      targets: { 'fresh keys': REDIS_TARGETS.fresh, replay: REDIS_TARGETS.replay },
      serverPids: await (await redisPids(admin))(),
    }),
  );
}

export async function redisMemorySection(ctx: SectionContext): Promise<SectionResult> {
  const section = 'Redis memory';
  return withRedis(ctx, section, (_admin, prefix) =>
    measureMemory(ctx, {
      section,
      storeName: 'Redis store',
      store: 'redis',
      databaseUrl: REDIS_URL,
      schema: prefix,
    }),
  );
}

export async function redisWakeSection(ctx: SectionContext): Promise<SectionResult> {
  const section = 'Redis wake';
  return withRedis(ctx, section, async (_admin, prefix) => {
    const { config } = ctx;
    const a = countRedis(await connectRedis(), APPS.wakeA);
    const b = countRedis(await connectRedis(), APPS.wakeB);
    const storeA = new RedisIdempotencyStore(a, { keyPrefix: prefix, logger: quietLogger });
    const storeB = new RedisIdempotencyStore(b, { keyPrefix: prefix, logger: quietLogger });
    try {
      await storeA.init();
      await storeB.init();
      const engineA = new IdempotencyEngine(storeA, { logger: countingLogger });
      const engineB = new IdempotencyEngine(storeB, { logger: countingLogger });
      const holder = {
        scope: SCOPE,
        holderApp: APPS.wakeA,
        holderEngine: engineA,
        actionMs: config.wakeActionMs,
      };
      const same = { ...holder, waiterEngine: engineA, waiterApp: APPS.wakeA };
      const other = { ...holder, waiterEngine: engineB, waiterApp: APPS.wakeB };
      const trials = await alternatingWakeTrials({ same, other }, config.wakeTrials, (line) =>
        ctx.log(`${section}: ${line}`),
      );
      const row = (label: string, xs: WakeTrial[]): ResultRow => {
        const p50 = percentile(
          xs.map((x) => x.wakeMs),
          50,
        );
        return {
          section,
          measurement: label,
          result: fmtP50P99(xs.map((x) => x.wakeMs)),
          target: `p50 ≤ ${REDIS_TARGETS.wakeP50Ms} ms`,
          verdict: verdict(p50 <= REDIS_TARGETS.wakeP50Ms),
          how: `n = ${xs.length}, ${config.wakeActionMs} ms action; the holder's completion (engine.execute returning): p50 ${fmtMs(
            percentile(
              xs.map((x) => x.completeMs),
              50,
            ),
          )}; waiter round trips (sendCommand on its client) ${fmtRange(
            xs.map((x) => x.waiterRoundTrips),
            0,
          )}`,
        };
      };
      return {
        rows: [
          row('Wake latency, duplicate on the holder’s instance', trials.same),
          row('Wake latency, duplicate on another instance (pub/sub)', trials.other),
        ],
        method: [
          `${section}: as the PostgreSQL wake section (bench/lib/wake.ts wakeAfterActionTrial): the holder runs a ${config.wakeActionMs} ms action through \`IdempotencyEngine.execute\` on instance A (its own node-redis client and store); once it has started, a duplicate calls \`execute\` (waitTimeout 10 s) through A or through instance B (a second client and store on the same prefix); it subscribes, marks the record watched in its acquire script, and parks. The clock starts when the holder's action returns (its complete script publishes, since the record is watched) and stops when the duplicate's \`execute()\` resolves with the replay. ${config.wakeTrials} trials per placement, alternating, one at a time; nearest-rank percentiles${config.wakeTrials < 100 ? ` (n = ${config.wakeTrials}: p99 is the largest sample)` : ''}. Waiter round trips: sendCommand calls on the waiter's client during the trial (the holder's completion excluded on A; the subscription goes over the store's own subscriber connection, not counted).`,
        ],
        notes: [],
      };
    } finally {
      await storeA.close().catch(() => undefined);
      await storeB.close().catch(() => undefined);
      a.destroy();
      b.destroy();
    }
  });
}
