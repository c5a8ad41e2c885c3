import { Body, Controller, Get, INestApplication, Post } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { DocumentBuilder, OpenAPIObject, SwaggerModule } from '@nestjs/swagger';
import { Idempotent, IdempotencyModule, IdempotencyModuleOptions } from 'nest-idempotency';
import { InMemoryIdempotencyStore } from 'nest-idempotency/core';

/** With @nestjs/swagger installed, idempotent routes document their key header and refusals. */
@Controller('docs')
class DocumentedController {
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

type Operation = {
  parameters?: { name: string; in: string; required?: boolean; schema?: { maxLength?: number } }[];
  responses: Record<
    string,
    { description: string; headers?: Record<string, unknown>; content?: Record<string, unknown> }
  >;
};

function operation(document: OpenAPIObject, path: string, method: 'post' | 'get'): Operation {
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

  it('documents the Idempotency-Key header and the 400, 409 (Retry-After), 413, 422 and 503 problem responses', async () => {
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
    expect(Object.keys(op.responses).sort()).toEqual(
      expect.arrayContaining(['400', '409', '413', '422', '503']),
    );
    expect(op.responses['409'].headers).toHaveProperty('Retry-After');
    expect(op.responses['503'].headers).toHaveProperty('Retry-After');
    expect(op.responses['422'].content).toHaveProperty(['application/problem+json']);
    expect(op.responses['409'].description).toMatch(/idempotency-in-flight/);
  });

  it('names the header a key expression reads, and leaves 422 out without a fingerprint', async () => {
    const { app, document } = await documentFor();
    apps.push(app);
    const op = operation(document, '/docs/by-request-id', 'post');
    expect(headerParams(op).map((p) => p.name)).toEqual(['x-request-id']);
    expect(op.responses).not.toHaveProperty('422');
    expect(op.responses).toHaveProperty('409');
  });

  it('documents no header for a key taken from the body, an optional header when the key is optional, nothing refused in observe mode, and leaves other routes alone', async () => {
    const { app, document } = await documentFor();
    apps.push(app);
    const byBody = operation(document, '/docs/by-body', 'post');
    expect(headerParams(byBody)).toEqual([]);
    expect(byBody.responses).toHaveProperty('422');
    expect(headerParams(operation(document, '/docs/optional', 'post'))).toEqual([
      expect.objectContaining({ name: 'Idempotency-Key', required: false }),
    ]);
    const observed = operation(document, '/docs/observed', 'post');
    expect(headerParams(observed)).toEqual([
      expect.objectContaining({ name: 'Idempotency-Key', required: false }),
    ]);
    expect(Object.keys(observed.responses).filter((s) => Number(s) >= 400)).toEqual([]);
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
    expect(op.responses).not.toHaveProperty('409');
  });
});
