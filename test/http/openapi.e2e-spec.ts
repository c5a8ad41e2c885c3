import { Body, Controller, Get, HttpCode, INestApplication, Post, Put } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  ApiConflictResponse,
  ApiCreatedResponse,
  ApiOkResponse,
  ApiProperty,
  ApiResponse,
  DocumentBuilder,
  OpenAPIObject,
  SwaggerModule,
} from '@nestjs/swagger';
import * as swaggerPlugin from '@nestjs/swagger/plugin';
import * as nestCommon from '@nestjs/common';
import * as nestSwagger from '@nestjs/swagger';
import path from 'node:path';
import vm from 'node:vm';
import * as library from 'nest-idempotency';
import { Idempotent, IdempotencyModule, IdempotencyModuleOptions } from 'nest-idempotency';
import { InMemoryIdempotencyStore } from 'nest-idempotency/core';
import ts from 'typescript';

class PaymentDto {
  @ApiProperty()
  id!: string;

  @ApiProperty()
  amount!: number;
}

class ConflictDto {
  @ApiProperty()
  reason!: string;
}

/** With @nestjs/swagger installed, idempotent routes document their key header and refusals. */
@Controller('docs')
class DocumentedController {
  @Post('typed')
  @Idempotent()
  @ApiCreatedResponse({ type: PaymentDto, description: 'The payment' })
  typed(): PaymentDto {
    return { id: 'p1', amount: 1 };
  }

  @Put('accepted')
  @HttpCode(202)
  @Idempotent()
  accepted() {
    return 'queued';
  }

  @Post('own-conflict')
  @Idempotent()
  @ApiConflictResponse({ type: ConflictDto, description: 'The order is closed' })
  @ApiResponse({
    status: 503,
    description: 'Maintenance',
    headers: { 'X-Maintenance-Until': { schema: { type: 'string' } } },
  })
  ownConflict() {
    return 'ok';
  }

  @Post('payments')
  @Idempotent()
  pay(@Body() body: { amount: number }) {
    return body;
  }

  @Post('by-request-id')
  @Idempotent({ key: 'headers.x-request-id', fingerprint: false })
  byRequestId(@Body() body: unknown) {
    return body;
  }

  @Post('by-body')
  @Idempotent({ key: 'body.orderId' })
  byBody(@Body() body: unknown) {
    return body;
  }

  @Post('optional')
  @Idempotent({ required: false })
  optional(@Body() body: unknown) {
    return body;
  }

  @Post('observed')
  @Idempotent({ mode: 'observe' })
  observed(@Body() body: unknown) {
    return body;
  }

  @Get('plain')
  plain() {
    return 'no idempotency';
  }
}

/** A controller class whose success responses are declared on the class. */
@Controller('classy')
@ApiOkResponse({ type: PaymentDto, description: 'Declared on the class' })
class ClassLevelController {
  @Post()
  @Idempotent()
  create() {
    return { id: 'p1', amount: 1 };
  }
}

/** Declares nothing for Swagger: the plugin metadata loaded in the test does. */
@Controller('readonly-orders')
class ReadonlyOrdersController {
  @Post()
  @Idempotent()
  create() {
    return { id: 'p1', amount: 1 };
  }
}

/** Its 201, with a type, is declared on the class. */
@Controller('classy-created')
@ApiCreatedResponse({ type: PaymentDto, description: 'Created, declared on the class' })
class ClassLevelCreatedController {
  @Post()
  @Idempotent()
  create() {
    return { id: 'p1', amount: 1 };
  }
}

/**
 * Compiles ./swagger-plugin/*.ts with the Swagger CLI plugin (the TypeScript
 * transformer `nest build` runs with it enabled) to CommonJS, and loads the
 * controller with this process's own Nest, Swagger and library modules.
 */
