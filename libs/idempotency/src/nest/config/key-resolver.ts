import { IdempotencyKeyError } from '../../core/errors';
import type { HandlerPlan } from './handler-plan';
import type { KeySource } from './handler-options';

export type ResolvedKey = { kind: 'key'; key: string } | { kind: 'absent' };

/**
 * The key a handler's `key` option (an expression or a function) gives for
 * one request or message: absent (undefined or null), or a string (a number
 * becomes its decimal text). Throws `IdempotencyKeyError` naming `Class.method`.
 */
export function evaluateKey(plan: HandlerPlan, source: KeySource): ResolvedKey {
  let value: unknown;
  if (plan.key.kind === 'function') {
    // A key function that throws is the application's own error: it propagates as it is.
    value = plan.key.fn(source);
  } else if (plan.key.kind === 'expression') {
    const result = plan.key.expression.evaluate(source as unknown as Record<string, unknown>);
    if (typeof result === 'object') {
      throw new IdempotencyKeyError(`${plan.where}: key expression ${result.invalid}`);
    }
    value = result;
  }
  if (value === undefined || value === null) return { kind: 'absent' };
  if (typeof value === 'number') value = String(value);
  if (typeof value !== 'string') {
    throw new IdempotencyKeyError(
      `${plan.where}: key function returned ${typeof value}, not a string`,
    );
  }
  return { kind: 'key', key: value };
}
