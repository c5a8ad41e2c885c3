/**
 * Case 10: a Redis Cluster (three masters, one replica each, private servers
 * this spec starts, cluster-node-timeout 1000 ms) loses a master to SIGKILL
 * under traffic; its replica is promoted and traffic goes on. Run three
 * times: with the store's defaults, with `waitForReplicas: { replicas: 1,
 * timeoutMs: 500 }` (both on node-redis), and with the defaults on an ioredis
 * `Cluster`.
 *
 * Replication is asynchronous, so this is a measurement: what was lost
 * (acknowledged completions whose record is gone or no longer COMPLETE after
 * the failover) and which keys ran twice, counted in PostgreSQL. What must
 * hold, and is asserted: every call ends with an answer or a typed error
 * (unavailable, completion failed, in flight), none hangs; the store serves
 * the failed master's slots again once the replica is promoted, without a
 * restart; nothing is corrupted (every COMPLETE record holds the token of one
 * of its key's own executions, and a retry of it replays exactly that);
 * a key whose record was lost runs again on retry and one whose record
 * survived never does. With WAIT, a completion that one replica acknowledged
 * (the only replica, so the promoted one) is never lost.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { randomUUID } from 'node:crypto';
import { describePayload, keyDigest } from 'nest-idempotency';
import { DataSource } from 'typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { describeIfRedis, scratchPrefix } from '../support/redis';
import {
  clusterNodes,
  hasRedisBinaries,
  RedisServers,
  replicasInSync,
  startCluster,
} from '../support/redis-server';
import { recordResult } from './support/harness';
import { waitUntil } from './support/restart-scenario';
import {
  createExecutionsTable,
  executionCounts,
  openStoreEngine,
  recordExecution,
  RedisClientName,
} from './support/stores';
import type { RedisIdempotencyStore } from 'nest-idempotency/redis';

const OP_TIMEOUT_MS = 1000;
const NODE_TIMEOUT_MS = 1000;
const LANES = 16;
const SCOPE = 'faults.failover';
/** Longest a call may take: acquire, then 6 completion attempts with their back-off, then WAIT. */
const CALL_BOUND_MS = 15_000;
const TYPED = new Set([
  'IdempotencyStoreUnavailableError',
  'IdempotencyCompletionError',
  'IdempotencyInFlightError',
]);

const MODES: Array<{
  name: string;
  wait?: { replicas: number; timeoutMs: number };
  client?: RedisClientName;
}> = [
  { name: 'without WAIT' },
  { name: 'WAIT 1 replica (500 ms)', wait: { replicas: 1, timeoutMs: 500 } },
  { name: 'ioredis Cluster, without WAIT', client: 'ioredis' },
];

interface Call {
  key: string;
  recheck: boolean;
  kind: 'executed' | 'replayed' | 'error';
  error?: string;
  startedAt: number;
  endedAt: number;
}

interface Figures {
  keys: number;
  calls: number;
  executionsExpected: number;
  executionsObserved: number;
  acknowledged: number;
  /** Acknowledged completions whose record was gone or not COMPLETE after the failover. */
  lost: number;
  /** Of those, how many WAIT had confirmed (must be 0). */
  lostConfirmed: number;
  unconfirmed: number;
  ranTwice: number;
  rerunsDuringTraffic: number;
  errors: Map<string, number>;
  promotedMs: number;
  recoveredMs: number;
  slowestCallMs: number;
  /** Errors in the last second of traffic (WAIT only: on the promoted master, which has no replica). */
  lateErrors: number;
  /** From starting the killed node again to the store answering on its shard. */
  rejoinMs: number;
}

/** Where a mode's run is, for the message of a failure. */
interface Progress {
  phase: string;
  calls: Call[];
  killedAt?: number;
  promotedAt?: number;
  recoveredAt?: number;
  quietFrom?: number;
}

/** The longest a call took, in ms. */
function slowestMs(calls: Call[]): number {
  return calls.reduce((most, c) => Math.max(most, c.endedAt - c.startedAt), 0);
}

