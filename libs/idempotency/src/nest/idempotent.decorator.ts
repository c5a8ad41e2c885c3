import { applyDecorators, UseInterceptors } from '@nestjs/common';
import { IdempotencyInterceptor } from './idempotency.interceptor';
import type { IdempotentOptions } from './config/handler-options';
import { IdempotentMetadata } from './idempotent.metadata';
import { MarkHandlerEntry } from './doors/handler-entry';
import { MarkProviderMethod } from './doors/provider-methods/provider-method.registry';

export type {
  CommandKeySource,
  GatewayKeySource,
  GraphqlKeySource,
  HttpKeySource,
  IdempotencyCompletion,
  IdempotencyMode,
  IdempotentOptions,
  JobKeySource,
  KeySource,
  RpcKeySource,
} from './config/handler-options';

/**
 * Runs the decorated handler (or every handler of the decorated class) once
 * per key: an HTTP route, a message handler (`@MessagePattern`,
 * `@EventPattern`), a GraphQL `@Mutation()`, a WebSocket gateway's
 * `@SubscribeMessage()` handler, a CQRS command handler's `execute`, a
 * BullMQ processor's `process` or a `@Cron` method. Options on a method
 * override those on its class, which
 * override the module's defaults. The interceptor travels with the handler,
 * so it applies however the application is assembled (a hybrid application's
 * microservice included); anything else it is put on fails the bootstrap.
 *
 * The decorated method (on a class: each of its handlers) is replaced by a
 * thin wrapper, metadata copied, that tells strict mode whether the
 * handler's body was entered (see nest/doors/handler-entry.ts), and that
 * hands a command, a BullMQ job or a `@Cron` tick, which Nest does not
 * intercept, to the lifecycle (see nest/doors/provider-methods/provider-method.registry.ts).
 */
export const Idempotent = (options: IdempotentOptions = {}) =>
  applyDecorators(
    MarkHandlerEntry(),
    MarkProviderMethod(),
    IdempotentMetadata(options),
    UseInterceptors(IdempotencyInterceptor),
  );
