import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import {
  IdempotencyLeaseLostError,
  IdempotencyStoreSchemaError,
  IdempotencyStoreUnavailableError,
} from '../../core/errors';
import { fingerprintsConflict } from '../../core/decide';
import { storedKeyDigest } from '../../core/key';
import { IdempotencyLogger } from '../../core/logger';
import { assertPayloadSize, DEFAULT_MAX_PAYLOAD_BYTES } from '../../core/payload';
import {
  AcquireRequest,
  AcquireResult,
  DEFAULT_MAX_WAITERS,
  DEFAULT_PURGE_BATCH,
  IdempotencyRecordView,
  IdempotencyStore,
  Lease,
  ListFilter,
  RecordId,
  RecordState,
  StoredPayload,
} from '../../core/store';
import { Observation, waitForRecord } from '../../core/wait-loop';
import { WaiterRegistry } from '../../core/waiters';
import { PgNotificationListener } from './postgres/listener';
import { poolOf } from './postgres/pool';
import { preparedName, storeQuery } from './postgres/query';
import {
  assertTableShape,
  ColumnRow,
  COLUMNS_QUERY,
  PRIMARY_KEY_QUERY,
  schemaSql,
} from './postgres/schema';
import { buildStatements, HOT_STATEMENTS, Statements } from './postgres/statements';
import { isUnavailable } from './postgres/unavailable';
import { channelFor, DEFAULT_TABLE, recordIdOf, TableName } from './table';

export interface TypeOrmIdempotencyStoreOptions {
  /** Schema of the records table. Default `public`. */
  schema?: string;
  /** Name of the records table. Default `idempotency_records`. */
  table?: string;
  /** Create (or upgrade) the table at `init()`. For development; use the migrations in production. */
  ensureSchema?: boolean;
  /** Largest stored result the store accepts, in bytes. Default 1 MiB. */
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

/** The lease a PostgreSQL store hands out: the record id, hashed once at acquisition. */
interface PgLease extends Lease {
  readonly id: Buffer;
  readonly idHex: string;
}

interface AcquireRow {
  outcome: 'acquired' | 'existing';
  state: RecordState | null;
  fingerprint: string | null;
  payload: Buffer | null;
  completed_at: Date | null;
  lease_left_ms: number | null;
  expires_left_ms: number | null;
  stealable: boolean;
  watched: boolean;
  marked: boolean;
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
  payload: Buffer | null;
  lease_expired: boolean;
}

/**
 * PostgreSQL store through a TypeORM `DataSource` (its `pg` pool). See
 * docs/storage.md for the table, the migrations and the round trips each call costs.
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

  onWait(listener: (scope: string) => void): () => void {
    return this.waiters.onWait(listener);
  }

  async tryAcquire(request: AcquireRequest): Promise<AcquireResult> {
    await this.init();
    const id = recordIdOf(request.scope, request.key);
    const idHex = id.toString('hex');
    const leaseId = randomUUID();
    if (request.waitTimeoutMs > 0) await this.listener?.ensure();
    const lease: PgLease = { id, idHex, leaseId, leaseMs: request.leaseMs, ttlMs: request.ttlMs };
    const logged = [idHex, request.scope, storedKeyDigest(request.scope, request.key)];
    return waitForRecord({
      request,
      waiters: this.waiters,
      waiterId: idHex,
      maxWaiters: this.maxWaiters,
      // Without a LISTEN connection a wake-up can be missed: look again sooner.
      pollMs: () =>
        this.listener?.listening ? this.pollIntervalMs : Math.min(this.pollIntervalMs, 100),
      look: async (watch): Promise<Observation> => {
        const [row] = await this.query<AcquireRow>(
          'acquire',
          this.sql.acquire,
          [
            id,
            request.scope,
            request.key,
            leaseId,
            request.leaseMs,
            request.ttlMs,
            request.fingerprint,
            watch,
          ],
          [...logged, leaseId, request.leaseMs, request.ttlMs, request.fingerprint, watch],
        );
        if (row?.outcome === 'acquired') return { kind: 'acquired', lease };
        // No row, or a row that changed under the statement: look again now.
        if (!row || row.stealable) return { kind: 'changed' };
        // Asked to mark a live record watched, and it is not: it changed under the
        // statement (unless the fingerprints differ: then nobody marks, and the caller is refused).
        if (
          watch &&
          row.state === 'IN_PROGRESS' &&
          !row.watched &&
          !row.marked &&
          !fingerprintsConflict(request.fingerprint, row.fingerprint)
        ) {
          return { kind: 'changed' };
        }
        return {
          kind: 'record',
          record: {
            state: row.state!,
            fingerprint: row.fingerprint,
            leaseLeftMs: row.lease_left_ms ?? 0,
            expiresLeftMs: row.expires_left_ms ?? 0,
            payload: row.payload,
            completedAt: row.completed_at,
          },
        };
      },
    });
  }

  async complete(lease: Lease, payload: StoredPayload): Promise<void> {
    assertPayloadSize(payload, this.maxPayloadBytes);
    await this.init();
    const { id, idHex, leaseId, ttlMs } = lease as PgLease;
    const rows = await this.query(
      'complete',
      this.sql.complete,
      [id, leaseId, payload, ttlMs, this.channel, idHex],
      [idHex, leaseId, `<${payload.length} bytes>`, ttlMs, this.channel, idHex],
    );
    if (rows.length === 0) {
      throw new IdempotencyLeaseLostError(
        'complete refused: the record is no longer held under this lease',
      );
    }
  }

  async release(lease: Lease): Promise<void> {
    await this.init();
    const { id, idHex, leaseId } = lease as PgLease;
    const rows = await this.query(
      'release',
      this.sql.release,
      [id, leaseId, this.channel, idHex],
      [idHex, leaseId, this.channel, idHex],
    );
    if (rows.length === 0) {
      throw new IdempotencyLeaseLostError(
        'release refused: the record is no longer held under this lease',
      );
    }
  }

  async extend(lease: Lease): Promise<boolean> {
    await this.init();
    const { id, idHex, leaseId, leaseMs } = lease as PgLease;
    const rows = await this.query(
      'extend',
      this.sql.extend,
      [id, leaseId, leaseMs],
      [idHex, leaseId, leaseMs],
    );
    return rows.length > 0;
  }

  async purgeExpired(options: { limit?: number } = {}): Promise<number> {
    await this.init();
    const limit = options.limit ?? DEFAULT_PURGE_BATCH;
    const [row] = await this.query<{ purged: number }>(
      'purge',
      this.sql.purgeBatch,
      [limit],
      [limit],
    );
    return row.purged;
  }

  /**
   * How many records `purgeExpired` would delete now (at most `limit`), by the
   * same rule, without deleting or locking anything: a purge's dry run.
   */
  async countExpired(options: { limit?: number } = {}): Promise<number> {
    await this.init();
    const limit = options.limit ?? null;
    const [row] = await this.query<{ expired: number }>(
      'count expired',
      this.sql.countExpired,
      [limit],
      [limit],
    );
    return row.expired;
  }

