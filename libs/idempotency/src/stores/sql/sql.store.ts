import { randomUUID } from 'node:crypto';
import {
  IdempotencyLeaseLostError,
  IdempotencyPayloadError,
  IdempotencyStoreSchemaError,
} from '../../core/errors';
import { PROBE_BYTES, PROBE_SCOPE, PROBE_TTL_MS, probeMismatch } from '../../core/byte-probe';
import { storedKeyDigest } from '../../core/key';
import { IdempotencyLogger } from '../../core/logger';
import { assertPayloadSize, DEFAULT_MAX_PAYLOAD_BYTES } from '../../core/payload';
import {
  checkAcquireRequest,
  checkLease,
  checkListFilter,
  checkPayload,
  checkPurgeOptions,
  checkRecordId,
  checkResolution,
  checkResumeRequest,
  checkStepName,
  checkSuspension,
} from '../../core/store-input';
import {
  AcquireRequest,
  AcquireResult,
  AmbiguityReason,
  ContinuationSupport,
  DEFAULT_MAX_WAITERS,
  DEFAULT_PURGE_BATCH,
  IdempotencyRecordView,
  IdempotencyStore,
  Lease,
  ListFilter,
  RecordId,
  Resolution,
  ResolveResult,
  StoredPayload,
  StepSupport,
  StrictModeSupport,
} from '../../core/store';
import type { ReceiptSupport } from '../../core/receipts';
import { checkReceipt } from '../../core/receipt-input';
import { waitForRecord } from '../../core/wait-loop';
import { WaiterRegistry } from '../../core/waiters';
import type { Dialect, DialectContext, RecordRef, SqlLease, SqlTransaction } from './dialect';
import { DEFAULT_TABLE, recordIdHexOf, TableName } from './table';

/** What every SQL store takes, whatever its connection. */
export interface SqlStoreOptions {
  /**
   * Schema of the records table. Default `public`. On MySQL and MariaDB, the
   * database of the table; default the connection's database.
   */
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
   * before 1.21, or without `max_prepared_statements`; on MySQL, ProxySQL
   * without prepared-statement support).
   */
  preparedStatements?: boolean;
  /**
   * Prove at `init()` that a payload comes back byte for byte (0x00, 0xff,
   * invalid UTF-8), with a short-lived record of its own, deleted afterwards.
   * Default true. Off, `init()` writes nothing: for read-only tools (the CLI's
   * reads) and read-only logins.
   */
  byteProbe?: boolean;
  logger?: IdempotencyLogger;
}

/** What a MySQL or MariaDB store takes besides. */
export interface CrossInstancePollOption {
  /**
   * MySQL and MariaDB only (they have no LISTEN/NOTIFY): the longest gap
   * between two checks, in one statement for all of this instance's waiting
   * duplicates, of whether the records they wait on were completed or released
   * by another instance. A record is first checked 4 ms after a duplicate
   * starts waiting on it, then at doubling gaps up to this. Default 32 ms.
   */
  crossInstancePollMs?: number;
}

export abstract class SqlIdempotencyStore implements IdempotencyStore {
  protected readonly dialect: Dialect;
  private readonly waiters = new WaiterRegistry();
  private readonly maxPayloadBytes: number;
  private readonly maxWaiters: number;
  private ready?: Promise<void>;
  /** `ready` has resolved (and close() has not run since). */
  private prepared = false;

  /**
   * `storeName`: the front's class, as errors name it; `migrations`: how its
   * users run the migrations; `dialect`: built on the front's connection.
   */
  protected constructor(
    private readonly storeName: string,
    migrations: string,
    private readonly options: SqlStoreOptions,
    dialect: (context: DialectContext) => Dialect,
  ) {
    this.maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
    this.maxWaiters = options.maxWaiters ?? DEFAULT_MAX_WAITERS;
    this.dialect = dialect({
      storeName,
      migrations,
      schema: options.schema,
      table: options.table ?? DEFAULT_TABLE.table,
      timeoutMs: options.operationTimeoutMs ?? 5000,
      pollIntervalMs: options.pollIntervalMs ?? 1000,
      preparedStatements: options.preparedStatements ?? true,
      maxPayloadBytes: this.maxPayloadBytes,
      logger: options.logger ?? {
        warn: (m: string) => console.warn(`[nest-idempotency] ${m}`),
        error: (m: string) => console.error(`[nest-idempotency] ${m}`),
      },
      waiters: this.waiters,
    });
  }

