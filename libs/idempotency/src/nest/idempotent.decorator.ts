import { applyDecorators, UseInterceptors } from '@nestjs/common';
import { IdempotencyInterceptor } from './idempotency.interceptor';
import type { IdempotentOptions } from './config/handler-options';
import { IdempotentMetadata } from './idempotent.metadata';
import { MarkHandlerEntry } from './doors/handler-entry';

export type {
  CommandKeySource,
  GatewayKeySource,
  GraphqlKeySource,
  HttpKeySource,
  IdempotencyCompletion,
  IdempotencyMode,
  IdempotentOptions,
  KeySource,
  RpcKeySource,
} from './config/handler-options';

/**
 * Runs the decorated handler (or every handler of the decorated class) once
 * per key: an HTTP route, a message handler (`@MessagePattern`,
 * `@EventPattern`), a GraphQL `@Mutation()`, a WebSocket gateway's
 * `@SubscribeMessage()` handler or a CQRS command handler's `execute`. Options on a method override those on its class, which
 * override the module's defaults. The interceptor travels with the handler,
 * so it applies however the application is assembled (a hybrid application's
 * microservice included); anything else it is put on fails the bootstrap.
 *
 * The decorated method (on a class: each of its handlers) is replaced by a
 * thin wrapper, metadata copied, that tells strict mode whether the
 * handler's body was entered (see nest/doors/handler-entry.ts).
 */
export const Idempotent = (options: IdempotentOptions = {}) =>
  applyDecorators(
    MarkHandlerEntry(),
    IdempotentMetadata(options),
    UseInterceptors(IdempotencyInterceptor),
  );
