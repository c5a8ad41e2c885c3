import { becomesAmbiguous, fingerprintsConflict, isStealable } from '../../../core/decide';
import { IdempotencyStoreUnavailableError } from '../../../core/errors';
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
import { ambiguousLook, resumeRefusal, stepsOfColumn } from '../dialect';
import { Deadlines } from '../bounded-query';
import { AcquireOrder } from '../acquire-order';
import { HIDDEN_CONTINUATION, loggedScope } from '../query-log';
import { channelFor, DEFAULT_TABLE, TableName } from '../table';
import { PgNotificationListener } from './listener';
import type { PgConnection } from './pool';
import { preparedName, storeQuery, StoreResult } from './query';
import { assertTableShape, ColumnRow, COLUMNS_QUERY, PRIMARY_KEY_QUERY, schemaSql } from './schema';
import { buildStatements, HOT_STATEMENTS, Statements } from './statements';
import { PgReceipts } from './receipts';

interface PeekRow {
  state: RecordState;
  fingerprint: string | null;
  lease_id: string | null;
  watched: boolean;
  /** Whole milliseconds since the epoch (a number, not a timestamp to parse); null unless COMPLETE. */
  completed_ms: number | null;
  payload: Buffer | null;
  /** Null for a COMPLETE record (it has no lease). */
  lease_left_ms: number | null;
  expires_left_ms: number;
  /** A suspended record's answer and continuation; null otherwise. */
  suspended_answer: Buffer | null;
  continuation: string | null;
}

const CHANGED: LookResult = { kind: 'changed' };

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
  ambiguous_since: Date | null;
  ambiguous_reason: AmbiguityReason | null;
  resolved_by: string | null;
  resolved_at: Date | null;
  suspended_until: Date | null;
}

/** What the strict statements read of an AMBIGUOUS record. */
interface AmbiguousRow {
  state?: RecordState;
  fingerprint: string | null;
  ambiguous_since: Date;
  ambiguous_reason?: AmbiguityReason;
  watched?: boolean;
}

/**
 * PostgreSQL through a `pg` pool (see ./pool.ts): small single-purpose
 * statements (./statements.ts) as named prepared statements on the hot path,
 * chosen per call, and LISTEN/NOTIFY (./listener.ts) to wake duplicates on
 * every instance.
 *
 * An acquisition is a read-only `peek` by primary key, or an `insert`, first:
 * whichever the scope's recent traffic says will settle it (see
 * `AcquireOrder`). A fresh key then costs one INSERT, a replay one SELECT; a
 * guess the other way costs one more statement, never a different outcome,
 * since each path falls back to the other. From the peek:
 *
 * - absent: insert; nothing inserted means someone else just did: look again.
 * - stealable (an expired lease, an expired result): `steal`, an UPDATE that
 *   rechecks the rule under the row lock; nothing updated: look again.
 * - IN_PROGRESS and live, for a caller that will wait, not yet `watched`:
 *   `mark` it watched (fenced by the lease id the peek saw), then wait.
 * - otherwise what the peek saw is the answer (a replay, a mismatch, in flight).
 *
 * Strict mode (`onExpiredLease: 'refuse'`) changes two branches and adds one,
 * each a statement of its own, so the default path sends what it always did:
 *
 * - an expired lease: `toAmbiguous` instead of `steal`, rechecked under the
 *   row lock, so exactly one contender moves it (`transitioned`); one that
 *   updated nothing looks again. It wakes a waiter (NOTIFY when `watched`);
 * - an expired result: `stealResult`, which never takes an expired lease;
 * - AMBIGUOUS (for any caller): `ambiguousPeek` reads since when and why,
 *   which the peek leaves out; nothing is written, whatever the TTL says.
 *
 * Why a waiter never misses the wake-up. complete (and release) notify only
 * when the row they change says `watched`; the waiter's mark and the holder's
 * completion are two UPDATEs of one row, so one waits for the other's commit
 * on the row lock, and under READ COMMITTED the second re-evaluates its WHERE
 * on the row's newest version (EvalPlanQual):
 *
 * - mark first: the completion's UPDATE sees `watched = true` (it does not
 *   assign the column, so RETURNING shows the newest version's flag) and sends
 *   NOTIFY once it committed, which is after the mark committed: after the
 *   waiter took its ticket (the wait loop takes it before the look), or, for
 *   a first look made without one, the wake-up moves the registry's count,
 *   and the wait loop then looks again (../../../core/wait-loop.ts); and after
 *   LISTEN was in effect (`beginAcquire` awaits it);
 * - completion first: the mark finds no IN_PROGRESS row under that lease and
 *   updates nothing; the waiter looks again and sees the result.
 *
 * A peek that shows `watched` already comes after a committed mark, which the
 * completion cannot have missed either (it would have had to lock the row
 * first, and then the mark would have updated nothing). The NOTIFY is a second
 * statement, after the completion committed: a crash between the two only
 * leaves the waiter to its poll (`pollIntervalMs`), as a lost LISTEN
 * connection would. A record nobody waits on never notifies.
 */
