import { FactoryProvider, Inject, Injectable, RequestMethod } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import { optionalPeer, preloadOptionalPeer } from '../../core/optional-peer';
import { compileHandlerPlan, HandlerPlan, mergeOptions, transportOf } from '../config/handler-plan';
import { IdempotentMetadata } from '../idempotent.metadata';
import type { ModuleSettings } from '../config/module-settings';
import { MODULE_SETTINGS } from '../config/module-settings.provider';
import { NEST_METADATA } from '../nest-metadata';

type Swagger = typeof import('@nestjs/swagger');

/** Injection token of `@nestjs/swagger` as the documenter uses it. */
const OPENAPI_SWAGGER = Symbol.for('nest-idempotency.openapi-swagger');

/**
 * `@nestjs/swagger` when the application has it installed and `openapi` is
 * on, else null (never an error). Loaded by an async provider, while the
 * application is created: Nest 12's is an ES module, which only `import()`
 * loads under Jest's ES-module runtime, and the documenter needs it before
 * `SwaggerModule.createDocument`. Wrapped in an object: explorers of other
 * packages (`@nestjs/graphql`'s) read every provider's value as an object.
 */
export const openApiSwaggerProvider: FactoryProvider<Promise<{ api: Swagger | null }>> = {
  provide: OPENAPI_SWAGGER,
  inject: [MODULE_SETTINGS],
  useFactory: async (settings: ModuleSettings) => {
    if (!settings.openapi) return { api: null };
    await preloadOptionalPeer('@nestjs/swagger');
    try {
      return { api: optionalPeer<Swagger>('@nestjs/swagger') };
    } catch {
      return { api: null };
    }
  },
};

/** Handlers already documented, so a second application in the same process adds nothing twice. */
const documented = new WeakSet<object>();

/** The component every refusal's `application/problem+json` content refers to. */
const PROBLEM_COMPONENT = 'IdempotencyProblemDetails';

/**
 * One response as Swagger keeps it in a method's `swagger/apiResponse`
 * metadata (status → the `@ApiResponse` options without `status`): the same
 * shape on `@nestjs/swagger` 11 and 12.
 */
interface ResponseEntry {
  description?: string;
  type?: unknown;
  schema?: unknown;
  content?: Record<string, unknown>;
  headers?: Record<string, unknown>;
  [option: string]: unknown;
}
type Responses = Record<string, ResponseEntry>;

/** A refusal the library may answer a route with. */
interface Refusal {
  status: number;
  description: string;
  retryAfter: boolean;
}

/**
 * Documents every `@Idempotent` route in the OpenAPI document: the key header,
 * `Idempotent-Replayed` on the route's own responses, and the refusals as
 * `application/problem+json` responses referring to one component. It runs
 * while the application is created, before `SwaggerModule.createDocument`, so
 * it knows the module's settings (the key header's name, the body limit).
 * Nothing happens without `@nestjs/swagger`, or with `http: { openapi: false }`.
 *
 * The route keeps every response the application declares or Swagger infers:
 * a route with none gets the one Swagger would infer (201 for POST, 200
 * otherwise, or the `@HttpCode`), and one the Swagger CLI plugin inferred from
 * the return type is applied first (the plugin's own pass, at document time,
 * adds nothing to a route that already has responses).
 */
@Injectable()
export class IdempotencyOpenApiDocumenter {
  constructor(
    discovery: DiscoveryService,
    scanner: MetadataScanner,
    reflector: Reflector,
    @Inject(MODULE_SETTINGS) settings: ModuleSettings,
    @Inject(OPENAPI_SWAGGER) { api }: { api: Swagger | null },
  ) {
    if (!api) return;
    for (const wrapper of discovery.getControllers()) {
      if (typeof wrapper.metatype !== 'function') continue;
      const classRef = wrapper.metatype as unknown as { name: string; prototype: object };
      const onClass = reflector.get(IdempotentMetadata, classRef as never);
      for (const methodName of scanner.getAllMethodNames(classRef.prototype)) {
        const handler = (classRef.prototype as Record<string, object>)[methodName];
        if (documented.has(handler) || transportOf(handler) !== 'http') continue;
        const options = mergeOptions(onClass, reflector.get(IdempotentMetadata, handler as never));
        if (!options) continue;
        let plan: HandlerPlan;
        try {
          plan = compileHandlerPlan(classRef, methodName, 'http', options, settings);
        } catch {
          continue; // the explorer refuses it at init, naming the handler
        }
        documented.add(handler);
        const descriptor = Object.getOwnPropertyDescriptor(classRef.prototype, methodName);
        if (!descriptor) continue;
        documentRoute(api, classRef, methodName, descriptor, plan, settings);
      }
    }
  }
}

