import { ConfigurableModuleBuilder } from '@nestjs/common';
import { IdempotencyModuleOptions } from './idempotency.options';

export const {
  ConfigurableModuleClass: ConfigurableIdempotencyModule,
  MODULE_OPTIONS_TOKEN: IDEMPOTENCY_MODULE_OPTIONS,
  OPTIONS_TYPE: IDEMPOTENCY_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: IDEMPOTENCY_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<IdempotencyModuleOptions>({ moduleName: 'Idempotency' })
  .setClassMethodName('forRoot')
  // Always global: the interceptor that @Idempotent applies resolves its
  // dependencies in the handler's own module, whichever that is.
  .setExtras({}, (definition) => ({ ...definition, global: true }))
  .build();
