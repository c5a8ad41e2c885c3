/**
 * The Redis and MariaDB stores of the fault cases 9 to 11, built the same way
 * in the test process and in a Nest app child (store-app.ts), from one JSON
 * config. Executions are still counted in PostgreSQL (the run's server, a
 * scratch schema): that table survives whatever happens to the store.
 */
import { randomUUID } from 'node:crypto';
import { IdempotencyEngine, IdempotencyEvent, IdempotencyStore } from 'nest-idempotency';
import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { createClient, createCluster } from 'redis';
import { DataSource } from 'typeorm';

export type StoreConfig =
  | {
      kind: 'redis';
      /** One URL: a standalone server. */
      url: string;
      prefix: string;
      operationTimeoutMs: number;
    }
  | {
      kind: 'redis-cluster';
      /** Seed nodes of the Cluster. */
      urls: string[];
      prefix: string;
      operationTimeoutMs: number;
      waitForReplicas?: { replicas: number; timeoutMs: number };
    }
  | {
      kind: 'mariadb';
      url: string;
      table: string;
      operationTimeoutMs: number;
      pool?: number;
    };

export interface OpenedStore {
  store: IdempotencyStore;
  /** The store's own handle (RedisIdempotencyStore or TypeOrmIdempotencyStore). */
  raw: RedisIdempotencyStore | TypeOrmIdempotencyStore;
  /** Errors the client reported on its own (connection lost, reconnecting), counted. */
  clientErrors: () => number;
  close: () => Promise<void>;
}

type Logger = { warn(m: string): void; error(m: string): void };

/** Connects the client (or DataSource) a config names and builds its store on it. */
export async function openStore(config: StoreConfig, logger: Logger): Promise<OpenedStore> {
  let errors = 0;
  const onError = () => void errors++;
  if (config.kind === 'mariadb') {
    const dataSource = await new DataSource({
      type: 'mariadb',
      url: config.url,
      poolSize: config.pool ?? 10,
    }).initialize();
    const store = new TypeOrmIdempotencyStore(dataSource, {
      table: config.table,
      ensureSchema: true,
      operationTimeoutMs: config.operationTimeoutMs,
      logger,
    });
    await store.init();
    return {
      store,
      raw: store,
      clientErrors: () => errors,
      close: async () => {
        await store.close();
        if (dataSource.isInitialized) await dataSource.destroy().catch(() => undefined);
      },
    };
  }
  if (config.kind === 'redis') {
    const client = createClient({ url: config.url });
    client.on('error', onError);
    await client.connect();
    const store = new RedisIdempotencyStore(client, {
      keyPrefix: config.prefix,
      operationTimeoutMs: config.operationTimeoutMs,
      logger,
    });
    await store.init();
    return {
      store,
      raw: store,
      clientErrors: () => errors,
      close: async () => {
        await store.close();
        client.destroy();
      },
    };
  }
  const cluster = createCluster({ rootNodes: config.urls.map((url) => ({ url })) });
  cluster.on('error', onError);
  await cluster.connect();
  const store = new RedisIdempotencyStore(cluster, {
    keyPrefix: config.prefix,
    operationTimeoutMs: config.operationTimeoutMs,
    waitForReplicas: config.waitForReplicas,
    logger,
  });
  await store.init();
  return {
    store,
    raw: store,
    clientErrors: () => errors,
    close: async () => {
      await store.close();
      cluster.destroy();
    },
  };
}

/** What an operator is told, plus `completed`: which completions the store acknowledged. */
const KEPT_EVENTS = new Set([
  'lease-lost',
  'completion-retry',
  'completion-failed',
  'release-failed',
  'completed',
]);

/** An engine in the test process on a store of `config`; its log lines and events are kept. */
export async function openStoreEngine(config: StoreConfig): Promise<
  OpenedStore & {
    engine: IdempotencyEngine;
    logs: string[];
    events: IdempotencyEvent[];
  }
> {
  const logs: string[] = [];
  const logger = {
    warn: (m: string) => logs.push(`warn: ${m}`),
    error: (m: string) => logs.push(`error: ${m}`),
  };
  const opened = await openStore(config, logger);
  const engine = new IdempotencyEngine(opened.store, { logger });
  const events: IdempotencyEvent[] = [];
  engine.onEvent((e) => {
    if (KEPT_EVENTS.has(e.type)) events.push(e);
  });
  return { ...opened, engine, logs, events };
}

/** The `executions` table alone (the records live in Redis or MariaDB). */
export async function createExecutionsTable(pg: DataSource, schema: string): Promise<void> {
  await pg.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
  await pg.query(
    `CREATE TABLE "${schema}".executions (
       n bigserial PRIMARY KEY, scope text NOT NULL, "key" text NOT NULL, pid int NOT NULL,
       token uuid NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
  );
}

/** Inserts an execution row first thing in an action; returns its token. */
export async function recordExecution(
  pg: DataSource,
  schema: string,
  scope: string,
  key: string,
): Promise<string> {
  const token = randomUUID();
  await pg.query(
    `INSERT INTO "${schema}".executions (scope, "key", pid, token) VALUES ($1, $2, $3, $4)`,
    [scope, key, process.pid, token],
  );
  return token;
}

/** Executions per key (and their tokens, in order), from the table. */
export async function executionCounts(
  pg: DataSource,
  schema: string,
): Promise<Map<string, string[]>> {
  const rows: Array<{ scope: string; key: string; token: string }> = await pg.query(
    `SELECT scope, "key", token::text AS token FROM "${schema}".executions ORDER BY n`,
  );
  const counts = new Map<string, string[]>();
  for (const row of rows) {
    const id = `${row.scope}|${row.key}`;
    counts.set(id, [...(counts.get(id) ?? []), row.token]);
  }
  return counts;
}
