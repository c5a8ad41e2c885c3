import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import {
  IdempotencyLeaseLostError,
  IdempotencyStoreSchemaError,
  IdempotencyStoreUnavailableError,
} from '../../core/errors';
import { IdempotencyLogger } from '../../core/logger';
import { decodePayload, DEFAULT_MAX_PAYLOAD_BYTES, encodePayload } from '../../core/payload';
import {
  AcquireRequest,
  AcquireResult,
  DEFAULT_MAX_WAITERS,
  IdempotencyRecordView,
  IdempotencyStore,
  ListFilter,
  RecordId,
  RecordState,
} from '../../core/store';
import { WaiterRegistry } from '../../core/waiters';
import { PgNotificationListener } from './pg-listener';
import {
  assertTableShape,
  ColumnRow,
  COLUMNS_QUERY,
  createTableSql,
  PRIMARY_KEY_QUERY,
} from './schema';
import { boundedQuery } from './bounded-query';
import { poolOf } from './pool';
import { preparedName, preparedQuery } from './prepared-query';
import { buildStatements, HOT_STATEMENTS, Statements } from './statements';
import { channelFor, DEFAULT_TABLE, recordIdOf, TableName } from './table';
import { isUnavailable } from './unavailable';

export interface TypeOrmIdempotencyStoreOptions {
  /** Schema of the records table. Default `public`. */
  schema?: string;
  /** Name of the records table. Default `idempotency_records`. */
  table?: string;
  /** Create the table at `init()` if it is missing. For development; use the migration in production. */
  ensureSchema?: boolean;
  /** Largest serialized result the store accepts. Default 1 MiB. */
  maxPayloadBytes?: number;
  /**
   * Most duplicates parked waiting in this process at once. One more is answered
   * `in-flight` straight away instead of holding memory. Default 10,000.
   */
  maxWaiters?: number;
  /** Bound on any one store call (including waiting for a pooled connection). Default 5000 ms. */
  operationTimeoutMs?: number;
  /** Fallback poll for waiting duplicates when a notification is missed. Default 1000 ms. */
  pollIntervalMs?: number;
  /**
   * Send acquire, complete, release and extend as named prepared statements
   * (each connection parses and plans them once). Default true. Turn off behind
   * a pooler that cannot keep prepared statements (PgBouncer in transaction mode
   * before 1.21, or without `max_prepared_statements`).
   */
  preparedStatements?: boolean;
  logger?: IdempotencyLogger;
}

interface AcquireRow {
  outcome: 'acquired' | 'existing';
  state: RecordState | null;
  fingerprint: string | null;
  payload: unknown;
  completed_at: Date | null;
  lease_left_ms: number | null;
  expires_left_ms: number | null;
  stealable: boolean;
}

interface ViewRow {
  scope: string;
  key: string;
  state: RecordState;
  lease_expires_at: Date | null;
  expires_at: Date;
  created_at: Date;
  completed_at: Date | null;
  fingerprint: string | null;
  payload: unknown;
  lease_expired: boolean;
}

const PURGE_BATCH = 1000;

/**
 * PostgreSQL store through a TypeORM `DataSource`. See the README's Storage
 * section for the table, the migration and the round trips each call costs.
 */
export class TypeOrmIdempotencyStore implements IdempotencyStore {
  readonly tableName: TableName;
  private readonly sql: Statements;
  /** Statement text → the name it is prepared under; empty when `preparedStatements` is off. */
  private readonly preparedNames = new Map<string, string>();
  private readonly channel: string;
  private readonly waiters = new WaiterRegistry();
  private readonly maxPayloadBytes: number;
  private readonly maxWaiters: number;
  private readonly timeoutMs: number;
  private readonly pollIntervalMs: number;
  private readonly logger: IdempotencyLogger;
  private listener?: PgNotificationListener;
  private ready?: Promise<void>;

