/**
 * The metadata keys Nest's own decorators write, read here by value so that
 * nothing is deep-imported from Nest's internals and `@nestjs/microservices`
 * stays optional. A unit test (nest-metadata.spec.ts) pins each one by
 * applying Nest's own decorator, on both supported majors.
 */
export const NEST_METADATA = {
  /** `@Controller(path)`, `@Get(path)`…: present on every route handler. */
  path: 'path',
  /** The route's RequestMethod. */
  method: 'method',
  /** `@Header(name, value)` on a route. */
  headers: '__headers__',
  /** Parameter decorators (`@Res()`, `@Next()`…), keyed `"<RouteParamtypes>:<index>"`. */
  routeArguments: '__routeArguments__',
  /** `@Sse()`. */
  sse: '__sse__',
  /** `@Res({ passthrough: true })`. */
  responsePassthrough: '__responsePassthrough__',
  /** `@Controller({ version })` or `@Version()`. */
  version: '__version__',
  /** `@MessagePattern` / `@EventPattern`: present on every message handler. */
  pattern: 'microservices:pattern',
  /** 1: request/response (`@MessagePattern`), 2: event (`@EventPattern`). */
  patternHandler: 'microservices:handler_type',
  /** The `Transport` a message handler is bound to, when it names one (`@GrpcMethod`: GRPC). */
  transport: 'microservices:transport',
  /** `@SubscribeMessage` on a WebSocket gateway. */
  websocketMessage: 'message',
  /** `@WebSocketGateway()`. */
  websocketGateway: 'websockets:is_gateway',
  /** `@CommandHandler(Command)` (`@nestjs/cqrs`). */
  cqrsCommandHandler: '__commandHandler__',
  /** `@Resolver()` (GraphQL). */
  graphqlResolver: 'graphql:resolver_type',
  /** `@Query()`, `@Mutation()`… (GraphQL). */
  graphqlResolverName: 'graphql:resolver_name',
  /** `@ResolveField()` (GraphQL). */
  graphqlResolveField: 'graphql:resolve_property',
  /** `@Processor(queue)` (`@nestjs/bullmq`), on the class. */
  bullProcessor: 'bullmq:processor_metadata',
  /** `@Cron`, `@Interval`, `@Timeout` (`@nestjs/schedule`): which one, as `SchedulerType`. */
  schedulerType: 'SCHEDULER_TYPE',
  /** `@Cron(time, options)`: the options, with `cronTime`. */
  cronOptions: 'SCHEDULE_CRON_OPTIONS',
} as const;

/** `SchedulerType` of `@nestjs/schedule`. */
export const SCHEDULER_TYPE = { cron: 1, timeout: 2, interval: 3 } as const;

/** `RouteParamtypes` values of the parameter decorators that hand the handler the raw response. */
export const ROUTE_PARAM = { response: 1, next: 2 } as const;

/** `PatternHandler.EVENT`. */
export const EVENT_HANDLER = 2;
