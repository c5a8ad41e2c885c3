import { StreamableFile } from '@nestjs/common';
import {
  HEADERS_METADATA,
  METHOD_METADATA,
  PATH_METADATA,
  RESPONSE_PASSTHROUGH_METADATA,
  ROUTE_ARGS_METADATA,
  SSE_METADATA,
} from '@nestjs/common/constants';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum';
import { RequestMethod } from '@nestjs/common';
import { parseDuration } from '../core/duration';
import { IdempotencyConfigError } from '../core/errors';
import { hasControlCharacters } from '../core/key';
import { IdempotentOptions, IDEMPOTENT_METADATA, KeySource } from './idempotent.decorator';
import {
  BUILT_IN_DEFAULTS,
  DEFAULT_REPLAY_HEADERS,
  IdempotencyModuleOptions,
  NEVER_STORED_HEADERS,
} from './idempotency.options';
import { CompiledKeyExpression, compileKeyExpression } from './key-expression';

const PATTERN_METADATA = 'microservices:pattern';
const PATTERN_HANDLER_METADATA = 'microservices:handler_type';
/** `@nestjs/microservices` PatternHandler.EVENT */
const EVENT_HANDLER = 2;

export const HTTP_ROOTS = ['body', 'params', 'query', 'headers', 'user'] as const;
export const RPC_ROOTS = ['data', 'message'] as const;

export type KeyResolver =
  | { kind: 'header' }
  | { kind: 'expression'; expression: CompiledKeyExpression }
  | { kind: 'function'; fn: (source: KeySource) => string | number | undefined };

/** Everything the interceptor needs for one handler, resolved and validated at bootstrap. */
export interface HandlerPlan {
  where: string;
  transport: 'http' | 'rpc';
  scope: string;
  leaseMs: number;
  waitTimeoutMs: number;
  ttlMs: number;
  required: boolean;
  key: KeyResolver;
  fingerprint: false | 'default' | ((source: KeySource) => string | undefined);
  /** HTTP: `METHOD /route/path` for the fingerprint. */
  route?: string;
  /** HTTP: lower-cased response headers stored and replayed. */
  replayHeaders?: Set<string>;
  /** RPC: an @EventPattern (no reply) rather than a @MessagePattern. */
  isEvent?: boolean;
}

/** Reads the method's and its class's `@Idempotent` options; undefined when neither has one. */
export function readIdempotentOptions(
  target: object,
  handler: object,
): IdempotentOptions | undefined {
  const onMethod = Reflect.getMetadata(IDEMPOTENT_METADATA, handler) as
    IdempotentOptions | undefined;
  const onClass = Reflect.getMetadata(IDEMPOTENT_METADATA, target) as IdempotentOptions | undefined;
  if (!onMethod && !onClass) return undefined;
  return mergeDefined(onClass ?? {}, onMethod ?? {});
}

/** True when the method is a route handler or a message/event handler. */
export function isHandler(handler: object): boolean {
  return (
    Reflect.hasMetadata(PATH_METADATA, handler) || Reflect.hasMetadata(PATTERN_METADATA, handler)
  );
}

/**
 * Resolves one handler's plan with the precedence method → class → module
 * defaults → built-in defaults, and refuses anything that would go wrong per request.
 */