  constructor(
    private readonly dataSource: DataSource,
    private readonly options: TypeOrmIdempotencyStoreOptions = {},
  ) {
    if (dataSource.options.type !== 'postgres') {
      throw new IdempotencyStoreSchemaError(
        `TypeOrmIdempotencyStore supports PostgreSQL; the DataSource is of type "${dataSource.options.type}"`,
      );
    }
    this.tableName = {
      schema: options.schema ?? DEFAULT_TABLE.schema,
      table: options.table ?? DEFAULT_TABLE.table,
    };
    this.sql = buildStatements(this.tableName);
    if (options.preparedStatements ?? true) {
      for (const operation of HOT_STATEMENTS)
        this.preparedNames.set(this.sql[operation], preparedName(operation, this.sql[operation]));
    }
    this.channel = channelFor(this.tableName);
    this.maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
    this.maxWaiters = options.maxWaiters ?? DEFAULT_MAX_WAITERS;
    this.timeoutMs = options.operationTimeoutMs ?? 5000;
    this.pollIntervalMs = options.pollIntervalMs ?? 1000;
    this.logger = options.logger ?? {
      warn: (m) => console.warn(`[nest-idempotency] ${m}`),
      error: (m) => console.error(`[nest-idempotency] ${m}`),
    };
  }

  /**
   * Checks (or with `ensureSchema`, creates) the table and starts listening.
   * Runs once; every other call awaits it, so calling it yourself is optional
   * but surfaces a wrong schema at startup rather than on the first request.
   */
  init(): Promise<void> {
    this.ready ??= this.prepare().catch((error) => {
      this.ready = undefined;
      throw error;
    });
    return this.ready;
  }

  /** Closes the LISTEN connection and wakes waiters. A later call prepares the store again. */
  async close(): Promise<void> {
    const listener = this.listener;
    this.listener = undefined;
    this.ready = undefined;
    await listener?.close();
    this.waiters.notifyAll();
  }

  async tryAcquire(request: AcquireRequest): Promise<AcquireResult> {
    await this.init();
    const id = recordIdOf(request.scope, request.key);
    const idHex = id.toString('hex');
    const deadline = Date.now() + request.waitTimeoutMs;
    const leaseId = randomUUID();
    const params = [
      id,
      request.scope,
      request.key,
      leaseId,
      request.leaseMs,
      request.ttlMs,
      request.fingerprint ?? null,
    ];
    if (request.waitTimeoutMs > 0) await this.listener?.ensure();

    for (;;) {
      // Take the ticket before looking, so a completion during the look still wakes us.
      const ticket = request.waitTimeoutMs > 0 ? this.waiters.register(idHex) : undefined;
      try {
        const rows = await this.query<AcquireRow>('acquire', this.sql.acquire, params);
        const row = rows[0];
        if (row?.outcome === 'acquired') return { kind: 'acquired', leaseId };
        // No row, or a row that looked stealable but someone else changed first: look again now.
        if (!row || row.stealable) continue;
        if (request.fingerprint && row.fingerprint && row.fingerprint !== request.fingerprint) {
          return { kind: 'fingerprint-mismatch' };
        }
        if (row.state === 'COMPLETE') {
          return {
            kind: 'duplicate',
            payload: decodePayload(row.payload),
            completedAt: row.completed_at!,
            expiresInMs: Math.floor(row.expires_left_ms ?? 0),
            fingerprint: row.fingerprint,
          };
        }
        const leaseLeftMs = Math.ceil(row.lease_left_ms ?? 0);
        const waitLeftMs = deadline - Date.now();
        if (!ticket || waitLeftMs <= 0 || this.waiters.size > this.maxWaiters) {
          return { kind: 'in-flight', retryAfterMs: leaseLeftMs };
        }
        const poll = this.listener?.listening
          ? this.pollIntervalMs
          : Math.min(this.pollIntervalMs, 100);
        await ticket.wait(Math.min(waitLeftMs, leaseLeftMs + 1, poll));
      } finally {
        ticket?.dispose();
      }
    }
  }

  async complete(id: RecordId, leaseId: string, payload: unknown, ttlMs: number): Promise<void> {
    const encoded = encodePayload(payload, this.maxPayloadBytes);
    await this.init();
    const rid = recordIdOf(id.scope, id.key);
    const rows = await this.query('complete', this.sql.complete, [
      rid,
      leaseId,
      encoded,
      ttlMs,
      this.channel,
      rid.toString('hex'),
    ]);
    if (rows.length === 0) {
      throw new IdempotencyLeaseLostError(
        'complete refused: the record is no longer held under this lease',
      );
    }
  }

  async release(id: RecordId, leaseId: string): Promise<void> {
    await this.init();
    const rid = recordIdOf(id.scope, id.key);
    const rows = await this.query('release', this.sql.release, [
      rid,
      leaseId,
      this.channel,
      rid.toString('hex'),
    ]);
    if (rows.length === 0) {
      throw new IdempotencyLeaseLostError(
        'release refused: the record is no longer held under this lease',
      );
    }
  }

