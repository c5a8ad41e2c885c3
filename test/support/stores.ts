import type { IdempotencyStore } from 'nest-idempotency';
import { mysqlSchemaSql, schemaSql, TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { createClient } from 'redis';
import { DataSource, DataSourceOptions } from 'typeorm';
import {
  dropTable,
  mariadbAvailable,
  mysqlTestUrl,
  openMysqlDataSource,
  scratchTable,
} from './mariadb';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from './postgres';
import {
  connectStandalone,
  deletePrefix,
  describeIfRedis,
  probeRedisSync,
  redisUrl,
  scratchPrefix,
} from './redis';

/**
 * The stores the end-to-end suites run on: the embedded PostgreSQL of the
 * run, the machine's Redis (standalone) and the machine's MariaDB. Each entry
 * opens a fresh namespace of its own (a schema, a key prefix, a table) with
 * the records table created as a migration would, and removes it afterwards.
 *
 * A suite declares itself once per store with `describeEachStore`: a store
 * whose server is unreachable is skipped with a warning that says how to
 * start it, unless IDEMPOTENCY_TEST_REQUIRE_REDIS=1 / IDEMPOTENCY_TEST_REQUIRE_MARIADB=1
 * (CI), where it fails instead (the conventions of ./redis.ts and ./mariadb.ts).
 */
export type StoreName = 'postgres' | 'redis' | 'mariadb';
export const STORE_NAMES: readonly StoreName[] = ['postgres', 'redis', 'mariadb'];

const LABELS: Record<StoreName, string> = {
  postgres: 'PostgreSQL',
  redis: 'Redis',
  mariadb: 'MariaDB',
};

export interface OpenedStore {
  name: StoreName;
  label: string;
  /** The parent's own instance on the namespace: hand it to the module, or read records through it. */
  store: IdempotencyStore;
  /**
   * What another process needs to open the same records (`storeFromEnv`):
   * IDEM_STORE, IDEM_STORE_URL and IDEM_STORE_NAMESPACE.
   */
  env: Record<string, string>;
  /** Deletes the namespace and closes the parent's connections. Call after the app closed. */
  cleanup(): Promise<void>;
}

const quiet = { warn: () => undefined, error: () => undefined };

/** Opens a fresh namespace of `name` on the store's server; `label` names it (letters, digits, `_`). */
export async function openStore(name: StoreName, label: string): Promise<OpenedStore> {
  switch (name) {
    case 'postgres': {
      const dataSource = await openDataSource();
      const schema = scratchSchema(label);
      for (const sql of schemaSql({ schema, table: 'idempotency_records' })) {
        await dataSource.query(sql);
      }
      return {
        name,
        label: LABELS[name],
        store: new TypeOrmIdempotencyStore(dataSource, { schema, logger: quiet }),
        env: { IDEM_STORE: name, IDEM_STORE_URL: testDatabaseUrl(), IDEM_STORE_NAMESPACE: schema },
        cleanup: async () => {
          await dropSchema(dataSource, schema);
          await dataSource.destroy();
        },
      };
    }
    case 'redis': {
      const client = await connectStandalone(redisUrl());
      const prefix = scratchPrefix(label);
      return {
        name,
        label: LABELS[name],
        store: new RedisIdempotencyStore(client, { keyPrefix: prefix, logger: quiet }),
        env: { IDEM_STORE: name, IDEM_STORE_URL: redisUrl(), IDEM_STORE_NAMESPACE: prefix },
        cleanup: async () => {
          await deletePrefix(client, prefix);
          client.destroy();
        },
      };
    }
    case 'mariadb': {
      const dataSource = await openMysqlDataSource();
      const table = scratchTable(label);
      for (const sql of mysqlSchemaSql({ table })) await dataSource.query(sql);
      return {
        name,
        label: LABELS[name],
        store: new TypeOrmIdempotencyStore(dataSource, { table, logger: quiet }),
        env: { IDEM_STORE: name, IDEM_STORE_URL: mysqlTestUrl(), IDEM_STORE_NAMESPACE: table },
        cleanup: async () => {
          await dropTable(dataSource, table);
          await dataSource.destroy();
        },
      };
    }
  }
}

/**
 * Declares `body` once per store, as `describe(`${title} on ${label}`)`. The
 * probes run while the file is collected (PostgreSQL is always there: the
 * run's global setup started it).
 */
export function describeEachStore(
  title: string,
  body: (name: StoreName, label: string) => void,
  stores: readonly StoreName[] = STORE_NAMES,
): void {
  for (const name of stores) {
    const label = LABELS[name];
    const heading = `${title} on ${label}`;
    if (name === 'redis') {
      describeIfRedis(redisProbe(), `Redis at ${redisUrl()}`)(heading, () => body(name, label));
    } else if (name === 'mariadb') {
      // Warns and answers false when the server is unreachable; throws when it is required.
      describe.runIf(mariadbAvailable())(heading, () => body(name, label));
    } else {
      describe(heading, () => body(name, label));
    }
  }
}

let probed: ReturnType<typeof probeRedisSync> | undefined;
function redisProbe(): ReturnType<typeof probeRedisSync> {
  probed ??= probeRedisSync();
  return probed;
}

/**
 * In a child process: the store `OpenedStore.env` describes, on connections
 * of its own, and what closes them. The records table exists already (the
 * parent created it).
 */
export async function storeFromEnv(
  env: Record<string, string | undefined>,
): Promise<{ store: IdempotencyStore; close: () => Promise<void> }> {
  const url = env.IDEM_STORE_URL;
  const namespace = env.IDEM_STORE_NAMESPACE;
  if (!url || !namespace) throw new Error('IDEM_STORE_URL and IDEM_STORE_NAMESPACE must be set');
  switch (env.IDEM_STORE) {
    case 'postgres':
    case 'mariadb': {
      const options =
        env.IDEM_STORE === 'postgres'
          ? { type: 'postgres', url, extra: { max: 10 } }
          : { type: 'mariadb', url, poolSize: 10 };
      const dataSource = await new DataSource(options as DataSourceOptions).initialize();
      const where = env.IDEM_STORE === 'postgres' ? { schema: namespace } : { table: namespace };
      return {
        store: new TypeOrmIdempotencyStore(dataSource, where),
        close: () => dataSource.destroy(),
      };
    }
    case 'redis': {
      const client = createClient({ url });
      client.on('error', () => undefined);
      await client.connect();
      return {
        store: new RedisIdempotencyStore(client, { keyPrefix: namespace }),
        close: async () => client.destroy(),
      };
    }
    default:
      throw new Error(`IDEM_STORE must be postgres, redis or mariadb, not ${env.IDEM_STORE}`);
  }
}