/** The calls that started at `from` or later and ended in an error. */
function errorsFrom(calls: Call[], from: number): Call[] {
  return calls.filter((c) => c.startedAt >= from && c.kind === 'error');
}

/** The phase, the timeline from the kill, and the calls' outcomes (error names and counts). */
function describeProgress(p: Progress): string {
  const since = (at: number | undefined) =>
    at === undefined || p.killedAt === undefined || !Number.isFinite(at)
      ? 'not reached'
      : `${at - p.killedAt} ms`;
  const outcomes = new Map<string, number>();
  for (const c of p.calls) {
    const name = c.kind === 'error' ? c.error! : c.kind;
    outcomes.set(name, (outcomes.get(name) ?? 0) + 1);
  }
  const late = p.quietFrom === undefined ? [] : errorsFrom(p.calls, p.quietFrom);
  return (
    `failed during ${p.phase}; from the kill: promoted ${since(p.promotedAt)}, first success on ` +
    `its slots ${since(p.recoveredAt)}, quiet second from ${since(p.quietFrom)}; ` +
    `${p.calls.length} calls: ${[...outcomes].map(([n, c]) => `${c} × ${n}`).join(', ')}; ` +
    `errors in the quiet second: ${late.length}${late.length ? ` (first at ${since(late[0].startedAt)}: ${late[0].error})` : ''}; ` +
    `slowest call ${slowestMs(p.calls)} ms`
  );
}

/** CRC16/XMODEM, Redis Cluster's key hash. */
function crc16(text: string): number {
  let crc = 0;
  for (const byte of Buffer.from(text)) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : crc << 1;
  }
  return crc & 0xffff;
}

function slotOf(name: string): number {
  const open = name.indexOf('{');
  const close = name.indexOf('}', open + 1);
  const tag = open >= 0 && close > open + 1 ? name.slice(open + 1, close) : name;
  return crc16(tag) % 16384;
}

function inRanges(slot: number, ranges: string[]): boolean {
  return ranges.some((range) => {
    const [from, to] = range.split('-').map(Number);
    return slot >= from && slot <= (to ?? from);
  });
}

/** `work` over `items`, 64 at a time, results in order. */
async function inBatches<T, R>(items: T[], work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i += 64) {
    results.push(...(await Promise.all(items.slice(i, i + 64).map(work))));
  }
  return results;
}