function compileWithSwaggerPlugin(): { OrdersController: new () => object } {
  const dir = path.join(__dirname, 'swagger-plugin');
  const files = ['orders.controller.ts', 'order.dto.ts'].map((f) => path.join(dir, f));
  const program = ts.createProgram(files, {
    module: ts.ModuleKind.CommonJS,
    target: ts.ScriptTarget.ES2022,
    experimentalDecorators: true,
    emitDecoratorMetadata: true,
    skipLibCheck: true,
    noEmitOnError: false,
    outDir: path.join(dir, 'out'),
    rootDir: dir,
  });
  const emitted = new Map<string, string>();
  const result = program.emit(
    undefined,
    (fileName, text) => {
      if (fileName.endsWith('.js')) emitted.set(path.basename(fileName, '.js'), text);
    },
    undefined,
    false,
    { before: [swaggerPlugin.before({}, program)] },
  );
  expect(result.emitSkipped).toBe(false);
  const shared: Record<string, unknown> = {
    '@nestjs/common': nestCommon,
    '@nestjs/swagger': nestSwagger,
    'nest-idempotency': library,
  };
  const loaded = new Map<string, unknown>();
  const load = (name: string): unknown => {
    if (loaded.has(name)) return loaded.get(name);
    const module = { exports: {} as Record<string, unknown> };
    loaded.set(name, module.exports);
    const code = emitted.get(name);
    if (code === undefined) throw new Error(`the plugin build emitted no ${name}.js`);
    const run = vm.runInThisContext(`(function (require, exports, module) {${code}\n})`) as (
      require: (id: string) => unknown,
      exports: object,
      module: object,
    ) => void;
    run(
      (id) => {
        if (id.startsWith('./')) return load(id.slice(2));
        if (id in shared) return shared[id];
        throw new Error(`unexpected require(${id}) in the plugin build`);
      },
      module.exports,
      module,
    );
    return module.exports;
  };
  const controller = load('orders.controller') as { OrdersController: new () => object };
  // The plugin added the response Swagger infers as a decorator of its own.
  expect(emitted.get('orders.controller')).toMatch(/ApiResponse\(\{ status: 201, type: /);
  return controller;
}

async function documentFor(
  options: Omit<IdempotencyModuleOptions, 'store'> = {},
): Promise<{ app: INestApplication; document: OpenAPIObject }> {
  const moduleRef = await Test.createTestingModule({
    imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore(), ...options })],
    controllers: [DocumentedController],
  }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  // As applications do it: the document is made before app.init()/listen().
  const document = SwaggerModule.createDocument(app, new DocumentBuilder().build());
  return { app, document };
}

type Response = {
  description: string;
  headers?: Record<string, { schema?: Record<string, unknown> }>;
  content?: Record<string, { schema?: Record<string, unknown> }>;
};
type Operation = {
  parameters?: { name: string; in: string; required?: boolean; schema?: { maxLength?: number } }[];
  responses: Record<string, Response>;
};

const PROBLEM_REF = { $ref: '#/components/schemas/IdempotencyProblemDetails' };
const REFUSALS = ['400', '409', '413', '415', '422', '500', '503'];

function operation(
  document: OpenAPIObject,
  path: string,
  method: 'post' | 'get' | 'put',
): Operation {
  const op = (document.paths[path] as Record<string, Operation> | undefined)?.[method];
  if (!op) throw new Error(`no ${method} ${path} in the document`);
  return op;
}

function headerParams(op: Operation) {
  return (op.parameters ?? []).filter((p) => p.in === 'header');
}

