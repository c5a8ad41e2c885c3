import { IdempotencyStoreSchemaError } from '../../../core/errors';
import type {
  AcquireRequest,
  AmbiguityReason,
  IdempotencyRecordView,
  ListFilter,
  RecordedStep,
  RecordState,
  Resolution,
  ResolveResult,
  ResumeRequest,
  ResumeResult,
  StoredPayload,
  Suspension,
} from '../../../core/store';
import type {
  AcquireAttempt,
  Dialect,
  DialectContext,
  LookResult,
  RecordRef,
  SqlLease,
  SqlTransaction,
} from '../dialect';
import { ambiguousLook, stepsOfColumn } from '../dialect';
import type { TableName } from '../table';
import { AcquireOrder } from '../acquire-order';
import { Deadlines } from '../bounded-query';
import { loggedScope } from '../query-log';
import { matchedRows, MysqlOk, MysqlPoolConnection, mysqlStoreQuery } from './query';
import {
  assertMysqlTableShape,
  MYSQL_COLUMNS_QUERY,
  MYSQL_ENGINE_QUERY,
  MYSQL_PRIMARY_KEY_QUERY,
  MysqlColumnRow,
  mysqlCreateDatabaseSql,
  mysqlContinuationsUpgrade,
  mysqlCurrentTableSql,
  mysqlStepsUpgrade,
  mysqlStrictModeUpgrade,
} from './schema';
import { MysqlContinuations } from './continuations';
import { bind, Statement } from './sql';
import { buildMysqlStatements, MysqlStatements } from './statements';
import { isLockConflict } from './unavailable';
import { WakePoller, WakeWatch } from './wake-poller';
import { MysqlReceipts } from './receipts';

/** Default for `crossInstancePollMs`: the longest gap between two checks of a waited-on record. */
export const DEFAULT_CROSS_INSTANCE_POLL_MS = 32;

/** The acquire statement's insert id: what it did. */
const INSERTED = 3;
const STOLEN = 2;

/** Numbers come back from mysql2 as numbers or, for BIGINT and DECIMAL, as strings. */
type Numeric = number | string | null;

/** What the peek reads. */
interface PeekRow {
  state: RecordState;
  fingerprint: string | null;
  lease_id: string | null;
  payload: Buffer | null;
  completed_at_us: Numeric;
  lease_left_us: Numeric;
  expires_left_us: Numeric;
  /** A suspended record's answer and continuation; null otherwise. */
  suspended_answer: Buffer | null;
  continuation: string | null;
}

/** What the acquiring statements read (RETURNING, or the read back after them). */
interface LookRow extends PeekRow {
  mine: Numeric;
  /** Strict statements only. */
  ambiguous_since_us?: Numeric;
  ambiguous_reason?: AmbiguityReason | null;
}

/** `ambiguousRead`. */
interface AmbiguousRow {
  state: RecordState;
  fingerprint: string | null;
  ambiguous_since_us: Numeric;
  ambiguous_reason: AmbiguityReason | null;
}

const CHANGED: LookResult = { kind: 'changed' };

/** One `tryAcquire` as every statement of its looks needs it. */
interface AcquireCall {
  readonly record: RecordRef;
  readonly lease: SqlLease;
  readonly strict: boolean;
  /** The acquiring statements' parameters, by name. */
  readonly values: Record<string, unknown>;
  /** What query logging shows in their place. */
  readonly logged: () => Record<string, unknown>;
}

interface ViewRow {
  scope: string;
  key: string;
  state: RecordState;
  fingerprint: string | null;
  payload: Buffer | null;
  lease_expires_at_us: Numeric;
  expires_at_us: Numeric;
  created_at_us: Numeric;
  completed_at_us: Numeric;
  lease_expired: Numeric;
  ambiguous_since_us: Numeric;
  ambiguous_reason: AmbiguityReason | null;
  resolved_by: string | null;
  resolved_at_us: Numeric;
  suspended_until_us: Numeric;
}

interface ServerRow {
  version: string;
  db: string | null;
  max_packet: Numeric;
}

