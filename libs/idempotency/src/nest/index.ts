export * from './idempotency.module';
export { IDEMPOTENCY_MODULE_OPTIONS } from './idempotency.module-definition';
export * from './idempotency.options';
export * from './idempotent.decorator';
export * from './idempotency.interceptor';
export { IdempotencyHttpException, IdempotencyProblemFilter } from './http/problem';
export type { ProblemDetails } from './http/problem';
export * from './rpc/rpc-exceptions';
export * from './idempotency-purge.scheduler';
