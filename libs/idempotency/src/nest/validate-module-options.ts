import { parseDuration } from '../core/duration';
import { IdempotencyConfigError } from '../core/errors';
import type { IdempotencyModuleOptions } from './idempotency.options';

const WHERE = 'IdempotencyModule';

/**
 * Checks the module's own options when the module starts, whether or not any
 * handler uses them, so a typo fails the bootstrap rather than a later request.
 */
export function validateModuleOptions(
  options: IdempotencyModuleOptions | undefined,
): IdempotencyModuleOptions {
  if (!options?.store || typeof options.store.tryAcquire !== 'function') {
    throw new IdempotencyConfigError(
      `${WHERE}: option "store" is required (an IdempotencyStore such as new TypeOrmIdempotencyStore(dataSource))`,
    );
  }
  const defaults = options.defaults ?? {};
  if (defaults.lease !== undefined)
    parseDuration(defaults.lease, 'defaults.lease', { allowZero: false }, WHERE);
  if (defaults.waitTimeout !== undefined) {
    parseDuration(defaults.waitTimeout, 'defaults.waitTimeout', { allowZero: true }, WHERE);
  }
  if (defaults.ttl !== undefined)
    parseDuration(defaults.ttl, 'defaults.ttl', { allowZero: false }, WHERE);
  const http = options.http ?? {};
  for (const name of ['maxKeyLength', 'maxBodyBytes'] as const) {
    const value = http[name];
    if (value !== undefined && (!Number.isInteger(value) || value < 1)) {
      throw new IdempotencyConfigError(
        `${WHERE}: option "http.${name}" must be a positive integer, got ${String(value)}`,
      );
    }
  }
  if (
    http.keyHeader !== undefined &&
    (typeof http.keyHeader !== 'string' || !/^[!#$%&'*+\-.^_`|~\w]+$/.test(http.keyHeader))
  ) {
    throw new IdempotencyConfigError(
      `${WHERE}: option "http.keyHeader" must be a header name, got ${JSON.stringify(http.keyHeader)}`,
    );
  }
  return options;
}
