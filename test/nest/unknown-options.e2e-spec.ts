import { Controller, Post, Type } from '@nestjs/common';
import { MessagePattern } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import {
  Idempotent,
  IdempotencyConfigError,
  IdempotencyModule,
  IdempotencyModuleOptions,
  IdempotentOptions,
  InMemoryIdempotencyStore,
} from 'nest-idempotency';
import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { ADAPTERS, send, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * Issue 21, items 6 and 7: an option TypeScript did not check (a forRootAsync
 * factory's result, configuration from JSON) with a typo, and the usual wiring
 * mistakes, stop the application from starting, saying what to write instead;
 * before, a typo started it with the option silently ignored.
 */

function ordersController(options: IdempotentOptions): Type {
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

function eventsController(options: IdempotentOptions): Type {
  @Controller()
  class OrderEvents {
    @MessagePattern('orders.create')
    @Idempotent(options)
    create() {
      return { ok: true };
    }
  }
  return OrderEvents;
}

/** Shaped as a TypeORM DataSource is to the check (the real one is used further down). */
const fakeDataSource = Object.assign(Object.create(DataSource.prototype) as object, {
  options: { type: 'postgres' },
});

/** Options as configuration from JSON or a factory gives them: unchecked by TypeScript. */
const unchecked = (options: object) => options as unknown as IdempotencyModuleOptions;

describe.each(ADAPTERS)('unknown options fail the start on %s, over a real socket', (adapter) => {
  const store = new InMemoryIdempotencyStore();

  const listen = async (metadata: Parameters<typeof startHttpApp>[1]) => {
    try {
      const { app } = await startHttpApp(adapter, metadata);
      await app.close();
    } catch (error) {
      return error;
    }
    throw new Error('the application started');
  };

  it('starts and serves with the same options spelled right', async () => {
    const { app, url } = await startHttpApp(adapter, {
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () =>
            unchecked({
              store,
              purge: false,
              http: { required: false },
              defaults: { waitTimeout: 0 },
            }),
        }),
      ],
      controllers: [ordersController({ waitTimeout: 0 })],
    });
    try {
      expect((await send(url, 'POST', '/orders', { key: 'k-1', body: {} })).status).toBe(201);
    } finally {
      await app.close();
    }
  });

  it('refuses a misspelled module option from a forRoot', async () => {
    const error = await listen({
      imports: [
        IdempotencyModule.forRoot(unchecked({ store, purge: false, htpp: { required: false } })),
      ],
      controllers: [ordersController({})],
    });
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toBe(
      'IdempotencyModule: unknown option "htpp" (did you mean "http"?)',
    );
  });

  it('refuses a misspelled default returned by a forRootAsync factory', async () => {
    const error = await listen({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () => unchecked({ store, purge: false, defaults: { waitTimout: 0 } }),
        }),
      ],
      controllers: [ordersController({})],
    });
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toBe(
      'IdempotencyModule: unknown option "defaults.waitTimout" (did you mean "defaults.waitTimeout"?)',
    );
  });

  it('says to add inject: [DataSource] when a forRootAsync factory received none', async () => {
    const error = await listen({
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: (source: DataSource) => ({
            store: new TypeOrmIdempotencyStore(source),
            purge: false,
          }),
        }),
      ],
      controllers: [ordersController({})],
    });
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toContain('add inject: [DataSource]');
  });

  it('says how to wrap a DataSource passed as the store', async () => {
    const error = await listen({
      imports: [IdempotencyModule.forRoot(unchecked({ store: fakeDataSource, purge: false }))],
      controllers: [ordersController({})],
    });
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toContain(
      'store: new TypeOrmIdempotencyStore(dataSource) (from nest-idempotency/typeorm)',
    );
  });

  it('refuses a misspelled decorator option, naming Class.method', async () => {
    const error = await listen({
      imports: [IdempotencyModule.forRoot({ store, purge: false })],
      controllers: [ordersController({ waitTimout: 0 } as IdempotentOptions)],
    });
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toBe(
      'OrdersController.create: unknown option "waitTimout" (did you mean "waitTimeout"?)',
    );
  });
});

