import { createParamDecorator } from '@nestjs/common';
import { currentIdempotencyContext } from '../core/current-context';

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
export const IdempotencyCtx = createParamDecorator(() => currentIdempotencyContext());
