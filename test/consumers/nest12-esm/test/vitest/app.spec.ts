import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppModule } from '../src/app.module.js';
import { executions } from '../src/payments.controller.js';

describe('a Nest 12 ESM application with nest-idempotency', () => {
  let app: Awaited<ReturnType<typeof NestFactory.create>>;
  let url: string;

  beforeAll(async () => {
    app = await NestFactory.create(AppModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    url = `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await app?.close();
  });

  const pay = (key?: string) =>
    fetch(`${url}/payments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
      body: JSON.stringify({ amount: 1000 }),
    });

  it('answers a POST, replays its repeat with Idempotent-Replayed: true and the same body, runs once', async () => {
    const key = `consumer-${Date.now()}`;
    const first = await pay(key);
    const second = await pay(key);
    expect(first.status).toBe(201);
    expect(second.status).toBe(201);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(await second.text()).toBe(await first.text());
    expect(executions.count).toBe(1);
  });

  it('answers a missing key with 400', async () => {
    const reply = await pay();
    expect(reply.status).toBe(400);
    expect(await reply.json()).toMatchObject({ code: 'idempotency-key-missing' });
  });

  it('runs without @nestjs/microservices installed', () => {
    const require = createRequire(import.meta.url);
    expect(() => require.resolve('@nestjs/microservices')).toThrow();
  });

  it('holds one copy of the library: its ESM and CommonJS entry points are the same module', async () => {
    const require = createRequire(import.meta.url);
    const viaImport = await import('nest-idempotency');
    const viaRequire = require('nest-idempotency') as typeof viaImport;
    expect(viaRequire.IdempotencyModule).toBe(viaImport.IdempotencyModule);
    expect(viaRequire.IdempotencyStore).toBe(viaImport.IdempotencyStore);
  });
});