  /** The records table (on MySQL, `schema` is its database, known for certain once `init()` ran). */
  get tableName(): TableName {
    return this.dialect.tableName;
  }

  /**
   * Checks (or with `ensureSchema`, creates) the table and starts listening.
   * Runs once; every other call awaits it, so calling it yourself is optional
   * but surfaces a wrong schema at startup rather than on the first request.
   */
  init(): Promise<void> {
    if (this.ready) return this.ready;
    const ready: Promise<void> = this.prepare().then(
      () => {
        // Unless close() (or a failure) let go of this preparation meanwhile.
        this.prepared = this.ready === ready;
      },
      (error) => {
        if (this.ready === ready) this.ready = undefined;
        throw error;
      },
    );
    this.ready = ready;
    return ready;
  }

  /** Closes the LISTEN connection (or stops polling) and wakes waiters. A later call prepares the store again. */
  async close(): Promise<void> {
    this.ready = undefined;
    this.prepared = false;
    await this.dialect.close();
    this.waiters.notifyAll();
  }

  onWait(listener: (scope: string) => void): () => void {
    return this.waiters.onWait(listener);
  }

  /**
   * `SELECT 1` through the same pool and the same bound as every other call
   * (waiting for a pooled connection included): `IdempotencyStoreUnavailableError`
   * after `operationTimeoutMs`, or when the database cannot be reached. It
   * needs no `init()`, so a health check tells an unreachable database apart
   * from a missing table.
   */
  ping(): Promise<void> {
    return this.dialect.ping();
  }

  tryAcquire(given: AcquireRequest): Promise<AcquireResult> {
    let request: AcquireRequest;
    try {
      request = checkAcquireRequest(given);
    } catch (error) {
      return Promise.reject(error as Error);
    }
    // Prepared: straight on, without a turn of the event loop for init().
    return this.prepared ? this.acquire(request) : this.init().then(() => this.acquire(request));
  }

  private async acquire(request: AcquireRequest): Promise<AcquireResult> {
    const record = recordRef(request.scope, request.key);
    const lease: SqlLease = {
      id: record.id,
      idHex: record.idHex,
      leaseId: randomUUID(),
      leaseMs: request.leaseMs,
      ttlMs: request.ttlMs,
    };
    const begun = this.dialect.beginAcquire(record, request, lease);
    const attempt = begun instanceof Promise ? await begun : begun;
    try {
      return await waitForRecord({
        request,
        waiters: this.waiters,
        waiterId: record.idHex,
        maxWaiters: this.maxWaiters,
        pollMs: () => this.dialect.pollMs(),
        look: attempt.look,
      });
    } finally {
      attempt.end();
    }
  }

  async complete(lease: Lease, payload: StoredPayload): Promise<void> {
    checkLease(lease, 'complete');
    checkPayload(payload, 'complete');
    assertPayloadSize(payload, this.maxPayloadBytes);
    await this.init();
    if (!issued(lease) || !(await this.dialect.complete(lease as SqlLease, payload))) {
      throw new IdempotencyLeaseLostError(
        'complete refused: the record is no longer held under this lease',
      );
    }
  }

  /**
   * The front's `completeIn`: the fenced completion as a statement of the
   * caller's open transaction, which `statement` runs.
   */
  protected async completeInTransaction(
    statement: SqlTransaction,
    lease: Lease,
    payload: StoredPayload,
  ): Promise<'stored' | 'lease-lost'> {
    checkLease(lease, 'completeIn');
    checkPayload(payload, 'completeIn');
    assertPayloadSize(payload, this.maxPayloadBytes);
    await this.init();
    if (!issued(lease)) return 'lease-lost';
    const stored = await this.dialect.completeIn(statement, lease as SqlLease, payload);
    return stored ? 'stored' : 'lease-lost';
  }

  /** The front's `afterCommit`: wakes this instance's waiters on the record. */
  protected afterCommitted(lease: Lease): void {
    this.dialect.afterCommit(lease as SqlLease);
  }

  /**
   * Strict mode (`onExpiredLease: 'refuse'`): AMBIGUOUS records, kept in the
   * table until resolved (never purged, never taken over), on the database's clock.
   */
  readonly strictMode: StrictModeSupport = {
    markAmbiguous: (lease, reason) => this.markAmbiguous(lease, reason),
    resolve: (id, resolution) => this.resolve(id, resolution),
  };

