import { StreamableFile } from '@nestjs/common';
import { IdempotencyConfigError } from '../core/errors';
import { compilePolicy, ExecutionPolicy } from '../core/policy';
import type { IdempotencyRmqOptions } from './idempotency.options';
import { DEFAULT_REPLAY_HEADERS, NEVER_STORED_HEADERS } from './idempotency.options';
import type { IdempotentOptions, KeySource } from './handler-options';
import { CompiledKeyExpression, compileKeyExpression } from './key-expression';
import { compileRmq, ModuleSettings } from './module-settings';
import { EVENT_HANDLER, NEST_METADATA, ROUTE_PARAM } from './nest-metadata';

export const HTTP_ROOTS = ['body', 'params', 'query', 'headers', 'user'] as const;
export const RPC_ROOTS = ['data', 'message'] as const;
export const GRAPHQL_ROOTS = ['args', 'headers', 'user'] as const;

export type KeyResolver =
  | { kind: 'header' }
  | { kind: 'expression'; expression: CompiledKeyExpression }
  | { kind: 'function'; fn: (source: KeySource) => string | number | undefined };

export type Transport = 'http' | 'rpc' | 'graphql';

/** Everything the interceptor needs for one handler, resolved and validated at bootstrap. */
export interface HandlerPlan {
  /** `Class.method`, for messages. */
  where: string;
  transport: Transport;
  /** The scope and durations, parsed once. */
  policy: ExecutionPolicy;
  /** Observe mode: run as if there were no idempotency, never wait, and report what enforce would do. */
  observe: boolean;
  required: boolean;
  key: KeyResolver;
  fingerprint: false | 'default' | ((source: KeySource) => string | undefined);
  /** HTTP: lower-cased response headers stored and replayed. */
  replayHeaders?: Set<string>;
  /** RPC: an @EventPattern (no reply) rather than a @MessagePattern. */
  isEvent?: boolean;
  /** RPC: the RabbitMQ settlement rules for this handler. */
  rmq?: Required<IdempotencyRmqOptions>;
}

/** Which transport a method serves, or undefined when it is not a route or message handler. */
export function transportOf(handler: object): Transport | undefined {
  if (Reflect.hasMetadata(NEST_METADATA.pattern, handler)) return 'rpc';
  if (Reflect.hasMetadata(NEST_METADATA.path, handler)) return 'http';
  if (graphqlOperationOf(handler) === 'Mutation') return 'graphql';
  return undefined;
}

/** `Query`, `Mutation`, `Subscription`, a field's parent type, or undefined for a method that resolves nothing. */
export function graphqlOperationOf(handler: object): string | undefined {
  const type = Reflect.getMetadata(NEST_METADATA.graphqlResolver, handler) as unknown;
  return typeof type === 'string' ? type : undefined;
}

/** The one precedence rule: method options over class options (field by field), then module defaults. */
export function mergeOptions(
  onClass: IdempotentOptions | undefined,
  onMethod: IdempotentOptions | undefined,
): IdempotentOptions | undefined {
  if (!onClass && !onMethod) return undefined;
  return { ...definedOnly(onClass ?? {}), ...definedOnly(onMethod ?? {}) };
}

/**
 * Resolves one handler's plan with the precedence method → class → module
 * defaults → built-in defaults, and refuses anything that would go wrong per
 * request, naming `Class.method`.
 */
