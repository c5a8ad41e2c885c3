import { Injectable } from '@nestjs/common';
import { IdempotencyEngine } from '../core/engine';
import { errorText } from '../core/error-text';
import { IdempotencyConfigError, IdempotencyStoreUnavailableError } from '../core/errors';

type Terminus = typeof import('@nestjs/terminus');
type HealthIndicatorService = InstanceType<Terminus['HealthIndicatorService']>;

/**
 * What `isHealthy` answers, as `@nestjs/terminus` expects an indicator to:
 * `{ [key]: { status: 'up' } }`, or `status: 'down'` with the reason as
 * `message`. Written out here so that the library's types need no terminus.
 */
export type IdempotencyHealthResult<Key extends string = string> = Record<
  Key,
  { status: 'up' } | { status: 'down'; message: string }
>;

export interface IdempotencyHealthOptions {
  /**
   * The longest the check may take, whatever the store does. Default 5000 ms.
   * Every built-in store also bounds its `ping()` by its own operation timeout;
   * this bounds a store of yours that does not.
   */
  timeoutMs?: number;
}

/** What a store without `ping()` is asked instead: a record that does not exist, read without a lock. */
const PROBE = { scope: 'nest-idempotency:health', key: 'ping' };

/**
 * A health indicator for `@nestjs/terminus` (11 or 12, an optional peer
 * loaded when this class is first created): one `ping()` of the module's
 * store (through the replay cache and the tracing store when they are on),
 * `up` when it answered, `down` with the reason when it did not.
 *
 * ```ts
 * @Module({
 *   imports: [TerminusModule],
 *   controllers: [HealthController],
 *   providers: [IdempotencyHealthIndicator],
 * })
 * export class HealthModule {}
 *
 * // in HealthController
 * @Get('health')
 * @HealthCheck()
 * check() {
 *   return this.health.check([() => this.idempotency.isHealthy('idempotency')]);
 * }
 * ```
 */
@Injectable()
export class IdempotencyHealthIndicator {
  private readonly indicators: HealthIndicatorService;

  constructor(private readonly engine: IdempotencyEngine) {
    this.indicators = new (loadTerminus().HealthIndicatorService)();
  }

  /**
   * Pings the store and reports it under `key` (default `idempotency`). A
   * store without `ping()` is checked with a `find` of a record that does not
   * exist. Never throws: a store that fails or does not answer within
   * `timeoutMs` is `down`, with the error's message.
   */
  async isHealthy<const Key extends string = 'idempotency'>(
    key: Key = 'idempotency' as Key,
    options: IdempotencyHealthOptions = {},
  ): Promise<IdempotencyHealthResult<Key>> {
    const timeoutMs = options.timeoutMs ?? 5000;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new IdempotencyConfigError(
        `IdempotencyHealthIndicator.isHealthy: timeoutMs must be a positive number of milliseconds, got ${String(options.timeoutMs)}`,
      );
    }
    const session = this.indicators.check(key);
    try {
      await withinMs(this.ping(), timeoutMs);
      return session.up() as IdempotencyHealthResult<Key>;
    } catch (error) {
      return session.down({ message: errorText(error) }) as IdempotencyHealthResult<Key>;
    }
  }

  private async ping(): Promise<void> {
    const store = this.engine.store;
    if (store.ping) await store.ping();
    else await store.find(PROBE);
  }
}

function withinMs(work: Promise<void>, timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new IdempotencyStoreUnavailableError(
            `the idempotency store did not answer the health check within ${timeoutMs} ms`,
          ),
        ),
      timeoutMs,
    );
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

let terminus: Terminus | undefined;

/** `@nestjs/terminus`, loaded when the indicator is first created: it is an optional peer. */
function loadTerminus(): Terminus {
  if (!terminus) {
    try {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      terminus = require('@nestjs/terminus') as Terminus;
    } catch (error) {
      throw new IdempotencyConfigError(
        `IdempotencyHealthIndicator needs @nestjs/terminus, which could not be loaded: ${errorText(error)}`,
        { cause: error },
      );
    }
  }
  if (typeof terminus.HealthIndicatorService !== 'function') {
    throw new IdempotencyConfigError(
      'IdempotencyHealthIndicator needs @nestjs/terminus 11 or later (HealthIndicatorService); the installed version has none',
    );
  }
  return terminus;
}