  /**
   * Receipts: two tables beside the records table (`<table>_receipts` and the
   * chains' heads), which the store needs only once receipts are on: `check()`
   * (called at bootstrap) creates them with `ensureSchema`, or names the
   * migration when they are missing.
   */
  readonly receipts: ReceiptSupport = {
    check: async () => {
      await this.init();
      await this.dialect.receipts.check(this.options.ensureSchema ?? false);
    },
    append: async (receipt) => {
      checkReceipt(receipt, 'receipts.append');
      if (!this.prepared) await this.init();
      return this.dialect.receipts.append(receipt);
    },
    read: async (chain, offset, limit) => {
      if (!this.prepared) await this.init();
      return this.dialect.receipts.read(chain, offset, limit);
    },
    head: async (chain) => {
      if (!this.prepared) await this.init();
      return this.dialect.receipts.head(chain);
    },
  };

  /** Recorded steps: a jsonb/JSON column of the record, written fenced by the lease. */
  readonly steps: StepSupport = {
    begin: async (lease, name) => {
      checkLease(lease, 'steps.begin');
      checkStepName(name, 'steps.begin');
      await this.init();
      const value = issued(lease)
        ? await this.dialect.stepBegin(lease as SqlLease, name)
        : undefined;
      if (value === undefined) throw leaseLost('steps.begin');
      return value;
    },
    record: async (lease, name, value) => {
      checkLease(lease, 'steps.record');
      checkStepName(name, 'steps.record');
      checkPayload(value, 'steps.record');
      assertPayloadSize(value, this.maxPayloadBytes);
      await this.init();
      if (!issued(lease) || !(await this.dialect.stepRecord(lease as SqlLease, name, value))) {
        throw leaseLost('steps.record');
      }
    },
    list: async (id) => {
      checkRecordId(id, 'steps.list');
      await this.init();
      return this.dialect.stepList(recordRef(id.scope, id.key));
    },
  };

  /**
   * Continuations: the suspension in three columns of the record (continuation,
   * answer, state), its hold the record's lease under a lease id nobody holds.
   */
  readonly continuations: ContinuationSupport = {
    suspend: async (lease, suspension) => {
      checkLease(lease, 'continuations.suspend');
      checkSuspension(suspension);
      // Answer and state are kept together: together they count against the limit.
      const size = suspension.answer.length + suspension.state.length;
      if (size > this.maxPayloadBytes) {
        throw new IdempotencyPayloadError(
          `the suspension's answer and state are ${size} bytes stored; the store accepts at most ${this.maxPayloadBytes}`,
        );
      }
      await this.init();
      if (
        !issued(lease) ||
        !(await this.dialect.suspend(lease as SqlLease, randomUUID(), suspension))
      ) {
        throw leaseLost('continuations.suspend');
      }
    },
    resume: async (request) => {
      checkResumeRequest(request);
      await this.init();
      const lease: SqlLease = {
        id: Buffer.from(request.locator, 'hex'),
        idHex: request.locator,
        leaseId: randomUUID(),
        leaseMs: request.leaseMs,
        ttlMs: request.ttlMs,
      };
      return this.dialect.resume(request, lease);
    },
  };

  private async markAmbiguous(lease: Lease, reason: AmbiguityReason): Promise<void> {
    checkLease(lease, 'markAmbiguous');
    await this.init();
    if (!issued(lease) || !(await this.dialect.markAmbiguous(lease as SqlLease, reason))) {
      throw new IdempotencyLeaseLostError(
        'markAmbiguous refused: the record is no longer held under this lease',
      );
    }
  }

  private async resolve(id: RecordId, resolution: Resolution): Promise<ResolveResult> {
    checkResolution(id, resolution);
    if (resolution.outcome === 'completed') {
      assertPayloadSize(resolution.payload, this.maxPayloadBytes);
    }
    await this.init();
    return this.dialect.resolve(recordRef(id.scope, id.key), resolution);
  }

  async release(lease: Lease): Promise<void> {
    checkLease(lease, 'release');
    await this.init();
    if (!issued(lease) || !(await this.dialect.release(lease as SqlLease))) {
      throw new IdempotencyLeaseLostError(
        'release refused: the record is no longer held under this lease',
      );
    }
  }

  async extend(lease: Lease): Promise<boolean> {
    checkLease(lease, 'extend');
    await this.init();
    return issued(lease) && this.dialect.extend(lease as SqlLease);
  }

  async purgeExpired(options: { limit?: number } = {}): Promise<number> {
    checkPurgeOptions(options);
    await this.init();
    return this.dialect.purge(options.limit ?? DEFAULT_PURGE_BATCH);
  }