  async extend(id: RecordId, leaseId: string, leaseMs: number): Promise<boolean> {
    await this.init();
    const rows = await this.query('extend', this.sql.extend, [
      recordIdOf(id.scope, id.key),
      leaseId,
      leaseMs,
    ]);
    return rows.length > 0;
  }

  async purgeExpired(options: { limit?: number } = {}): Promise<number> {
    await this.init();
    let total = 0;
    for (;;) {
      const batch = Math.min(
        PURGE_BATCH,
        options.limit === undefined ? PURGE_BATCH : options.limit - total,
      );
      if (batch <= 0) return total;
      const [row] = await this.query<{ purged: number }>('purge', this.sql.purgeBatch, [batch]);
      total += row.purged;
      if (row.purged < batch) return total;
    }
  }

  /**
   * How many records `purgeExpired` would delete now (at most `limit`), by the
   * same rule, without deleting or locking anything: a purge's dry run.
   */
  async countExpired(options: { limit?: number } = {}): Promise<number> {
    await this.init();
    const [row] = await this.query<{ expired: number }>('count expired', this.sql.countExpired, [
      options.limit ?? null,
    ]);
    return row.expired;
  }

  async find(id: RecordId): Promise<IdempotencyRecordView | null> {
    await this.init();
    const rows = await this.query<ViewRow>('find', this.sql.find, [recordIdOf(id.scope, id.key)]);
    return rows.length > 0 ? toView(rows[0]) : null;
  }

  async list(filter: ListFilter = {}): Promise<IdempotencyRecordView[]> {
    await this.init();
    const rows = await this.query<ViewRow>('list', this.sql.list, [
      filter.scope ?? null,
      filter.state ?? null,
      filter.limit ?? 100,
    ]);
    return rows.map(toView);
  }

  private async prepare(): Promise<void> {
    if (!this.dataSource.isInitialized) {
      throw new IdempotencyStoreSchemaError(
        'TypeOrmIdempotencyStore: the DataSource is not initialized; call dataSource.initialize() before the store is used (before the application starts)',
      );
    }
    const { schema, table } = this.tableName;
    if (this.options.ensureSchema) {
      // One statement string runs as one implicit transaction; the advisory lock
      // serializes instances that start together (CREATE ... IF NOT EXISTS can race).
      const lock = `SELECT pg_advisory_xact_lock(hashtext('nest-idempotency:' || ${literal(`${schema}.${table}`)}))`;
      await this.query('ensureSchema', [lock, ...createTableSql(this.tableName)].join(';\n'), []);
    }
    const columns = await this.query<ColumnRow>('schema check', COLUMNS_QUERY, [schema, table]);
    const primaryKey = await this.query<{ column_name: string }>(
      'schema check',
      PRIMARY_KEY_QUERY,
      [schema, table],
    );
    assertTableShape(
      this.tableName,
      columns,
      primaryKey.map((r) => r.column_name),
    );
    const pool = poolOf(this.dataSource)!;
    this.listener = new PgNotificationListener(
      pool,
      this.channel,
      this.waiters,
      this.logger,
      this.timeoutMs,
    );
  }

  private async query<T = unknown>(
    operation: string,
    sql: string,
    params: unknown[],
  ): Promise<T[]> {
    const name = this.preparedNames.get(sql);
    try {
      return name
        ? await preparedQuery<T>(this.dataSource, this.timeoutMs, operation, name, sql, params)
        : await boundedQuery<T>(this.dataSource, this.timeoutMs, operation, sql, params);
    } catch (error) {
      if (error instanceof IdempotencyStoreUnavailableError) throw error;
      if (isUnavailable(error)) {
        throw new IdempotencyStoreUnavailableError(
          `PostgreSQL is unavailable during ${operation}: ${(error as Error).message}`,
          1000,
          { cause: error },
        );
      }
      throw error;
    }
  }
}

function toView(row: ViewRow): IdempotencyRecordView {
  return {
    scope: row.scope,
    key: row.key,
    state: row.state,
    leaseExpiresAt: row.lease_expires_at,
    leaseExpired: row.lease_expired,
    expiresAt: row.expires_at,
    createdAt: row.created_at,
    completedAt: row.completed_at,
    fingerprint: row.fingerprint,
    ...(row.state === 'COMPLETE' ? { payload: decodePayload(row.payload) } : {}),
  };
}

function literal(text: string): string {
  return `'${text.replace(/'/g, "''")}'`;
}