/**
 * MySQL and MariaDB through a mysql2 pool: the application's own, or the
 * one under a `mysql` or `mariadb` DataSource.
 *
 * - Acquisition starts, per scope, with the minimum insert (fresh keys) or a
 *   locking-free peek (replays); a record found stealable goes to one
 *   `INSERT … ON DUPLICATE KEY UPDATE` whose assignments steal only a
 *   stealable row. A `mariadb` DataSource (or a mysql2 pool store) on MariaDB 10.5+ has that statement
 *   read the row back itself (RETURNING); otherwise the insert id says what
 *   happened and a second statement reads the row when it was left alone.
 * - Waiting duplicates on this instance are woken in process by complete and
 *   release; those on other instances by ./wake-poller.ts.
 * - Strict mode (`onExpiredLease: 'refuse'`) sends `acquireStrict` instead,
 *   the same one statement (and read back) that moves an expired lease to
 *   AMBIGUOUS where the default one steals it; the default one, finding an
 *   AMBIGUOUS record (which it never steals), reads its since and why with
 *   one more statement.
 */
export class MysqlDialect implements Dialect {
  private productName: string;
  private database: string | undefined;
  private statements?: MysqlStatements;
  private poller?: WakePoller;
  private receiptStatements?: MysqlReceipts;
  private readonly crossInstancePollMs: number;
  private readonly order = new AcquireOrder();
  /** Every statement's bound (`operationTimeoutMs`), one timer between them. */
  private readonly deadlines: Deadlines;
  private readonly continuations: MysqlContinuations;

  /**
   * `type`: `mariadb` lets acquisitions use RETURNING when the server is
   * MariaDB 10.5 or later; `database`: the one the connection settings name, if any.
   */
  constructor(
    private readonly context: DialectContext,
    private readonly connection: MysqlPoolConnection,
    private readonly type: 'mysql' | 'mariadb',
    database: string | undefined,
    crossInstancePollMs = DEFAULT_CROSS_INSTANCE_POLL_MS,
  ) {
    this.productName = type === 'mariadb' ? 'MariaDB' : 'MySQL';
    // Until `prepare` asks the server: the database the connection settings name, if any.
    this.database = context.schema ?? database ?? undefined;
    this.crossInstancePollMs = crossInstancePollMs;
    this.deadlines = new Deadlines(context.timeoutMs);
    this.continuations = new MysqlContinuations(
      (operation, statement, values, logged) => this.query(operation, statement, values, logged),
      () => this.sql,
      context.waiters,
    );
  }

  /** Receipts: known once `prepare` found the database. */
  get receipts(): MysqlReceipts {
    if (!this.receiptStatements) throw new Error('MysqlDialect used before prepare()');
    return this.receiptStatements;
  }

  get product(): string {
    return this.productName;
  }

  get tableName(): TableName {
    return { schema: this.database ?? '', table: this.context.table };
  }

  /** True when acquisitions read the row back in the same statement (RETURNING). */
  get returning(): boolean {
    return this.sql.readBack === undefined;
  }

