import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { executions } from '../../src/payments.controller.js';
import { messageRuns } from '../../src/payments.messages.js';
import { startApp, type RunningApp } from '../app-harness.js';

describe('a Nest 12 ESM application with nest-idempotency (Vitest)', () => {
  let app: RunningApp;

  beforeAll(async () => {
    app = await startApp();
  });
  afterAll(async () => {
    await app?.close();
  });

  const pay = (key?: string) =>
    fetch(`${app.url}/payments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
      body: JSON.stringify({ amount: 1000 }),
    });

  it('answers a POST, replays its repeat with Idempotent-Replayed: true and the same body, runs once', async () => {
    const key = `consumer-${randomUUID()}`;
    const before = executions.count;
    const first = await pay(key);
    const second = await pay(key);
    expect(first.status).toBe(201);
    expect(second.status).toBe(201);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(await second.text()).toBe(await first.text());
    expect(executions.count - before).toBe(1);
  });

  it('answers a missing key with 400', async () => {
    const reply = await pay();
    expect(reply.status).toBe(400);
    expect(await reply.json()).toMatchObject({ code: 'idempotency-key-missing' });
  });

  it('runs a TCP message handler once per key', async () => {
    const id = randomUUID();
    const first = await app.send('payments.charge', { id, amount: 5 });
    const second = await app.send('payments.charge', { id, amount: 5 });
    expect(second).toEqual(first);
    expect(messageRuns.get(id)).toBe(1);
  });

  it('holds one copy of the library: require() after import returns the imported build', async () => {
    const require = createRequire(import.meta.url);
    const viaImport = await import('nest-idempotency');
    const viaRequire = require('nest-idempotency') as typeof viaImport;
    expect(viaRequire.IdempotencyModule).toBe(viaImport.IdempotencyModule);
    expect(viaRequire.IdempotencyEngine).toBe(viaImport.IdempotencyEngine);
  });
});