describe('OpenAPI documents (with @nestjs/swagger)', () => {
  const apps: INestApplication[] = [];
  afterAll(async () => {
    for (const app of apps) await app.close();
  });

  it('keeps the 201 Swagger infers, with Idempotent-Replayed, beside the key header and every refusal', async () => {
    const { app, document } = await documentFor();
    apps.push(app);
    const op = operation(document, '/docs/payments', 'post');
    expect(headerParams(op)).toEqual([
      expect.objectContaining({
        name: 'Idempotency-Key',
        in: 'header',
        required: true,
        schema: expect.objectContaining({ maxLength: 255 }),
      }),
    ]);
    expect(Object.keys(op.responses)).toEqual(['201', ...REFUSALS]);
    expect(op.responses['201'].headers).toEqual({
      'Idempotent-Replayed': expect.objectContaining({
        schema: { type: 'string', enum: ['true'] },
      }),
    });
    for (const status of REFUSALS) {
      expect(op.responses[status].content, status).toEqual({
        'application/problem+json': { schema: PROBLEM_REF },
      });
      expect(op.responses[status].headers?.['Idempotent-Replayed'], status).toBeUndefined();
    }
    expect(Object.keys(op.responses['409'].headers!)).toEqual(['Retry-After']);
    expect(Object.keys(op.responses['503'].headers!)).toEqual(['Retry-After']);
    expect(op.responses['400'].headers).toBeUndefined();
    expect(op.responses['409'].description).toMatch(/idempotency-in-flight/);
    expect(op.responses['413'].description).toMatch(/idempotency-body-too-large.*1048576 bytes/);
    expect(op.responses['415'].description).toMatch(/idempotency-body-unreadable/);
    expect(op.responses['500'].description).toMatch(/idempotency-result-not-storable/);
    expect(op.responses['503'].description).toMatch(
      /idempotency-store-unavailable.*idempotency-completion-failed/,
    );
  });

  it('defines the problem document once, as a component every refusal refers to', async () => {
    const { app, document } = await documentFor();
    apps.push(app);
    const schemas = document.components?.schemas ?? {};
    expect(Object.keys(schemas).filter((name) => /Problem/.test(name))).toEqual([
      'IdempotencyProblemDetails',
    ]);
    expect(schemas.IdempotencyProblemDetails).toEqual({
      type: 'object',
      properties: {
        type: expect.objectContaining({ type: 'string', format: 'uri-reference' }),
        title: expect.objectContaining({ type: 'string' }),
        status: expect.objectContaining({ type: 'integer' }),
        detail: expect.objectContaining({ type: 'string' }),
        code: expect.objectContaining({ type: 'string' }),
        retryAfterSeconds: expect.objectContaining({ type: 'integer', minimum: 1 }),
      },
      required: ['type', 'title', 'status', 'detail', 'code'],
    });
    // Every problem+json content in the document is the reference, never an inline copy.
    const contents = Object.values(document.paths)
      .flatMap((item) => Object.values(item as Record<string, Operation>))
      .flatMap((op) => Object.values(op.responses ?? {}))
      .map((response) => response.content?.['application/problem+json'])
      .filter((content) => content !== undefined);
    expect(contents.length).toBeGreaterThanOrEqual(REFUSALS.length);
    for (const content of contents) expect(content).toEqual({ schema: PROBLEM_REF });
  });

  it("keeps the application's declared success response and its type, and @HttpCode's status", async () => {
    const { app, document } = await documentFor();
    apps.push(app);
    const typed = operation(document, '/docs/typed', 'post');
    expect(Object.keys(typed.responses)).toEqual(['201', ...REFUSALS]);
    expect(typed.responses['201']).toEqual({
      description: 'The payment',
      headers: { 'Idempotent-Replayed': expect.any(Object) },
      content: { 'application/json': { schema: { $ref: '#/components/schemas/PaymentDto' } } },
    });
    expect(document.components?.schemas?.PaymentDto).toEqual(
      expect.objectContaining({ required: ['id', 'amount'] }),
    );
    const accepted = operation(document, '/docs/accepted', 'put');
    expect(Object.keys(accepted.responses)).toEqual(['202', ...REFUSALS]);
    expect(accepted.responses['202'].headers).toHaveProperty('Idempotent-Replayed');
  });

  it('gives success responses declared on the controller class the header too', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore() })],
      controllers: [ClassLevelController, ClassLevelCreatedController],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    apps.push(app);
    const document = SwaggerModule.createDocument(app, new DocumentBuilder().build());
    const op = operation(document, '/classy', 'post');
    // As without the library: the class's 200 and the method's inferred 201.
    expect(Object.keys(op.responses)).toEqual(['200', '201', ...REFUSALS]);
    expect(op.responses['200']).toEqual({
      description: 'Declared on the class',
      headers: { 'Idempotent-Replayed': expect.any(Object) },
      content: { 'application/json': { schema: { $ref: '#/components/schemas/PaymentDto' } } },
    });
    expect(op.responses['201'].headers).toHaveProperty('Idempotent-Replayed');
    // A status the class declares is the class's, with its type, not an untyped inferred one.
    const created = operation(document, '/classy-created', 'post');
    expect(Object.keys(created.responses)).toEqual(['201', ...REFUSALS]);
    expect(created.responses['201']).toEqual({
      description: 'Created, declared on the class',
      headers: { 'Idempotent-Replayed': expect.any(Object) },
      content: { 'application/json': { schema: { $ref: '#/components/schemas/PaymentDto' } } },
    });
  });

  it('keeps the success type the Swagger CLI plugin infers from the return type', async () => {
    const { OrdersController } = compileWithSwaggerPlugin();
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore() })],
      controllers: [OrdersController],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    apps.push(app);
    const document = SwaggerModule.createDocument(app, new DocumentBuilder().build());
    const op = operation(document, '/plugin-orders', 'post');
    expect(Object.keys(op.responses)).toEqual(['201', ...REFUSALS]);
    expect(op.responses['201']).toEqual({
      description: '',
      headers: { 'Idempotent-Replayed': expect.any(Object) },
      content: { 'application/json': { schema: { $ref: '#/components/schemas/OrderDto' } } },
    });
    expect(document.components?.schemas?.OrderDto).toEqual(
      expect.objectContaining({
        properties: expect.objectContaining({ id: expect.objectContaining({ type: 'string' }) }),
      }),
    );
    expect(headerParams(op).map((p) => p.name)).toEqual(['Idempotency-Key']);
  });

  it("keeps the success type from the plugin's metadata file (SWC builds), loaded before the application is created", async () => {
    // What `PluginMetadataGenerator` writes to metadata.ts, in the shape loadPluginMetadata takes.
    await SwaggerModule.loadPluginMetadata(async () => ({
      '@nestjs/swagger': {
        models: [],
        controllers: [
          [
            Promise.resolve({ ReadonlyOrdersController }),
            { ReadonlyOrdersController: { create: { type: PaymentDto } } },
          ],
        ],
      },
    }));
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore() })],
      controllers: [ReadonlyOrdersController],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    apps.push(app);
    const document = SwaggerModule.createDocument(app, new DocumentBuilder().build());
    const op = operation(document, '/readonly-orders', 'post');
    expect(Object.keys(op.responses)).toEqual(['201', ...REFUSALS]);
    expect(op.responses['201'].content).toEqual({
      'application/json': { schema: { $ref: '#/components/schemas/PaymentDto' } },
    });
    expect(op.responses['201'].headers).toHaveProperty('Idempotent-Replayed');
  });

  it("adds the library's refusal to a response the application declares for the same status, keeping the application's", async () => {
    const { app, document } = await documentFor();
    apps.push(app);
    const op = operation(document, '/docs/own-conflict', 'post');
    // The application declared responses, none of them a success: Swagger would infer none either.
    expect(Object.keys(op.responses)).toEqual(REFUSALS);
    expect(op.responses['409'].description).toMatch(
      /^The order is closed\n\n`idempotency-in-flight`/,
    );
    expect(op.responses['409'].content).toEqual({
      'application/json': { schema: { $ref: '#/components/schemas/ConflictDto' } },
    });
    expect(op.responses['409'].headers).toHaveProperty('Retry-After');
    expect(op.responses['503'].description).toMatch(
      /^Maintenance\n\n`idempotency-store-unavailable`/,
    );
    expect(Object.keys(op.responses['503'].headers!).sort()).toEqual([
      'Retry-After',
      'X-Maintenance-Until',
    ]);
    expect(op.responses['503'].content).toEqual({
      'application/problem+json': { schema: PROBLEM_REF },
    });
  });

  it('names the header a key expression reads, and leaves 422 out without a fingerprint', async () => {
    const { app, document } = await documentFor();
    apps.push(app);
    const op = operation(document, '/docs/by-request-id', 'post');
    expect(headerParams(op).map((p) => p.name)).toEqual(['x-request-id']);
    expect(op.responses).not.toHaveProperty('422');
    // Without the default fingerprint no body is read for it: never 415 either.
    expect(op.responses).not.toHaveProperty('415');
    expect(op.responses).toHaveProperty('409');
  });

  it('documents no header for a key taken from the body, an optional header when the key is optional, nothing refused in observe mode, and leaves other routes alone', async () => {
    const { app, document } = await documentFor();
    apps.push(app);
    const byBody = operation(document, '/docs/by-body', 'post');
    expect(headerParams(byBody)).toEqual([]);
    expect(byBody.responses).toHaveProperty('422');
    const optional = operation(document, '/docs/optional', 'post');
    expect(headerParams(optional)).toEqual([
      expect.objectContaining({ name: 'Idempotency-Key', required: false }),
    ]);
    // No key, no refusal for its absence: only idempotency-key-invalid.
    expect(optional.responses['400'].description).not.toMatch(/idempotency-key-missing/);
    const observed = operation(document, '/docs/observed', 'post');
    expect(headerParams(observed)).toEqual([
      expect.objectContaining({ name: 'Idempotency-Key', required: false }),
    ]);
    expect(observed.responses).toEqual({ '201': { description: '' } });
    const plain = operation(document, '/docs/plain', 'get');
    expect(headerParams(plain)).toEqual([]);
    expect(Object.keys(plain.responses)).toEqual(['200']);
  });

  it("uses the module's http.keyHeader and maxKeyLength; http.openapi: false documents nothing", async () => {
    // A fresh controller class: each handler is documented once per process.
    @Controller('renamed')
    class RenamedController {
      @Post()
      @Idempotent()
      create() {
        return 'ok';
      }
    }
    @Controller('silent')
    class SilentController {
      @Post()
      @Idempotent()
      create() {
        return 'ok';
      }
    }
    const renamed = await Test.createTestingModule({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () => ({
            store: new InMemoryIdempotencyStore(),
            http: { keyHeader: 'X-Idempotency-Key', maxKeyLength: 64 },
          }),
        }),
      ],
      controllers: [RenamedController],
    }).compile();
    const renamedApp = renamed.createNestApplication({ logger: false });
    apps.push(renamedApp);
    const doc = SwaggerModule.createDocument(renamedApp, new DocumentBuilder().build());
    expect(headerParams(operation(doc, '/renamed', 'post'))).toEqual([
      expect.objectContaining({
        name: 'X-Idempotency-Key',
        required: true,
        schema: expect.objectContaining({ maxLength: 64 }),
      }),
    ]);

    const silent = await Test.createTestingModule({
      imports: [
        IdempotencyModule.forRoot({
          store: new InMemoryIdempotencyStore(),
          http: { openapi: false },
        }),
      ],
      controllers: [SilentController],
    }).compile();
    const silentApp = silent.createNestApplication({ logger: false });
    apps.push(silentApp);
    const silentDoc = SwaggerModule.createDocument(silentApp, new DocumentBuilder().build());
    const op = operation(silentDoc, '/silent', 'post');
    expect(headerParams(op)).toEqual([]);
    expect(op.responses).toEqual({ '201': { description: '' } });
  });
});
