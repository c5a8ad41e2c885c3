import { Body, Controller, INestApplication, Post } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyEvent, IdempotencyModule, keyDigest } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { ADAPTERS, send, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { Probe } from './fixtures';

/** What clients see beyond the replay itself: CORS, problem types, and observe mode. */
const probe = new Probe();

@Controller('clients')
class ClientsController {
  @Post('orders')
  @Idempotent()
  create(@Body() body: { amount: number }) {
    probe.ran('create');
    return { id: randomUUID(), amount: body.amount };
  }

  @Post('observed')
  @Idempotent({ mode: 'observe' })
  observed(@Body() body: { amount: number }) {
    probe.ran('observed');
    return { id: randomUUID(), amount: body.amount };
  }
}

describe.each(ADAPTERS)('what clients see, over %s', (adapter) => {
  const schema = scratchSchema('clients');
  let dataSource: DataSource;
  let app: INestApplication;
  let url: string;
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    dataSource = await openDataSource();
    ({ app, url } = await startHttpApp(
      adapter,
      {
        imports: [
          IdempotencyModule.forRoot({
            store: new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true }),
            http: { problemTypes: 'https://docs.example.com/errors/' },
            onEvent: (event) => events.push(event),
          }),
        ],
        controllers: [ClientsController],
      },
      (app) => app.enableCors({ origin: 'https://shop.example.com' }),
    ));
  });
  afterAll(async () => {
    await app?.close();
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });
  beforeEach(() => {
    probe.executions.clear();
    events.length = 0;
  });

  it('lists Idempotent-Replayed in Access-Control-Expose-Headers on a CORS replay, so a browser can read it', async () => {
    const key = randomUUID();
    const headers = { origin: 'https://shop.example.com' };
    const first = await send(url, 'POST', '/clients/orders', { key, body: { amount: 1 }, headers });
    const replay = await send(url, 'POST', '/clients/orders', {
      key,
      body: { amount: 1 },
      headers,
    });
    expect(first.headers.get('access-control-allow-origin')).toBe('https://shop.example.com');
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('access-control-allow-origin')).toBe('https://shop.example.com');
    expect(replay.headers.get('access-control-expose-headers')).toMatch(
      /(^|, )Idempotent-Replayed$/,
    );
    expect(replay.text).toBe(first.text);
  });

  it('gives problem documents the configured type URI, the code appended', async () => {
    const reply = await send(url, 'POST', '/clients/orders', { body: { amount: 1 } });
    expect(reply.status).toBe(400);
    expect(reply.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(reply.json()).toMatchObject({
      type: 'https://docs.example.com/errors/idempotency-key-missing',
      code: 'idempotency-key-missing',
    });
  });

  it('observe mode runs every duplicate, changes no response, and reports what enforce would have done', async () => {
    const key = randomUUID();
    const first = await send(url, 'POST', '/clients/observed', { key, body: { amount: 1 } });
    const again = await send(url, 'POST', '/clients/observed', { key, body: { amount: 1 } });
    const reused = await send(url, 'POST', '/clients/observed', { key, body: { amount: 2 } });
    const keyless = await send(url, 'POST', '/clients/observed', { body: { amount: 3 } });
    for (const reply of [first, again, reused, keyless]) {
      expect(reply.status).toBe(201);
      expect(reply.headers.get('idempotent-replayed')).toBeNull();
    }
    expect(again.json()).not.toEqual(first.json());
    expect(probe.count('observed')).toBe(4);
    const observed = events.filter((e) => e.type === 'observed');
    expect(observed.map((e) => (e as { wouldHave: string }).wouldHave)).toEqual([
      'replayed',
      'fingerprint-mismatch',
      'key-missing',
    ]);
    expect(observed[0]).toMatchObject({
      scope: 'ClientsController.observed',
      keyDigest: keyDigest('ClientsController.observed', key),
    });
    // Nothing was replayed or refused: only the observed events say what would have been.
    expect(
      events
        .filter((e) => e.scope === 'ClientsController.observed')
        .map((e) => e.type)
        .filter((type) => type !== 'observed'),
    ).toEqual(['acquired', 'completed']);
  });
});
