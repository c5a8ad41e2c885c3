/**
 * `nest-idempotency`: the Nest module, the decorator and the interceptor, with
 * everything of `nest-idempotency/core`. Needs `@nestjs/common`, `@nestjs/core`,
 * `rxjs` and `reflect-metadata`; loads `@nestjs/microservices` only when the
 * application has message handlers. The PostgreSQL store is
 * `nest-idempotency/typeorm`.
 */
// First: records that this build is loaded (see core/loaded-builds.ts).
import './core/loaded-builds';
export * from './core';
export * from './nest/index';
