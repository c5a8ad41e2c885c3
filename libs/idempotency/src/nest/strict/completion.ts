import type { Execution } from '../../core/execution';
import type { HandlerPlan } from '../handler-plan';

/** The warning of `onCompletionFailure: 'return'`. */
export function completionFailureReturned(plan: HandlerPlan, execution: Execution): string {
  return `${plan.where}: onCompletionFailure is 'return', so the caller gets the handler's response although its outcome was not recorded; ${execution.keyDigest} stays IN_PROGRESS and a retry after its lease may run the handler again`;
}