function documentRoute(
  api: Swagger,
  classRef: { prototype: object },
  methodName: string,
  descriptor: PropertyDescriptor,
  plan: HandlerPlan,
  settings: ModuleSettings,
): void {
  const handler = descriptor.value as object;
  const header = keyHeaderOf(plan, settings);
  if (header) {
    api.ApiHeader({
      name: header,
      required: plan.required && !plan.observe,
      description: `Idempotency key: a retry with the same key replays the first response (marked \`Idempotent-Replayed: true\`) instead of running ${plan.where} again. At most ${settings.maxKeyLength} characters.`,
      schema: { type: 'string', minLength: 1, maxLength: settings.maxKeyLength },
    })(classRef.prototype, methodName, descriptor);
  }
  if (plan.observe) return; // observe mode never refuses a request, nor replays one

  applyPluginResponses(api, classRef, methodName, descriptor);
  const key = api.DECORATORS.API_RESPONSE;
  const declared = Reflect.getMetadata(key, handler) as Responses | undefined;
  const onClass = (Reflect.getMetadata(key, classRef.prototype.constructor) ?? {}) as Responses;
  const responses: Responses = { ...declared };
  if (!declared) {
    // What Swagger shows for a method that declares nothing, unless the class declares that status.
    const status = defaultStatusOf(handler);
    if (!(status in onClass)) responses[status] = {};
  }
  for (const [status, entry] of Object.entries(onClass)) {
    // A success response declared on the controller applies here too: copied, to carry the header.
    if (isAnswer(status) && !(status in responses)) responses[status] = entry;
  }
  for (const [status, entry] of Object.entries(responses)) {
    if (!isAnswer(status)) continue;
    responses[status] = {
      ...entry,
      description: entry.description ?? '',
      headers: { 'Idempotent-Replayed': REPLAYED_HEADER, ...entry.headers },
    };
  }
  for (const refusal of refusalsOf(plan, settings)) {
    const status = String(refusal.status);
    responses[status] = withRefusal(responses[status], refusal);
  }
  Reflect.defineMetadata(key, responses, handler);
  api.ApiExtraModels(problemModel(api))(classRef.prototype, methodName, descriptor);
}

/**
 * What the Swagger CLI plugin inferred for this method (its response type
 * from the return type), applied as Swagger applies it when it makes the
 * document: the class nearest the method wins, and responses the method
 * already declares are left alone.
 */
function applyPluginResponses(
  api: Swagger,
  classRef: { prototype: object },
  methodName: string,
  descriptor: PropertyDescriptor,
): void {
  for (
    let prototype: object | null = classRef.prototype;
    prototype && prototype !== Object.prototype;
    prototype = Object.getPrototypeOf(prototype) as object | null
  ) {
    const factory = (prototype.constructor as unknown as Record<string, unknown>)[
      PLUGIN_METADATA_FACTORY
    ];
    if (typeof factory !== 'function') continue;
    const inferred = (factory as () => Record<string, Record<string, unknown>>)()[methodName];
    if (!inferred) continue;
    // Swagger's own pass takes these three as the operation's, not the response's.
    const { summary: _summary, deprecated: _deprecated, tags: _tags, ...response } = inferred;
    if (Object.keys(response).length === 0) continue;
    const status = (response.status as number | undefined) ?? defaultStatusOf(descriptor.value);
    api.ApiResponse({ ...response, status } as Parameters<Swagger['ApiResponse']>[0], {
      overrideExisting: false,
    })(classRef.prototype, methodName, descriptor);
  }
}

/** The static method the Swagger CLI plugin adds to a controller class (`METADATA_FACTORY_NAME`). */
const PLUGIN_METADATA_FACTORY = '_OPENAPI_METADATA_FACTORY';

/** `@HttpCode(…)` (Nest's `HTTP_CODE_METADATA`), pinned by the OpenAPI e2e test on both majors. */
const HTTP_CODE_METADATA = '__httpCode__';

/** The status Swagger documents for a route without declared responses. */
function defaultStatusOf(handler: object): number {
  const code = Reflect.getMetadata(HTTP_CODE_METADATA, handler) as number | undefined;
  if (code) return code;
  return Reflect.getMetadata(NEST_METADATA.method, handler) === RequestMethod.POST ? 201 : 200;
}

/** A response the handler itself gives, and a replay repeats: 1xx to 3xx, or a `2XX` range. */
function isAnswer(status: string): boolean {
  return /^[123](\d\d|XX)$/i.test(status);
}

const REPLAYED_HEADER = {
  description:
    '`true` when this response is the replay of the first response to the same idempotency key; absent on the first response',
  schema: { type: 'string', enum: ['true'] },
};

const RETRY_AFTER_HEADER = {
  description: 'Seconds to wait before retrying with the same key',
  schema: { type: 'integer', minimum: 1 },
};