export function compileHandlerPlan(
  classRef: { name: string; prototype: object },
  methodName: string,
  options: IdempotentOptions,
  moduleOptions: IdempotencyModuleOptions,
): HandlerPlan {
  const where = `${classRef.name}.${methodName}`;
  const handler = (classRef.prototype as Record<string, object>)[methodName];
  const transport: 'http' | 'rpc' = Reflect.hasMetadata(PATTERN_METADATA, handler) ? 'rpc' : 'http';
  const defaults = { ...BUILT_IN_DEFAULTS, ...definedOnly(moduleOptions.defaults ?? {}) };
  const lease = options.lease ?? defaults.lease;
  const waitTimeout = options.waitTimeout ?? defaults.waitTimeout;
  const ttl = options.ttl ?? defaults.ttl;
  const leaseMs = parseDuration(lease, 'lease', { allowZero: false }, where);
  const waitTimeoutMs = parseDuration(waitTimeout, 'waitTimeout', { allowZero: true }, where);
  const ttlMs = parseDuration(ttl, 'ttl', { allowZero: false }, where);

  if (
    options.scope !== undefined &&
    (typeof options.scope !== 'string' ||
      options.scope.length === 0 ||
      hasControlCharacters(options.scope))
  ) {
    throw new IdempotencyConfigError(
      `${where}: option "scope" must be a non-empty string without control characters`,
    );
  }
  const plan: HandlerPlan = {
    where,
    transport,
    scope: options.scope ?? where,
    leaseMs,
    waitTimeoutMs,
    ttlMs,
    required:
      options.required ?? (transport === 'http' ? (moduleOptions.http?.required ?? true) : true),
    key: compileKey(options.key, transport, where),
    fingerprint: compileFingerprint(options.fingerprint, transport, where),
  };

  if (transport === 'http') {
    refuseStreamingHandler(classRef, methodName, handler, where);
    plan.route = routeOf(classRef, handler);
    const custom = (
      (Reflect.getMetadata(HEADERS_METADATA, handler) ?? []) as { name: string }[]
    ).map((h) => h.name);
    plan.replayHeaders = new Set(
      [...DEFAULT_REPLAY_HEADERS, ...(moduleOptions.http?.replayHeaders ?? []), ...custom]
        .map((h) => h.toLowerCase())
        .filter((h) => !NEVER_STORED_HEADERS.includes(h)),
    );
  } else {
    plan.isEvent = Reflect.getMetadata(PATTERN_HANDLER_METADATA, handler) === EVENT_HANDLER;
    if (plan.key.kind === 'header') {
      throw new IdempotencyConfigError(
        `${where}: option "key" is required on a message handler, e.g. 'data.orderId', 'message.key' or 'message.properties.messageId'`,
      );
    }
  }
  return plan;
}

function compileKey(
  key: IdempotentOptions['key'],
  transport: 'http' | 'rpc',
  where: string,
): KeyResolver {
  if (key === undefined) return { kind: 'header' };
  if (typeof key === 'function') return { kind: 'function', fn: key };
  if (typeof key === 'string') {
    return {
      kind: 'expression',
      expression: compileKeyExpression(key, transport === 'http' ? HTTP_ROOTS : RPC_ROOTS, where),
    };
  }
  throw new IdempotencyConfigError(
    `${where}: option "key" must be a string expression or a function, got ${typeof key}`,
  );
}

function compileFingerprint(
  option: IdempotentOptions['fingerprint'],
  transport: 'http' | 'rpc',
  where: string,
): HandlerPlan['fingerprint'] {
  if (option === undefined) return transport === 'http' ? 'default' : false;
  if (option === false) return false;
  if (option === true) return 'default';
  if (typeof option === 'function') return option;
  throw new IdempotencyConfigError(
    `${where}: option "fingerprint" must be true, false or a function`,
  );
}

function refuseStreamingHandler(
  classRef: object,
  methodName: string,
  handler: object,
  where: string,
): void {
  const args = (Reflect.getMetadata(ROUTE_ARGS_METADATA, classRef, methodName) ?? {}) as Record<
    string,
    unknown
  >;
  const takesResponse = Object.keys(args).some((k) => {
    const type = Number(k.split(':')[0]);
    return type === RouteParamtypes.RESPONSE || type === RouteParamtypes.NEXT;
  });
  const passthrough =
    Reflect.getMetadata(RESPONSE_PASSTHROUGH_METADATA, classRef, methodName) === true;
  if (takesResponse && !passthrough) {
    throw new IdempotencyConfigError(
      `${where}: @Idempotent cannot record a handler that writes the response itself (@Res() without passthrough); use @Res({ passthrough: true }) and return the body`,
    );
  }
  if (Reflect.getMetadata(SSE_METADATA, handler)) {
    throw new IdempotencyConfigError(
      `${where}: @Idempotent cannot record a server-sent event stream (@Sse)`,
    );
  }
  const prototype = (classRef as { prototype: object }).prototype;
  if (Reflect.getMetadata('design:returntype', prototype, methodName) === StreamableFile) {
    throw new IdempotencyConfigError(
      `${where}: @Idempotent cannot record a StreamableFile response; return the data instead`,
    );
  }
}

function routeOf(classRef: object, handler: object): string {
  const base = ([] as string[]).concat(Reflect.getMetadata(PATH_METADATA, classRef) ?? '')[0] ?? '';
  const path = ([] as string[]).concat(Reflect.getMetadata(PATH_METADATA, handler) ?? '')[0] ?? '';
  const method = RequestMethod[Reflect.getMetadata(METHOD_METADATA, handler) as number] ?? 'GET';
  const joined = `/${[base, path]
    .map((p) => p.replace(/^\/+|\/+$/g, ''))
    .filter(Boolean)
    .join('/')}`;
  return `${method} ${joined}`;
}

function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

function mergeDefined<T extends object>(base: T, override: T): T {
  return { ...base, ...definedOnly(override) };
}
