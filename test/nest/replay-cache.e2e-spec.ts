import { Body, Controller, INestApplication, Post } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyModule } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { ADAPTERS, send, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';
import { parsePgUrl, TcpProxy } from '../support/tcp-proxy';

let executions = 0;

@Controller('quotes')
class QuotesController {
  @Post()
  @Idempotent()
  create(@Body() body: { amount: number }) {
    executions++;
    return { amount: body.amount, quote: randomUUID() };
  }
}

/**
 * With `cache` on, a replay of a completed key is answered from process memory:
 * proven by cutting the database off and still getting the replay.
 */
describe.each(ADAPTERS)('local replay cache over %s', (adapter) => {
  const schema = scratchSchema('cache');
  let direct: DataSource;
  let proxied: DataSource;
  let proxy: TcpProxy;
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    direct = await openDataSource();
    const target = parsePgUrl(testDatabaseUrl());
    proxy = new TcpProxy(target.host, target.port);
    const port = await proxy.start();
    const through = new URL(testDatabaseUrl());
    through.hostname = '127.0.0.1';
    through.port = String(port);
    proxied = await openDataSource({ url: through.toString() } as never);
    const store = new TypeOrmIdempotencyStore(proxied, {
      schema,
      ensureSchema: true,
      operationTimeoutMs: 1000,
    });
    ({ app, url } = await startHttpApp(adapter, {
      imports: [IdempotencyModule.forRoot({ store, cache: { maxEntries: 100 }, purge: false })],
      controllers: [QuotesController],
    }));
  });
  afterAll(async () => {
    await app?.close();
    await proxied?.destroy();
    await proxy?.cut();
    await dropSchema(direct, schema);
    await direct.destroy();
  });

  it('replays a completed key with the database cut off; a new key gets 503; a changed body still gets 422', async () => {
    const key = randomUUID();
    const before = executions;
    const first = await send(url, 'POST', '/quotes', { key, body: { amount: 5 } });
    expect(first.status).toBe(201);
    // The first replay reads the store (and its clock); it is cached from then on.
    const stored = await send(url, 'POST', '/quotes', { key, body: { amount: 5 } });
    expect(stored.headers.get('idempotent-replayed')).toBe('true');
    await proxy.cut();
    try {
      const replay = await send(url, 'POST', '/quotes', { key, body: { amount: 5 } });
      expect(replay.status).toBe(201);
      expect(replay.text).toBe(first.text);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      const mismatch = await send(url, 'POST', '/quotes', { key, body: { amount: 6 } });
      expect(mismatch.status).toBe(422);
      const fresh = await send(url, 'POST', '/quotes', { key: randomUUID(), body: { amount: 5 } });
      expect(fresh.status).toBe(503);
    } finally {
      await proxy.restore();
    }
    expect(executions).toBe(before + 1);
  });
});