export class PostgresDialect implements Dialect {
  readonly product = 'PostgreSQL';
  readonly tableName: TableName;
  private readonly sql: Statements;
  /** Statement text → the name it is prepared under; empty when `preparedStatements` is off. */
  private readonly preparedNames = new Map<string, string>();
  private readonly channel: string;
  private readonly deadlines: Deadlines;
  private readonly order = new AcquireOrder();
  private listener?: PgNotificationListener;
  readonly receipts: PgReceipts;

  constructor(
    private readonly context: DialectContext,
    private readonly connection: PgConnection,
  ) {
    this.tableName = { schema: context.schema ?? DEFAULT_TABLE.schema, table: context.table };
    this.sql = buildStatements(this.tableName);
    if (context.preparedStatements) {
      for (const operation of HOT_STATEMENTS)
        this.preparedNames.set(this.sql[operation], preparedName(operation, this.sql[operation]));
    }
    this.channel = channelFor(this.tableName);
    this.deadlines = new Deadlines(context.timeoutMs);
    this.receipts = new PgReceipts(this.tableName, (operation, text, values, logged) =>
      this.query(operation, text, values, logged),
    );
    if (context.preparedStatements) {
      const append = this.receipts.appendSql;
      this.preparedNames.set(append, preparedName('receipt', append));
    }
  }