  async prepare(ensureSchema: boolean): Promise<void> {
    const { context } = this;
    const [server] = await this.query<ServerRow[]>(
      'server check',
      plain('SELECT VERSION() AS version, DATABASE() AS db, @@max_allowed_packet AS max_packet'),
      [],
    );
    const mariadb = /mariadb/i.test(server.version);
    this.productName = mariadb ? 'MariaDB' : 'MySQL';
    const database = context.schema ?? server.db ?? undefined;
    if (!database) {
      throw new IdempotencyStoreSchemaError(
        `${context.storeName}: the ${this.productName} connection has no database; set one in the connection settings or pass { schema } (the database of the records table)`,
      );
    }
    this.database = database;
    const name = { schema: database, table: context.table };
    // RETURNING where TypeORM itself uses it: a `mariadb` DataSource on MariaDB 10.5 or later.
    const returning = this.type === 'mariadb' && mariadb && atLeast(server.version, [10, 5]);
    this.statements = buildMysqlStatements(name, { returning });
    this.receiptStatements = new MysqlReceipts(
      name,
      this.connection,
      this.productName,
      context.timeoutMs,
    );
    if (ensureSchema) {
      // CREATE … IF NOT EXISTS is atomic under the server's metadata lock: instances
      // that start together need no lock of their own.
      if (context.schema) await this.ddl(mysqlCreateDatabaseSql(context.schema));
      for (const sql of mysqlCurrentTableSql(name)) await this.ddl(sql);
      // A table an older release made: strict mode's state and columns.
      await mysqlStrictModeUpgrade(
        (text, params) => this.query('ensureSchema', plain(text), params),
        name,
      );
      await mysqlStepsUpgrade(
        (text, params) => this.query('ensureSchema', plain(text), params),
        name,
      );
      await mysqlContinuationsUpgrade(
        (text, params) => this.query('ensureSchema', plain(text), params),
        name,
      );
    }
    const where = [database, context.table];
    const columns = await this.query<MysqlColumnRow[]>(
      'schema check',
      plain(MYSQL_COLUMNS_QUERY),
      where,
    );
    const primaryKey = await this.query<Array<{ column_name: string }>>(
      'schema check',
      plain(MYSQL_PRIMARY_KEY_QUERY),
      where,
    );
    const [engine] = await this.query<Array<{ engine: string | null }>>(
      'schema check',
      plain(MYSQL_ENGINE_QUERY),
      where,
    );
    assertMysqlTableShape(
      `${database}.${context.table}`,
      columns,
      primaryKey.map((row) => row.column_name),
      engine?.engine ?? null,
      context.migrations,
    );
    // A statement larger than max_allowed_packet fails and takes its connection with it:
    // refuse at startup a payload limit the server would refuse at the first large result.
    const packet = Number(server.max_packet);
    const needed = context.maxPayloadBytes * (context.preparedStatements ? 1 : 2) + 64 * 1024;
    if (packet > 0 && needed > packet) {
      throw new IdempotencyStoreSchemaError(
        `${context.storeName}: maxPayloadBytes ${context.maxPayloadBytes} needs statements of up to ${needed} bytes, but ${this.productName}'s max_allowed_packet is ${packet}; raise max_allowed_packet or lower maxPayloadBytes`,
      );
    }
    this.poller?.close();
    this.poller = new WakePoller(
      (ids) => this.pollLeases(ids),
      context.waiters,
      context.logger,
      this.crossInstancePollMs,
    );
  }

  async close(): Promise<void> {
    this.poller?.close();
    this.poller = undefined;
  }

  pollMs(): number {
    return this.context.pollIntervalMs;
  }

  beginAcquire(record: RecordRef, request: AcquireRequest, lease: SqlLease): AcquireAttempt {
    const strict = request.onExpiredLease === 'refuse';
    const values = {
      id: record.id,
      scope: record.scope,
      key: record.key,
      lease: lease.leaseId,
      leaseMs: request.leaseMs,
      ttlMs: request.ttlMs,
      fingerprint: request.fingerprint,
    };
    // What query logging shows instead of the key: built once, and only for a logger that logs.
    let shown: Record<string, unknown> | undefined;
    const logged = () =>
      (shown ??= {
        ...values,
        id: record.idHex,
        scope: loggedScope(record.scope),
        key: record.digest,
      });
    const call: AcquireCall = { record, lease, strict, values, logged };
    // The wake-up poller follows the record from the first look that finds it in
    // flight (a replay never gets that far, and so never registers).
    let watch: WakeWatch | undefined;
    const observe =
      request.waitTimeoutMs > 0
        ? (leaseId: string) =>
            (watch ??= this.poller?.watch(record.id, record.idHex))?.observe(leaseId)
        : undefined;
    const acquired: LookResult = { kind: 'acquired', lease };
    // The first look teaches the scope's order: a scope of fresh keys sends the plain
    // insert first, one whose records are mostly there (replays) the peek. Either way
    // a record the peek finds stealable (or, strict, to be moved) goes to `acquire`,
    // the one statement that inserts, steals or moves under the row lock. Later looks
    // of this attempt follow a record that was there, and peek.
    let first = true;
    const look = async (watching: boolean): Promise<LookResult> => {
      const peekFirst = !first || this.order.peekFirst(record.scope);
      const learn = first;
      first = false;
      const watched = watching ? observe : undefined;
      try {
        if (!peekFirst) {
          const ok = await this.query<MysqlOk>('acquire', this.sql.insert, values, logged);
          const inserted = Number(ok.insertId) === INSERTED;
          if (learn) this.order.observe(record.scope, !inserted);
          if (inserted) return acquired;
        }
        const [row] = await this.query<PeekRow[]>('acquire (peek)', this.sql.peek, values, logged);
        if (!row) {
          if (peekFirst && learn) this.order.observe(record.scope, false);
          // Gone, or never there: the acquire decides (an insert, then).
          return await this.acquireStatement(call, watched, false);
        }
        if (peekFirst && learn) this.order.observe(record.scope, true);
        // This attempt's own insert, whatever its insert id said (only an explicit 3 counts).
        if (row.state === 'IN_PROGRESS' && row.lease_id === lease.leaseId) return acquired;
        if (row.state === 'AMBIGUOUS') return await this.ambiguous(record);
        const leaseLeftMs = micros(row.lease_left_us) / 1000;
        const expiresLeftMs = micros(row.expires_left_us) / 1000;
        // A lease or a result that ran out: the acquire steals it (or, strict, moves it).
        if (row.state === 'IN_PROGRESS' ? leaseLeftMs <= 0 : expiresLeftMs <= 0) {
          return await this.acquireStatement(call, watched, true);
        }
        return liveRecord(row, leaseLeftMs, expiresLeftMs, watched);
      } catch (error) {
        // Two acquirers deadlocked on the same new row: InnoDB rolled one back. Look again.
        if (isLockConflict(error)) return CHANGED;
        throw error;
      }
    };
    return { end: () => watch?.dispose(), look };
  }

