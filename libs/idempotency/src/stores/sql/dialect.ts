import type { IdempotencyLogger } from '../../core/logger';
import type {
  RecordedStep,
  AcquireRequest,
  AmbiguityReason,
  IdempotencyRecordView,
  Lease,
  ListFilter,
  Resolution,
  ResolveResult,
  ResumeRequest,
  ResumeResult,
  StoredPayload,
  Suspension,
} from '../../core/store';
import type { Observation } from '../../core/wait-loop';
import type { WaiterRegistry } from '../../core/waiters';
import type { DialectReceipts } from './receipt-tables';
import type { TableName } from './table';

/**
 * What the SQL stores ask of a database: one implementation per SQL dialect
 * (./postgres/dialect.ts, ./mysql/dialect.ts), each holding its own
 * statements, schema, query path, error mapping and wake-up mechanism, on a
 * driver pool (the application's own, or the one under a TypeORM DataSource).
 * The store (./sql.store.ts) keeps what every dialect shares: hashing the
 * record id, handing out leases, the wait loop, payload limits and the
 * lease-lost errors.
 */
export interface Dialect {
  /** The product, for messages ("PostgreSQL", "MariaDB", "MySQL"). */
  readonly product: string;
  /** The table, as resolved so far (a MySQL database name may be known only after `prepare`). */
  readonly tableName: TableName;
  /**
   * Checks (and with `ensureSchema` first creates) the table and sets up
   * whatever wakes waiting duplicates. Throws `IdempotencyStoreSchemaError`
   * for a missing or misshapen table.
   */
  prepare(ensureSchema: boolean): Promise<void>;
  /** Stops waking and releases what `prepare` opened; waiters are woken to look once more. */
  close(): Promise<void>;
  /** One trivial statement through the store's query path, bounded like every other. */
  ping(): Promise<void>;
  /**
   * Starts one `tryAcquire`: the looks of the wait loop, and its end. A look
   * that acquires hands back `lease` (made by the store beforehand, so that the
   * look's own answer is the wait loop's). Synchronous when nothing needs
   * awaiting first (a replay's hot path saves a promise).
   */
  beginAcquire(
    record: RecordRef,
    request: AcquireRequest,
    lease: SqlLease,
  ): AcquireAttempt | Promise<AcquireAttempt>;
  /** The longest a waiting duplicate sleeps before looking again without a wake-up. */
  pollMs(): number;
  /** Each: false when the record is not IN_PROGRESS under `lease.leaseId`. */
  complete(lease: SqlLease, payload: StoredPayload): Promise<boolean>;
  release(lease: SqlLease): Promise<boolean>;
  /**
   * `completion: 'transaction'`: the fenced completion as a statement of the
   * caller's open transaction on `runner` (false when not IN_PROGRESS under
   * the lease). A waiter elsewhere wakes when that transaction commits.
   */
  completeIn(tx: SqlTransaction, lease: SqlLease, payload: StoredPayload): Promise<boolean>;
  /** After the transaction that ran `completeIn` committed: wakes this instance's waiters. */
  afterCommit(lease: SqlLease): void;
  extend(lease: SqlLease): Promise<boolean>;
  /**
   * Strict mode: IN_PROGRESS under the lease → AMBIGUOUS (false when not held),
   * waking the record's waiters so that they see it.
   */
  markAmbiguous(lease: SqlLease, reason: AmbiguityReason): Promise<boolean>;
  /** Strict mode: ends an AMBIGUOUS record, atomically; anything else is left alone. Wakes waiters. */
  resolve(record: RecordRef, resolution: Resolution): Promise<ResolveResult>;
  /** Recorded steps: the step's value (begun: null, after marking it), or undefined when not held. */
  stepBegin(lease: SqlLease, name: string): Promise<StoredPayload | null | undefined>;
  /** False when not held. */
  stepRecord(lease: SqlLease, name: string, value: StoredPayload): Promise<boolean>;
  /** The steps of a record that is not COMPLETE, sorted by name. */
  stepList(record: RecordRef): Promise<RecordedStep[]>;
  /**
   * Continuations: IN_PROGRESS under `lease` → suspended, under `holdLeaseId`
   * (which nobody holds) for the hold (false when not held). Wakes waiters.
   */
  suspend(lease: SqlLease, holdLeaseId: string, suspension: Suspension): Promise<boolean>;
  /**
   * Continuations: admits the resumption (the record at `lease.id` then held
   * under `lease`), atomically, or says why not, changing nothing.
   */
  resume(request: ResumeRequest, lease: SqlLease): Promise<ResumeResult>;
  /** One bounded batch; how many rows it deleted. */
  purge(limit: number): Promise<number>;
  /** How many rows `purge` would delete now, at most `limit` (null: no bound), locking nothing. */
  countExpired(limit: number | null): Promise<number>;
  find(record: RecordRef): Promise<IdempotencyRecordView | null>;
  /** Deletes the record whatever its state (the byte probe's own record, at `init()`). */
  forget(record: RecordRef): Promise<void>;
  list(filter: ListFilter): Promise<IdempotencyRecordView[]>;
  /** Receipts: the dialect's statements for the receipts tables (see ./receipt-tables.ts). */
  readonly receipts: DialectReceipts;
}

