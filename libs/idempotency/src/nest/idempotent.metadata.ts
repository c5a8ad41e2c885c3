import { Reflector } from '@nestjs/core';
import type { IdempotentOptions } from './config/handler-options';

/**
 * The `@Idempotent` options as metadata, on a method or a class. Read with
 * `reflector.get(IdempotentMetadata, target)`.
 */
export const IdempotentMetadata = Reflector.createDecorator<IdempotentOptions>({
  key: 'nest-idempotency:idempotent',
});
