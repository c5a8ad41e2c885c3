import { FactoryProvider, Inject, Injectable } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import { optionalPeer, preloadOptionalPeer } from '../../core/optional-peer';
import { compileHandlerPlan, HandlerPlan, mergeOptions, transportOf } from '../handler-plan';
import { IdempotentMetadata } from '../idempotent.metadata';
import type { ModuleSettings } from '../module-settings';
import { MODULE_SETTINGS } from '../module-settings.provider';

type Swagger = typeof import('@nestjs/swagger');
type ResponseOptions = Parameters<Swagger['ApiResponse']>[0];

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

/**
 * Documents every `@Idempotent` route in the OpenAPI document: the key header
 * and the refusals (400, 409 with `Retry-After`, 413, 422, 503). It runs while
 * the application is created, before `SwaggerModule.createDocument`, so it
 * knows the module's settings (the key header's name). Nothing happens without
 * `@nestjs/swagger`, or with `http: { openapi: false }`.
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
        for (const decorate of decoratorsFor(api, plan, settings)) {
          decorate(classRef.prototype, methodName, descriptor);
        }
      }
    }
  }
}

function decoratorsFor(api: Swagger, plan: HandlerPlan, settings: ModuleSettings) {
  const problem = (description: string, retryAfter = false): ResponseOptions => ({
    description,
    content: { 'application/problem+json': { schema: PROBLEM_SCHEMA } },
    ...(retryAfter
      ? {
          headers: {
            'Retry-After': {
              description: 'Seconds to wait before retrying with the same key',
              schema: { type: 'integer', minimum: 1 },
            },
          },
        }
      : {}),
  });
  const header = keyHeaderOf(plan, settings);
  const out: MethodDecorator[] = [];
  if (header) {
    out.push(
      api.ApiHeader({
        name: header,
        required: plan.required && !plan.observe,
        description: `Idempotency key: a retry with the same key replays the first response (marked \`Idempotent-Replayed: true\`) instead of running ${plan.where} again. At most ${settings.maxKeyLength} characters.`,
        schema: { type: 'string', minLength: 1, maxLength: settings.maxKeyLength },
      }),
    );
  }
  if (plan.observe) return out; // observe mode never refuses a request
  out.push(
    api.ApiResponse({
      status: 400,
      ...problem(
        'idempotency-key-missing or idempotency-key-invalid: the key is absent (when required) or not a valid key',
      ),
    }),
    api.ApiResponse({
      status: 409,
      ...problem(
        'idempotency-in-flight: a request with this idempotency key is still being processed',
        true,
      ),
    }),
    api.ApiResponse({
      status: 413,
      ...problem(
        `idempotency-body-too-large: the request body is over ${settings.maxBodyBytes} bytes`,
      ),
    }),
    api.ApiResponse({
      status: 503,
      ...problem(
        'idempotency-store-unavailable or idempotency-completion-failed: the idempotency store could not be reached',
        true,
      ),
    }),
  );
  if (plan.fingerprint !== false) {
    out.push(
      api.ApiResponse({
        status: 422,
        ...problem(
          'idempotency-key-reused: this idempotency key was already used with a different request',
        ),
      }),
    );
  }
  return out;
}

/** The request header the key is read from, if it is one header. */
function keyHeaderOf(plan: HandlerPlan, settings: ModuleSettings): string | undefined {
  if (plan.key.kind === 'header') return settings.keyHeader;
  if (plan.key.kind !== 'expression') return undefined;
  const match = /^\s*headers\.([!#$%&'*+\-.^_`|~\w]+)\s*$/.exec(plan.key.expression.source);
  return match?.[1];
}

const PROBLEM_SCHEMA = {
  type: 'object',
  required: ['type', 'title', 'status', 'detail', 'code'],
  properties: {
    type: { type: 'string', format: 'uri-reference' },
    title: { type: 'string' },
    status: { type: 'integer' },
    detail: { type: 'string' },
    code: { type: 'string', description: 'Stable machine-readable reason' },
    retryAfterSeconds: { type: 'integer', minimum: 1 },
  },
};