/** A record's identity as the store computed it once: the hashed id, and what logs may show. */
export interface RecordRef {
  /** SHA-256 of (scope, key): the primary key. */
  readonly id: Buffer;
  readonly idHex: string;
  readonly scope: string;
  readonly key: string;
  /** `scope/#digest`: what a log shows instead of the key (and the tenant). Computed when first read. */
  readonly digest: string;
}

/** The lease every SQL dialect hands out: the record id, hashed once at acquisition. */
export interface SqlLease extends Lease {
  readonly id: Buffer;
  readonly idHex: string;
}

/**
 * What one atomic look found, as the wait loop takes it (../../core/wait-loop.ts):
 * acquired (with the attempt's lease; `stolen` from an expired lease or result),
 * a record, or `changed` (look again).
 */
export type LookResult = Observation;

/** One `tryAcquire` as a dialect runs it. */
export interface AcquireAttempt {
  /**
   * One look: insert, steal, or report what is there (a dialect may take more
   * than one statement, reporting `changed` when the record changed between
   * them). `watch`: the caller waits if it is in flight.
   */
  look(watch: boolean): Promise<LookResult>;
  /** The attempt is over, whatever its outcome. */
  end(): void;
}

/**
 * A statement inside the caller's open transaction (`completion:
 * 'transaction'`): the rows it returned and the rows it wrote. Each front
 * makes one from its own transaction handle (a TypeORM QueryRunner, a `pg`
 * client).
 */
export type SqlTransaction = (
  text: string,
  values: unknown[],
) => Promise<{ rows: unknown[]; affected: number }>;

/** What a dialect is built with: the store's resolved options (its connection comes apart). */
export interface DialectContext {
  /** The store's class, as its errors name it. */
  readonly storeName: string;
  /** How the front's users run the migrations, as errors name it (`createIdempotencyMigrations()`). */
  readonly migrations: string;
  /** As given: a dialect applies its own defaults (PostgreSQL `public`, MySQL the connection's database). */
  readonly schema: string | undefined;
  readonly table: string;
  readonly timeoutMs: number;
  readonly pollIntervalMs: number;
  readonly preparedStatements: boolean;
  readonly maxPayloadBytes: number;
  readonly logger: IdempotencyLogger;
  /** The store's waiters: a dialect wakes them (NOTIFY, or in process and by polling). */
  readonly waiters: WaiterRegistry;
}

/**
 * An AMBIGUOUS record as a look reports it, in every dialect: no lease, no
 * payload; `transitioned` when this very look moved it there.
 */
export function ambiguousLook(
  fingerprint: string | null,
  since: Date | null,
  reason: AmbiguityReason | null,
  transitioned: boolean,
): LookResult {
  return {
    kind: 'record',
    record: {
      state: 'AMBIGUOUS',
      fingerprint,
      leaseLeftMs: 0,
      expiresLeftMs: 0,
      payload: null,
      completedAt: null,
      ambiguousSince: since,
      ambiguousReason: reason,
      transitioned,
    },
  };
}

/**
 * Why a resumption was not admitted, from the record with its continuation
 * (none: `unknown`): still suspended but lapsed, `lapsed`; no longer suspended
 * but resumed (IN_PROGRESS) or completed, `consumed`; otherwise (AMBIGUOUS)
 * `unknown`. Still suspended and live: `retry`, the record was suspended only
 * after the admission looked.
 */
export function resumeRefusal(
  row: { state: string; suspended: boolean; lapsed: boolean } | undefined,
): Exclude<ResumeResult['kind'], 'admitted'> | 'retry' {
  if (!row) return 'unknown';
  if (row.suspended) {
    if (row.state !== 'IN_PROGRESS') return 'unknown';
    return row.lapsed ? 'lapsed' : 'retry';
  }
  return row.state === 'IN_PROGRESS' || row.state === 'COMPLETE' ? 'consumed' : 'unknown';
}

/**
 * The `steps` column as every dialect stores it (a JSON object: name → the
 * value in base64, or null while begun), read back sorted by name. MySQL
 * hands the JSON over as text, PostgreSQL parsed.
 */
export function stepsOfColumn(column: unknown): RecordedStep[] {
  if (column === null || column === undefined) return [];
  const entries = (typeof column === 'string' ? JSON.parse(column) : column) as Record<
    string,
    string | null
  >;
  return Object.keys(entries)
    .sort()
    .map((name) => {
      const value = entries[name];
      return { name, value: value === null ? null : Buffer.from(value, 'base64') };
    });
}
