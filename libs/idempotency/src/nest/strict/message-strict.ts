import type { ExecutionContext } from '@nestjs/common';
import type { IdempotencyOutcomeUnknownException } from '../../core/errors';
import type { IdempotencyLogger } from '../../core/logger';
import type { HandlerPlan } from '../handler-plan';
import { microservices } from '../rpc/microservices';
import { settleDelivery } from '../rpc/rmq-settlement';
import { rpcExceptions } from '../rpc/rpc-exceptions';

/**
 * Strict mode, a message whose record is AMBIGUOUS. Redelivering it changes
 * nothing until someone resolves the record, so it is never left for a blind
 * retry:
 *
 * - Kafka `@EventPattern`: skipped (its offset committed) with an error in
 *   the log. On Nest 11 and 12 `ServerKafka.handleEvent` awaits the handler's
 *   stream, so anything thrown there fails kafkajs' `eachMessage`, which
 *   redelivers the message again and again and stalls its partition.
 * - Kafka `@MessagePattern`, and other transports' requests: an
 *   `IdempotencyOutcomeUnknownException` (an `RpcException`, not a
 *   `KafkaRetriableException`: `ServerKafka` publishes it to the reply topic
 *   and commits the offset).
 * - RabbitMQ with `noAck: false`: settled by the handler's `rejected` rule
 *   (dead-letter by default), then the exception as above.
 */
export function refuseOutcomeUnknown(
  context: ExecutionContext,
  plan: HandlerPlan,
  error: IdempotencyOutcomeUnknownException,
  logger: IdempotencyLogger,
): null {
  const { KafkaContext } = microservices();
  if (plan.isEvent && context.switchToRpc().getContext() instanceof KafkaContext) {
    logger.error(
      `${plan.where}: Kafka event skipped (idempotency-outcome-unknown), ${error.keyDigest} is AMBIGUOUS since ${error.since.toISOString()}; resolve it, then publish the event again if it did not run`,
    );
    return null;
  }
  logger.warn(
    `${plan.where}: delivery refused (idempotency-outcome-unknown): ${error.keyDigest} is AMBIGUOUS since ${error.since.toISOString()}`,
  );
  settleDelivery(context, plan.rmq!, 'rejected');
  throw rpcExceptions().outcomeUnknown(error);
}
