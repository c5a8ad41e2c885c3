import { Controller, INestApplication, Post, Res, Type } from '@nestjs/common';
import { MessagePattern, MicroserviceOptions, Transport } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import {
  Idempotent,
  IdempotencyConfigError,
  IdempotencyModule,
  IdempotencyModuleOptions,
  IdempotentOptions,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { CapturedLogs } from '../support/captured-logs';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * Misconfiguration must stop the application from starting, naming the handler
 * (`Class.method`) and the option, instead of failing request by request.
 * Bootstrap is adapter-independent (the explorer runs in onModuleInit), so
 * Express alone is used here.
 */

function httpController(options: IdempotentOptions): Type {
  @Controller('orders')
  class OrdersController {
    @Post()
    @Idempotent(options)
    create() {
      return { ok: true };
    }
  }
  return OrdersController;
}

function messageController(options: IdempotentOptions): Type {
  @Controller()
  class OrderEventsController {
    @MessagePattern('orders.create')
    @Idempotent(options)
    create() {
      return { ok: true };
    }
  }
  return OrderEventsController;
}

@Controller('raw')
class RawResponseController {
  @Post()
  @Idempotent()
  create(@Res() res: { send: (body: unknown) => void }) {
    res.send({ ok: true });
  }
}

@Controller('healthy')
class HealthyController {
  @Post()
  @Idempotent({ lease: 'PT30S', waitTimeout: 0, key: 'order:{body.id}' })
  create() {
    return { ok: true };
  }

  @MessagePattern('healthy.created')
  @Idempotent({ key: 'data.id' })
  created() {
    return { ok: true };
  }
}

describe('HTTP bootstrap refuses misconfiguration (express)', () => {
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  const schema = scratchSchema('http_boot');
  const started: INestApplication[] = [];

  beforeAll(async () => {
    dataSource = await openDataSource();
    store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
  });
  afterAll(async () => {
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });
  afterEach(async () => {
    for (const app of started.splice(0)) await app.close();
  });

  /** Compiles, creates and initialises an Express application; resolves to the error it failed with. */
  async function bootstrapError(
    controller: Type,
    moduleOptions: Partial<IdempotencyModuleOptions> = {},
  ): Promise<unknown> {
    try {
      const moduleRef = await Test.createTestingModule({
        imports: [IdempotencyModule.forRoot({ store, ...moduleOptions })],
        controllers: [controller],
      })
        .setLogger(new CapturedLogs())
        .compile();
      const app = moduleRef.createNestApplication({ logger: false });
      started.push(app);
      await app.init();
    } catch (error) {
      return error;
    }
    throw new Error(`bootstrap succeeded for ${controller.name}`);
  }

  async function expectConfigError(
    controller: Type,
    parts: (string | RegExp)[],
    moduleOptions?: Partial<IdempotencyModuleOptions>,
  ): Promise<void> {
    const error = await bootstrapError(controller, moduleOptions);
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    const message = (error as Error).message;
    for (const part of parts) {
      if (typeof part === 'string') expect(message).toContain(part);
      else expect(message).toMatch(part);
    }
  }

  it('starts when everything is valid (the cases below fail for their own reason)', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store, defaults: { ttl: '7d' } })],
      controllers: [HealthyController, httpController({}), messageController({ key: 'data.id' })],
    })
      .setLogger(new CapturedLogs())
      .compile();
    const app = moduleRef.createNestApplication({ logger: false });
    started.push(app);
    await expect(app.init()).resolves.toBe(app);
  });

  describe('durations on the decorator', () => {
    it.each<[string, IdempotentOptions, string, RegExp]>([
      ['an unparseable lease', { lease: 'abc' }, 'lease', /invalid duration "abc"/],
      ['an unparseable ttl', { ttl: 'P1M' }, 'ttl', /invalid duration "P1M"/],
      ['a negative waitTimeout', { waitTimeout: '-5s' }, 'waitTimeout', /zero or more/],
      ['a negative number', { waitTimeout: -1 }, 'waitTimeout', /zero or more/],
      ['a zero lease', { lease: 0 }, 'lease', /greater than zero/],
      ['a zero ttl', { ttl: 'PT0S' }, 'ttl', /greater than zero/],
      ['a lease past the timer limit', { lease: '30d' }, 'lease', /too long/],
    ])('%s', async (_label, options, option, reason) => {
      await expectConfigError(httpController(options), [
        'OrdersController.create',
        `option "${option}"`,
        reason,
      ]);
    });
  });

  it.each<[string, IdempotencyModuleOptions['defaults'], string]>([
    ['waitTimeout', { waitTimeout: 'soon' }, 'waitTimeout'],
    ['lease', { lease: 0 }, 'lease'],
    ['ttl', { ttl: '-1h' }, 'ttl'],
  ])(
    'an invalid module default %s fails the start, naming the module option',
    async (_label, defaults, option) => {
      await expectConfigError(
        httpController({}),
        ['IdempotencyModule', `option "defaults.${option}"`],
        {
          defaults,
        },
      );
    },
  );

  it('an invalid module default fails the start even when every handler overrides it', async () => {
    await expectConfigError(
      httpController({ lease: '10s', ttl: '1h' }),
      ['IdempotencyModule', 'option "defaults.lease"'],
      {
        defaults: { lease: 'nope' },
      },
    );
  });

  describe('key expressions', () => {
    it.each([
      ['body..x', /invalid expression "body\.\.x"/],
      ['order:{body.id', /invalid expression "order:\{body\.id"/],
      ['order:{}', /invalid expression/],
      ['literal-only', /unknown root "literal-only"/],
      ['{body.id}}', /invalid expression/],
    ])('refuses %s', async (key, reason) => {
      await expectConfigError(httpController({ key }), [
        'OrdersController.create',
        'option "key"',
        reason,
      ]);
    });

    it('refuses an unknown root on an HTTP handler', async () => {
      await expectConfigError(httpController({ key: 'foo.bar' }), [
        'OrdersController.create',
        'option "key"',
        'unknown root "foo"',
        'body, params, query, headers, user',
      ]);
    });

    it('refuses an HTTP root on a @MessagePattern handler of a microservice controller', async () => {
      await expectConfigError(messageController({ key: 'body.x' }), [
        'OrderEventsController.create',
        'option "key"',
        'unknown root "body"',
        'data, message',
      ]);
    });

    it('refuses an HTTP root on that handler in a microservice application too', async () => {
      const moduleRef = await Test.createTestingModule({
        imports: [IdempotencyModule.forRoot({ store })],
        controllers: [messageController({ key: 'body.x' })],
      })
        .setLogger(new CapturedLogs())
        .compile();
      const app = moduleRef.createNestMicroservice<MicroserviceOptions>({
        transport: Transport.TCP,
        options: { host: '127.0.0.1', port: 0 },
        logger: false,
      });
      try {
        const failure = app.init();
        await expect(failure).rejects.toBeInstanceOf(IdempotencyConfigError);
        await expect(failure).rejects.toThrow(
          /OrderEventsController\.create: option "key" uses unknown root "body"/,
        );
      } finally {
        // Nest's context close() awaits the failed initialisation and so rethrows its error;
        // nothing was listening yet (init does not listen).
        await app.close().catch(() => undefined);
      }
    });

    it('refuses a message root on an HTTP handler', async () => {
      await expectConfigError(httpController({ key: 'data.id' }), [
        'OrdersController.create',
        'unknown root "data"',
      ]);
    });
  });

  it('refuses a message handler without a key', async () => {
    await expectConfigError(messageController({}), [
      'OrderEventsController.create',
      'option "key" is required',
    ]);
  });

  it('refuses a handler that takes @Res() without passthrough', async () => {
    await expectConfigError(RawResponseController, [
      'RawResponseController.create',
      '@Res()',
      'passthrough',
    ]);
  });

  it('refuses an empty scope', async () => {
    await expectConfigError(httpController({ scope: '' }), [
      'OrdersController.create',
      'option "scope"',
    ]);
  });

  it('refuses a key that is neither an expression nor a function', async () => {
    await expectConfigError(httpController({ key: 42 as unknown as string }), [
      'OrdersController.create',
      'option "key"',
    ]);
  });

  it('refuses forRoot without a store', async () => {
    const error = await bootstrapError(httpController({}), { store: undefined });
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toMatch(/IdempotencyModule: option "store" is required/);
  });

  it('refuses forRootAsync whose factory returns no store', async () => {
    const failure = Test.createTestingModule({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: async () => ({}) as IdempotencyModuleOptions,
        }),
      ],
      controllers: [httpController({})],
    })
      .setLogger(new CapturedLogs())
      .compile();
    await expect(failure).rejects.toBeInstanceOf(IdempotencyConfigError);
    await expect(failure).rejects.toThrow(/option "store" is required/);
  });
});
