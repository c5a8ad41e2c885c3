import type { Execution } from '../../core/execution';
import type { HandlerPlan } from '../handler-plan';

/** The warning of `onCompletionFailure: 'return'`. */
export function completionFailureReturned(plan: HandlerPlan, execution: Execution): string {
  return `${plan.where}: onCompletionFailure is 'return', so the caller gets the handler's response although its outcome was not recorded; ${execution.keyDigest} stays IN_PROGRESS and a retry after its lease may run the handler again`;
}

/**
 * What a caller of any adapter is told when, in strict mode with
 * `completion: 'transaction'`, its lease was lost before the commit: its
 * writes rolled back, and the record (moved to AMBIGUOUS by a duplicate that
 * found the lease run out) refuses a retry until it is resolved.
 */
export const LOST_IN_STRICT_MODE =
  "this request's lease on its idempotency key ran out before its transaction committed, so its writes were rolled back; strict mode has made the key's outcome unknown, and it is not processed again until the record is resolved";
