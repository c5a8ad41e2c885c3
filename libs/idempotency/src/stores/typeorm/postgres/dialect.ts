import { fingerprintsConflict } from '../../../core/decide';
import { IdempotencyStoreUnavailableError } from '../../../core/errors';
import type {
  AcquireRequest,
  IdempotencyRecordView,
  ListFilter,
  RecordState,
  StoredPayload,
} from '../../../core/store';
import type {
  AcquireAttempt,
  Dialect,
  DialectContext,
  LookResult,
  RecordRef,
  SqlLease,
} from '../dialect';
import { channelFor, DEFAULT_TABLE, TableName } from '../table';
import { PgNotificationListener } from './listener';
import { poolOf } from './pool';
import { preparedName, storeQuery } from './query';
import { assertTableShape, ColumnRow, COLUMNS_QUERY, PRIMARY_KEY_QUERY, schemaSql } from './schema';
import { buildStatements, HOT_STATEMENTS, Statements } from './statements';
import { isUnavailable } from './unavailable';

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
 * PostgreSQL through the `pg` pool under the DataSource: one statement per
 * operation (./statements.ts), named prepared statements on the hot path,
 * and LISTEN/NOTIFY (./listener.ts) to wake duplicates on every instance.
 */
export class PostgresDialect implements Dialect {
  readonly product = 'PostgreSQL';
  readonly tableName: TableName;
  private readonly sql: Statements;
  /** Statement text → the name it is prepared under; empty when `preparedStatements` is off. */
  private readonly preparedNames = new Map<string, string>();
  private readonly channel: string;
  private listener?: PgNotificationListener;

  constructor(private readonly context: DialectContext) {
    this.tableName = { schema: context.schema ?? DEFAULT_TABLE.schema, table: context.table };
    this.sql = buildStatements(this.tableName);
    if (context.preparedStatements) {
      for (const operation of HOT_STATEMENTS)
        this.preparedNames.set(this.sql[operation], preparedName(operation, this.sql[operation]));
    }
    this.channel = channelFor(this.tableName);
  }

  async prepare(ensureSchema: boolean): Promise<void> {
    const { schema, table } = this.tableName;
    if (ensureSchema) {
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
    const pool = poolOf(this.context.dataSource)!;
    this.listener = new PgNotificationListener(
      pool,
      this.channel,
      this.context.waiters,
      this.context.logger,
      this.context.timeoutMs,
    );
  }

  async close(): Promise<void> {
    const listener = this.listener;
    this.listener = undefined;
    await listener?.close();
  }

  // Without a LISTEN connection a wake-up can be missed: look again sooner.
  pollMs(): number {
    const { pollIntervalMs } = this.context;
    return this.listener?.listening ? pollIntervalMs : Math.min(pollIntervalMs, 100);
  }

  async beginAcquire(
    record: RecordRef,
    request: AcquireRequest,
    leaseId: string,
  ): Promise<AcquireAttempt> {
    if (request.waitTimeoutMs > 0) await this.listener?.ensure();
    const { id, idHex, scope, key, digest } = record;
    const logged = [idHex, scope, digest];
    return {
      end: () => undefined,
      look: async (watch): Promise<LookResult> => {
        const [row] = await this.query<AcquireRow>(
          'acquire',
          this.sql.acquire,
          [id, scope, key, leaseId, request.leaseMs, request.ttlMs, request.fingerprint, watch],
          [...logged, leaseId, request.leaseMs, request.ttlMs, request.fingerprint, watch],
        );
        if (row?.outcome === 'acquired') return { kind: 'acquired' };
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
    };
  }

  async complete(lease: SqlLease, payload: StoredPayload): Promise<boolean> {
    const { id, idHex, leaseId, ttlMs } = lease;
    const rows = await this.query(
      'complete',
      this.sql.complete,
      [id, leaseId, payload, ttlMs, this.channel, idHex],
      [idHex, leaseId, `<${payload.length} bytes>`, ttlMs, this.channel, idHex],
    );
    return rows.length > 0;
  }

  async release(lease: SqlLease): Promise<boolean> {
    const { id, idHex, leaseId } = lease;
    const rows = await this.query(
      'release',
      this.sql.release,
      [id, leaseId, this.channel, idHex],
      [idHex, leaseId, this.channel, idHex],
    );
    return rows.length > 0;
  }

  async extend(lease: SqlLease): Promise<boolean> {
    const { id, idHex, leaseId, leaseMs } = lease;
    const rows = await this.query(
      'extend',
      this.sql.extend,
      [id, leaseId, leaseMs],
      [idHex, leaseId, leaseMs],
    );
    return rows.length > 0;
  }

  async purge(limit: number): Promise<number> {
    const [row] = await this.query<{ purged: number }>(
      'purge',
      this.sql.purgeBatch,
      [limit],
      [limit],
    );
    return row.purged;
  }

  async countExpired(limit: number | null): Promise<number> {
    const [row] = await this.query<{ expired: number }>(
      'count expired',
      this.sql.countExpired,
      [limit],
      [limit],
    );
    return row.expired;
  }

  async find(record: RecordRef): Promise<IdempotencyRecordView | null> {
    const rows = await this.query<ViewRow>('find', this.sql.find, [record.id], [record.idHex]);
    return rows.length > 0 ? toView(rows[0]) : null;
  }

  async list(filter: ListFilter): Promise<IdempotencyRecordView[]> {
    const params = [filter.scope ?? null, filter.state ?? null, filter.limit ?? 100];
    const rows = await this.query<ViewRow>('list', this.sql.list, params, params);
    return rows.map(toView);
  }

  private async query<T = unknown>(
    operation: string,
    text: string,
    values: unknown[],
    logged: unknown[],
  ): Promise<T[]> {
    try {
      return await storeQuery<T>(this.context.dataSource, this.context.timeoutMs, {
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
