import type { CallHandler, ExecutionContext } from '@nestjs/common';
import type { CallIdentity } from '../../../core/lifecycle';
import type { Refusal } from '../../../core/refusal';
import type { HandlerPlan } from '../../config/handler-plan';
import type { RpcKeySource } from '../../config/handler-options';
import { replayedValue } from '../../replayed-value';
import { messageView } from './message-view';
import { microservices } from './microservices';
import { consumerNoAck, settleDelivery } from './rmq-settlement';
import { RpcExceptions, rpcExceptions } from './rpc-exceptions';
import { Door } from '../door';

/**
 * Message handlers (`@MessagePattern`, `@EventPattern`): the key from the
 * payload or the transport's message, the stored result (the handler's return
 * value as JSON), the replay, and refusals as RPC exceptions, with RabbitMQ
 * deliveries settled when their handler does not run.
 */
export class MessageDoor extends Door {
  /** Handlers whose stated `rmq.noAck` was found to contradict their consumer's: said once each. */
  private readonly noAckContradictions = new Set<string>();

  protected async serve(
    context: ExecutionContext,
    next: CallHandler,
    plan: HandlerPlan,
  ): Promise<unknown> {
    this.checkNoAck(context, plan);
    const source = this.keySource(context);
    const outcome = await this.performValue(plan, this.identify(plan, source, context), next);
    switch (outcome.kind) {
      case 'replayed': {
        settleDelivery(context, plan.rmq!, 'replayed');
        const replayed = replayedValue(outcome.payload, plan);
        if (replayed.kind === 'error') {
          if (plan.isEvent) return null;
          throw this.exceptions(context).rejected('idempotency-replayed-error', replayed.message);
        }
        // Always a value: an empty stream would make Kafka retry and a request/reply hang.
        return replayed.value ?? null;
      }
      case 'refused':
        return this.refuse(context, plan, outcome.refusal, false);
      case 'executed':
        if (!outcome.failure || plan.observe) return outcome.value;
        return this.refuse(context, plan, outcome.failure.refusal, true, outcome.value);
    }
  }

  /** What key expressions and functions see: the payload and the transport's message. */
  protected keySource(context: ExecutionContext): RpcKeySource {
    return {
      type: 'rpc',
      data: context.switchToRpc().getData(),
      message: messageView(context),
      context,
    };
  }

  /** How refusals are thrown to this transport's caller. */
  protected exceptions(_context: ExecutionContext): RpcExceptions {
    return rpcExceptions();
  }

  protected identify(
    plan: HandlerPlan,
    source: RpcKeySource,
    context: ExecutionContext,
  ): CallIdentity {
    return this.identityFrom(plan, source, context, () => this.fingerprintOf(plan, source));
  }

  /** The handler's fingerprint of the message: none unless it sets a function. */
  protected fingerprintOf(plan: HandlerPlan, source: RpcKeySource): string | null {
    if (plan.fingerprint === false || plan.fingerprint === 'default') return null;
    return (plan.fingerprint as (source: RpcKeySource) => string | undefined)(source) ?? null;
  }

  /**
   * A refusal as the message's caller gets it. `ran`: the handler ran, and
   * only its record failed: a result too large to store leaves its record
   * saying so, and this delivery still gets its value.
   */
  private refuse(
    context: ExecutionContext,
    plan: HandlerPlan,
    refusal: Refusal,
    ran: boolean,
    value?: unknown,
  ): unknown {
    const exceptions = this.exceptions(context);
    switch (refusal.code) {
      case 'idempotency-in-flight':
        settleDelivery(context, plan.rmq!, 'inFlight', refusal.retryAfterMs);
        throw exceptions.inFlight(refusal.retryAfterMs, refusal.scope, refusal.keyDigest);
      case 'idempotency-store-unavailable':
        if (refusal.retryAfterMs === undefined) {
          // Strict mode kept the key after a failed commit: a redelivery would only be refused.
          return this.reject(context, plan, 'idempotency-outcome-unknown', refusal.detail ?? '');
        }
        settleDelivery(context, plan.rmq!, 'unavailable', refusal.retryAfterMs);
        throw exceptions.unavailable(
          refusal.retryAfterMs,
          refusal.detail ?? 'the idempotency store is unavailable; retry later',
        );
      case 'idempotency-outcome-unknown':
        return refusal.error
          ? this.refuseOutcomeUnknown(context, plan, refusal.error)
          : this.reject(context, plan, refusal.code, refusal.detail ?? '');
      case 'idempotency-key-missing':
        return this.reject(
          context,
          plan,
          refusal.code,
          `${plan.where}: the message has no idempotency key`,
        );
      case 'idempotency-key-reused':
        return this.reject(
          context,
          plan,
          refusal.code,
          `${refusal.keyDigest} was already used with a different message`,
        );
      case 'idempotency-result-not-storable':
        if (ran && refusal.detail === undefined) return value; // the record says it ran
        if (!ran) {
          // The handler ran once; its result is not there to replay, and it is not run again.
          settleDelivery(context, plan.rmq!, 'replayed');
          if (plan.isEvent) return null;
          throw exceptions.rejected(
            refusal.code,
            `${plan.where}: the message was processed, but its result could not be recorded for replay; it is not run again`,
          );
        }
        return this.reject(context, plan, refusal.code, refusal.detail ?? '');
      case 'idempotency-completion-failed':
        throw exceptions.rejected(refusal.code, refusal.detail);
      case 'idempotency-key-invalid':
      case 'idempotency-body-too-large':
      case 'idempotency-body-unreadable':
        return this.reject(context, plan, 'idempotency-key-invalid', refusal.detail);
    }
  }

