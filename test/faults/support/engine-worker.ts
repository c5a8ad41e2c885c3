/**
 * A child process that runs the idempotency engine on the real PostgreSQL
 * store, driven over IPC by the fault specs. Started with
 *   node -r @swc-node/register test/faults/support/engine-worker.ts
 * Env: FW_PG_URL, FW_SCHEMA (records table and `executions` already created),
 * FW_POOL (pool size, default 10), FW_OP_TIMEOUT_MS (store operationTimeoutMs),
 * FW_STORE (optional: a JSON StoreConfig of ./stores.ts; then the records live
 * in that store, and PostgreSQL keeps only the `executions` table).
 *
 * Every action inserts a row into "<schema>".executions before anything else,
 * so executions are counted by PostgreSQL, not by the process (which may be killed).
 * Logs carry key digests only; the parent checks that no raw key was printed.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { IdempotencyEngine, IdempotencyStore } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import type { Pool } from 'pg';
import { DataSource } from 'typeorm';
import type {
  ActionValue,
  BurstCommand,
  CallResult,
  ChildCommand,
  ChildMessage,
  ExecuteCommand,
  PurgeTrafficCommand,
  PurgeTrafficStats,
} from './protocol';
import { openStore, StoreConfig } from './stores';

const url = required('FW_PG_URL');
const schema = required('FW_SCHEMA');
const poolSize = Number(process.env.FW_POOL ?? 10);

const logger = {
  warn: (m: string) => console.warn(`[worker ${process.pid}] warn: ${m}`),
  error: (m: string) => console.error(`[worker ${process.pid}] error: ${m}`),
};
const storeConfig = process.env.FW_STORE
  ? (JSON.parse(process.env.FW_STORE) as StoreConfig)
  : undefined;
const dataSource = new DataSource({ type: 'postgres', url, extra: { max: poolSize } });
/** The records' store: TypeORM on the executions' PostgreSQL schema, unless FW_STORE names another. */
let store: IdempotencyStore;
let engine: IdempotencyEngine;

const gates = new Map<string, () => void>();
const released = new Set<string>();

function send(message: ChildMessage): void {
  if (process.connected) process.send!(message);
}

function pool(): Pool {
  return (dataSource.driver as unknown as { master: Pool }).master;
}

async function recordExecution(scope: string, key: string, token: string): Promise<void> {
  await dataSource.query(
    `INSERT INTO "${schema}".executions (scope, "key", pid, token) VALUES ($1, $2, $3, $4)`,
    [scope, key, process.pid, token],
  );
}

function waitForRelease(id: string): Promise<void> {
  if (released.has(id)) return Promise.resolve();
  return new Promise((resolve) => gates.set(id, resolve));
}

async function call(command: Omit<ExecuteCommand, 'cmd'>): Promise<CallResult> {
  const startedAt = Date.now();
  try {
    const outcome = await engine.execute(
      {
        scope: command.scope,
        key: command.key,
        lease: command.lease,
        waitTimeout: command.waitTimeout,
        ttl: command.ttl,
        ...(command.strict ? { onExpiredLease: 'refuse' as const } : {}),
      },
      async (signal, ctx): Promise<ActionValue> => {
        const token = randomUUID();
        await recordExecution(command.scope, command.key, token);
        if (command.step) {
          await ctx.step('charge', async () => {
            await recordExecution(`${command.scope}#charge`, command.key, token);
            if (command.step === 'inside') {
              send({ type: 'entered', id: command.id, token });
              await waitForRelease(command.id);
            }
            return token;
          });
          if (command.step === 'inside')
            return { token, pid: process.pid, aborted: signal.aborted };
        }
        send({ type: 'entered', id: command.id, token });
        if (command.hold) await waitForRelease(command.id);
        if (command.workMs) await delay(command.workMs);
        return { token, pid: process.pid, aborted: signal.aborted };
      },
    );
    if (outcome.kind === 'suspended') throw new Error('no action here suspends');
    return { kind: outcome.kind, value: outcome.value, startedAt, endedAt: Date.now() };
  } catch (error) {
    const e = error as Error;
    return {
      kind: 'error',
      error: { name: e.name, message: e.message },
      startedAt,
      endedAt: Date.now(),
    };
  }
}

async function burst(command: BurstCommand): Promise<void> {
  // The pool's queue, sampled every millisecond while the calls run: proof that it was exhausted.
  let maxPoolWaiting = 0;
  const sampler = setInterval(() => {
    maxPoolWaiting = Math.max(maxPoolWaiting, pool().waitingCount);
  }, 1);
  const results = await Promise.all(
    Array.from({ length: command.count }, (_, i) =>
      call({ ...command.request, id: `${command.id}.${i}` }),
    ),
  );
  clearInterval(sampler);
  send({ type: 'burst-result', id: command.id, results, maxPoolWaiting });
}

