import { applyDecorators, UseInterceptors } from '@nestjs/common';
import { IdempotencyInterceptor } from './idempotency.interceptor';
import type { IdempotentOptions } from './handler-options';
import { IdempotentMetadata } from './idempotent.metadata';

export type {
  GraphqlKeySource,
  HttpKeySource,
  IdempotencyMode,
  IdempotentOptions,
  KeySource,
  RpcKeySource,
} from './handler-options';

/**
 * Runs the decorated handler (or every handler of the decorated class) once
 * per key: an HTTP route, a message handler (`@MessagePattern`,
 * `@EventPattern`) or a GraphQL `@Mutation()`. Options on a method override those on its class, which
 * override the module's defaults. The interceptor travels with the handler,
 * so it applies however the application is assembled (a hybrid application's
 * microservice included); anything else it is put on fails the bootstrap.
 */
export const Idempotent = (options: IdempotentOptions = {}) =>
  applyDecorators(IdempotentMetadata(options), UseInterceptors(IdempotencyInterceptor));
