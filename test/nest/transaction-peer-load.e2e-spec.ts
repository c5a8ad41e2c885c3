import { Body, Controller, INestApplication, Post } from '@nestjs/common';
import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { Idempotent, IdempotencyModule, InMemoryIdempotencyStore } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { send, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * `@nestjs-cls/transactional` is installed here (a dev dependency), as it can
 * be in any application's node_modules (a monorepo's hoisted one, say). The
 * module loads it only when some handler completes in a transaction: loading
 * it enters nestjs-cls's AsyncLocalStorage, which turns on promise hooks that
 * every later promise of the process pays for, whether the application uses
 * nestjs-cls or not. Node keeps every CommonJS module it loaded (nestjs-cls
 * is one) in one cache, whoever asks.
 */
const clsLoaded = () =>
  Object.keys(createRequire(join(process.cwd(), 'package.json')).cache).some((path) =>
    /[\\/]nestjs-cls[\\/]/.test(path),
  );

@Controller('orders')
class OrdersController {
  @Post()
  @Idempotent({ scope: 'peer-load-orders' })
  create(@Body() body: { n: number }) {
    return { n: body.n };
  }
}

@Controller('ledger')
class LedgerController {
  @Post()
  @Idempotent({ scope: 'peer-load-ledger', completion: 'transaction' })
  post(@Body() body: { n: number }) {
    return { n: body.n };
  }
}

describe('@nestjs-cls/transactional, installed but not used', () => {
  let app: INestApplication | undefined;

  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  it('is not loaded for an application without a handler that completes in a transaction', async () => {
    expect(clsLoaded()).toBe(false);
    let url: string;
    ({ app, url } = await startHttpApp('fastify', {
      imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore(), purge: false })],
      controllers: [OrdersController],
    }));
    const reply = await send(url, 'POST', '/orders', { key: randomUUID(), body: { n: 1 } });
    expect(reply.status).toBe(201);
    expect(clsLoaded()).toBe(false);
  });

  it('is loaded at bootstrap once one does', async () => {
    const dataSource = await openDataSource();
    const schema = scratchSchema('peerload');
    try {
      const store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
      ({ app } = await startHttpApp('fastify', {
        imports: [IdempotencyModule.forRoot({ store, purge: false })],
        controllers: [LedgerController],
      }));
      expect(clsLoaded()).toBe(true);
    } finally {
      await app?.close();
      app = undefined;
      await dropSchema(dataSource, schema);
      await dataSource.destroy();
    }
  });
});
