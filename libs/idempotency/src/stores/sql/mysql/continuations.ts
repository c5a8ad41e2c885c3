import type { ResumeRequest, ResumeResult, Suspension } from '../../../core/store';
import type { WaiterRegistry } from '../../../core/waiters';
import type { SqlLease } from '../dialect';
import { resumeRefusal } from '../dialect';
import { HIDDEN_CONTINUATION, loggedScope } from '../query-log';
import { matchedRows, MysqlOk } from './query';
import type { Statement } from './sql';
import type { MysqlStatements } from './statements';

/** The dialect's query path: a built statement, its values by name, and what logs show instead. */
export type MysqlQuery = <T>(
  operation: string,
  statement: Statement,
  values: Record<string, unknown>,
  logged: Record<string, unknown>,
) => Promise<T>;

/** Numbers and booleans come back from mysql2 as numbers or strings. */
type Flag = number | string | null;

/**
 * Continuations on MySQL and MariaDB (./statements.ts `suspend`, `resume`):
 * a suspension is one fenced UPDATE; a resumption is admitted by one UPDATE
 * (the test and the write under the row lock), which moves the record to the
 * resumption's lease, so that reading the state back and clearing it after
 * are fenced by that lease. UPDATE has no RETURNING here.
 */
export class MysqlContinuations {
  constructor(
    private readonly query: MysqlQuery,
    private readonly sql: () => MysqlStatements,
    private readonly waiters: WaiterRegistry,
  ) {}

  async suspend(lease: SqlLease, hold: string, suspension: Suspension): Promise<boolean> {
    const { id, idHex, leaseId } = lease;
    const { continuation, answer, state, holdMs } = suspension;
    const ok = await this.query<MysqlOk>(
      'continuations.suspend',
      this.sql().suspend,
      { id, lease: leaseId, hold, holdMs, continuation, answer, state },
      {
        id: idHex,
        lease: leaseId,
        hold,
        holdMs,
        continuation: HIDDEN_CONTINUATION,
        answer: `<${answer.length} bytes>`,
        state: `<${state.length} bytes>`,
      },
    );
    if (matchedRows(ok) === 0) return false;
    // This instance's waiters look again now, other instances' at their poll (the lease changed).
    this.waiters.notify(idHex);
    return true;
  }

  async resume(request: ResumeRequest, lease: SqlLease): Promise<ResumeResult> {
    const { id, idHex, leaseId, leaseMs, ttlMs } = lease;
    const { scope, continuation } = request;
    const sql = this.sql();
    const values = { id, scope, continuation, lease: leaseId, leaseMs, ttlMs };
    const logged = {
      ...values,
      id: idHex,
      scope: loggedScope(scope),
      continuation: HIDDEN_CONTINUATION,
    };
    for (;;) {
      const ok = await this.query<MysqlOk>('continuations.resume', sql.resume, values, logged);
      if (matchedRows(ok) > 0) {
        const [row] = await this.query<
          Array<{ scope: string; key: string; suspended_state: Buffer | null }>
        >('continuations.resume', sql.resumedRead, values, logged);
        // Admitted, then lost before its state was read (its lease ran out and was taken over).
        if (!row || row.suspended_state === null) return { kind: 'consumed' };
        await this.query<MysqlOk>('continuations.resume', sql.resumedClear, values, logged);
        return {
          kind: 'admitted',
          lease,
          id: { scope: row.scope, key: row.key },
          state: row.suspended_state,
        };
      }
      const [found] = await this.query<Array<{ state: string; suspended: Flag; lapsed: Flag }>>(
        'continuations.resume',
        sql.resumeRefusal,
        values,
        logged,
      );
      const refusal = resumeRefusal(
        found && {
          state: found.state,
          suspended: Number(found.suspended) === 1,
          lapsed: Number(found.lapsed) === 1,
        },
      );
      // Suspended only since the admission looked: admit it now.
      if (refusal !== 'retry') return { kind: refusal };
    }
  }
}
