import type { CallHandler, ExecutionContext } from '@nestjs/common';
import type { CallIdentity } from '../../../core/lifecycle';
import type { Refusal } from '../../../core/refusal';
import type { GatewayKeySource } from '../../config/handler-options';
import type { HandlerPlan } from '../../config/handler-plan';
import { replayedValue } from '../../replayed-value';
import { Door } from '../door';
import { wsException } from './ws-exceptions';

/**
 * A WebSocket gateway's `@SubscribeMessage` handlers (the `ws` and
 * `socket.io` adapters): the key from the message's data, the stored
 * acknowledgement (the handler's return value, which the adapter sends back:
 * socket.io's ack, or a `{ event, data }` response), the replay, and refusals
 * as `WsException`s, which the gateway's exception filter sends as its
 * `exception` event with their `code` and `retryAfterMs`.
 */
export class GatewayDoor extends Door {
  protected async serve(
    context: ExecutionContext,
    next: CallHandler,
    plan: HandlerPlan,
  ): Promise<unknown> {
    const source: GatewayKeySource = {
      type: 'ws',
      data: context.switchToWs().getData(),
      context,
    };
    const outcome = await this.performValue(plan, this.identify(plan, source, context), next);
    switch (outcome.kind) {
      case 'replayed': {
        const replayed = replayedValue(outcome.payload, plan);
        if (replayed.kind === 'error')
          throw this.rejected('idempotency-replayed-error', replayed.message);
        return replayed.value;
      }
      case 'refused':
        throw this.refusal(plan, outcome.refusal);
      case 'executed':
        if (!outcome.failure || plan.observe) return outcome.value;
        // A result too large to store: the record says the handler ran, and this client gets its answer.
        if (
          outcome.failure.refusal.code === 'idempotency-result-not-storable' &&
          outcome.failure.refusal.detail === undefined
        )
          return outcome.value;
        throw this.refusal(plan, outcome.failure.refusal);
    }
  }

  private identify(
    plan: HandlerPlan,
    source: GatewayKeySource,
    context: ExecutionContext,
  ): CallIdentity {
    const fingerprint = plan.fingerprint;
    return this.identityFrom(plan, source, context, () =>
      typeof fingerprint === 'function'
        ? ((fingerprint as (source: GatewayKeySource) => string | undefined)(source) ?? null)
        : null,
    );
  }

  /** A refusal as the gateway's client sees it: the `exception` event, with its code. */
  private refusal(plan: HandlerPlan, refusal: Refusal): Error {
    switch (refusal.code) {
      case 'idempotency-in-flight':
        return wsException(
          {
            status: 'error',
            code: refusal.code,
            message: `Idempotency key ${refusal.keyDigest} is still in flight; retry after ${refusal.retryAfterMs} ms`,
            retryAfterMs: refusal.retryAfterMs,
          },
          { scope: refusal.scope, keyDigest: refusal.keyDigest },
        );
      case 'idempotency-store-unavailable':
        if (refusal.retryAfterMs === undefined) {
          // Strict mode kept the key after a failed commit: a retry would only be refused.
          return this.rejected('idempotency-outcome-unknown', refusal.detail ?? '');
        }
        return wsException({
          status: 'error',
          code: refusal.code,
          message: refusal.detail ?? 'the idempotency store is unavailable; retry later',
          retryAfterMs: refusal.retryAfterMs,
        });
      case 'idempotency-outcome-unknown':
        return this.rejected(refusal.code, refusal.error?.message ?? refusal.detail ?? '');
      case 'idempotency-key-missing':
        return this.rejected(refusal.code, `${plan.where}: the message has no idempotency key`);
      case 'idempotency-key-reused':
        return this.rejected(
          refusal.code,
          `${refusal.keyDigest} was already used with a different message`,
        );
      case 'idempotency-result-not-storable':
        return this.rejected(
          refusal.code,
          refusal.detail ??
            `${plan.where}: the message was processed, but its result could not be recorded for replay; it is not run again`,
        );
      case 'idempotency-completion-failed':
        return this.rejected(refusal.code, refusal.detail);
      case 'idempotency-key-invalid':
      case 'idempotency-body-too-large':
      case 'idempotency-body-unreadable':
        return this.rejected('idempotency-key-invalid', refusal.detail);
      case 'idempotency-resumption-refused':
        return this.rejected(refusal.code, refusal.error.message);
    }
  }

  private rejected(code: string, message: string): Error {
    return wsException({ status: 'error', code, message });
  }
}
