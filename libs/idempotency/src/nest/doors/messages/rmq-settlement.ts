import type { ExecutionContext } from '@nestjs/common';
import type { IdempotencyRmqOptions, RmqSettlement } from '../../config/idempotency.options';
import { microservices } from './microservices';

/** Why a delivery's handler did not run. */
export type Unhandled = 'replayed' | 'inFlight' | 'unavailable' | 'rejected';

const MIN_REQUEUE_DELAY_MS = 100;

/**
 * Settles a RabbitMQ delivery whose handler did not run, as the handler's
 * rules say, when its consumer acknowledges manually. Other transports, and
 * `noAck: true` consumers (the broker needs nothing; an ack would close the
 * channel with 406 PRECONDITION_FAILED), are left alone.
 *
 * A requeue waits first (the twin's remaining lease, within bounds), so a
 * duplicate that meets an in-flight twin is not redelivered in a hot loop.
 */
export function settleDelivery(
  context: ExecutionContext,
  rules: Required<IdempotencyRmqOptions>,
  why: Unhandled,
  retryAfterMs = 0,
): void {
  if (rules.noAck) return;
  const rpcContext = context.switchToRpc().getContext() as unknown;
  const { RmqContext } = microservices();
  if (!(rpcContext instanceof RmqContext)) return;
  const channel = rpcContext.getChannelRef() as {
    ack(message: unknown): void;
    nack(message: unknown, allUpTo?: boolean, requeue?: boolean): void;
  };
  const message = rpcContext.getMessage();
  const settlement: RmqSettlement = rules[why];
  const safely = (settle: () => void) => {
    try {
      settle();
    } catch {
      // The channel closed meanwhile: the broker redelivers the message itself.
    }
  };
  switch (settlement) {
    case 'ack':
      return safely(() => channel.ack(message));
    case 'dead-letter':
      return safely(() => channel.nack(message, false, false));
    case 'requeue': {
      const delay = Math.min(rules.maxRequeueDelayMs, Math.max(MIN_REQUEUE_DELAY_MS, retryAfterMs));
      setTimeout(() => safely(() => channel.nack(message, false, true)), delay).unref();
      return;
    }
  }
}
