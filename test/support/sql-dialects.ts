import { DataSource } from 'typeorm';
import {
  mysqlSchemaSql,
  schemaSql,
  TypeOrmIdempotencyStoreOptions,
} from 'nest-idempotency/typeorm';
import {
  dropTable,
  mariadbAvailable,
  mysqlTarget,
  mysqlUrlThroughPort,
  openMysqlDataSource,
  scratchTable,
} from './mariadb';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from './postgres';
import { parsePgUrl } from './tcp-proxy';

/** Where one test's table lives, as the store's options name it and as its messages print it. */
export interface TablePlace {
  options: Pick<TypeOrmIdempotencyStoreOptions, 'schema' | 'table'>;
  /** The table as the store's messages print it (`schema.table`), or another table beside it. */
  printed(table?: string): string;
  /** The table as SQL names it, quoted. */
  sql: string;
  drop(): Promise<void>;
}

/** A row of the purge seed: `n` records of one state, TTL and lease end in seconds from now. */
export interface SeedRows {
  prefix: string;
  n: number;
  state: 'COMPLETE' | 'IN_PROGRESS';
  expiresInS: number;
  leaseEndsInS: number;
}

/** A table altered away from the store's shape, and what the store must say about it. */
export type WrongShape = [
  label: string,
  alter: (table: string) => string[],
  says: Array<string | RegExp>,
];

/**
 * What the SQL store suite needs of a database: the same behaviours, checked
 * once, over PostgreSQL and MariaDB, with only the SQL that tells them apart.
 */
export interface SqlDialect {
  /** How the store's messages name the database. */
  name: 'PostgreSQL' | 'MariaDB';
  available(): boolean;
  openDataSource(options?: { url?: string; poolSize?: number }): Promise<DataSource>;
  newPlace(admin: DataSource): TablePlace;
  schemaSql(place: TablePlace): string[];
  wrongShapes: WrongShape[];
  tableExists(admin: DataSource, place: TablePlace): Promise<boolean>;
  /** The server's host and port, for proxies in front of it. */
  target(): { host: string; port: number };
  urlThroughPort(port: number): string;
  seed(admin: DataSource, place: TablePlace, rows: SeedRows): Promise<void>;
  /** How many records are left per key prefix (the key without its trailing digits), by prefix. */
  countsByPrefix(admin: DataSource, place: TablePlace): Promise<Array<[string, number]>>;
}

const pgTable = (schema: string) => `"${schema}".idempotency_records`;

export const postgresDialect: SqlDialect = {
  name: 'PostgreSQL',
  available: () => true,
  openDataSource: ({ url, poolSize } = {}) =>
    openDataSource({ ...(url ? { url } : {}), ...(poolSize ? { extra: { max: poolSize } } : {}) }),
  newPlace(admin) {
    const schema = scratchSchema('store');
    return {
      options: { schema },
      printed: (table = 'idempotency_records') => `${schema}.${table}`,
      sql: pgTable(schema),
      drop: () => dropSchema(admin, schema),
    };
  },
  schemaSql: (place) => schemaSql({ schema: place.options.schema!, table: 'idempotency_records' }),
  wrongShapes: [
    [
      'payload is text instead of bytea',
      (t) => [`ALTER TABLE ${t} ALTER COLUMN payload TYPE text`],
      ['column "payload" is text, expected bytea'],
    ],
    [
      'a column is missing',
      (t) => [`ALTER TABLE ${t} DROP COLUMN lease_expires_at`],
      ['column "lease_expires_at" is missing (expected timestamp with time zone)'],
    ],
    [
      'the primary key is another',
      (t) => [
        `ALTER TABLE ${t} DROP CONSTRAINT idempotency_records_pkey`,
        `ALTER TABLE ${t} ADD PRIMARY KEY (scope, "key")`,
      ],
      [/primary key is \((scope, key|key, scope)\), expected \(id\)/],
    ],
    [
      'there is no primary key',
      (t) => [`ALTER TABLE ${t} DROP CONSTRAINT idempotency_records_pkey`],
      ['primary key is (none), expected (id)'],
    ],
    [
      'all of these at once',
      (t) => [
        `ALTER TABLE ${t} ALTER COLUMN payload TYPE text`,
        `ALTER TABLE ${t} DROP COLUMN fingerprint`,
        `ALTER TABLE ${t} ALTER COLUMN created_at TYPE timestamp`,
        `ALTER TABLE ${t} DROP CONSTRAINT idempotency_records_pkey`,
        `ALTER TABLE ${t} ADD PRIMARY KEY (scope, "key")`,
      ],
      [
        'column "payload" is text, expected bytea',
        'column "fingerprint" is missing (expected text)',
        'column "created_at" is timestamp without time zone, expected timestamp with time zone',
        /primary key is \((scope, key|key, scope)\), expected \(id\)/,
      ],
    ],
  ],
  async tableExists(admin, place) {
    const rows = await admin.query(`SELECT to_regclass($1) IS NOT NULL AS present`, [place.sql]);
    return rows[0].present;
  },
  target: () => parsePgUrl(testDatabaseUrl()),
  urlThroughPort(port) {
    const url = new URL(testDatabaseUrl());
    url.hostname = '127.0.0.1';
    url.port = String(port);
    return url.toString();
  },
  async seed(admin, place, { prefix, n, state, expiresInS, leaseEndsInS }) {
    await admin.query(
      `INSERT INTO ${place.sql} (id, scope, "key", state, lease_id, lease_expires_at, expires_at, payload, created_at, completed_at)
       SELECT sha256(convert_to($1 || i, 'UTF8')), 'purge', $1 || i, $2,
         CASE WHEN $2 = 'IN_PROGRESS' THEN gen_random_uuid() END,
         CASE WHEN $2 = 'IN_PROGRESS' THEN now() + make_interval(secs => $4) END,
         now() + make_interval(secs => $3),
         CASE WHEN $2 = 'COMPLETE' THEN convert_to('v1', 'UTF8') END,
         now() - interval '2 hours',
         CASE WHEN $2 = 'COMPLETE' THEN now() - interval '2 hours' END
       FROM generate_series(1, $5::int) AS i`,
      [prefix, state, expiresInS, leaseEndsInS, n],
    );
  },
  async countsByPrefix(admin, place) {
    const rows: Array<{ prefix: string; n: number }> = await admin.query(
      `SELECT regexp_replace("key", '[0-9]+$', '') AS prefix, count(*)::int AS n FROM ${place.sql} GROUP BY 1 ORDER BY 1`,
    );
    return rows.map((r) => [r.prefix, r.n]);
  },
};

