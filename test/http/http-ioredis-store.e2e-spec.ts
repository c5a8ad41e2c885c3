import { randomUUID } from 'node:crypto';
import { IdempotencyModule, IdempotencyStore } from 'nest-idempotency';
import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { send, startHttpApp } from '../support/http-app';
import { connectIoredis, connectIoredisCluster } from '../support/ioredis';
import {
  connectStandalone,
  deletePrefix,
  describeIfRedis,
  probeRedisSync,
  redisUrl,
  scratchPrefix,
} from '../support/redis';
import { hasRedisBinaries, RedisServers, startCluster } from '../support/redis-server';
import { PaymentsController, probe } from './fixtures';

/** Twenty duplicates at once, then one more: one run, every other answer a replay of it. */
async function expectOneRun(url: string): Promise<void> {
  const key = randomUUID();
  const before = probe.count('create');
  const answers = await Promise.all(
    Array.from({ length: 20 }, () => send(url, 'POST', '/payments', { key, body: { amount: 5 } })),
  );
  expect(answers.map((a) => a.status).every((s) => s === 201)).toBe(true);
  expect(new Set(answers.map((a) => a.text)).size).toBe(1);
  expect(probe.count('create')).toBe(before + 1);
  const again = await send(url, 'POST', '/payments', { key, body: { amount: 5 } });
  expect(again.headers.get('idempotent-replayed')).toBe('true');
}

describeIfRedis(probeRedisSync(), `Redis at ${redisUrl()}`)(
  "The Redis store on the application's own ioredis client",
  () => {
    it('runs a handler once for concurrent duplicates; after app.close() the client still answers PING', async () => {
      const client = await connectIoredis(redisUrl());
      const prefix = scratchPrefix('http-ioredis');
      const { app, url } = await startHttpApp('express', {
        imports: [
          IdempotencyModule.forRoot({
            store: new RedisIdempotencyStore(client, { keyPrefix: prefix }),
          }),
        ],
        controllers: [PaymentsController],
      });
      try {
        const store = app.get(IdempotencyStore) as unknown as RedisIdempotencyStore;
        expect(store.clientLibrary).toBe('ioredis');
        await expectOneRun(url);
      } finally {
        await app.close();
      }
      expect(client.status).toBe('ready');
      expect(await client.ping()).toBe('PONG');
      const admin = await connectStandalone(redisUrl());
      await deletePrefix(admin, prefix);
      admin.destroy();
      client.disconnect();
    });
  },
);

let servers: RedisServers | undefined;
afterAll(async () => {
  await servers?.stop();
}, 30_000);

describeIfRedis(hasRedisBinaries(), 'the redis-server binary')(
  "The Redis store on the application's own ioredis Cluster client",
  () => {
    it('runs a handler once for concurrent duplicates; after app.close() the Cluster client still answers PING', async () => {
      servers = await startCluster();
      const client = await connectIoredisCluster(servers.ports);
      const { app, url } = await startHttpApp('fastify', {
        imports: [
          IdempotencyModule.forRoot({
            store: new RedisIdempotencyStore(client, { keyPrefix: scratchPrefix('http-ioc') }),
          }),
        ],
        controllers: [PaymentsController],
      });
      try {
        await expectOneRun(url);
      } finally {
        await app.close();
      }
      expect(client.status).toBe('ready');
      expect(await client.ping()).toBe('PONG');
      client.disconnect();
    }, 60_000);
  },
);
