import { FactoryProvider, Inject, Module } from '@nestjs/common';
import { DiscoveryModule, HttpAdapterHost } from '@nestjs/core';
import { IdempotencyEngine } from '../core/engine';
import type { IdempotencyLogger } from '../core/logger';
import { IdempotencyStore } from '../core/store';
import { ReplayCachingStore } from '../stores/cache/replay-cache.store';
import { instrumentIdempotencyEngine, TracingIdempotencyStore } from '../telemetry/opentelemetry';
import { GatewayDoor } from './doors/gateway/gateway.door';
import { GraphqlDoor } from './doors/graphql/graphql.door';
import { GrpcDoor } from './doors/grpc/grpc.door';
import { HttpDoor } from './doors/http/http.door';
import { MessageDoor } from './doors/messages/message.door';
import { IdempotencyExplorer } from './idempotency.explorer';
import { ProviderMethodsBinder } from './doors/provider-methods/provider-methods.binder';
import { IdempotencyPurgeScheduler } from './idempotency-purge.scheduler';
import {
  ConfigurableIdempotencyModule,
  IDEMPOTENCY_MODULE_OPTIONS,
} from './idempotency.module-definition';
import { IdempotencyModuleOptions } from './config/idempotency.options';
import { compileModuleSettings, ModuleSettings } from './config/module-settings';
import { MODULE_SETTINGS } from './config/module-settings.provider';
import { IdempotencyOpenApiDocumenter, openApiSwaggerProvider } from './openapi/openapi-documenter';
import { IdempotencyTransaction } from './transaction/idempotency-transaction';
import { IdempotencyTransactionRunner } from './transaction/transaction-runner';

/**
 * `IdempotencyModule.forRoot({ store, ... })` or `forRootAsync({ useFactory, inject })`,
 * once, in the root module (it is global). Handlers opt in with `@Idempotent()`,
 * which brings its own interceptor.
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: MODULE_SETTINGS,
      inject: [IDEMPOTENCY_MODULE_OPTIONS],
      useFactory: (options: IdempotencyModuleOptions) => compileModuleSettings(options),
    },
    {
      provide: IdempotencyStore,
      inject: [MODULE_SETTINGS],
      useFactory: (settings: ModuleSettings) => settings.store,
    },
    {
      provide: IdempotencyEngine,
      inject: [MODULE_SETTINGS],
      useFactory: (settings: ModuleSettings) => createEngine(settings),
    },
    {
      provide: HttpDoor,
      inject: [IdempotencyEngine, MODULE_SETTINGS, HttpAdapterHost, IdempotencyTransactionRunner],
      useFactory: (
        engine: IdempotencyEngine,
        settings: ModuleSettings,
        host: HttpAdapterHost,
        transactions: IdempotencyTransactionRunner,
      ) => new HttpDoor(engine, settings, host, settings.logger, transactions),
    },
    doorProvider(MessageDoor),
    doorProvider(GrpcDoor),
    doorProvider(GraphqlDoor),
    doorProvider(GatewayDoor),
    IdempotencyTransactionRunner,
    IdempotencyTransaction,
    IdempotencyExplorer,
    ProviderMethodsBinder,
    openApiSwaggerProvider,
    IdempotencyOpenApiDocumenter,
    IdempotencyPurgeScheduler,
  ],
  exports: [
    IdempotencyStore,
    IdempotencyEngine,
    IdempotencyExplorer,
    HttpDoor,
    MessageDoor,
    GrpcDoor,
    GraphqlDoor,
    GatewayDoor,
    IdempotencyTransaction,
    IdempotencyPurgeScheduler,
    IDEMPOTENCY_MODULE_OPTIONS,
    MODULE_SETTINGS,
  ],
})
export class IdempotencyModule extends ConfigurableIdempotencyModule {}

/** A door built as `new Door(engine, settings, logger, transactions)`, as most doors are. */
type DoorClass<T> = new (
  engine: IdempotencyEngine,
  settings: ModuleSettings,
  logger: IdempotencyLogger,
  transactions: IdempotencyTransactionRunner,
) => T;

function doorProvider<T>(door: DoorClass<T>): FactoryProvider<T> {
  return {
    provide: door,
    inject: [IdempotencyEngine, MODULE_SETTINGS, IdempotencyTransactionRunner],
    useFactory: (
      engine: IdempotencyEngine,
      settings: ModuleSettings,
      transactions: IdempotencyTransactionRunner,
    ) => new door(engine, settings, settings.logger, transactions),
  };
}

/** The engine over the configured store: with the replay cache and telemetry when asked for. */
function createEngine(settings: ModuleSettings): IdempotencyEngine {
  const { options } = settings;
  let store: IdempotencyStore = options.cache
    ? new ReplayCachingStore(settings.store, options.cache)
    : settings.store;
  const telemetry = typeof options.telemetry === 'object' ? (options.telemetry as object) : {};
  if (options.telemetry) store = new TracingIdempotencyStore(store, telemetry);
  const engine = new IdempotencyEngine(store, {
    logger: settings.logger,
    derivedKeys: options.derivedKeys,
    receipts: options.receipts,
  });
  if (options.telemetry) instrumentIdempotencyEngine(engine, telemetry);
  if (options.onEvent) engine.onEvent(options.onEvent);
  return engine;
}

/** Injects the configured `IdempotencyStore`. */
export const InjectIdempotencyStore = () => Inject(IdempotencyStore);
/** Injects the module options as given to `forRoot`/`forRootAsync`. */
export const InjectIdempotencyOptions = () => Inject(IDEMPOTENCY_MODULE_OPTIONS);