  /** An AMBIGUOUS record's since and why (which the peek and `acquire` do not read); `moved` by this look. */
  private async ambiguous(record: RecordRef, moved = false): Promise<LookResult> {
    const [row] = await this.query<AmbiguousRow[]>(
      'acquire',
      this.sql.ambiguousRead,
      { id: record.id },
      { id: record.idHex },
    );
    // Resolved since: look again.
    if (row?.state !== 'AMBIGUOUS') return CHANGED;
    return ambiguousRow(row, moved);
  }

  /**
   * The acquiring statement: inserts, steals (or, strict, moves) under the row
   * lock, or reads what is there. `stealable`: the peek saw the row there and
   * stealable, so a row RETURNING shows as this caller's was stolen (RETURNING
   * does not say whether it inserted; a row purged between the two statements
   * would be reported stolen though inserted).
   */
  private async acquireStatement(
    call: AcquireCall,
    observe: ((leaseId: string) => void) | undefined,
    stealable: boolean,
  ): Promise<LookResult> {
    const { record, lease, strict, values, logged } = call;
    const sql = this.sql;
    const acquire = strict ? sql.acquireStrict : sql.acquire;
    const readBack = strict ? sql.readBackStrict : sql.readBack;
    let row: LookRow | undefined;
    if (!readBack) {
      [row] = await this.query<LookRow[]>('acquire', acquire, values, logged);
    } else {
      const ok = await this.query<MysqlOk>('acquire', acquire, values, logged);
      const marker = Number(ok.insertId);
      if (marker === INSERTED) return { kind: 'acquired', lease };
      if (marker === STOLEN) return { kind: 'acquired', lease, stolen: true };
      [row] = await this.query<LookRow[]>('acquire (read back)', readBack, values, logged);
    }
    // Gone between the two statements (released, purged): look again.
    if (!row) return CHANGED;
    const mine = Number(row.mine) === 1;
    if (row.state === 'AMBIGUOUS') {
      // Moved there by this very statement (its lease id is the mark), or found so.
      if (mine) this.context.waiters.notify(record.idHex);
      if (row.ambiguous_since_us === undefined) return this.ambiguous(record, mine);
      return ambiguousRow(row, mine);
    }
    // Without RETURNING, a row read back as this caller's after insert id 1 is its own
    // insert (a steal says 2, above).
    if (mine)
      return stealable && !readBack
        ? { kind: 'acquired', lease, stolen: true }
        : { kind: 'acquired', lease };
    const leaseLeftMs = micros(row.lease_left_us) / 1000;
    const expiresLeftMs = micros(row.expires_left_us) / 1000;
    // Stealable (or, strict, to be moved), yet not: it changed between the statements. Look again.
    if (row.state === 'IN_PROGRESS' ? leaseLeftMs <= 0 : expiresLeftMs <= 0) return CHANGED;
    return liveRecord(row, leaseLeftMs, expiresLeftMs, observe);
  }