  async find(id: RecordId): Promise<IdempotencyRecordView | null> {
    await this.init();
    const rid = recordIdOf(id.scope, id.key);
    const rows = await this.query<ViewRow>('find', this.sql.find, [rid], [rid.toString('hex')]);
    return rows.length > 0 ? toView(rows[0]) : null;
  }

  async list(filter: ListFilter = {}): Promise<IdempotencyRecordView[]> {
    await this.init();
    const params = [filter.scope ?? null, filter.state ?? null, filter.limit ?? 100];
    const rows = await this.query<ViewRow>('list', this.sql.list, params, params);
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
      const ddl = [lock, ...schemaSql(this.tableName)].join(';\n');
      await this.query('ensureSchema', ddl, [], []);
    }
    const columns = await this.query<ColumnRow>(
      'schema check',
      COLUMNS_QUERY,
      [schema, table],
      [schema, table],
    );
    const primaryKey = await this.query<{ column_name: string }>(
      'schema check',
      PRIMARY_KEY_QUERY,
      [schema, table],
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
    text: string,
    values: unknown[],
    logged: unknown[],
  ): Promise<T[]> {
    try {
      return await storeQuery<T>(this.dataSource, this.timeoutMs, {
        operation,
        text,
        values,
        logged,
        name: this.preparedNames.get(text),
      });
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
  const view: IdempotencyRecordView = {
    scope: row.scope,
    key: row.key,
    state: row.state,
    leaseExpiresAt: row.lease_expires_at,
    leaseExpired: row.lease_expired,
    expiresAt: row.expires_at,
    createdAt: row.created_at,
    completedAt: row.completed_at,
    fingerprint: row.fingerprint,
  };
  if (row.state === 'COMPLETE' && row.payload) view.payload = row.payload;
  return view;
}

function literal(text: string): string {
  return `'${text.replace(/'/g, "''")}'`;
}
