import type { Execution } from '../../core/execution';
import type { IdempotencyLogger } from '../../core/logger';
import {
  decodeHttpResponse,
  decodeValue,
  HttpResponseRecord,
  notStorableReason,
} from '../../core/payload';
import type { StoredPayload } from '../../core/store';
import type { HandlerPlan } from '../handler-plan';
import { problem } from '../http/problem';

/**
 * Strict mode and `onCompletionFailure` over HTTP: the refusal of an
 * AMBIGUOUS record, the replay of a record an operator or a reconcile hook
 * resolved, and the messages.
 */

/**
 * 409: the request conflicts with the state of the key (an earlier attempt
 * whose outcome nobody knows), as `idempotency-in-flight` does, but no
 * `Retry-After`: waiting does not help; only a resolution does.
 */
export function outcomeUnknownProblem(plan: HandlerPlan): ReturnType<typeof problem> {
  return problem(
    409,
    'idempotency-outcome-unknown',
    `${plan.where}: an earlier request with this idempotency key may have been processed and its outcome is unknown; it is not processed again until the record is resolved`,
  );
}

const HTTP_TAG = 0x68; // 'h': an HTTP response record (see core/payload.ts)
const LEGACY_TAG = 0x7b; // '{': a 0.1 record

/**
 * The response a replay writes. A record the handler completed holds its
 * response; one that `nest-idempotency resolve --completed --payload` or a
 * `reconcile` hook completed holds a value, replayed as JSON with the route's
 * status (`@HttpCode`, else 201 for POST and 200 otherwise).
 */
export function replayedResponse(payload: StoredPayload, plan: HandlerPlan): HttpResponseRecord {
  if (payload[0] === HTTP_TAG || payload[0] === LEGACY_TAG || notStorableReason(payload)) {
    return decodeHttpResponse(payload);
  }
  const value = decodeValue(payload);
  const status = plan.replayStatus ?? 200;
  if (value === undefined) return { status, headers: {}, body: Buffer.alloc(0) };
  return {
    status,
    headers: { 'content-type': 'application/json; charset=utf-8' },
    body: Buffer.from(JSON.stringify(value), 'utf8'),
  };
}

/**
 * Strict mode, and something answered before the handler returned: the
 * handler ran, so its record is completed without a response (a retry is
 * refused with `idempotency-result-not-storable`) rather than freed to run again.
 */
export async function completeAnsweredEarly(
  execution: Execution,
  plan: HandlerPlan,
  logger: IdempotencyLogger,
): Promise<void> {
  logger.warn(
    `${plan.where}: the response was sent before the handler returned (an interceptor answered first); strict mode completes ${execution.keyDigest} without a result, so a retry is refused rather than run again`,
  );
  try {
    await execution.completeNotStorable('the response was sent before the handler returned');
  } catch (error) {
    logger.error(`${plan.where}: ${(error as Error).message}`);
  }
}