  async complete(lease: SqlLease, payload: StoredPayload): Promise<boolean> {
    const { id, idHex, leaseId, ttlMs } = lease;
    const ok = await this.query<MysqlOk>(
      'complete',
      this.sql.complete,
      { id, lease: leaseId, payload, ttlMs },
      { id: idHex, lease: leaseId, payload: `<${payload.length} bytes>`, ttlMs },
    );
    if (ok.affectedRows === 0) return false;
    this.context.waiters.notify(idHex);
    return true;
  }

  async completeIn(tx: SqlTransaction, lease: SqlLease, payload: StoredPayload): Promise<boolean> {
    const { id, leaseId, ttlMs } = lease;
    const done = await tx(
      this.sql.complete.text,
      bind(this.sql.complete, { id, lease: leaseId, payload, ttlMs }),
    );
    return done.affected > 0;
  }

  afterCommit(lease: SqlLease): void {
    // Other instances see the commit at their next poll.
    this.context.waiters.notify(lease.idHex);
  }

  async release(lease: SqlLease): Promise<boolean> {
    const { id, idHex, leaseId } = lease;
    const ok = await this.query<MysqlOk>(
      'release',
      this.sql.release,
      { id, lease: leaseId },
      { id: idHex, lease: leaseId },
    );
    if (ok.affectedRows === 0) return false;
    this.context.waiters.notify(idHex);
    return true;
  }

  async extend(lease: SqlLease): Promise<boolean> {
    const { id, idHex, leaseId, leaseMs } = lease;
    const ok = await this.query<MysqlOk>(
      'extend',
      this.sql.extend,
      { id, lease: leaseId, leaseMs },
      { id: idHex, lease: leaseId, leaseMs },
    );
    return matchedRows(ok) > 0;
  }

  async stepBegin(lease: SqlLease, name: string): Promise<StoredPayload | null | undefined> {
    const { id, idHex, leaseId } = lease;
    const values = { id, lease: leaseId, name };
    const logged = { id: idHex, lease: leaseId, name };
    const ok = await this.query<MysqlOk>('steps.begin', this.sql.stepBegin, values, logged);
    if (matchedRows(ok) === 0) return undefined;
    // Fenced again: a lease lost between the two statements reads nothing.
    const rows = await this.query<Array<{ steps: string | null }>>(
      'steps.begin',
      this.sql.stepRead,
      values,
      logged,
    );
    if (rows.length === 0) return undefined;
    return stepsOfColumn(rows[0].steps).find((step) => step.name === name)?.value ?? null;
  }

  async stepRecord(lease: SqlLease, name: string, value: StoredPayload): Promise<boolean> {
    const { id, idHex, leaseId } = lease;
    const ok = await this.query<MysqlOk>(
      'steps.record',
      this.sql.stepRecord,
      { id, lease: leaseId, name, value: value.toString('base64') },
      { id: idHex, lease: leaseId, name, value: `<${value.length} bytes>` },
    );
    return matchedRows(ok) > 0;
  }

  async stepList(record: RecordRef): Promise<RecordedStep[]> {
    const rows = await this.query<Array<{ steps: string | null }>>(
      'steps.list',
      this.sql.stepList,
      { id: record.id },
      { id: record.idHex },
    );
    return stepsOfColumn(rows[0]?.steps);
  }

  suspend(lease: SqlLease, holdLeaseId: string, suspension: Suspension): Promise<boolean> {
    return this.continuations.suspend(lease, holdLeaseId, suspension);
  }

  resume(request: ResumeRequest, lease: SqlLease): Promise<ResumeResult> {
    return this.continuations.resume(request, lease);
  }

