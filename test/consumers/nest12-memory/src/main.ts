import 'reflect-metadata';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { Body, Controller, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Idempotent, IdempotencyModule, InMemoryIdempotencyStore } from 'nest-idempotency';

// Boots, answers a POST, replays it, refuses a missing key, and shows what is not installed.
let runs = 0;

@Controller('orders')
class OrdersController {
  @Post()
  @Idempotent()
  create(@Body() body: { sku: string }) {
    runs++;
    return { sku: body.sku, run: runs };
  }
}

@Module({
  imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore() })],
  controllers: [OrdersController],
})
class AppModule {}

const require = createRequire(import.meta.url);
for (const absent of ['@nestjs/microservices', 'typeorm', 'pg']) {
  assert.throws(() => require.resolve(absent), `${absent} should not be installed`);
}

const app = await NestFactory.create(AppModule, { logger: false });
await app.listen(0, '127.0.0.1');
const url = `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}/orders`;
const post = (key?: string) =>
  fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
    body: JSON.stringify({ sku: 'a-1' }),
  });
const first = await post('k-1');
const second = await post('k-1');
assert.equal(first.status, 201);
assert.equal(second.headers.get('idempotent-replayed'), 'true');
assert.equal(await second.text(), await first.text());
assert.equal((await post()).status, 400);
assert.equal(runs, 1);
await app.close();
console.log('consumer-nest12-memory: ok (no @nestjs/microservices, typeorm or pg installed)');
