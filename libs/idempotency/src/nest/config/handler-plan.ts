import { StreamableFile } from '@nestjs/common';
import { IdempotencyConfigError } from '../../core/errors';
import { refuseUnknownOptions } from '../../core/option-keys';
import { compilePolicy, ExecutionPolicy, PolicyOptions } from '../../core/policy';
import { assertStrictModeSupported } from '../../core/strict';
import type { FingerprintForm } from '../doors/http/fingerprint';
import {
  DEFAULT_REPLAY_HEADERS,
  NEVER_STORED_HEADERS,
  RMQ_OPTION_KEYS,
} from './idempotency.options';
import { IDEMPOTENT_OPTION_KEYS, IdempotentOptions, KeySource } from './handler-options';
import { CompiledKeyExpression, compileKeyExpression } from './key-expression';
import { compileRmq, ModuleSettings, RmqRules } from './module-settings';
import { EVENT_HANDLER, NEST_METADATA, ROUTE_PARAM } from '../nest-metadata';
import { compileGrpcMethod } from '../doors/grpc/grpc-method';
import { readsIdempotencyContext } from '../idempotency-ctx.decorator';

export const HTTP_ROOTS = ['body', 'params', 'query', 'headers', 'user'] as const;
export const RPC_ROOTS = ['data', 'message'] as const;
export const GRAPHQL_ROOTS = ['args', 'headers', 'user'] as const;
export const GATEWAY_ROOTS = ['data'] as const;
export const COMMAND_ROOTS = ['command'] as const;
export const JOB_ROOTS = ['job', 'data'] as const;

export type KeyResolver =
  | { kind: 'header' }
  | { kind: 'expression'; expression: CompiledKeyExpression }
  | { kind: 'function'; fn: (source: KeySource) => string | number | undefined };

/**
 * `ws`: a WebSocket gateway's `@SubscribeMessage`; `command`: a CQRS command handler's `execute`;
 * `job`: a BullMQ processor's `process`; `tick`: a `@Cron` method (the last three run through the
 * explorer's wrappers, not an interceptor).
 */
export type Transport = 'http' | 'rpc' | 'graphql' | 'ws' | 'command' | 'job' | 'tick';

/** Doors whose key comes from the call itself (no key header), with no default fingerprint. */
const KEYED_BY_MESSAGE: readonly Transport[] = ['rpc', 'ws', 'command', 'job', 'tick'];

