import type { Refusal } from '../../../core/refusal';
import type { HandlerPlan } from '../../config/handler-plan';
import { IdempotencyHttpException, problem } from './problem';
import { keySourceText } from '../door';

/** Every refusal as the problem document (RFC 9457) an HTTP client gets, with its status and `Retry-After`. */
export function problemFor(
  refusal: Refusal,
  plan: HandlerPlan,
  keyHeader: string,
): IdempotencyHttpException {
  const { code } = refusal;
  switch (refusal.code) {
    case 'idempotency-key-missing':
      return problem(
        400,
        code,
        plan.key.kind === 'header'
          ? `${plan.where} requires the ${keyHeader} header`
          : `${plan.where}: the request has no idempotency key (key: ${keySourceText(plan)})`,
      );
    case 'idempotency-key-invalid':
      return problem(400, code, refusal.detail);
    case 'idempotency-body-too-large':
      return problem(413, code, refusal.detail);
    case 'idempotency-body-unreadable':
      return problem(415, code, refusal.detail);
    case 'idempotency-key-reused':
      return problem(422, code, 'this idempotency key was already used with a different request');
    case 'idempotency-in-flight':
      return problem(
        409,
        code,
        'a request with this idempotency key is still being processed',
        refusal.retryAfterMs,
      );
    case 'idempotency-store-unavailable':
      return problem(
        503,
        code,
        refusal.detail ?? 'the idempotency store is unavailable; retry later',
        refusal.retryAfterMs,
      );
    case 'idempotency-outcome-unknown':
      // 409 as in flight, but no Retry-After: waiting does not help, only a resolution does.
      return problem(
        409,
        code,
        refusal.detail
          ? `${plan.where}: ${refusal.detail}`
          : `${plan.where}: an earlier request with this idempotency key may have been processed and its outcome is unknown; it is not processed again until the record is resolved`,
      );
    case 'idempotency-result-not-storable':
      return problem(
        500,
        code,
        refusal.detail ??
          'the request was processed, but its response could not be recorded for replay; retrying with this key will not run it again',
      );
    case 'idempotency-completion-failed':
      return problem(
        503,
        code,
        'the request was processed but its outcome could not be recorded',
        1000,
      );
    case 'idempotency-resumption-refused':
      return problem(RESUMPTION_STATUS[refusal.error.reason], code, refusal.error.message);
  }
}

/** A refused resumption by its reason: a malformed token, none to resume, resumed already, or too late. */
const RESUMPTION_STATUS = { invalid: 400, unknown: 404, consumed: 409, lapsed: 410 } as const;