  /**
   * How many records `purgeExpired` would delete now (at most `limit`), by the
   * same rule, without deleting or locking anything: a purge's dry run.
   */
  async countExpired(options: { limit?: number } = {}): Promise<number> {
    checkPurgeOptions(options, 'countExpired');
    await this.init();
    return this.dialect.countExpired(options.limit ?? null);
  }

  async find(id: RecordId): Promise<IdempotencyRecordView | null> {
    checkRecordId(id, 'find');
    await this.init();
    return this.dialect.find(recordRef(id.scope, id.key));
  }

  async list(filter: ListFilter = {}): Promise<IdempotencyRecordView[]> {
    checkListFilter(filter);
    await this.init();
    return this.dialect.list(filter);
  }

  /** Throws when the front's connection cannot be used yet (a DataSource not initialized). */
  protected abstract assertUsable(): void;

  private async prepare(): Promise<void> {
    this.assertUsable();
    await this.dialect.prepare(this.options.ensureSchema ?? false);
    if (this.options.byteProbe ?? true) await this.proveBytes();
  }

  /**
   * Writes `PROBE_BYTES` as a record of its own (acquired and completed as any
   * other, its lease and TTL on the database's clock) and reads it back as a
   * replay and as `find` would, then deletes it: a payload column, driver or
   * connection setting that does not keep bytes as they are fails the start,
   * not every replay later. A probe record left behind (the process died
   * meanwhile) expires within a minute and is purged as any other.
   */
  private async proveBytes(): Promise<void> {
    const record = recordRef(PROBE_SCOPE, randomUUID());
    const request: AcquireRequest = {
      scope: record.scope,
      key: record.key,
      leaseMs: PROBE_TTL_MS,
      ttlMs: PROBE_TTL_MS,
      waitTimeoutMs: 0,
      fingerprint: null,
    };
    const lease: SqlLease = {
      id: record.id,
      idHex: record.idHex,
      leaseId: randomUUID(),
      leaseMs: PROBE_TTL_MS,
      ttlMs: PROBE_TTL_MS,
    };
    const look = async () => {
      const attempt = await this.dialect.beginAcquire(record, request, lease);
      try {
        return await attempt.look(false);
      } finally {
        attempt.end();
      }
    };
    let failed = true;
    try {
      const acquired = await look();
      if (acquired.kind !== 'acquired' || !(await this.dialect.complete(lease, PROBE_BYTES))) {
        throw new IdempotencyStoreSchemaError(
          `${this.storeName}: the byte probe at init() could not write its own record in ${this.dialect.product}`,
        );
      }
      const replayed = await look();
      const found = await this.dialect.find(record);
      const mismatch =
        probeMismatch(replayed.kind === 'record' ? replayed.record.payload : null) ??
        probeMismatch(found?.payload);
      if (mismatch) {
        throw new IdempotencyStoreSchemaError(
          `${this.storeName}: ${this.dialect.product} does not hand stored bytes back unchanged: ${mismatch}. Check the payload column's type (bytea on PostgreSQL, LONGBLOB on MySQL and MariaDB) and the driver's settings`,
        );
      }
      failed = false;
    } finally {
      // Whatever happened: the probe leaves no record (a failure to delete it
      // matters only when nothing failed before).
      await this.dialect.forget(record).catch((error: unknown) => {
        if (!failed) throw error;
      });
    }
  }
}

/** The record's id, hashed once per call; the digest logs show, only if something is logged. */
class Ref implements RecordRef {
  readonly id: Buffer;
  readonly idHex: string;
  private shown?: string;

  constructor(
    readonly scope: string,
    readonly key: string,
  ) {
    this.idHex = recordIdHexOf(scope, key);
    this.id = Buffer.from(this.idHex, 'hex');
  }

  get digest(): string {
    return (this.shown ??= storedKeyDigest(this.scope, this.key));
  }
}

function recordRef(scope: string, key: string): RecordRef {
  return new Ref(scope, key);
}

function leaseLost(operation: string): IdempotencyLeaseLostError {
  return new IdempotencyLeaseLostError(
    `${operation} refused: the record is no longer held under this lease`,
  );
}

/** How this store writes lease ids (randomUUID): PostgreSQL's uuid column takes no other text. */
const LEASE_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Whether this store could have handed out `lease`: one whose id is not a
 * UUID holds no record here, so it is refused as lost (never sent, where
 * the database would answer with a type error instead).
 */
function issued(lease: Lease): boolean {
  return LEASE_ID.test(lease.leaseId);
}