/** Everything the interceptor needs for one handler, resolved and validated at bootstrap. */
export interface HandlerPlan {
  /** `Class.method`, for messages. */
  where: string;
  transport: Transport;
  /** The scope and durations, parsed once. */
  policy: ExecutionPolicy;
  /** `transaction`: the handler runs in a database transaction that also completes the record. */
  completion: 'separate' | 'transaction';
  /** Observe mode: run as if there were no idempotency, never wait, and report what enforce would do. */
  observe: boolean;
  required: boolean;
  key: KeyResolver;
  fingerprint: false | 'default' | ((source: KeySource) => string | undefined);
  /** HTTP, default fingerprint: `shared-scope` when other routes share the scope on purpose (set by the explorer). */
  fingerprintForm?: FingerprintForm;
  /** HTTP: lower-cased response headers stored and replayed. */
  replayHeaders?: Set<string>;
  /** HTTP: the status a replay of a resolved record (a value, not a response) goes out with. */
  replayStatus?: number;
  /** HTTP: the status of a suspension's answer (`@HttpCode` if the route sets one, else 202). */
  suspendStatus?: number;
  /** HTTP: the scope whose suspended records this route resumes (`resumes`). */
  resumes?: string;
  /** RPC: a unary `@GrpcMethod` (keyed by its metadata by default; refusals as gRPC statuses). */
  grpc?: boolean;
  /** RPC: an @EventPattern (no reply) rather than a @MessagePattern. */
  isEvent?: boolean;
  /** RPC: the RabbitMQ settlement rules for this handler. */
  rmq?: RmqRules;
  /** The handler takes an `@IdempotencyCtx()` parameter: its work runs with the context current. */
  readsContext: boolean;
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
  refuseUnknownOptions(options, IDEMPOTENT_OPTION_KEYS, where);
  refuseUnknownOptions(options.rmq, RMQ_OPTION_KEYS, where, 'rmq.');
  if (transport === 'job' || transport === 'tick')
    refuseProviderMethodOptions(options, transport, where);
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
      ...strictOptions(options, settings),
    },
    where,
  );
  assertStrictModeSupported(policy, settings.store);
  const mode = options.mode ?? settings.defaults.mode ?? 'enforce';
  if (mode !== 'enforce' && mode !== 'observe') {
    throw new IdempotencyConfigError(
      `${where}: option "mode" must be 'enforce' or 'observe', got ${JSON.stringify(mode)}`,
    );
  }
  const observe = mode === 'observe';
  const completion = options.completion ?? settings.defaults.completion ?? 'separate';
  if (completion !== 'separate' && completion !== 'transaction') {
    throw new IdempotencyConfigError(
      `${where}: option "completion" must be 'separate' or 'transaction', got ${JSON.stringify(completion)}`,
    );
  }
  if (completion === 'transaction' && !settings.store.transactional) {
    throw new IdempotencyConfigError(
      `${where}: option completion: 'transaction' needs a store that completes inside a database transaction (TypeOrmIdempotencyStore); ${storeName(settings.store)} cannot`,
    );
  }
  const grpc = transport === 'rpc' && compileGrpcMethod(handler, where);
  const plan: HandlerPlan = {
    where,
    transport,
    // Observing never makes a caller wait.
    // Observing never makes a caller wait, and never makes a record AMBIGUOUS.
    policy: observe ? { ...policy, waitTimeoutMs: 0, strict: false } : policy,
    observe,
    completion,
    required:
      options.required ??
      (KEYED_BY_MESSAGE.includes(transport)
        ? true
        : options.resumes === undefined && settings.required),
    key: compileKey(options.key, transport, where),
    fingerprint: compileFingerprint(options.fingerprint, grpc ? 'grpc' : transport, where),
    readsContext: readsIdempotencyContext(classRef, methodName),
  };

  if (transport === 'http') {
    refuseStreamingHandler(classRef, methodName, handler, where);
    const custom = (
      (Reflect.getMetadata(NEST_METADATA.headers, handler) ?? []) as { name: string }[]
    ).map((h) => h.name);
    plan.replayStatus = routeStatus(handler);
    const explicit = Reflect.getMetadata('__httpCode__', handler) as unknown;
    plan.suspendStatus = typeof explicit === 'number' ? explicit : 202;
    if (options.resumes !== undefined) {
      plan.resumes = compileResumes(options.resumes, completion, observe, settings, where);
    }
    plan.replayHeaders = new Set(
      [...DEFAULT_REPLAY_HEADERS, ...settings.replayHeaders, ...custom]
        .map((h) => h.toLowerCase())
        .filter((h) => !NEVER_STORED_HEADERS.includes(h)),
    );
    if (options.rmq !== undefined) {
      throw new IdempotencyConfigError(`${where}: option "rmq" applies to message handlers only`);
    }
    return plan;
  }
  if (options.resumes !== undefined) {
    throw new IdempotencyConfigError(
      `${where}: option "resumes" applies to HTTP routes only (the engine has engine.resume)`,
    );
  }
  if (transport === 'job' || transport === 'tick') {
    // Checked before the plan was built (refuseProviderMethodOptions).
  } else if (transport !== 'rpc') {
    if (options.rmq !== undefined) {
      throw new IdempotencyConfigError(`${where}: option "rmq" applies to message handlers only`);
    }
    if (transport !== 'graphql' && plan.key.kind === 'header') {
      throw new IdempotencyConfigError(
        transport === 'ws'
          ? `${where}: option "key" is required on a gateway's message handler, e.g. 'data.requestId'`
          : `${where}: option "key" is required on a command handler, e.g. 'command.orderId'`,
      );
    }
  } else {
    plan.isEvent = Reflect.getMetadata(NEST_METADATA.patternHandler, handler) === EVENT_HANDLER;
    plan.rmq = compileRmq(options.rmq, `${where}: option "rmq`, settings.rmq);
    if (grpc) plan.grpc = true;
    else if (plan.key.kind === 'header') {
      throw new IdempotencyConfigError(
        `${where}: option "key" is required on a message handler, e.g. 'data.orderId', 'message.key' or 'message.properties.messageId'`,
      );
    }
  }
  return plan;
}