  async prepare(ensureSchema: boolean): Promise<void> {
    const { schema, table } = this.tableName;
    if (ensureSchema) {
      // One statement string runs as one implicit transaction; the advisory lock
      // serializes instances that start together (CREATE ... IF NOT EXISTS can race).
      const lock = `SELECT pg_advisory_xact_lock(hashtext('nest-idempotency:' || ${literal(`${schema}.${table}`)}))`;
      const ddl = [lock, ...schemaSql(this.tableName)].join(';\n');
      await this.query('ensureSchema', ddl, [], none);
    }
    const names = () => [schema, table];
    const { rows: columns } = await this.query<ColumnRow>(
      'schema check',
      COLUMNS_QUERY,
      [schema, table],
      names,
    );
    const { rows: primaryKey } = await this.query<{ column_name: string }>(
      'schema check',
      PRIMARY_KEY_QUERY,
      [schema, table],
      names,
    );
    assertTableShape(
      this.tableName,
      columns,
      primaryKey.map((r) => r.column_name),
      this.context.migrations,
    );
    const pool = this.connection.pool();
    if (!pool) throw new IdempotencyStoreUnavailableError(`prepare: ${this.connection.unready}`);
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

  beginAcquire(
    record: RecordRef,
    request: AcquireRequest,
    lease: SqlLease,
  ): AcquireAttempt | Promise<AcquireAttempt> {
    // A caller that may wait needs LISTEN in effect before its first look.
    const listener = this.listener;
    if (request.waitTimeoutMs > 0 && listener && !listener.listening) {
      return listener.ensure().then(() => this.attempt(record, request, lease));
    }
    return this.attempt(record, request, lease);
  }

  private attempt(record: RecordRef, request: AcquireRequest, lease: SqlLease): AcquireAttempt {
    const { leaseId } = lease;
    const acquired: LookResult = { kind: 'acquired', lease };
    const stolen: LookResult = { kind: 'acquired', lease, stolen: true };
    const { id, scope } = record;
    const { leaseMs, ttlMs, fingerprint, onExpiredLease } = request;
    const sql = this.sql;
    // What the first look finds teaches the scope's order; later looks of this
    // attempt know a record was there, and peek.
    let first = true;
    let insertFirst = !this.order.peekFirst(scope);
    const insert = async () => {
      const { rowCount } = await this.query(
        'acquire',
        sql.insert,
        [id, scope, record.key, leaseId, leaseMs, ttlMs, fingerprint],
        () => [
          record.idHex,
          loggedScope(scope),
          record.digest,
          leaseId,
          leaseMs,
          ttlMs,
          fingerprint,
        ],
      );
      return rowCount === 1;
    };
    const learn = (found: boolean) => {
      if (first) this.order.observe(scope, found);
      first = false;
    };
    return {
      end: () => undefined,
      look: async (watch): Promise<LookResult> => {
        if (insertFirst) {
          insertFirst = false;
          const inserted = await insert();
          learn(!inserted);
          if (inserted) return acquired;
        }
        const {
          rows: [row],
        } = await this.query<PeekRow>('acquire', sql.peek, [id], () => [record.idHex]);
        learn(row !== undefined);
        if (!row) return (await insert()) ? acquired : CHANGED;
        const leaseLeftMs = row.lease_left_ms ?? 0;
        const expiresLeftMs = row.expires_left_ms;
        if (row.state === 'AMBIGUOUS') {
          const {
            rows: [found],
          } = await this.query<AmbiguousRow>('acquire', sql.ambiguousPeek, [id], () => [
            record.idHex,
          ]);
          // Resolved since the peek: look again.
          if (found?.state !== 'AMBIGUOUS') return CHANGED;
          return ambiguousLook(
            found.fingerprint,
            found.ambiguous_since,
            found.ambiguous_reason!,
            false,
          );
        }
        if (becomesAmbiguous(row.state, leaseLeftMs, onExpiredLease)) {
          const {
            rows: [moved],
          } = await this.query<AmbiguousRow>('acquire', sql.toAmbiguous, [id], () => [
            record.idHex,
          ]);
          // The holder completed, released or extended since the peek, or another contender
          // moved it first: look again.
          if (!moved) return CHANGED;
          if (moved.watched) await this.notify(record.idHex, 'move to AMBIGUOUS');
          return ambiguousLook(moved.fingerprint, moved.ambiguous_since, 'lease-expired', true);
        }
        if (isStealable(row.state, leaseLeftMs, expiresLeftMs, onExpiredLease)) {
          const { rowCount } = await this.query(
            'acquire',
            onExpiredLease === 'refuse' ? sql.stealResult : sql.steal,
            [id, leaseId, leaseMs, ttlMs, fingerprint],
            () => [record.idHex, leaseId, leaseMs, ttlMs, fingerprint],
          );
          return rowCount === 1 ? stolen : CHANGED;
        }
        // A suspended record (its hold runs: a lapsed one was stolen or moved above)
        // is answered at once: nothing to wait for.
        const suspension =
          row.suspended_answer !== null
            ? { answer: row.suspended_answer, continuation: row.continuation! }
            : null;
        if (
          watch &&
          row.state === 'IN_PROGRESS' &&
          !suspension &&
          !row.watched &&
          // A mismatch is refused at once: nothing to wait for, so nothing to mark.
          !fingerprintsConflict(fingerprint, row.fingerprint)
        ) {
          const { rowCount } = await this.query('acquire', sql.mark, [id, row.lease_id], () => [
            record.idHex,
            row.lease_id,
          ]);
          // Since the peek the holder completed, released or lost its lease, or another
          // waiter marked the record: look again.
          if (rowCount !== 1) return CHANGED;
        }
        return {
          kind: 'record',
          record: {
            state: row.state,
            fingerprint: row.fingerprint,
            leaseLeftMs,
            expiresLeftMs,
            payload: row.payload,
            // Whole milliseconds on the server: rounding only undoes the float's error.
            completedAt: row.completed_ms === null ? null : new Date(Math.round(row.completed_ms)),
            suspension,
          },
        };
      },
    };
  }

  async complete(lease: SqlLease, payload: StoredPayload): Promise<boolean> {
    const { id, idHex, leaseId, ttlMs } = lease;
    const { rows } = await this.query<{ watched: boolean }>(
      'complete',
      this.sql.complete,
      [id, leaseId, payload, ttlMs],
      () => [idHex, leaseId, `<${payload.length} bytes>`, ttlMs],
    );
    if (rows.length === 0) return false;
    if (rows[0].watched) await this.notify(idHex, 'completion');
    return true;
  }

  async completeIn(tx: SqlTransaction, lease: SqlLease, payload: StoredPayload): Promise<boolean> {
    const { id, idHex, leaseId, ttlMs } = lease;
    const done = await tx(this.sql.complete, [id, leaseId, payload, ttlMs]);
    const rows = done.rows as { watched: boolean }[];
    if (rows.length === 0) return false;
    // Part of the caller's transaction: PostgreSQL delivers it when that commits. (Not
    // this.sql.notify, whose synchronous_commit setting would apply to the whole transaction.)
    // A row, not pg_notify's void: not every client can read a void column back (Prisma cannot).
    if (rows[0].watched) await tx('SELECT 1 AS sent FROM pg_notify($1, $2)', [this.channel, idHex]);
    return true;
  }

  afterCommit(lease: SqlLease): void {
    this.context.waiters.notify(lease.idHex);
  }

  async release(lease: SqlLease): Promise<boolean> {
    const { id, idHex, leaseId } = lease;
    const { rows } = await this.query<{ watched: boolean }>(
      'release',
      this.sql.release,
      [id, leaseId],
      () => [idHex, leaseId],
    );
    if (rows.length === 0) return false;
    if (rows[0].watched) await this.notify(idHex, 'release');
    return true;
  }

  async markAmbiguous(lease: SqlLease, reason: AmbiguityReason): Promise<boolean> {
    const { id, idHex, leaseId } = lease;
    const { rows } = await this.query<{ watched: boolean }>(
      'markAmbiguous',
      this.sql.markAmbiguous,
      [id, leaseId, reason],
      () => [idHex, leaseId, reason],
    );
    if (rows.length === 0) return false;
    if (rows[0].watched) await this.notify(idHex, 'move to AMBIGUOUS');
    return true;
  }

  async stepBegin(lease: SqlLease, name: string): Promise<StoredPayload | null | undefined> {
    const { id, idHex, leaseId } = lease;
    const { rows } = await this.query<{ value: string | null }>(
      'steps.begin',
      this.sql.stepBegin,
      [id, leaseId, name],
      () => [idHex, leaseId, name],
    );
    if (rows.length === 0) return undefined;
    return rows[0].value === null ? null : Buffer.from(rows[0].value, 'base64');
  }

  async stepRecord(lease: SqlLease, name: string, value: StoredPayload): Promise<boolean> {
    const { id, idHex, leaseId } = lease;
    const { rowCount } = await this.query(
      'steps.record',
      this.sql.stepRecord,
      [id, leaseId, name, value.toString('base64')],
      () => [idHex, leaseId, name, `<${value.length} bytes>`],
    );
    return rowCount === 1;
  }

  async stepList(record: RecordRef): Promise<RecordedStep[]> {
    const { rows } = await this.query<{ steps: unknown }>(
      'steps.list',
      this.sql.stepList,
      [record.id],
      () => [record.idHex],
    );
    return stepsOfColumn(rows[0]?.steps);
  }

  async suspend(lease: SqlLease, holdLeaseId: string, suspension: Suspension): Promise<boolean> {
    const { id, idHex, leaseId } = lease;
    const { continuation, answer, state, holdMs } = suspension;
    const { rows } = await this.query<{ watched: boolean }>(
      'continuations.suspend',
      this.sql.suspend,
      [id, leaseId, holdLeaseId, holdMs, continuation, answer, state],
      () => [
        idHex,
        leaseId,
        holdLeaseId,
        holdMs,
        HIDDEN_CONTINUATION,
        `<${answer.length} bytes>`,
        `<${state.length} bytes>`,
      ],
    );
    if (rows.length === 0) return false;
    // Its waiters look again and are answered `suspended`.
    if (rows[0].watched) await this.notify(idHex, 'suspension');
    else this.context.waiters.notify(idHex);
    return true;
  }

  async resume(request: ResumeRequest, lease: SqlLease): Promise<ResumeResult> {
    const { id, idHex, leaseId, leaseMs, ttlMs } = lease;
    const { scope, continuation } = request;
    for (;;) {
      const {
        rows: [admitted],
      } = await this.query<{ scope: string; key: string; state: Buffer }>(
        'continuations.resume',
        this.sql.resume,
        [id, scope, continuation, leaseId, leaseMs, ttlMs],
        () => [idHex, loggedScope(scope), HIDDEN_CONTINUATION, leaseId, leaseMs, ttlMs],
      );
      if (admitted) {
        return {
          kind: 'admitted',
          lease,
          id: { scope: admitted.scope, key: admitted.key },
          state: admitted.state,
        };
      }
      const {
        rows: [found],
      } = await this.query<{ state: RecordState; suspended: boolean; lapsed: boolean }>(
        'continuations.resume',
        this.sql.resumeRefusal,
        [id, scope, continuation],
        () => [idHex, loggedScope(scope), HIDDEN_CONTINUATION],
      );
      const refusal = resumeRefusal(found);
      // Suspended only since the admission looked: admit it now.
      if (refusal !== 'retry') return { kind: refusal };
    }
  }

  async resolve(record: RecordRef, resolution: Resolution): Promise<ResolveResult> {
    const { id, idHex } = record;
    for (;;) {
      const { rows } =
        resolution.outcome === 'completed'
          ? await this.query<{ resolved_at: Date; watched: boolean }>(
              'resolve',
              this.sql.resolveCompleted,
              [id, resolution.payload, resolution.ttlMs, resolution.resolvedBy],
              () => [
                idHex,
                `<${resolution.payload.length} bytes>`,
                resolution.ttlMs,
                resolution.resolvedBy,
              ],
            )
          : await this.query<{ resolved_at: Date; watched: boolean }>(
              'resolve',
              this.sql.resolveNotExecuted,
              [id],
              () => [idHex],
            );
      if (rows.length === 1) {
        // Nobody waits on an AMBIGUOUS record, unless a look raced the move: wake it anyway.
        if (rows[0].watched) await this.notify(idHex, 'resolution');
        else this.context.waiters.notify(idHex);
        return { kind: 'resolved', resolvedAt: rows[0].resolved_at };
      }
      const {
        rows: [now],
      } = await this.query<{ state: RecordState }>('resolve', this.sql.stateOf, [id], () => [
        idHex,
      ]);
      // AMBIGUOUS only since the update looked (a contender just moved it): resolve it now.
      if (now?.state !== 'AMBIGUOUS') return { kind: 'not-ambiguous', state: now?.state ?? null };
    }
  }

  /**
   * Wakes the waiters of a record on every instance, once its completion or
   * release committed. The change stands either way: a NOTIFY that fails only
   * leaves the waiters to their poll.
   */
  private async notify(idHex: string, after: string): Promise<void> {
    // This instance's own waiters need not wait for the notification's round trip.
    this.context.waiters.notify(idHex);
    try {
      await this.query('notify', this.sql.notify, [this.channel, idHex], () => [
        this.channel,
        idHex,
      ]);
    } catch (error) {
      this.context.logger.warn(
        `NOTIFY after a ${after} failed; duplicates waiting on the record look again at their next poll: ${(error as Error).message}`,
      );
    }
  }

  async extend(lease: SqlLease): Promise<boolean> {
    const { id, idHex, leaseId, leaseMs } = lease;
    const { rowCount } = await this.query('extend', this.sql.extend, [id, leaseId, leaseMs], () => [
      idHex,
      leaseId,
      leaseMs,
    ]);
    return rowCount === 1;
  }

  async ping(): Promise<void> {
    await this.query('ping', 'SELECT 1', [], none);
  }

  async purge(limit: number): Promise<number> {
    const { rows } = await this.query<{ purged: number }>(
      'purge',
      this.sql.purgeBatch,
      [limit],
      () => [limit],
    );
    return rows[0].purged;
  }

  async countExpired(limit: number | null): Promise<number> {
    const { rows } = await this.query<{ expired: number }>(
      'count expired',
      this.sql.countExpired,
      [limit],
      () => [limit],
    );
    return rows[0].expired;
  }

  async find(record: RecordRef): Promise<IdempotencyRecordView | null> {
    const { rows } = await this.query<ViewRow>('find', this.sql.find, [record.id], () => [
      record.idHex,
    ]);
    return rows.length > 0 ? toView(rows[0]) : null;
  }

  async forget(record: RecordRef): Promise<void> {
    await this.query('probe', this.sql.forget, [record.id], () => [record.idHex]);
  }

  async list(filter: ListFilter): Promise<IdempotencyRecordView[]> {
    const scope = filter.scope ?? null;
    const params = [scope, filter.state ?? null, filter.limit ?? 100];
    const { rows } = await this.query<ViewRow>('list', this.sql.list, params, () => [
      scope === null ? null : loggedScope(scope),
      ...params.slice(1),
    ]);
    return rows.map(toView);
  }

  private query<T = unknown>(
    operation: string,
    text: string,
    values: unknown[],
    logged: () => unknown[],
  ): Promise<StoreResult<T>> {
    return storeQuery<T>(this.connection, this.deadlines, {
      operation,
      text,
      values,
      logged,
      name: this.preparedNames.get(text),
    });
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
  if (row.state === 'AMBIGUOUS') {
    view.ambiguousSince = row.ambiguous_since!;
    view.ambiguousReason = row.ambiguous_reason!;
  }
  if (row.resolved_by !== null) {
    view.resolvedBy = row.resolved_by;
    view.resolvedAt = row.resolved_at!;
  }
  if (row.suspended_until !== null) view.suspendedUntil = row.suspended_until;
  return view;
}

const none = (): unknown[] => [];

function literal(text: string): string {
  return `'${text.replace(/'/g, "''")}'`;
}
