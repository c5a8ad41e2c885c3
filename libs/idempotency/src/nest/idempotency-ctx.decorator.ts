import { createParamDecorator } from '@nestjs/common';
import { currentIdempotencyContext } from '../core/current-context';
import { NEST_METADATA } from './nest-metadata';

/**
 * Marks the parameter's factory. A symbol of the global registry, like the
 * current context's store, so that a handler plan compiled by one build of
 * the package (CommonJS or ES module) knows the decorator of the other.
 */
const READS_CONTEXT = Symbol.for('nest-idempotency.reads-context');

/** What Nest calls for the parameter: the context the lifecycle made current. */
const readContext = Object.assign(() => currentIdempotencyContext(), { [READS_CONTEXT]: true });

/**
 * The handler's `IdempotencyContext` as a parameter, on every door
 * `@Idempotent` protects (HTTP routes, GraphQL mutations, message handlers):
 * `charge(@Body() body: ChargeDto, @IdempotencyCtx() ctx: IdempotencyContext)`.
 * `undefined` where the call has no record: a handler without
 * `@Idempotent`, a call without a key where keys are optional, and observe
 * mode's runs of a record it did not take. Nest evaluates it inside the
 * interceptor's `next.handle()`, where the lifecycle has made the record's
 * context current.
 */
export const IdempotencyCtx = createParamDecorator(readContext);

/**
 * Whether `Class.method` takes an `@IdempotencyCtx()` parameter (Nest keeps
 * a custom parameter's factory in the method's route arguments). Only such a
 * handler runs with its context current: entering an AsyncLocalStorage turns
 * on promise hooks that every later promise of the process pays for.
 */
export function readsIdempotencyContext(classRef: object, methodName: string): boolean {
  const args = Reflect.getMetadata(NEST_METADATA.routeArguments, classRef, methodName) as
    Record<string, { factory?: unknown }> | undefined;
  return (
    args !== undefined &&
    Object.values(args).some(
      (arg) => (arg?.factory as Record<symbol, unknown> | undefined)?.[READS_CONTEXT] === true,
    )
  );
}
