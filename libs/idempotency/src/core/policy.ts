import { Duration, parseDuration } from './duration';
import { IdempotencyConfigError } from './errors';
import { DEFAULT_MAX_KEY_LENGTH, scopeProblem } from './key';

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
}

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
  };
}
