import type { ExecutionContext } from '@nestjs/common';
import type { RmqSettlement } from '../../config/idempotency.options';
import type { RmqRules } from '../../config/module-settings';
import { microservices } from './microservices';

/** Why a delivery's handler did not run. */
export type Unhandled = 'replayed' | 'inFlight' | 'unavailable' | 'rejected';

const MIN_REQUEUE_DELAY_MS = 100;

const CONSUMER_NO_ACK = Symbol.for('nest-idempotency.rmq-consumer-no-ack');
const PATCHED = Symbol.for('nest-idempotency.rmq-server-patched');

/**
 * The RMQ transport consumes with its own `options.noAck`, which the
 * `RmqContext` does not carry. This marks each message the transport hands
 * over with its consumer's setting (a non-enumerable symbol property, invisible
 * to anything else), so that the library settles exactly when the consumer
 * acknowledges manually, whatever `rmq.noAck` says. Applied once, when the
 * application has message handlers; a transport that is not Nest's
 * `ServerRMQ` (or overrides `handleMessage` without calling it) leaves messages
 * unmarked, and `rmq.noAck` decides.
 */
export function recordRmqConsumerAck(): void {
  const { ServerRMQ } = microservices.get();
  const prototype = ServerRMQ.prototype as unknown as Record<symbol, unknown> & {
    handleMessage(message: unknown, channel: unknown): Promise<void>;
  };
  if (prototype[PATCHED] || typeof prototype.handleMessage !== 'function') return;
  const handleMessage = prototype.handleMessage;
  prototype.handleMessage = function (this: { noAck?: unknown }, message, channel) {
    if (message && typeof message === 'object' && typeof this.noAck === 'boolean') {
      Object.defineProperty(message, CONSUMER_NO_ACK, {
        value: this.noAck,
        enumerable: false,
        configurable: true,
      });
    }
    return handleMessage.call(this, message, channel);
  };
  Object.defineProperty(prototype, PATCHED, { value: true, enumerable: false });
}

/**
 * The `noAck` of the consumer that received this RabbitMQ delivery, as its
 * transport was configured; undefined for another transport, or when the
 * transport's setting could not be read.
 */
export function consumerNoAck(context: ExecutionContext): boolean | undefined {
  const rpcContext = context.switchToRpc().getContext() as unknown;
  const { RmqContext } = microservices.get();
  if (!(rpcContext instanceof RmqContext)) return undefined;
  const message = rpcContext.getMessage() as Record<symbol, unknown> | undefined;
  const value = message?.[CONSUMER_NO_ACK];
  return typeof value === 'boolean' ? value : undefined;
}

/**
 * Settles a RabbitMQ delivery whose handler did not run, as the handler's
 * rules say, when its consumer acknowledges manually: the transport's own
 * `noAck` where it is known (`consumerNoAck`), else `rmq.noAck`. Other
 * transports, and `noAck: true` consumers (the broker needs nothing; an ack
 * would close the channel with 406 PRECONDITION_FAILED), are left alone.
 *
 * A requeue waits first (the twin's remaining lease, within bounds), so a
 * duplicate that meets an in-flight twin is not redelivered in a hot loop.
 */
export function settleDelivery(
  context: ExecutionContext,
  rules: RmqRules,
  why: Unhandled,
  retryAfterMs = 0,
): void {
  const rpcContext = context.switchToRpc().getContext() as unknown;
  const { RmqContext } = microservices.get();
  if (!(rpcContext instanceof RmqContext)) return;
  if (consumerNoAck(context) ?? rules.noAck) return;
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
