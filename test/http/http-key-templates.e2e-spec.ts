import { Body, Controller, INestApplication, Post, Type } from '@nestjs/common';
import { MessagePattern } from '@nestjs/microservices';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyConfigError, IdempotencyModule } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { CapturedLogs } from '../support/captured-logs';
import { ADAPTERS, AdapterName, send, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { Probe } from './fixtures';

/**
 * Key templates must give two different sets of values two different keys
 * (issue 20, item 5): `{body.a}{body.b}` made one key of `ab`+`c` and `a`+`bc`,
 * and the second request replayed the first's response. Templates that
 * escaping cannot make injective are refused at bootstrap, naming the handler.
 */
const probe = new Probe();

function templated(key: string): Type {
  @Controller('transfers')
  class TransfersController {
    @Post()
    @Idempotent({ key, fingerprint: false })
    create(@Body() body: { a: string; b: string }) {
      probe.ran(`${body.a}|${body.b}`);
      return { a: body.a, b: body.b, token: randomUUID() };
    }
  }
  return TransfersController;
}

@Controller()
class TransferEventsController {
  @MessagePattern('transfers.create')
  @Idempotent({ key: 'transfer:{data.from}{data.to}' })
  create() {
    return { ok: true };
  }
}

describe.each(ADAPTERS)('key templates, over %s', (adapter: AdapterName) => {
  const schema = scratchSchema('templates');
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;

  beforeAll(async () => {
    dataSource = await openDataSource();
    store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
  });
  afterAll(async () => {
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });
  beforeEach(() => probe.executions.clear());

  async function bootstrapError(controller: Type): Promise<Error> {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store })],
      controllers: [controller],
    })
      .setLogger(new CapturedLogs())
      .compile();
    const app: INestApplication =
      adapter === 'fastify'
        ? moduleRef.createNestApplication(new FastifyAdapter(), { logger: false })
        : moduleRef.createNestApplication({ logger: false });
    try {
      await app.init();
    } catch (error) {
      return error as Error;
    } finally {
      await app.close().catch(() => undefined);
    }
    throw new Error(`the application started with ${controller.name}`);
  }

  it('refuses {body.a}{body.b} at bootstrap, naming the handler, rather than replay "a"+"bc" for "ab"+"c"', async () => {
    const error = await bootstrapError(templated('{body.a}{body.b}'));
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect(error.message).toBe(
      'TransfersController.create: option "key" has an invalid expression "{body.a}{body.b}": {body.a} and {body.b} have nothing between them, so two different pairs of values could make one key ("ab" and "c", "a" and "bc"); put a separator between them, e.g. {body.a}:{body.b}',
    );
  });

  it('refuses text between two values that starts with "%", and adjacent values on a message handler', async () => {
    await expect(bootstrapError(templated('{body.a}%{body.b}'))).resolves.toMatchObject({
      message: expect.stringContaining(
        'TransfersController.create: option "key" has an invalid expression "{body.a}%{body.b}": the text after {body.a} starts with "%"',
      ),
    });
    await expect(bootstrapError(TransferEventsController)).resolves.toMatchObject({
      message: expect.stringContaining(
        'TransferEventsController.create: option "key" has an invalid expression "transfer:{data.from}{data.to}": {data.from} and {data.to} have nothing between them',
      ),
    });
  });

  it('runs "ab"+"c" and "a"+"bc" once each under a template with a separator', async () => {
    const { app, url } = await startHttpApp(adapter, {
      imports: [IdempotencyModule.forRoot({ store })],
      controllers: [templated(`${randomUUID()}:{body.a}:{body.b}`)],
    });
    try {
      const first = await send(url, 'POST', '/transfers', { body: { a: 'ab', b: 'c' } });
      const second = await send(url, 'POST', '/transfers', { body: { a: 'a', b: 'bc' } });
      expect(second.headers.get('idempotent-replayed')).toBeNull();
      expect(second.json()).toMatchObject({ a: 'a', b: 'bc' });
      expect(first.json()).toMatchObject({ a: 'ab', b: 'c' });
      expect(probe.count('ab|c')).toBe(1);
      expect(probe.count('a|bc')).toBe(1);
    } finally {
      await app.close();
    }
  });
});
