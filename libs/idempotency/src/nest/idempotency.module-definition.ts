import { ConfigurableModuleBuilder } from '@nestjs/common';
import { IdempotencyConfigError } from '../core/errors';
import { IdempotencyModuleOptions } from './config/idempotency.options';

export const {
  ConfigurableModuleClass: ConfigurableIdempotencyModule,
  MODULE_OPTIONS_TOKEN: IDEMPOTENCY_MODULE_OPTIONS,
  OPTIONS_TYPE: IDEMPOTENCY_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: IDEMPOTENCY_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<IdempotencyModuleOptions>({ moduleName: 'Idempotency' })
  .setClassMethodName('forRoot')
  // Always global: the interceptor that @Idempotent applies resolves its
  // dependencies in the handler's own module, whichever that is. `isGlobal`
  // is accepted as 0.1 wrote it (true), and refused when false.
  .setExtras({ isGlobal: true }, (definition, extras) => {
    if (extras.isGlobal === false) {
      throw new IdempotencyConfigError(
        'IdempotencyModule: option "isGlobal" cannot be false: the module is always global (since 0.2), so every module\'s @Idempotent handlers find it; import it once, in the root module',
      );
    }
    return { ...definition, global: true };
  })
  .build();