/** Every refusal this route can answer with, by status. */
function refusalsOf(plan: HandlerPlan, settings: ModuleSettings): Refusal[] {
  const keyCodes = plan.required
    ? '`idempotency-key-missing` (no key) or `idempotency-key-invalid`'
    : '`idempotency-key-invalid`';
  const out: Refusal[] = [
    {
      status: 400,
      description: `${keyCodes}: the idempotency key is absent or not a valid key`,
      retryAfter: false,
    },
    {
      status: 409,
      description: plan.policy.strict
        ? '`idempotency-in-flight`: a request with this idempotency key is still being processed (with `Retry-After`); or `idempotency-outcome-unknown`: an earlier request with this key may have been processed and its outcome is unknown until the record is resolved (no `Retry-After`)'
        : '`idempotency-in-flight`: a request with this idempotency key is still being processed',
      retryAfter: true,
    },
    {
      status: 413,
      description: `\`idempotency-body-too-large\`: the request body is over ${settings.maxBodyBytes} bytes`,
      retryAfter: false,
    },
  ];
  if (plan.fingerprint === 'default') {
    out.push({
      status: 415,
      description:
        '`idempotency-body-unreadable`: the request has a body that was not parsed before the idempotency check, so it cannot be compared with the first request',
      retryAfter: false,
    });
  }
  if (plan.fingerprint !== false) {
    out.push({
      status: 422,
      description:
        '`idempotency-key-reused`: this idempotency key was already used with a different request',
      retryAfter: false,
    });
  }
  out.push(
    {
      status: 500,
      description:
        '`idempotency-result-not-storable`: the response could not be recorded for replay; a retry with this key does not run the request again',
      retryAfter: false,
    },
    {
      status: 503,
      description:
        '`idempotency-store-unavailable` or `idempotency-completion-failed`: the idempotency store could not be reached, or the outcome could not be recorded',
      retryAfter: true,
    },
  );
  return out;
}

/**
 * The refusal as a response of its own, or added to the application's own
 * response of that status: its description first, then the library's; its
 * headers kept; the problem document added as a media type unless the
 * application's response has a `type` or `schema` (Swagger renders those as
 * the only content, so the library's would be lost anyway).
 */
function withRefusal(own: ResponseEntry | undefined, refusal: Refusal): ResponseEntry {
  const problem = { schema: { $ref: `#/components/schemas/${PROBLEM_COMPONENT}` } };
  const headers = refusal.retryAfter ? { 'Retry-After': RETRY_AFTER_HEADER } : undefined;
  if (!own) {
    return {
      description: refusal.description,
      content: { 'application/problem+json': problem },
      ...(headers ? { headers } : {}),
    };
  }
  const rendersItsOwnContent = own.type !== undefined || own.schema !== undefined;
  return {
    ...own,
    description: own.description
      ? `${own.description}\n\n${refusal.description}`
      : refusal.description,
    ...(headers || own.headers ? { headers: { ...headers, ...own.headers } } : {}),
    ...(rendersItsOwnContent
      ? {}
      : { content: { 'application/problem+json': problem, ...own.content } }),
  };
}

/** The header the key is read from, if it is one header. */
function keyHeaderOf(plan: HandlerPlan, settings: ModuleSettings): string | undefined {
  if (plan.key.kind === 'header') return settings.keyHeader;
  if (plan.key.kind !== 'expression') return undefined;
  const match = /^\s*headers\.([!#$%&'*+\-.^_`|~\w]+)\s*$/.exec(plan.key.expression.source);
  return match?.[1];
}

let problemClass: (new () => object) | undefined;

/**
 * The problem document (`ProblemDetails` in ../http/problem.ts) as a model
 * class Swagger turns into the `IdempotencyProblemDetails` component: made
 * when `@nestjs/swagger` is there, since its decorators describe it.
 */
function problemModel(api: Swagger): new () => object {
  if (problemClass) return problemClass;
  // The class name is the component's name.
  const model = class IdempotencyProblemDetails {};
  const property = (name: string, options: Parameters<Swagger['ApiProperty']>[0]) =>
    api.ApiProperty(options)(model.prototype, name);
  property('type', {
    type: 'string',
    format: 'uri-reference',
    description: '`about:blank`, or the URI `http.problemTypes` makes from the code',
  });
  property('title', { type: 'string', description: "The status code's reason phrase" });
  property('status', { type: 'integer', description: 'The HTTP status code' });
  property('detail', { type: 'string', description: 'What happened, for a person to read' });
  property('code', {
    type: 'string',
    description: 'Stable machine-readable reason, such as `idempotency-in-flight`',
  });
  property('retryAfterSeconds', {
    type: 'integer',
    minimum: 1,
    required: false,
    description: 'Seconds to wait before retrying with the same key, when `Retry-After` is sent',
  });
  problemClass = model;
  return model;
}
