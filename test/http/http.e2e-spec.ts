import { INestApplication } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { IdempotencyModule, IdempotencyStore } from 'nest-idempotency';
import { ADAPTERS, send, sendRaw, startHttpApp } from '../support/http-app';
import { describeEachStore, OpenedStore, openStore } from '../support/stores';
import { OrdersController, PaymentsController, probe } from './fixtures';

/**
 * Every case on every store (PostgreSQL, Redis standalone, MariaDB), each on
 * Express and Fastify over a real socket. Nothing here is specific to one
 * store: the records are read back through the store's own `find`/`list`.
 */
describeEachStore('HTTP', (storeName) => {
  describe.each(ADAPTERS)('over %s', (adapter) => {
    let app: INestApplication;
    let url: string;
    let opened: OpenedStore;
    let store: IdempotencyStore;

    beforeAll(async () => {
      opened = await openStore(storeName, 'http');
      store = opened.store;
      ({ app, url } = await startHttpApp(adapter, {
        imports: [IdempotencyModule.forRoot({ store, http: { replayHeaders: ['x-payment-api'] } })],
        controllers: [PaymentsController, OrdersController],
      }));
    });
    afterAll(async () => {
      await app?.close();
      await opened?.cleanup();
    });
    beforeEach(() => probe.executions.clear());

    const key = () => randomUUID();

    it('runs the first request and replays status, body and headers to a duplicate', async () => {
      const k = key();
      const first = await send(url, 'POST', '/payments', { key: k, body: { amount: 10 } });
      expect(first.status).toBe(201);
      expect(first.headers.get('x-payment-api')).toBe('v1');
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      const again = await send(url, 'POST', '/payments', { key: k, body: { amount: 10 } });
      expect(again.status).toBe(201);
      expect(again.text).toBe(first.text);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.headers.get('x-payment-api')).toBe('v1');
      expect(again.headers.get('content-type')).toMatch(/^application\/json/);
      expect(probe.count('create')).toBe(1);
    });

    it('accepts the key as a structured-field string, the same key as bare', async () => {
      const k = key();
      const bare = await send(url, 'POST', '/payments', { key: k, body: { amount: 1 } });
      const quoted = await send(url, 'POST', '/payments', { key: `"${k}"`, body: { amount: 1 } });
      expect(quoted.headers.get('idempotent-replayed')).toBe('true');
      expect(quoted.json()).toEqual(bare.json());
      expect(probe.count('create')).toBe(1);
    });

    it('replays a status the handler set itself and a Location header', async () => {
      const k = key();
      const first = await send(url, 'POST', '/payments/accepted', { key: k });
      expect(first.status).toBe(202);
      const again = await send(url, 'POST', '/payments/accepted', { key: k });
      expect(again.status).toBe(202);
      expect(again.headers.get('location')).toBe('/payments/queued');
      expect(again.json()).toEqual(first.json());
      expect(probe.count('accepted')).toBe(1);
    });

    it('replays an empty 204', async () => {
      const k = key();
      expect((await send(url, 'POST', '/payments/nothing', { key: k })).status).toBe(204);
      const again = await send(url, 'POST', '/payments/nothing', { key: k });
      expect(again.status).toBe(204);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(probe.count('nothing')).toBe(1);
    });

    it('gives a concurrent duplicate the real response once the first finishes', async () => {
      const k = key();
      const gate = probe.hold('slow');
      const first = send(url, 'POST', '/payments/slow', { key: k, body: { n: 1 } });
      await gate.entered.promise;
      const second = send(url, 'POST', '/payments/slow', { key: k, body: { n: 1 } });
      // The duplicate is parked inside the store; no second execution has started.
      expect(probe.count('slow')).toBe(1);
      gate.release.open();
      const [a, b] = await Promise.all([first, second]);
      expect(a.status).toBe(201);
      expect(b.status).toBe(201);
      expect(b.json()).toEqual(a.json());
      expect(b.headers.get('idempotent-replayed')).toBe('true');
      expect(probe.count('slow')).toBe(1);
    });

    it('answers 409 problem+json with Retry-After when the wait runs out', async () => {
      const k = key();
      const gate = probe.hold('impatient');
      const first = send(url, 'POST', '/payments/impatient', { key: k });
      await gate.entered.promise;
      const second = await send(url, 'POST', '/payments/impatient', { key: k });
      expect(second.status).toBe(409);
      expect(second.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      const retryAfter = Number(second.headers.get('retry-after'));
      expect(Number.isInteger(retryAfter)).toBe(true);
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(30);
      expect(second.json()).toMatchObject({ status: 409, code: 'idempotency-in-flight' });
      expect(second.text).not.toContain(k);
      gate.release.open();
      expect((await first).status).toBe(201);
      expect(probe.count('impatient')).toBe(1);
    });

    it('answers 422 when the key is reused with a different body; key order alone does not count', async () => {
      const k = key();
      await send(url, 'POST', '/payments', { key: k, body: { amount: 10, currency: 'EUR' } });
      const reordered = await send(url, 'POST', '/payments', {
        key: k,
        rawBody: '{"currency":"EUR","amount":10}',
      });
      expect(reordered.status).toBe(201);
      expect(reordered.headers.get('idempotent-replayed')).toBe('true');
      const changed = await send(url, 'POST', '/payments', {
        key: k,
        body: { amount: 11, currency: 'EUR' },
      });
      expect(changed.status).toBe(422);
      expect(changed.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(changed.json()).toMatchObject({ code: 'idempotency-key-reused' });
      expect(probe.count('create')).toBe(1);
    });

    it('releases the key when the handler throws, so a retry runs again', async () => {
      const k = key();
      const first = await send(url, 'POST', '/payments/fails', { key: k });
      expect(first.status).toBe(400);
      expect(first.json()).toMatchObject({ message: 'card declined' });
      const retry = await send(url, 'POST', '/payments/fails', { key: k });
      expect(retry.status).toBe(201);
      expect(retry.json()).toEqual({ ok: true, attempt: 2 });
      expect(probe.count('fails')).toBe(2);
    });

    it('lets an unexpected error reach Nest unchanged (500) and releases the key', async () => {
      const k = key();
      expect((await send(url, 'POST', '/payments/crashes', { key: k })).status).toBe(500);
      expect((await send(url, 'POST', '/payments/crashes', { key: k })).status).toBe(500);
      expect(probe.count('crashes')).toBe(2);
      await expect(store.list({ scope: 'PaymentsController.crashes' })).resolves.toEqual([]);
    });

    it('never stores or replays Set-Cookie', async () => {
      const k = key();
      const first = await send(url, 'POST', '/payments/cookie', { key: k });
      expect(first.headers.get('set-cookie')).toBe('session=secret');
      const record = await store.find({ scope: 'PaymentsController.cookie', key: k });
      expect(JSON.stringify(record?.payload)).not.toContain('session=secret');
      const again = await send(url, 'POST', '/payments/cookie', { key: k });
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      // The route's @Header is applied by Nest before the interceptor on every request;
      // what matters is that nothing was stored: see the record above.
      expect(probe.count('cookie')).toBe(1);
    });

    it('takes the key from an expression over params and body', async () => {
      const a = await send(url, 'PUT', '/orders/42', { body: { customerId: 'c1' } });
      const b = await send(url, 'PUT', '/orders/42', { body: { customerId: 'c1' } });
      const c = await send(url, 'PUT', '/orders/42', { body: { customerId: 'c2' } });
      expect(b.json()).toEqual(a.json());
      expect(c.json()).not.toEqual(a.json());
      expect(probe.count('put')).toBe(2);
      await expect(
        store.find({ scope: 'OrdersController.put', key: 'order:c1:42' }),
      ).resolves.toMatchObject({ state: 'COMPLETE' });
    });

    it('answers 400 when the expression yields nothing', async () => {
      const reply = await send(url, 'PUT', '/orders/42', { body: { other: 1 } });
      expect(reply.status).toBe(400);
      expect(reply.json()).toMatchObject({ code: 'idempotency-key-missing' });
      expect(probe.count('put')).toBe(0);
    });

    it('answers 400 when the expression yields an object', async () => {
      const reply = await send(url, 'PUT', '/orders/42', {
        body: { customerId: { nested: true } },
      });
      expect(reply.status).toBe(400);
      expect(reply.json()).toMatchObject({ code: 'idempotency-key-invalid' });
      expect(probe.count('put')).toBe(0);
    });

    describe('bad keys', () => {
      it('400 when the key is missing and required', async () => {
        const reply = await send(url, 'POST', '/payments', { body: { amount: 1 } });
        expect(reply.status).toBe(400);
        expect(reply.json()).toMatchObject({ code: 'idempotency-key-missing' });
        expect(probe.count('create')).toBe(0);
      });

      it('runs without idempotency when the key is missing and not required', async () => {
        const a = await send(url, 'POST', '/payments/optional');
        const b = await send(url, 'POST', '/payments/optional');
        expect(a.status).toBe(201);
        expect(b.json()).not.toEqual(a.json());
        expect(probe.count('optional')).toBe(2);
      });

      it.each([
        ['empty', ''],
        ['256 characters', 'k'.repeat(256)],
        ['a malformed structured-field string', '"unterminated'],
      ])('400 when the key is %s', async (_label, value) => {
        const reply = await sendRaw(
          url,
          'POST',
          '/payments',
          ['Idempotency-Key', value],
          '{"amount":1}',
        );
        expect(reply.status).toBe(400);
        expect(reply.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        expect(reply.json()).toMatchObject({ code: expect.stringMatching(/^idempotency-key-/) });
        if (value.length > 3) expect(reply.text).not.toContain(value);
        expect(probe.count('create')).toBe(0);
      });

      it('400 when the key contains a control character', async () => {
        const reply = await sendRaw(
          url,
          'POST',
          '/payments',
          ['Idempotency-Key', 'a\tb'],
          '{"amount":1}',
        );
        expect(reply.status).toBe(400);
        expect(probe.count('create')).toBe(0);
      });

      it('400 when the header is sent twice', async () => {
        const reply = await sendRaw(
          url,
          'POST',
          '/payments',
          ['Idempotency-Key', 'one', 'Idempotency-Key', 'two'],
          '{"amount":1}',
        );
        expect(reply.status).toBe(400);
        expect(reply.json()).toMatchObject({ code: 'idempotency-key-invalid' });
        expect(probe.count('create')).toBe(0);
      });

      it('400 from the body parser for invalid JSON, before any record is made', async () => {
        const k = key();
        const reply = await send(url, 'POST', '/payments', { key: k, rawBody: '{"amount":' });
        expect(reply.status).toBe(400);
        expect(probe.count('create')).toBe(0);
        await expect(
          store.find({ scope: 'PaymentsController.create', key: k }),
        ).resolves.toBeNull();
      });

      it('accepts a 255-character key', async () => {
        const reply = await send(url, 'POST', '/payments', {
          key: 'k'.repeat(255) + '',
          body: { amount: 1 },
        });
        expect(reply.status).toBe(201);
      });
    });

    it('stores the 500 Nest sent for a result the adapter cannot serialize; a retry replays it, the handler ran once', async () => {
      const k = key();
      const before = probe.count('unstorable');
      const reply = await send(url, 'POST', '/payments/unstorable', { key: k });
      expect(reply.status).toBe(500);
      const retry = await send(url, 'POST', '/payments/unstorable', { key: k });
      expect(retry.status).toBe(500);
      expect(retry.text).toBe(reply.text);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(probe.count('unstorable')).toBe(before + 1);
      await expect(
        store.find({ scope: 'PaymentsController.unstorable', key: k }),
      ).resolves.toMatchObject({ state: 'COMPLETE' });
    });
  });
});
