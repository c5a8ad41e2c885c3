/**
 * The Nest surface, by group; with `nest-idempotency/core`'s names it is the
 * root entry point. Whatever is not listed is internal.
 */

// The module and its options.
export {
  IdempotencyModule,
  InjectIdempotencyOptions,
  InjectIdempotencyStore,
} from './idempotency.module';
export { IDEMPOTENCY_MODULE_OPTIONS } from './idempotency.module-definition';
export {
  DEFAULT_KEY_HEADER,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_PURGE,
  DEFAULT_REPLAY_HEADERS,
  DEFAULT_RMQ,
  NEVER_STORED_HEADERS,
} from './config/idempotency.options';
export type {
  IdempotencyDefaults,
  IdempotencyHttpOptions,
  IdempotencyModuleOptions,
  IdempotencyPurgeOptions,
  IdempotencyRmqOptions,
  IdempotencyStoreFromOptions,
  RmqSettlement,
  StoredHttpResponse,
  StoredResult,
  StoredRpcResult,
} from './config/idempotency.options';

// The decorator and its options.
export { Idempotent } from './idempotent.decorator';
export { IdempotentMetadata } from './idempotent.metadata';
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
export { IdempotencyInterceptor } from './idempotency.interceptor';
export { IdempotencyCtx } from './idempotency-ctx.decorator';

// What the doors answer.
export { IdempotencyHttpException, IdempotencyProblemFilter } from './doors/http/problem';
export type { ProblemDetails } from './doors/http/problem';
export type { IdempotencyWsError } from './doors/gateway/ws-exceptions';
export type { IdempotencyRpcError } from './doors/messages/rpc-exceptions';
export { IdempotencyGraphqlRefusal } from './doors/graphql/graphql-errors';

// Transactions, the purge, health.
export { IdempotencyTransaction } from './transaction/idempotency-transaction';
export { IdempotencyPurgeScheduler } from './idempotency-purge.scheduler';
export type { PurgeRun } from './idempotency-purge.scheduler';
export { IdempotencyHealthIndicator } from './idempotency.health';
export type { IdempotencyHealthOptions, IdempotencyHealthResult } from './idempotency.health';
