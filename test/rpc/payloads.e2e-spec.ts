import { randomUUID } from 'node:crypto';
import { IdempotencyEngine } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * Results PostgreSQL's jsonb refused (U+0000, lone surrogates) are stored and
 * replayed exactly, through the engine, on the real server; before 0.2 they
 * left the record IN_PROGRESS and ran again once its lease lapsed.
 */
describe('results every store accepts, on PostgreSQL', () => {
  const schema = scratchSchema('payloads');
  let dataSource: DataSource;
  let engine: IdempotencyEngine;

  beforeAll(async () => {
    dataSource = await openDataSource();
    engine = new IdempotencyEngine(
      new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true }),
      { logger: { warn: () => undefined, error: () => undefined } },
    );
  });
  afterAll(async () => {
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });

  it.each([
    ['U+0000', { text: 'a\u0000b' }],
    ['a lone surrogate', { text: 'x\ud800y' }],
    ['both, deep, with keys out of order', { z: [{ b: '\u0000', a: '\udfff' }], a: 1 }],
  ])('stores and replays a result with %s, running the action once', async (_label, value) => {
    const request = { scope: 'payloads', key: randomUUID(), lease: '30s', ttl: '1h' };
    let runs = 0;
    const first = await engine.execute(request, async () => (runs++, value));
    const second = await engine.execute(request, async () => (runs++, value));
    expect(first).toEqual({ kind: 'executed', value });
    expect(second).toMatchObject({ kind: 'replayed', value });
    expect(JSON.stringify(second.value)).toBe(JSON.stringify(value));
    expect(runs).toBe(1);
  });
});