  async markAmbiguous(lease: SqlLease, reason: AmbiguityReason): Promise<boolean> {
    const { id, idHex, leaseId } = lease;
    const ok = await this.query<MysqlOk>(
      'markAmbiguous',
      this.sql.markAmbiguous,
      { id, lease: leaseId, reason },
      { id: idHex, lease: leaseId, reason },
    );
    if (ok.affectedRows === 0) return false;
    // Other instances' waiters see the lease go at their next poll.
    this.context.waiters.notify(idHex);
    return true;
  }

  async resolve(record: RecordRef, resolution: Resolution): Promise<ResolveResult> {
    const { id, idHex } = record;
    for (;;) {
      const ok =
        resolution.outcome === 'completed'
          ? await this.query<MysqlOk>(
              'resolve',
              this.sql.resolveCompleted,
              {
                id,
                payload: resolution.payload,
                ttlMs: resolution.ttlMs,
                resolvedBy: resolution.resolvedBy,
              },
              {
                id: idHex,
                payload: `<${resolution.payload.length} bytes>`,
                ttlMs: resolution.ttlMs,
                resolvedBy: resolution.resolvedBy,
              },
            )
          : await this.query<MysqlOk>(
              'resolve',
              this.sql.resolveNotExecuted,
              { id },
              { id: idHex },
            );
      if (ok.affectedRows === 1) {
        this.context.waiters.notify(idHex);
        // The time the statement wrote (or, for a deletion, the server's clock now).
        const [at] =
          resolution.outcome === 'completed'
            ? await this.query<Array<{ resolved_at_us: Numeric }>>(
                'resolve',
                this.sql.resolvedAt,
                { id },
                { id: idHex },
              )
            : [];
        const resolvedAt =
          dateOf(at?.resolved_at_us ?? null) ??
          dateOf(
            (await this.query<Array<{ now_us: Numeric }>>('resolve', this.sql.now, {}))[0].now_us,
          )!;
        return { kind: 'resolved', resolvedAt };
      }
      const [now] = await this.query<Array<{ state: RecordState }>>(
        'resolve',
        this.sql.stateOf,
        { id },
        { id: idHex },
      );
      // AMBIGUOUS only since the update looked (a contender just moved it): resolve it now.
      if (now?.state !== 'AMBIGUOUS') return { kind: 'not-ambiguous', state: now?.state ?? null };
    }
  }

  async ping(): Promise<void> {
    await this.query('ping', plain('SELECT 1'), []);
  }

  async purge(limit: number): Promise<number> {
    const ok = await this.query<MysqlOk>('purge', this.sql.purge, { limit });
    return ok.affectedRows;
  }

  async countExpired(limit: number | null): Promise<number> {
    const [row] = await this.query<Array<{ expired: Numeric }>>(
      'count expired',
      this.sql.countExpired,
      { limit: limit ?? Number.MAX_SAFE_INTEGER },
    );
    return Number(row.expired);
  }

  async find(record: RecordRef): Promise<IdempotencyRecordView | null> {
    const rows = await this.query<ViewRow[]>(
      'find',
      this.sql.find,
      { id: record.id },
      { id: record.idHex },
    );
    return rows.length > 0 ? toView(rows[0]) : null;
  }

  async forget(record: RecordRef): Promise<void> {
    await this.query('probe', this.sql.forget, { id: record.id }, { id: record.idHex });
  }

  async list(filter: ListFilter): Promise<IdempotencyRecordView[]> {
    const values = {
      scope: filter.scope ?? null,
      state: filter.state ?? null,
      limit: filter.limit ?? 100,
    };
    const rows = await this.query<ViewRow[]>('list', this.sql.list, values, {
      ...values,
      scope: values.scope === null ? null : loggedScope(values.scope),
    });
    return rows.map(toView);
  }

  private get sql(): MysqlStatements {
    if (!this.statements) throw new Error('MysqlDialect used before prepare()');
    return this.statements;
  }

  private async pollLeases(ids: Buffer[]): Promise<Array<{ id: Buffer; lease_id: string | null }>> {
    return this.query(
      'wake-up poll',
      this.sql.poll,
      { ids },
      {
        ids: ids.map((id) => id.toString('hex')),
      },
    );
  }

