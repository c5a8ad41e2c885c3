import {
  CallHandler,
  ExecutionContext,
  Injectable,
  NestInterceptor,
  OnModuleInit,
  Optional,
} from '@nestjs/common';
import { from, mergeMap, Observable } from 'rxjs';
import { IdempotencyConfigError } from '../core/errors';
import { GatewayDoor } from './doors/gateway/gateway.door';
import { GraphqlDoor } from './doors/graphql/graphql.door';
import { GrpcDoor } from './doors/grpc/grpc.door';
import { HttpDoor } from './doors/http/http.door';
import { MessageDoor } from './doors/messages/message.door';
import { IdempotencyExplorer } from './idempotency.explorer';
import { IdempotentMetadata } from './idempotent.metadata';

/** Marks a call's context once the interceptor acted on it (a property: cheaper than a WeakSet entry per call). */
const SEEN = Symbol('nest-idempotency.seen');
/** How long a call that arrives before the plans are compiled waits for them (see `whenCompiled`). */
const BEFORE_INIT_WAIT_MS = 60_000;

/**
 * Applied by `@Idempotent()` itself, to the handler it decorates, so it runs
 * whatever the application's global configuration (a hybrid application's
 * microservice included). It only dispatches to the door of the call's kind
 * (HTTP, messages, GraphQL, gateways), which owns the key, the stored result and the refusals.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor, OnModuleInit {
  constructor(
    @Optional() private readonly explorer?: IdempotencyExplorer,
    @Optional() private readonly http?: HttpDoor,
    @Optional() private readonly messages?: MessageDoor,
    @Optional() private readonly graphql?: GraphqlDoor,
    @Optional() private readonly grpc?: GrpcDoor,
    @Optional() private readonly gateways?: GatewayDoor,
  ) {}

  onModuleInit(): void {
    if (
      !this.explorer ||
      !this.http ||
      !this.messages ||
      !this.graphql ||
      !this.grpc ||
      !this.gateways
    ) {
      throw new IdempotencyConfigError(
        '@Idempotent is used but IdempotencyModule is not configured: add IdempotencyModule.forRoot({ store }) (or forRootAsync) to the root module',
      );
    }
  }

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const explorer = this.explorer!;
    const plan = explorer.planFor(context.getClass(), context.getHandler());
    if (!plan && !explorer.isCompiled && isIdempotent(context)) {
      // Before the application's init hooks (a hybrid application's early message): wait for them.
      const where = `${context.getClass().name}.${context.getHandler().name}`;
      return from(explorer.whenCompiled(where, BEFORE_INIT_WAIT_MS)).pipe(
        mergeMap(() => this.intercept(context, next)),
      );
    }
    // @Idempotent on a class and on its method applies the interceptor twice; Nest
    // hands both the same context for one call, and only the first one acts.
    if (!plan || (context as { [SEEN]?: true })[SEEN]) return next.handle();
    (context as { [SEEN]?: true })[SEEN] = true;
    switch (context.getType<string>()) {
      case 'http':
        return this.http!.handle(context, next, plan);
      case 'rpc':
        return (plan.grpc ? this.grpc! : this.messages!).handle(context, next, plan);
      case 'graphql':
        return this.graphql!.handle(context, next, plan);
      case 'ws':
        return this.gateways!.handle(context, next, plan);
      default:
        // A transport this library does not protect (it refuses such handlers at bootstrap).
        return next.handle();
    }
  }
}

/** `@Idempotent` on the handler or its class. */
function isIdempotent(context: ExecutionContext): boolean {
  return (
    Reflect.getMetadata(IdempotentMetadata.KEY, context.getHandler()) !== undefined ||
    Reflect.getMetadata(IdempotentMetadata.KEY, context.getClass()) !== undefined
  );
}
