import { Inject, Logger, Module } from '@nestjs/common';
import { APP_FILTER, APP_INTERCEPTOR, DiscoveryModule } from '@nestjs/core';
import { IdempotencyEngine } from '../core/engine';
import { DEFAULT_MAX_KEY_LENGTH } from '../core/key';
import { IdempotencyStore } from '../core/store';
import { ReplayCachingStore } from '../stores/cache/replay-cache.store';
import { IdempotencyExplorer } from './idempotency.explorer';
import { IdempotencyPurgeScheduler } from './idempotency-purge.scheduler';
import { IdempotencyInterceptor } from './idempotency.interceptor';
import {
  ConfigurableIdempotencyModule,
  IDEMPOTENCY_MODULE_OPTIONS,
} from './idempotency.module-definition';
import { IdempotencyModuleOptions } from './idempotency.options';
import { IdempotencyProblemFilter } from './http/problem';
import { validateModuleOptions } from './validate-module-options';

/**
 * `IdempotencyModule.forRoot({ store, ... })` or `forRootAsync({ useFactory, inject })`.
 * Registers the interceptor and the problem+json filter globally; handlers opt in with `@Idempotent()`.
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: IdempotencyStore,
      inject: [IDEMPOTENCY_MODULE_OPTIONS],
      useFactory: (options: IdempotencyModuleOptions) => validateModuleOptions(options).store,
    },
    {
      provide: IdempotencyEngine,
      inject: [IdempotencyStore, IDEMPOTENCY_MODULE_OPTIONS],
      useFactory: (store: IdempotencyStore, options: IdempotencyModuleOptions) =>
        new IdempotencyEngine(
          options.cache ? new ReplayCachingStore(store, options.cache) : store,
          {
            logger: options.logger ?? new Logger('Idempotency'),
            maxKeyLength: options.http?.maxKeyLength ?? DEFAULT_MAX_KEY_LENGTH,
          },
        ),
    },
    IdempotencyExplorer,
    IdempotencyInterceptor,
    IdempotencyPurgeScheduler,
    { provide: APP_INTERCEPTOR, useExisting: IdempotencyInterceptor },
    { provide: APP_FILTER, useClass: IdempotencyProblemFilter },
  ],
  exports: [
    IdempotencyStore,
    IdempotencyEngine,
    IdempotencyPurgeScheduler,
    IDEMPOTENCY_MODULE_OPTIONS,
  ],
})
export class IdempotencyModule extends ConfigurableIdempotencyModule {}

/** Injects the configured `IdempotencyStore`. */
export const InjectIdempotencyStore = () => Inject(IdempotencyStore);
/** Injects the module options as given to `forRoot`/`forRootAsync`. */
export const InjectIdempotencyOptions = () => Inject(IDEMPOTENCY_MODULE_OPTIONS);