export const mariadbDialect: SqlDialect = {
  name: 'MariaDB',
  available: mariadbAvailable,
  openDataSource: ({ url, poolSize } = {}) =>
    openMysqlDataSource({ ...(url ? { url } : {}), ...(poolSize ? { poolSize } : {}) }),
  newPlace(admin) {
    const table = scratchTable('store');
    return {
      options: { table },
      printed: (other = table) => `test.${other}`,
      sql: `\`${table}\``,
      drop: () => dropTable(admin, table),
    };
  },
  schemaSql: (place) => mysqlSchemaSql({ table: place.options.table }),
  wrongShapes: [
    [
      'payload is a BLOB (64 KiB) instead of a LONGBLOB',
      (t) => [`ALTER TABLE ${t} MODIFY payload BLOB NULL`],
      ['column "payload" is blob, expected longblob'],
    ],
    [
      'times are TIMESTAMP (which ends in 2038)',
      (t) => [`ALTER TABLE ${t} MODIFY expires_at TIMESTAMP(6) NOT NULL`],
      ['column "expires_at" is timestamp(6), expected datetime(6)'],
    ],
    [
      'times are whole seconds',
      (t) => [`ALTER TABLE ${t} MODIFY lease_expires_at DATETIME NULL`],
      ['column "lease_expires_at" is datetime, expected datetime(6)'],
    ],
    [
      'a column is missing',
      (t) => [`ALTER TABLE ${t} DROP COLUMN fingerprint`],
      ['column "fingerprint" is missing (expected text)'],
    ],
    [
      'scopes compare case-insensitively',
      (t) => [
        `ALTER TABLE ${t} MODIFY scope MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL`,
      ],
      ['column "scope" compares as utf8mb4_general_ci, expected utf8mb4_bin'],
    ],
    [
      'the primary key is another',
      (t) => [
        `ALTER TABLE ${t} DROP PRIMARY KEY, ADD COLUMN n INT NOT NULL AUTO_INCREMENT PRIMARY KEY`,
      ],
      ['primary key is (n), expected (id)'],
    ],
    [
      'the engine is not InnoDB',
      (t) => [`ALTER TABLE ${t} ENGINE = MyISAM`],
      ['engine is MyISAM, expected InnoDB'],
    ],
    [
      'the key is hashed to another width',
      (t) => [`ALTER TABLE ${t} MODIFY id BINARY(16) NOT NULL`],
      ['column "id" is binary(16), expected binary(32)'],
    ],
  ],
  async tableExists(admin, place) {
    const rows = await admin.query(
      `SELECT COUNT(*) AS n FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`,
      [place.options.table],
    );
    return Number(rows[0].n) === 1;
  },
  target: mysqlTarget,
  urlThroughPort: mysqlUrlThroughPort,
  async seed(admin, place, { prefix, n, state, expiresInS, leaseEndsInS }) {
    const row = `(UNHEX(SHA2(?, 256)), 'purge', ?, ?,
       IF(? = 'IN_PROGRESS', UUID(), NULL),
       IF(? = 'IN_PROGRESS', UTC_TIMESTAMP(6) + INTERVAL ? SECOND, NULL),
       UTC_TIMESTAMP(6) + INTERVAL ? SECOND,
       IF(? = 'COMPLETE', 'v1', NULL),
       UTC_TIMESTAMP(6) - INTERVAL 2 HOUR,
       IF(? = 'COMPLETE', UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, NULL))`;
    // In batches: one statement per 500 rows keeps under max_allowed_packet.
    for (let from = 1; from <= n; from += 500) {
      const keys = Array.from(
        { length: Math.min(500, n - from + 1) },
        (_, i) => prefix + (from + i),
      );
      await admin.query(
        `INSERT INTO ${place.sql} (id, scope, \`key\`, state, lease_id, lease_expires_at, expires_at, payload, created_at, completed_at)
         VALUES ${keys.map(() => row).join(', ')}`,
        keys.flatMap((key) => [
          key,
          key,
          state,
          state,
          state,
          leaseEndsInS,
          expiresInS,
          state,
          state,
        ]),
      );
    }
  },
  async countsByPrefix(admin, place) {
    const rows: Array<{ prefix: string; n: number | string }> = await admin.query(
      `SELECT REGEXP_REPLACE(\`key\`, '[0-9]+$', '') AS prefix, COUNT(*) AS n FROM ${place.sql} GROUP BY 1 ORDER BY 1`,
    );
    return rows.map((r) => [r.prefix, Number(r.n)]);
  },
};