describeIfRedis(hasRedisBinaries(), 'the redis-server binary')(
  'fault 10: Redis Cluster master killed, replica promoted, under traffic',
  () => {
    const schema = scratchSchema('fault_failover');
    let pg: DataSource;
    let servers: RedisServers | undefined;
    const figures = new Map<string, Figures>();
    const started = Date.now();

    beforeAll(async () => {
      pg = await openDataSource({ extra: { max: LANES + 4 } });
      await createExecutionsTable(pg, schema);
    });

    afterAll(async () => {
      await servers?.stop();
      if (pg) {
        await dropSchema(pg, schema);
        await pg.destroy();
      }
    });

    for (const mode of MODES) {
      it(`${mode.name}: every call answered or refused as typed, the store recovers, no corruption; losses measured`, async () => {
        servers = await startCluster({ replicas: 1, nodeTimeoutMs: NODE_TIMEOUT_MS });
        const ports = servers.ports;
        const local = await openStoreEngine({
          kind: 'redis-cluster',
          urls: ports.map((p) => `redis://127.0.0.1:${p}`),
          prefix: scratchPrefix('fault10'),
          operationTimeoutMs: OP_TIMEOUT_MS,
          waitForReplicas: mode.wait,
          client: mode.client,
        });
        const store = local.store as RedisIdempotencyStore;
        const progress: Progress = { phase: 'starting the traffic', calls: [] };
        try {
          figures.set(mode.name, await failover(servers, local, store, !!mode.wait, progress));
        } catch (error) {
          // A rare failure on a loaded CI machine must say where it happened and what the
          // traffic looked like: the message is all a CI log keeps.
          if (error instanceof Error)
            error.message = `${describeProgress(progress)}\n${error.message}`;
          throw error;
        } finally {
          await local.close();
          await servers.stop();
          servers = undefined;
        }
      }, 120_000);
    }

    async function failover(
      cluster: RedisServers,
      local: Awaited<ReturnType<typeof openStoreEngine>>,
      store: RedisIdempotencyStore,
      waiting: boolean,
      progress: Progress,
    ): Promise<Figures> {
      const nodes = clusterNodes(cluster.ports[0]);
      const victim = nodes.find((n) => n.role === 'master')!;
      const replica = nodes.find((n) => n.masterId === victim.id)!;
      expect(replica).toBeDefined();
      const onVictim = (key: string) =>
        inRanges(slotOf(store.keys.record(SCOPE, key).key), victim.slots);

      const calls: Call[] = progress.calls;
      const completedKeys: string[] = [];
      let stop = false;
      let promotedAt = Infinity;
      let recoveredAt = Infinity;

      const call = async (key: string, recheck: boolean): Promise<void> => {
        const startedAt = Date.now();
        const entry: Call = { key, recheck, kind: 'error', startedAt, endedAt: 0 };
        try {
          const outcome = await local.engine.execute(
            { scope: SCOPE, key, lease: '2s', waitTimeout: '3s', ttl: '1h' },
            () => recordExecution(pg, schema, SCOPE, key),
          );
          if (outcome.kind === 'suspended') throw new Error('no action here suspends');
          entry.kind = outcome.kind;
          if (outcome.kind === 'executed' && !recheck) completedKeys.push(key);
          if (startedAt >= promotedAt && recoveredAt === Infinity && onVictim(key))
            recoveredAt = Date.now();
        } catch (error) {
          const { name, message } = error as Error;
          // An untyped error keeps the start of its message: the check below shows what it was.
          entry.error = TYPED.has(name) ? name : `${name}: ${String(message).slice(0, 160)}`;
        }
        entry.endedAt = Date.now();
        calls.push(entry);
      };

      const lanes = Array.from({ length: LANES }, async () => {
        while (!stop) {
          if (completedKeys.length > 0 && Math.random() < 0.25) {
            await call(completedKeys[Math.floor(Math.random() * completedKeys.length)], true);
          } else {
            await call(randomUUID(), false);
          }
          // A refused call backs off as a client would. While a slot has no master, calls can be
          // refused without any I/O, and a loop of settled promises would starve the timers that
          // stop it (a CI run hung so); a storm of instant retries would also crowd the client.
          if (calls.at(-1)?.kind === 'error') await delay(50);
        }
      });

      // Traffic, then the kill, then the promotion (polled: CLUSTER NODES on the replica).
      await waitUntil(
        'traffic on the victim master',
        () => completedKeys.filter(onVictim).length >= 100,
        30_000,
      );
      const killedAt = Date.now();
      progress.killedAt = killedAt;
      progress.phase = 'waiting for the promotion';
      await cluster.servers.find((s) => s.port === victim.port)!.kill();
      await waitUntil(
        'the replica promoted',
        () =>
          clusterNodes(replica.port).some((n) => n.flags.includes('myself') && n.role === 'master'),
        30_000,
      );
      promotedAt = Date.now();
      progress.promotedAt = promotedAt;
      progress.phase = 'waiting for a success on the failed-over slots';
      // With WAIT, the promoted master has no replica: each completion on it holds the shard's
      // one connection for the WAIT timeout, and under 16 lanes every call queued behind may time
      // out until the old master rejoins (below). That is the documented limit, so with WAIT a
      // spell without a success during the traffic is reported, not failed.
      await waitUntil(
        'a call on the failed-over slots succeeds',
        () => recoveredAt < Infinity,
        30_000,
      ).catch((error: unknown) => {
        if (!waiting) throw error;
      });
      // Keep going; then the last second of traffic must run without a single error.
      progress.recoveredAt = recoveredAt;
      progress.phase = 'traffic after the recovery';
      await delay(1500);
      const quietFrom = Date.now();
      progress.quietFrom = quietFrom;
      await delay(1000);
      stop = true;
      await Promise.all(lanes);

      // The killed node is started again and rejoins as a replica of the promoted master (a full
      // sync discards what it held); with WAIT, that ends the promoted master's spell without a
      // replica. Then the store must answer on that shard again before the records are read.
      progress.phase = 'the old master rejoining';
      const rejoinFrom = Date.now();
      await cluster.restart!(victim.port);
      await waitUntil(
        'the old master rejoins as a replica of the promoted one',
        () =>
          clusterNodes(victim.port).some(
            (n) => n.flags.includes('myself') && n.role === 'slave' && n.masterId === replica.id,
          ),
        30_000,
      );
      await replicasInSync([victim.port], Date.now() + 30_000);
      const probe = completedKeys.find(onVictim)!;
      for (let i = 0; ; i++) {
        try {
          await local.store.find({ scope: SCOPE, key: probe });
          break;
        } catch (error) {
          if (i >= 30) throw error;
        }
      }
      const rejoinMs = Date.now() - rejoinFrom;

      progress.phase = 'checking the calls';
      // Every call ended, as an answer or a typed refusal, within the bound.
      const errors = new Map<string, number>();
      for (const c of calls.filter((c) => c.kind === 'error'))
        errors.set(c.error!, (errors.get(c.error!) ?? 0) + 1);
      expect([...errors.keys()].filter((name) => !TYPED.has(name))).toEqual([]);
      const slowestCallMs = slowestMs(calls);
      expect(slowestCallMs).toBeLessThan(CALL_BOUND_MS);
      // The last second: no error at all without WAIT. With WAIT, the promoted master has no
      // replica left, so each of its completions holds its connection for the WAIT timeout, and
      // calls queued behind may time out: those are counted, on that shard only.
      const late = errorsFrom(calls, quietFrom);
      const lateElsewhere = late.filter((c) => !onVictim(c.key));
      expect(waiting ? lateElsewhere : late).toEqual([]);

      // Which completions the store acknowledged, and which WAIT did not confirm.
      const digests = new Map<string, string>();
      const keys = [...new Set(calls.map((c) => c.key))];
      for (const key of keys) digests.set(keyDigest(SCOPE, key), key);
      const acknowledged = new Set(
        local.events.filter((e) => e.type === 'completed').map((e) => digests.get(e.keyDigest)!),
      );
      const unconfirmed = new Set(
        local.logs
          .map(
            (line) =>
              /complete of (\S+): (?:\d+ of \d+ replicas acknowledged|WAIT for)/.exec(line)?.[1],
          )
          .filter((d): d is string => d !== undefined)
          .map((d) => digests.get(d)!),
      );
      if (!waiting) expect(unconfirmed.size).toBe(0);

      progress.phase = 'reading the records';
      // What the cluster holds now, against what ran (PostgreSQL).
      const before = await executionCounts(pg, schema);
      const executed = keys.filter((k) => before.has(`${SCOPE}|${k}`));
      const records = new Map(
        await inBatches(
          executed,
          async (k) => [k, await local.store.find({ scope: SCOPE, key: k })] as const,
        ),
      );
      const stored = new Map<string, string>();
      for (const [k, record] of records) {
        if (record?.state !== 'COMPLETE') continue;
        const payload = describePayload(record.payload!);
        expect(payload.kind).toBe('value');
        const token = (payload as { value: string }).value;
        // Not corrupted: the token of one of this key's own executions.
        expect(before.get(`${SCOPE}|${k}`)).toContain(token);
        stored.set(k, token);
      }
      const lost = [...acknowledged].filter((k) => !stored.has(k));
      const lostConfirmed = lost.filter((k) => !unconfirmed.has(k));
      if (waiting) expect(lostConfirmed).toEqual([]);

      progress.phase = 'the retry of every key';
      // A retry of every key: what survived replays its token, what did not runs again.
      const sweep = await inBatches(executed, async (k) => ({
        key: k,
        outcome: await local.engine.execute(
          { scope: SCOPE, key: k, lease: '2s', waitTimeout: '5s', ttl: '1h' },
          () => recordExecution(pg, schema, SCOPE, k),
        ),
      }));
      for (const { key, outcome } of sweep) {
        if (stored.has(key))
          expect(outcome).toMatchObject({ kind: 'replayed', value: stored.get(key) });
        else expect(outcome.kind).toBe('executed');
      }
      const after = await executionCounts(pg, schema);
      const runs = executed.map((k) => after.get(`${SCOPE}|${k}`)!.length);
      // Never a third run: one record lost at most once (the sweep ran after the failover).
      expect(runs.filter((n) => n > 2)).toEqual([]);

      return {
        keys: executed.length,
        calls: calls.length,
        executionsExpected: executed.length,
        executionsObserved: runs.reduce((a, b) => a + b, 0),
        acknowledged: acknowledged.size,
        lost: lost.length,
        lostConfirmed: lostConfirmed.length,
        unconfirmed: unconfirmed.size,
        ranTwice: runs.filter((n) => n > 1).length,
        rerunsDuringTraffic: executed.filter((k) => before.get(`${SCOPE}|${k}`)!.length > 1).length,
        errors,
        promotedMs: promotedAt - killedAt,
        // Not served again during the traffic (WAIT only, see above): Infinity.
        recoveredMs: recoveredAt - killedAt,
        slowestCallMs,
        lateErrors: late.length,
        rejoinMs,
      };
    }

    it('records its figures', () => {
      expect([...figures.keys()]).toEqual(MODES.map((m) => m.name));
      const all = [...figures.values()];
      const sum = (pick: (f: Figures) => number) => all.reduce((t, f) => t + pick(f), 0);
      const summary = (name: string, f: Figures) =>
        `${name}: ${f.calls} calls on ${f.keys} keys, replica promoted ${f.promotedMs} ms after ` +
        `the kill, failed-over slots ${Number.isFinite(f.recoveredMs) ? `served again after ${f.recoveredMs} ms` : 'not served again during the traffic (every call there waited behind a full WAIT timeout)'}; refusals ` +
        `${[...f.errors].map(([n, c]) => `${c} × ${n.replace(/^Idempotency/, '')}`).join(', ') || 'none'}; ` +
        `slowest call ${f.slowestCallMs} ms; ${f.lost} of ${f.acknowledged} acknowledged completions ` +
        `lost${f.unconfirmed ? ` (${f.unconfirmed} not confirmed by WAIT, ${f.lostConfirmed} lost although confirmed)` : ''}; ` +
        `${f.ranTwice} keys ran twice (${f.rerunsDuringTraffic} already during the traffic)` +
        (f.lateErrors
          ? `; ${f.lateErrors} refusals in the last second, all on the promoted master (no replica left: each WAIT takes its full timeout and holds the shard's connection)`
          : '');
      recordResult({
        case: 10,
        title: 'Redis Cluster failover (master killed, replica promoted)',
        executionsExpected: sum((f) => f.executionsExpected),
        executionsObserved: sum((f) => f.executionsObserved),
        recordsLost: sum((f) => f.lost),
        maxRecoveryMs: Math.max(...all.map((f) => f.recoveredMs).filter(Number.isFinite)),
        notes:
          `private 3 masters + 3 replicas, cluster-node-timeout ${NODE_TIMEOUT_MS} ms, ${LANES} lanes ` +
          `through the engine (new keys, 1 in 4 calls a retry of a completed key), operationTimeoutMs ` +
          `${OP_TIMEOUT_MS}, then a retry of every key; max recovery from the SIGKILL; ` +
          MODES.map((m) => summary(m.name, figures.get(m.name)!)).join('; ') +
          `; ${Math.round((Date.now() - started) / 1000)} s`,
      });
    });
  },
);
