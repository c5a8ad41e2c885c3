/**
 * Messages between the fault specs and their child processes (IPC). Keys
 * travel over IPC, never through a log line.
 */
import type { IdempotencyEvent } from 'nest-idempotency';

export interface ExecuteCommand {
  cmd: 'execute';
  /** Chosen by the parent; every reply about this call carries it. */
  id: string;
  scope: string;
  key: string;
  lease: string;
  waitTimeout: string;
  ttl: string;
  /** Block in the action, after reporting `entered`, until a `release` command for `id`. */
  hold?: boolean;
  /** Time spent in the action (after `entered`, and after the hold if any). */
  workMs?: number;
  /**
   * Run a recorded step (`ctx.step('charge')`) before `entered`: its side effect is a row of
   * `executions` under the scope `<scope>#charge`. `inside`: `hold` blocks inside the step
   * (begun, not recorded) instead of after it.
   */
  step?: 'after' | 'inside';
  /** Strict mode (`onExpiredLease: 'refuse'`). */
  strict?: boolean;
}

export interface BurstCommand {
  cmd: 'burst';
  id: string;
  /** Concurrent calls of one request, each reported in `burst-result`. */
  count: number;
  request: Omit<ExecuteCommand, 'cmd' | 'id' | 'hold'>;
}

export interface PurgeTrafficCommand {
  cmd: 'purge-traffic';
  id: string;
  scope: string;
  /** New keys are started until this many ms have passed. */
  durationMs: number;
  concurrency: number;
  /** Purge runs (`purgeExpired({ limit })`) back to back, until the traffic ends. */
  purgeLimit: number;
}

export type ChildCommand =
  | ExecuteCommand
  | BurstCommand
  | PurgeTrafficCommand
  | { cmd: 'release'; id: string }
  | { cmd: 'waiters'; id: string; count: number }
  /** To the PostgreSQL-server child: stop it (fast shutdown), start it again, or stop and exit. */
  | { cmd: 'pg-stop' | 'pg-start' | 'pg-shutdown'; id: string };

export interface ActionValue {
  token: string;
  pid: number;
  /** Whether the action's AbortSignal had fired when it returned. */
  aborted: boolean;
}

export interface CallResult {
  kind: 'executed' | 'replayed' | 'error';
  value?: ActionValue;
  error?: { name: string; message: string };
  startedAt: number;
  endedAt: number;
}

export interface PurgeTrafficStats {
  keys: number;
  /** Re-executions of a completed key: replayed as they should be, or executed again. */
  rechecks: number;
  rechecksReplayed: number;
  /** Executed again although the recheck started before the record's ttl ran out: a lost record. */
  rechecksLost: number;
  /** Executed again after the ttl: expected. */
  rechecksAfterTtl: number;
  /** Keys whose action outlived its ttl (IN_PROGRESS past ttl, lease renewed). */
  longActions: number;
  purgeRuns: number;
  purged: number;
  errors: string[];
}

export type ChildMessage =
  | { type: 'ready'; pid: number; port?: number; url?: string }
  | { type: 'done'; id: string; error?: string }
  | { type: 'entered'; id: string; token: string }
  | { type: 'result'; id: string; result: CallResult }
  | { type: 'burst-result'; id: string; results: CallResult[]; maxPoolWaiting: number }
  | { type: 'waiters'; id: string; count: number }
  | { type: 'purge-traffic-result'; id: string; stats: PurgeTrafficStats }
  | { type: 'event'; event: IdempotencyEvent };
