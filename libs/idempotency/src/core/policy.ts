import { Duration, parseDuration } from './duration';
import { IdempotencyConfigError } from './errors';
import { DEFAULT_MAX_KEY_LENGTH, scopeProblem } from './key';
import type { AmbiguityReason } from './store';

/** How long things last when nobody says: a 30 s lease, a 10 s wait, a 24 h replay window. */
export const BUILT_IN_DEFAULTS = { lease: 'PT30S', waitTimeout: 'PT10S', ttl: 'PT24H' } as const;

export interface PolicyOptions {
  /** Record namespace, e.g. `PaymentsController.create`. */
  scope: string;
  /** How long a holder is protected before a duplicate may steal the key. Default `PT30S`. */
  lease?: Duration;
  /** How long a duplicate blocks, inside the store, for the holder's answer. Default `PT10S`. */
  waitTimeout?: Duration;
  /** How long a completed result is replayed. Default `PT24H`. */
  ttl?: Duration;
  /** Longest key accepted. Default 255. */
  maxKeyLength?: number;
  /**
   * What a contender does with an IN_PROGRESS record whose lease ran out.
   * `steal` (default): it takes the record over and runs the action.
   * `refuse` (strict mode): the record becomes AMBIGUOUS and the contender is
   * refused (`IdempotencyOutcomeUnknownError`); so does a record whose
   * action threw, unless the error is known not to have executed. Needs a
   * store that declares `strictMode`.
   */
  onExpiredLease?: 'steal' | 'refuse';
  /**
   * Strict mode: true for an error thrown by an action that had no effect, so
   * its record is released (a retry runs) rather than made AMBIGUOUS. An
   * `IdempotencyNotExecutedError` (or one in the `cause` chain) always counts.
   */
  notExecuted?: (error: unknown) => boolean;
  /**
   * Strict mode: asked by the contender that finds a record AMBIGUOUS.
   * `completed` resolves the record with `value` and replays it;
   * `not-executed` resolves it (deleted) and runs the action; `unknown` (or
   * a throw, which is logged) refuses the contender.
   */
  reconcile?: ReconcileHook;
  /**
   * When the action ran but its result could not be recorded after every
   * retry. `error` (default): the caller gets an error (HTTP 503
   * `idempotency-completion-failed`, `IdempotencyCompletionError`); `return`:
   * the caller gets the action's value and a warning is logged.
   */
  onCompletionFailure?: 'error' | 'return';
}

/** What a `reconcile` hook is asked about an AMBIGUOUS record. */
export interface ReconcileQuestion {
  /** The handler's scope (the policy's, without the tenant). */
  scope: string;
  keyDigest: string;
  /** The key as the caller sent it. */
  key: string;
  /** When the record became AMBIGUOUS, by the store's clock. */
  since: Date;
  reason: AmbiguityReason;
  /** `step-unknown`: the recorded step that began and recorded nothing. */
  step?: string;
}

export type ReconcileAnswer =
  { outcome: 'completed'; value: unknown } | { outcome: 'not-executed' } | { outcome: 'unknown' };

export type ReconcileHook = (
  question: ReconcileQuestion,
) => Promise<ReconcileAnswer> | ReconcileAnswer;

/**
 * One handler's or one call site's rules, checked and parsed once (at
 * bootstrap for a Nest handler) and reused for every call.
 */
export interface ExecutionPolicy {
  readonly scope: string;
  /** Where errors say the policy came from: `Class.method`, or the scope. */
  readonly where: string;
  readonly leaseMs: number;
  readonly waitTimeoutMs: number;
  readonly ttlMs: number;
  readonly maxKeyLength: number;
  /** Strict mode: an expired lease is refused, never stolen (`onExpiredLease: 'refuse'`). */
  readonly strict: boolean;
  readonly notExecuted?: (error: unknown) => boolean;
  readonly reconcile?: ReconcileHook;
  readonly onCompletionFailure: 'error' | 'return';
}

/** Throws `IdempotencyConfigError` naming `where` and the option when anything is unusable. */
export function compilePolicy(
  options: PolicyOptions,
  where: string = options.scope,
): ExecutionPolicy {
  const problem = scopeProblem(options.scope);
  if (problem) throw new IdempotencyConfigError(`${where}: option "scope" ${problem}`);
  const maxKeyLength = options.maxKeyLength ?? DEFAULT_MAX_KEY_LENGTH;
  if (!Number.isInteger(maxKeyLength) || maxKeyLength < 1) {
    throw new IdempotencyConfigError(
      `${where}: option "maxKeyLength" must be a positive integer, got ${String(maxKeyLength)}`,
    );
  }
  return {
    scope: options.scope,
    where,
    leaseMs: parseDuration(options.lease ?? BUILT_IN_DEFAULTS.lease, 'lease', 'lease', where),
    waitTimeoutMs: parseDuration(
      options.waitTimeout ?? BUILT_IN_DEFAULTS.waitTimeout,
      'waitTimeout',
      'waitTimeout',
      where,
    ),
    ttlMs: parseDuration(options.ttl ?? BUILT_IN_DEFAULTS.ttl, 'ttl', 'ttl', where),
    maxKeyLength,
    ...compileStrictness(options, where),
  };
}

function compileStrictness(
  options: PolicyOptions,
  where: string,
): Pick<ExecutionPolicy, 'strict' | 'notExecuted' | 'reconcile' | 'onCompletionFailure'> {
  const {
    onExpiredLease = 'steal',
    notExecuted,
    reconcile,
    onCompletionFailure = 'error',
  } = options;
  if (onExpiredLease !== 'steal' && onExpiredLease !== 'refuse') {
    throw new IdempotencyConfigError(
      `${where}: option "onExpiredLease" must be 'steal' or 'refuse', got ${JSON.stringify(onExpiredLease)}`,
    );
  }
  if (onCompletionFailure !== 'error' && onCompletionFailure !== 'return') {
    throw new IdempotencyConfigError(
      `${where}: option "onCompletionFailure" must be 'error' or 'return', got ${JSON.stringify(onCompletionFailure)}`,
    );
  }
  for (const [name, fn] of [
    ['notExecuted', notExecuted],
    ['reconcile', reconcile],
  ] as const) {
    if (fn !== undefined && typeof fn !== 'function') {
      throw new IdempotencyConfigError(`${where}: option "${name}" must be a function`);
    }
  }
  const strict = onExpiredLease === 'refuse';
  if (!strict && (notExecuted !== undefined || reconcile !== undefined)) {
    throw new IdempotencyConfigError(
      `${where}: options "notExecuted" and "reconcile" apply to strict mode only; set onExpiredLease: 'refuse'`,
    );
  }
  return { strict, notExecuted, reconcile, onCompletionFailure };
}