/**
 * Resolves when `count` callers of this store are parked (each holds a wake-up
 * ticket) and no statement is running or queued: then every waiter is waiting
 * without a connection. There is no event for that, so this polls, bounded.
 */
async function waiters(id: string, count: number): Promise<void> {
  if (storeConfig) throw new Error('waiters: only on the default (TypeORM) store');
  const registry = (store as unknown as { waiters: { size: number } }).waiters;
  const p = pool();
  for (let i = 0; i < 2000; i++) {
    if (registry.size >= count && p.waitingCount === 0 && p.idleCount === p.totalCount) break;
    await delay(5);
  }
  send({ type: 'waiters', id, count: registry.size });
}

/**
 * Traffic for the concurrent-purge case: new keys with short ttls (some
 * actions outlive their ttl and live on their renewed lease), each re-run
 * once at a random point inside its ttl, while this instance purges back to back.
 */
async function purgeTraffic(command: PurgeTrafficCommand): Promise<void> {
  const stats: PurgeTrafficStats = {
    keys: 0,
    rechecks: 0,
    rechecksReplayed: 0,
    rechecksLost: 0,
    rechecksAfterTtl: 0,
    longActions: 0,
    purgeRuns: 0,
    purged: 0,
    errors: [],
  };
  const endAt = Date.now() + command.durationMs;
  let trafficDone = false;

  const purger = (async () => {
    while (!trafficDone) {
      try {
        stats.purged += await store.purgeExpired({ limit: command.purgeLimit });
        stats.purgeRuns++;
      } catch (error) {
        stats.errors.push(`purge: ${(error as Error).message}`);
      }
      await delay(5);
    }
  })();

  const lane = async (lane: number) => {
    for (let n = 0; Date.now() < endAt && n < 10_000; n++) {
      const key = randomUUID();
      const ttlMs = 300 + Math.floor(Math.random() * 700);
      const long = (stats.keys + lane) % 4 === 0;
      // A long action runs past its ttl: IN_PROGRESS past ttl, kept alive by the heartbeat.
      const workMs = long ? ttlMs + 400 : Math.floor(Math.random() * 100);
      if (long) stats.longActions++;
      stats.keys++;
      const request = {
        id: `${command.id}.${lane}.${n}`,
        scope: command.scope,
        key,
        lease: '400ms',
        waitTimeout: '5s',
        ttl: `${ttlMs}ms`,
      };
      const first = await call({ ...request, workMs });
      if (first.kind !== 'executed') {
        stats.errors.push(`first call ${first.kind}: ${first.error?.message ?? ''}`);
        continue;
      }
      const completedAt = first.endedAt;
      await delay(Math.floor(Math.random() * ttlMs * 0.8));
      const recheck = await call({ ...request, id: `${request.id}.recheck`, workMs: 0 });
      stats.rechecks++;
      if (recheck.kind === 'replayed') stats.rechecksReplayed++;
      else if (recheck.kind === 'executed') {
        // The record was stored when `complete` returned, at completedAt at the latest.
        if (recheck.startedAt < completedAt + ttlMs - 50) stats.rechecksLost++;
        else stats.rechecksAfterTtl++;
      } else stats.errors.push(`recheck: ${recheck.error?.message ?? ''}`);
    }
  };
  await Promise.all(Array.from({ length: command.concurrency }, (_, i) => lane(i)));
  trafficDone = true;
  await purger;
  send({ type: 'purge-traffic-result', id: command.id, stats });
}

async function handle(command: ChildCommand): Promise<void> {
  switch (command.cmd) {
    case 'execute':
      send({ type: 'result', id: command.id, result: await call(command) });
      return;
    case 'release':
      released.add(command.id);
      gates.get(command.id)?.();
      gates.delete(command.id);
      return;
    case 'burst':
      return burst(command);
    case 'waiters':
      return waiters(command.id, command.count);
    case 'purge-traffic':
      return purgeTraffic(command);
  }
}

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

async function main(): Promise<void> {
  await dataSource.initialize();
  if (storeConfig) {
    store = (await openStore(storeConfig, logger)).store;
  } else {
    const typeorm = new TypeOrmIdempotencyStore(dataSource, {
      schema,
      operationTimeoutMs: Number(process.env.FW_OP_TIMEOUT_MS ?? 5000),
    });
    await typeorm.init();
    store = typeorm;
  }
  engine = new IdempotencyEngine(store, { logger });
  engine.onEvent((event) => send({ type: 'event', event }));
  process.on('message', (command: ChildCommand) => {
    handle(command).catch((error: unknown) => {
      console.error(`[worker ${process.pid}] command ${command.cmd} failed: ${String(error)}`);
    });
  });
  send({ type: 'ready', pid: process.pid });
}

// The parent went away (or ended the test): do not outlive it.
process.on('disconnect', () => process.exit(0));
main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
