/**
 * The Redis and MariaDB stores of the fault cases 9 to 11, built the same way
 * in the test process and in a Nest app child (store-app.ts), from one JSON
 * config. Executions are still counted in PostgreSQL (the run's server, a
 * scratch schema): that table survives whatever happens to the store.
 */
import { randomUUID } from 'node:crypto';
import { IdempotencyEngine, IdempotencyEvent, IdempotencyStore } from 'nest-idempotency';
import { MysqlIdempotencyStore } from 'nest-idempotency/mysql';
import { PgIdempotencyStore } from 'nest-idempotency/pg';
import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { Cluster as IoredisCluster, Redis as Ioredis } from 'ioredis';
import { createPool as createMysqlPool } from 'mysql2';
import { Pool as PgPool } from 'pg';
import { createClient, createCluster } from 'redis';
import { DataSource } from 'typeorm';

/** Which Redis client library a Redis config connects with (node-redis unless told). */
export type RedisClientName = 'node-redis' | 'ioredis';

export type StoreConfig =
  | {
      kind: 'redis';
      /** One URL: a standalone server. */
      url: string;
      prefix: string;
      operationTimeoutMs: number;
      client?: RedisClientName;
    }
  | {
      kind: 'redis-cluster';
      /** Seed nodes of the Cluster. */
      urls: string[];
      prefix: string;
      operationTimeoutMs: number;
      waitForReplicas?: { replicas: number; timeoutMs: number };
      client?: RedisClientName;
    }
  | {
      kind: 'mariadb';
      url: string;
      table: string;
      operationTimeoutMs: number;
      pool?: number;
    }
  | {
      /** PgIdempotencyStore on a plain `pg` Pool. */
      kind: 'pg-pool';
      url: string;
      schema: string;
      operationTimeoutMs: number;
    }
  | {
      /** MysqlIdempotencyStore on a plain mysql2 pool. */
      kind: 'mysql-pool';
      url: string;
      table: string;
      operationTimeoutMs: number;
    };

export interface OpenedStore {
  store: IdempotencyStore;
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
    return opened(
      store,
      () => errors,
      async () => {
        if (dataSource.isInitialized) await dataSource.destroy().catch(() => undefined);
      },
    );
  }
  if (config.kind === 'pg-pool') {
    const pool = new PgPool({ connectionString: config.url, max: 10 });
    pool.on('error', onError);
    const store = new PgIdempotencyStore(pool, {
      schema: config.schema,
      ensureSchema: true,
      operationTimeoutMs: config.operationTimeoutMs,
      logger,
    });
    return opened(
      store,
      () => errors,
      async () => {
        await pool.end();
      },
    );
  }
  if (config.kind === 'mysql-pool') {
    const pool = createMysqlPool({ uri: config.url, connectionLimit: 10 });
    pool.on('connection', (connection) => connection.on('error', onError));
    const store = new MysqlIdempotencyStore(pool, {
      table: config.table,
      ensureSchema: true,
      operationTimeoutMs: config.operationTimeoutMs,
      logger,
    });
    return opened(
      store,
      () => errors,
      async () => {
        await new Promise<void>((resolve) => pool.end(() => resolve()));
      },
    );
  }
  const client = await connectRedis(config, onError);
  const store = new RedisIdempotencyStore(client.handle, {
    keyPrefix: config.prefix,
    operationTimeoutMs: config.operationTimeoutMs,
    waitForReplicas: config.kind === 'redis-cluster' ? config.waitForReplicas : undefined,
    logger,
  });
  return opened(
    store,
    () => errors,
    async () => {
      client.close();
    },
  );
}

/** Prepares `store` (its schema, scripts); closing it also closes the client it was built on. */
async function opened(
  store: IdempotencyStore,
  clientErrors: () => number,
  closeClient: () => Promise<unknown> | void,
): Promise<OpenedStore> {
  await store.init?.();
  return {
    store,
    clientErrors,
    close: async () => {
      await store.close?.();
      await closeClient();
    },
  };
}

/** The client a Redis config names, connected, with its errors counted. */
async function connectRedis(
  config: Extract<StoreConfig, { kind: 'redis' | 'redis-cluster' }>,
  onError: () => void,
): Promise<{
  handle: ConstructorParameters<typeof RedisIdempotencyStore>[0];
  close: () => void;
}> {
  if (config.client === 'ioredis') {
    const client =
      config.kind === 'redis'
        ? new Ioredis(config.url, { lazyConnect: true })
        : new IoredisCluster(
            config.urls.map((url) => {
              const { hostname, port } = new URL(url);
              return { host: hostname, port: Number(port) };
            }),
            { lazyConnect: true },
          );
    client.on('error', onError);
    await client.connect();
    return { handle: client, close: () => client.disconnect() };
  }
  if (config.kind === 'redis') {
    const client = createClient({ url: config.url });
    client.on('error', onError);
    await client.connect();
    return { handle: client, close: () => client.destroy() };
  }
  const cluster = createCluster({ rootNodes: config.urls.map((url) => ({ url })) });
  cluster.on('error', onError);
  await cluster.connect();
  return { handle: cluster, close: () => cluster.destroy() };
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