describe('unknown options at every level', () => {
  const store = new InMemoryIdempotencyStore();
  const boot = (options: object, controllers: Type[] = []) =>
    Test.createTestingModule({
      imports: [IdempotencyModule.forRoot(unchecked({ store, purge: false, ...options }))],
      controllers,
    })
      .compile()
      .then((moduleRef) => moduleRef.init());

  it.each([
    [
      { http: { keyheader: 'X-Key' } },
      'unknown option "http.keyheader" (did you mean "http.keyHeader"?)',
    ],
    [{ rmq: { noack: false } }, 'unknown option "rmq.noack" (did you mean "rmq.noAck"?)'],
    [
      { purge: { intervall: '1h' } },
      'unknown option "purge.intervall" (did you mean "purge.interval"?)',
    ],
    [
      { cache: { maxEntrys: 10 } },
      'unknown option "cache.maxEntrys" (did you mean "cache.maxEntries"?)',
    ],
    [
      { telemetry: { metre: {} } },
      'unknown option "telemetry.metre" (did you mean "telemetry.meter"?)',
    ],
    [
      { defaults: { foo: 1 } },
      'unknown option "defaults.foo"; the options here are "defaults.lease",',
    ],
    [{ onevent: () => undefined }, 'unknown option "onevent" (did you mean "onEvent"?)'],
  ])('refuses %j', async (options, message) => {
    const failure = boot(options);
    await expect(failure).rejects.toBeInstanceOf(IdempotencyConfigError);
    await expect(failure).rejects.toThrow(`IdempotencyModule: ${message}`);
  });

  it('refuses a misspelled store.redis option and a misspelled store kind', async () => {
    await expect(
      boot({ store: { redis: { url: 'redis://127.0.0.1:6379', keyPrefx: 'app:' } } }),
    ).rejects.toThrow(
      'IdempotencyModule: unknown option "store.redis.keyPrefx" (did you mean "store.redis.keyPrefix"?)',
    );
    await expect(boot({ store: { redsi: { url: 'redis://127.0.0.1:6379' } } })).rejects.toThrow(
      'IdempotencyModule: unknown option "store.redsi" (did you mean "store.redis"?); option "store" is an IdempotencyStore',
    );
  });

  it('refuses a misspelled rmq option on a message handler', async () => {
    const failure = boot({}, [
      eventsController({ key: 'data.id', rmq: { noAk: false } as object }),
    ]);
    await expect(failure).rejects.toThrow(
      'OrderEvents.create: unknown option "rmq.noAk" (did you mean "rmq.noAck"?)',
    );
  });

  it('accepts isGlobal: true, the module extra', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [
        IdempotencyModule.forRoot({
          store,
          purge: false,
          isGlobal: true,
        } as IdempotencyModuleOptions),
      ],
    }).compile();
    await moduleRef.init();
    await moduleRef.close();
  });

  it('refuses unknown options of the stores themselves', () => {
    expect(() => new InMemoryIdempotencyStore({ maxWaiter: 1 } as object)).toThrow(
      'InMemoryIdempotencyStore: unknown option "maxWaiter" (did you mean "maxWaiters"?)',
    );
    expect(() =>
      RedisIdempotencyStore.fromUrl('redis://127.0.0.1:6379', { clustr: true } as object),
    ).toThrow('RedisIdempotencyStore.fromUrl: unknown option "clustr" (did you mean "cluster"?)');
    expect(() =>
      RedisIdempotencyStore.fromUrl('redis://127.0.0.1:6379', {
        waitForReplicas: { replicas: 1, timeoutMS: 10 } as never,
      }),
    ).toThrow(
      'RedisIdempotencyStore: unknown option "waitForReplicas.timeoutMS" (did you mean "waitForReplicas.timeoutMs"?)',
    );
  });
});

describe('TypeORM wiring mistakes', () => {
  const schema = scratchSchema('wiring');
  let dataSource: DataSource;

  beforeAll(async () => {
    dataSource = await openDataSource();
  });
  afterAll(async () => {
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });

  it('refuses a misspelled TypeOrmIdempotencyStore option', () => {
    expect(() => new TypeOrmIdempotencyStore(dataSource, { ensureSchmea: true } as object)).toThrow(
      'TypeOrmIdempotencyStore: unknown option "ensureSchmea" (did you mean "ensureSchema"?)',
    );
  });

  it('says how to wrap a DataSource passed as the store', async () => {
    const failure = Test.createTestingModule({
      imports: [IdempotencyModule.forRoot(unchecked({ store: dataSource, purge: false }))],
    }).compile();
    await expect(failure).rejects.toBeInstanceOf(IdempotencyConfigError);
    await expect(failure).rejects.toThrow(
      'IdempotencyModule: option "store" is a TypeORM DataSource, not a store; wrap it: store: new TypeOrmIdempotencyStore(dataSource) (from nest-idempotency/typeorm)',
    );
  });

  it('says to add inject: [DataSource] when the factory received nothing', async () => {
    const failure = Test.createTestingModule({
      imports: [
        IdempotencyModule.forRootAsync({
          // No inject: Nest calls the factory with no arguments.
          useFactory: (source: DataSource) => ({
            store: new TypeOrmIdempotencyStore(source, { schema, ensureSchema: true }),
            purge: false,
          }),
        }),
      ],
    }).compile();
    await expect(failure).rejects.toBeInstanceOf(IdempotencyConfigError);
    await expect(failure).rejects.toThrow(
      'TypeOrmIdempotencyStore: no DataSource was given (got undefined, not a TypeORM DataSource); in IdempotencyModule.forRootAsync, add inject: [DataSource]',
    );
  });
});