  /**
   * Strict mode, a message whose record is AMBIGUOUS. Redelivering it changes
   * nothing until someone resolves the record, so it is never left for a
   * blind retry: a Kafka event is skipped (its offset committed; throwing
   * would make kafkajs redeliver it again and again and stall its partition);
   * a request gets an `IdempotencyOutcomeUnknownError` (an `RpcException`:
   * not retried); a RabbitMQ delivery is settled by the `rejected` rule.
   */
  private refuseOutcomeUnknown(
    context: ExecutionContext,
    plan: HandlerPlan,
    error: NonNullable<Extract<Refusal, { code: 'idempotency-outcome-unknown' }>['error']>,
  ): null {
    if (this.isKafkaEvent(context, plan)) {
      this.logger.error(
        `${plan.where}: Kafka event skipped (idempotency-outcome-unknown), ${error.keyDigest} is AMBIGUOUS since ${error.since.toISOString()}; resolve it, then publish the event again if it did not run`,
      );
      return null;
    }
    this.logger.warn(
      `${plan.where}: delivery refused (idempotency-outcome-unknown): ${error.keyDigest} is AMBIGUOUS since ${error.since.toISOString()}`,
    );
    settleDelivery(context, plan.rmq!, 'rejected');
    // An event has no caller to answer: thrown, Nest would only log it again, with its stack.
    if (plan.isEvent) return null;
    throw this.exceptions(context).outcomeUnknown(error);
  }

  /**
   * A message that can never succeed as sent. A request is answered with the
   * error; a RabbitMQ delivery is settled by the handler's rules; an event is
   * not thrown (one warning line says why it was refused), and a Kafka event
   * is skipped (its offset committed) with an error in the log, since
   * throwing would make kafkajs retry it forever and stall its partition.
   */
  private reject(
    context: ExecutionContext,
    plan: HandlerPlan,
    code: string,
    message: string,
  ): null {
    if (this.isKafkaEvent(context, plan)) {
      this.logger.error(
        `${plan.where}: Kafka event skipped (${code}), it can never be processed as sent: ${message}`,
      );
      return null;
    }
    this.logger.warn(`${plan.where}: delivery refused (${code}): ${message}`);
    settleDelivery(context, plan.rmq!, 'rejected');
    // An event has no caller to answer: thrown, Nest would only log it again, with its stack.
    if (plan.isEvent) return null;
    throw this.exceptions(context).rejected(code, message);
  }

  /**
   * The consumer's own `noAck` (the RMQ transport's `options.noAck`) decides
   * whether a delivery is settled; an `rmq.noAck` that says otherwise is
   * ignored, and the first such delivery of each handler says which setting
   * to change, in one line.
   */
  private checkNoAck(context: ExecutionContext, plan: HandlerPlan): void {
    const rules = plan.rmq;
    if (!rules?.noAckStated || this.noAckContradictions.has(plan.where)) return;
    const actual = consumerNoAck(context);
    if (actual === undefined || actual === rules.noAck) return;
    this.noAckContradictions.add(plan.where);
    this.logger.warn(
      `${plan.where}: rmq.noAck is ${rules.noAck}, but its RabbitMQ consumer has noAck: ${actual} (the RMQ transport's options.noAck), which wins: ${actual ? 'the library settles none of its deliveries' : 'the library acks or nacks the deliveries whose handler does not run'}. Remove rmq.noAck (the library reads the transport's own), or set the transport's options.noAck to ${rules.noAck} if that is what the consumer needs`,
    );
  }

  private isKafkaEvent(context: ExecutionContext, plan: HandlerPlan): boolean {
    const { KafkaContext } = microservices.get();
    return plan.isEvent === true && context.switchToRpc().getContext() instanceof KafkaContext;
  }
}
