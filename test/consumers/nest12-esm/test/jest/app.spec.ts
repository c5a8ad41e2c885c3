import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';
import * as imported from 'nest-idempotency';
import type * as core from 'nest-idempotency/core';
import { executions } from '../../src/payments.controller.js';
import { messageRuns } from '../../src/payments.messages.js';
import { startApp, type RunningApp } from '../app-harness.js';

// Jest in ES-module mode (--experimental-vm-modules), transformed by ts-jest (useESM) or @swc/jest.
describe('a Nest 12 ESM application with nest-idempotency (Jest, ES modules)', () => {
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

  it('runs a TCP message handler once per key (Nest 12 loads @nestjs/microservices as an ES module)', async () => {
    const id = randomUUID();
    const first = await app.send('payments.charge', { id, amount: 5 });
    const second = await app.send('payments.charge', { id, amount: 5 });
    expect(second).toEqual(first);
    expect(messageRuns.get(id)).toBe(1);
  });

  it('a require() of nest-idempotency/core agrees with the import on tokens and errors', () => {
    // Jest's require() cannot load an ES module before Node 24.9 (nor, so, Nest 12): it gets
    // the CommonJS build of the framework-free entry point beside the imported ES-module one.
    const required = createRequire(import.meta.url)('nest-idempotency/core') as typeof core;
    expect(required.IdempotencyStore).toBe(imported.IdempotencyStore);
    expect(new required.IdempotencyConfigError('x')).toBeInstanceOf(
      imported.IdempotencyConfigError,
    );
    expect(new imported.IdempotencyKeyError('x')).toBeInstanceOf(required.IdempotencyError);
    expect(new imported.IdempotencyKeyError('x')).not.toBeInstanceOf(
      required.IdempotencyConfigError,
    );
  });
});