  private ddl(text: string): Promise<unknown> {
    return this.query('ensureSchema', plain(text), []);
  }

  /**
   * `values` by name for a built statement, or in order for a `plain` one;
   * `logged`, what query logging shows in their place (or a function that
   * makes it, called only when the query log logs queries).
   */
  private query<T>(
    operation: string,
    statement: Statement,
    values: Record<string, unknown> | unknown[],
    logged: Record<string, unknown> | unknown[] | (() => Record<string, unknown>) = values,
  ): Promise<T> {
    return mysqlStoreQuery<T>(this.connection, this.deadlines, this.productName, {
      operation,
      text: statement.text,
      values: positional(statement, values),
      logged: () => positional(statement, typeof logged === 'function' ? logged() : logged),
      prepared: statement.hot && this.context.preparedStatements,
    });
  }
}

/** `values` in the statement's order: bound by name for a built statement, as given for a `plain` one. */
function positional(statement: Statement, given: Record<string, unknown> | unknown[]): unknown[] {
  return Array.isArray(given) ? given : bind(statement, given);
}

/** A statement whose `?` are bound in order (the catalog queries and DDL). */
function plain(text: string): Statement {
  return { text, names: [], hot: false };
}

function micros(value: Numeric): number {
  return value === null ? 0 : Number(value);
}

function dateOf(us: Numeric): Date | null {
  return us === null ? null : new Date(Math.floor(Number(us) / 1000));
}

function toView(row: ViewRow): IdempotencyRecordView {
  const view: IdempotencyRecordView = {
    scope: row.scope,
    key: row.key,
    state: row.state,
    leaseExpiresAt: dateOf(row.lease_expires_at_us),
    leaseExpired: Number(row.lease_expired) === 1,
    expiresAt: dateOf(row.expires_at_us)!,
    createdAt: dateOf(row.created_at_us)!,
    completedAt: dateOf(row.completed_at_us),
    fingerprint: row.fingerprint,
  };
  if (row.state === 'COMPLETE' && row.payload) view.payload = row.payload;
  if (row.state === 'AMBIGUOUS') {
    view.ambiguousSince = dateOf(row.ambiguous_since_us)!;
    view.ambiguousReason = row.ambiguous_reason!;
  }
  if (row.resolved_by !== null) {
    view.resolvedBy = row.resolved_by;
    view.resolvedAt = dateOf(row.resolved_at_us)!;
  }
  const suspendedUntil = dateOf(row.suspended_until_us);
  if (suspendedUntil) view.suspendedUntil = suspendedUntil;
  return view;
}

function atLeast(version: string, wanted: [number, number]): boolean {
  const [major = 0, minor = 0] = (/(\d+)\.(\d+)/.exec(version) ?? []).slice(1).map(Number);
  return major > wanted[0] || (major === wanted[0] && minor >= wanted[1]);
}

/** An AMBIGUOUS row as a look reports it; `moved`: this very statement moved it there. */
function ambiguousRow(row: LookRow | AmbiguousRow, moved: boolean): LookResult {
  return ambiguousLook(
    row.fingerprint,
    dateOf(row.ambiguous_since_us ?? null),
    row.ambiguous_reason ?? null,
    moved,
  );
}

/** A live record someone else holds or completed; a waiter's watch follows an IN_PROGRESS one's lease. */
function liveRecord(
  row: PeekRow,
  leaseLeftMs: number,
  expiresLeftMs: number,
  observe: ((leaseId: string) => void) | undefined,
): LookResult {
  if (row.state === 'IN_PROGRESS' && row.lease_id) observe?.(row.lease_id);
  return {
    kind: 'record',
    record: {
      state: row.state,
      fingerprint: row.fingerprint,
      leaseLeftMs: row.state === 'IN_PROGRESS' ? leaseLeftMs : 0,
      expiresLeftMs,
      payload: row.payload,
      completedAt: dateOf(row.completed_at_us),
      suspension:
        row.state === 'IN_PROGRESS' && row.suspended_answer !== null
          ? { answer: row.suspended_answer, continuation: row.continuation! }
          : null,
    },
  };
}