export function compileHandlerPlan(
  classRef: { name: string; prototype: object },
  methodName: string,
  transport: Transport,
  options: IdempotentOptions,
  settings: ModuleSettings,
): HandlerPlan {
  const where = `${classRef.name}.${methodName}`;
  const handler = (classRef.prototype as Record<string, object>)[methodName];
  if (options.scope !== undefined && typeof options.scope !== 'string') {
    throw new IdempotencyConfigError(`${where}: option "scope" must be a non-empty string`);
  }
  const policy = compilePolicy(
    {
      scope: options.scope ?? where,
      lease: options.lease ?? settings.defaults.lease,
      waitTimeout: options.waitTimeout ?? settings.defaults.waitTimeout,
      ttl: options.ttl ?? settings.defaults.ttl,
      maxKeyLength: settings.maxKeyLength,
    },
    where,
  );
  const mode = options.mode ?? settings.defaults.mode ?? 'enforce';
  if (mode !== 'enforce' && mode !== 'observe') {
    throw new IdempotencyConfigError(
      `${where}: option "mode" must be 'enforce' or 'observe', got ${JSON.stringify(mode)}`,
    );
  }
  const observe = mode === 'observe';
  const plan: HandlerPlan = {
    where,
    transport,
    // Observing never makes a caller wait.
    policy: observe ? { ...policy, waitTimeoutMs: 0 } : policy,
    observe,
    required: options.required ?? (transport === 'rpc' ? true : settings.required),
    key: compileKey(options.key, transport, where),
    fingerprint: compileFingerprint(options.fingerprint, transport, where),
  };

  if (transport === 'http') {
    refuseStreamingHandler(classRef, methodName, handler, where);
    const custom = (
      (Reflect.getMetadata(NEST_METADATA.headers, handler) ?? []) as { name: string }[]
    ).map((h) => h.name);
    plan.replayHeaders = new Set(
      [...DEFAULT_REPLAY_HEADERS, ...settings.replayHeaders, ...custom]
        .map((h) => h.toLowerCase())
        .filter((h) => !NEVER_STORED_HEADERS.includes(h)),
    );
    if (options.rmq !== undefined) {
      throw new IdempotencyConfigError(`${where}: option "rmq" applies to message handlers only`);
    }
  } else if (transport === 'graphql') {
    if (options.rmq !== undefined) {
      throw new IdempotencyConfigError(`${where}: option "rmq" applies to message handlers only`);
    }
  } else {
    plan.isEvent = Reflect.getMetadata(NEST_METADATA.patternHandler, handler) === EVENT_HANDLER;
    plan.rmq = compileRmq(options.rmq, `${where}: option "rmq`, settings.rmq);
    if (plan.key.kind === 'header') {
      throw new IdempotencyConfigError(
        `${where}: option "key" is required on a message handler, e.g. 'data.orderId', 'message.key' or 'message.properties.messageId'`,
      );
    }
  }
  return plan;
}

const ROOTS: Record<Transport, readonly string[]> = {
  http: HTTP_ROOTS,
  rpc: RPC_ROOTS,
  graphql: GRAPHQL_ROOTS,
};

function compileKey(
  key: IdempotentOptions['key'],
  transport: Transport,
  where: string,
): KeyResolver {
  if (key === undefined) return { kind: 'header' };
  if (typeof key === 'function') return { kind: 'function', fn: key };
  if (typeof key === 'string') {
    return {
      kind: 'expression',
      expression: compileKeyExpression(key, ROOTS[transport], where),
    };
  }
  throw new IdempotencyConfigError(
    `${where}: option "key" must be a string expression or a function, got ${typeof key}`,
  );
}

function compileFingerprint(
  option: IdempotentOptions['fingerprint'],
  transport: Transport,
  where: string,
): HandlerPlan['fingerprint'] {
  if (option === undefined) return transport === 'rpc' ? false : 'default';
  if (option === false) return false;
  if (option === true) {
    if (transport === 'rpc') {
      throw new IdempotencyConfigError(
        `${where}: option "fingerprint" has no default for a message handler; pass a function of the message, e.g. ({ data }) => JSON.stringify(data)`,
      );
    }
    return 'default';
  }
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
  const args = (Reflect.getMetadata(NEST_METADATA.routeArguments, classRef, methodName) ??
    {}) as Record<string, unknown>;
  const takesResponse = Object.keys(args).some((k) => {
    const type = Number(k.split(':')[0]);
    return type === ROUTE_PARAM.response || type === ROUTE_PARAM.next;
  });
  const passthrough =
    Reflect.getMetadata(NEST_METADATA.responsePassthrough, classRef, methodName) === true;
  if (takesResponse && !passthrough) {
    throw new IdempotencyConfigError(
      `${where}: @Idempotent cannot record a handler that writes the response itself (@Res() without passthrough); use @Res({ passthrough: true }) and return the body`,
    );
  }
  if (Reflect.getMetadata(NEST_METADATA.sse, handler)) {
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

function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