/** `resumes`: a scope to resume, on a store that holds continuations, outside transactions and observe mode. */
function compileResumes(
  resumes: unknown,
  completion: 'separate' | 'transaction',
  observe: boolean,
  settings: ModuleSettings,
  where: string,
): string {
  if (typeof resumes !== 'string' || resumes.length === 0) {
    throw new IdempotencyConfigError(
      `${where}: option "resumes" must be the scope of the handler that suspends (a non-empty string, e.g. 'PaymentsController.pay')`,
    );
  }
  if (!settings.store.continuations) {
    throw new IdempotencyConfigError(
      `${where}: option "resumes" needs a store with continuations (store.continuations); ${storeName(settings.store)} has none`,
    );
  }
  if (completion === 'transaction' || observe) {
    throw new IdempotencyConfigError(
      `${where}: option "resumes" cannot be combined with ${observe ? "mode: 'observe'" : "completion: 'transaction'"}`,
    );
  }
  return resumes;
}

const ROOTS: Record<Transport, readonly string[]> = {
  http: HTTP_ROOTS,
  rpc: RPC_ROOTS,
  graphql: GRAPHQL_ROOTS,
  ws: GATEWAY_ROOTS,
  command: COMMAND_ROOTS,
  job: JOB_ROOTS,
  tick: [],
};

/** A job's or a tick's options: no RabbitMQ rules; a tick's key and fingerprint come from its schedule. */
function refuseProviderMethodOptions(
  options: IdempotentOptions,
  transport: 'job' | 'tick',
  where: string,
): void {
  const applies = transport === 'job' ? 'a BullMQ job' : 'a @Cron tick';
  if (options.rmq !== undefined) {
    throw new IdempotencyConfigError(`${where}: option "rmq" applies to message handlers only`);
  }
  if (transport === 'tick') {
    for (const name of ['key', 'fingerprint', 'required'] as const) {
      if (options[name] === undefined) continue;
      throw new IdempotencyConfigError(
        `${where}: option "${name}" does not apply to ${applies}: its key is the tick's scheduled time and the job's name; remove it`,
      );
    }
  }
}

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

/** gRPC methods have a default fingerprint (their request message), other message handlers none. */
function compileFingerprint(
  option: IdempotentOptions['fingerprint'],
  transport: Transport | 'grpc',
  where: string,
): HandlerPlan['fingerprint'] {
  const keyedByMessage = transport !== 'grpc' && KEYED_BY_MESSAGE.includes(transport);
  if (option === undefined) return keyedByMessage ? false : 'default';
  if (option === false) return false;
  if (option === true) {
    if (keyedByMessage) {
      throw new IdempotencyConfigError(
        transport === 'command'
          ? `${where}: option "fingerprint" has no default for a command handler; pass a function of the command, e.g. ({ command }) => JSON.stringify(command)`
          : `${where}: option "fingerprint" has no default for a ${transport === 'job' ? 'job' : 'message handler'}; pass a function of the message, e.g. ({ data }) => JSON.stringify(data)`,
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

function storeName(store: object): string {
  const name = (store as { constructor?: { name?: string } }).constructor?.name;
  return name && name !== 'Object' ? name : 'this store';
}

/**
 * Strict mode's options over the module's defaults. The module's
 * `notExecuted` and `reconcile` reach strict handlers only, so a module-wide
 * hook does not make every other handler's bootstrap fail.
 */
function strictOptions(
  options: IdempotentOptions,
  settings: ModuleSettings,
): Partial<PolicyOptions> {
  const defaults = settings.defaults;
  const onExpiredLease = options.onExpiredLease ?? defaults.onExpiredLease;
  const strict = onExpiredLease === 'refuse';
  return {
    onExpiredLease,
    onCompletionFailure: options.onCompletionFailure ?? defaults.onCompletionFailure,
    notExecuted: options.notExecuted ?? (strict ? defaults.notExecuted : undefined),
    reconcile: options.reconcile ?? (strict ? defaults.reconcile : undefined),
  };
}

/** `@HttpCode`, else Nest's default: 201 for POST, 200 otherwise. */
function routeStatus(handler: object): number {
  const code = Reflect.getMetadata('__httpCode__', handler) as unknown;
  if (typeof code === 'number') return code;
  return Reflect.getMetadata(NEST_METADATA.method, handler) === 1 ? 201 : 200;
}

function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
