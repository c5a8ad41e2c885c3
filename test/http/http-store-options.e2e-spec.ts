import { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { AddressInfo, createServer } from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import {
  IdempotencyConfigError,
  IdempotencyModule,
  IdempotencyModuleOptions,
  IdempotencyStore,
  IdempotencyStoreUnavailableError,
} from 'nest-idempotency';
import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { send, startHttpApp } from '../support/http-app';
import {
  AnyRedisClient,
  connectCluster,
  connectStandalone,
  deletePrefix,
  describeIfRedis,
  probeRedisSync,
  redisUrl,
  scanAll,
  scratchPrefix,
} from '../support/redis';
import { hasRedisBinaries, RedisServers, startCluster } from '../support/redis-server';
import { PaymentsController, probe } from './fixtures';

const ROOT = path.resolve(__dirname, '../..');
const PASSWORD = 'pa55-never-printed';

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** The store the module built: the one it provides as `IdempotencyStore`. */
const builtStore = (app: Pick<INestApplication, 'get'>) =>
  app.get(IdempotencyStore) as unknown as ReturnType<typeof RedisIdempotencyStore.fromUrl>;

/** A payment, then its duplicate: the second is a replay, the handler ran once. */
async function expectReplay(url: string): Promise<string> {
  const key = randomUUID();
  const before = probe.count('create');
  const first = await send(url, 'POST', '/payments', { key, body: { amount: 5 } });
  const again = await send(url, 'POST', '/payments', { key, body: { amount: 5 } });
  expect(first.status).toBe(201);
  expect(again.headers.get('idempotent-replayed')).toBe('true');
  expect(again.text).toBe(first.text);
  expect(probe.count('create')).toBe(before + 1);
  return key;
}

describeIfRedis(probeRedisSync(), `Redis at ${redisUrl()}`)(
  'IdempotencyModule builds the Redis store from options: store: { redis: { url } }',
  () => {
    let admin: AnyRedisClient;
    const prefix = scratchPrefix('store-options');

    beforeAll(async () => {
      admin = await connectStandalone(redisUrl());
    });
    afterAll(async () => {
      if (admin) {
        await deletePrefix(admin, prefix);
        admin.destroy();
      }
    });

    it('forRoot: connects its own client at bootstrap, replays through it, and closes it at shutdown', async () => {
      const { app, url } = await startHttpApp('express', {
        imports: [
          IdempotencyModule.forRoot({ store: { redis: { url: redisUrl(), keyPrefix: prefix } } }),
        ],
        controllers: [PaymentsController],
      });
      const store = builtStore(app);
      try {
        expect(store).toBeInstanceOf(RedisIdempotencyStore);
        expect(store.cluster).toBe(false);
        expect(store.clientLibrary).toBe('node-redis');
        expect(store.client.isOpen).toBe(true);
        const key = await expectReplay(url);
        // The record is in Redis, under the configured prefix.
        const record = await store.find({ scope: 'PaymentsController.create', key });
        expect(record?.state).toBe('COMPLETE');
        expect(await scanAll(admin, `${prefix}*`)).toContain(
          store.keys.record('PaymentsController.create', key).key,
        );
      } finally {
        await app.close();
      }
      expect(store.client.isOpen).toBe(false);
    });

    it('forRootAsync: the factory may return the same options (from configuration), on Fastify', async () => {
      const { app, url } = await startHttpApp('fastify', {
        imports: [
          IdempotencyModule.forRootAsync({
            useFactory: async () => ({ store: { redis: { url: redisUrl(), keyPrefix: prefix } } }),
          }),
        ],
        controllers: [PaymentsController],
      });
      const store = builtStore(app);
      try {
        await expectReplay(url);
      } finally {
        await app.close();
      }
      expect(store.client.isOpen).toBe(false);
    });

    const compile = (store: unknown) =>
      Test.createTestingModule({
        imports: [
          IdempotencyModule.forRoot({
            store: store as IdempotencyModuleOptions['store'],
            purge: false,
          }),
        ],
      }).compile();

    it.each([
      [{ redis: {} }, /^IdempotencyModule: option "store\.redis\.url" is required: a redis:\/\//],
      [{ redis: 'redis://h:6379' }, /^IdempotencyModule: option "store\.redis" must be an object/],
      [
        { redis: { url: `mysql://root:${PASSWORD}@db/app` } },
        /^IdempotencyModule: option "store\.redis": the URL must start with redis:\/\/ or rediss:\/\/, not mysql:\/\/$/,
      ],
      [
        { redis: { url: `redis:// ${PASSWORD}` } },
        /^IdempotencyModule: option "store\.redis": the URL is not a URL/,
      ],
      [
        { redis: { url: ['redis://a:7000', 'redis://b:7000'] } },
        /^IdempotencyModule: option "store\.redis": 2 URLs were given; .*pass cluster: true$/,
      ],
      [
        { redis: { url: redisUrl(), keyPrefix: 'x{y}' } },
        /^IdempotencyModule: option "store\.redis": keyPrefix must not contain "\{" or "\}"/,
      ],
    ])('refuses %j at bootstrap with IdempotencyConfigError', async (store, message) => {
      const error = await compile(store).then(
        () => new Error('the module started'),
        (e: Error) => e,
      );
      expect(error).toBeInstanceOf(IdempotencyConfigError);
      expect(error.message).toMatch(message);
      expect(error.message).not.toContain(PASSWORD);
    });

    it('keeps the refusal for a missing store as it was', async () => {
      const error = await compile(undefined).then(
        () => new Error('the module started'),
        (e: Error) => e,
      );
      expect(error.message).toBe(
        'IdempotencyModule: option "store" is required (an IdempotencyStore such as new TypeOrmIdempotencyStore(dataSource) from nest-idempotency/typeorm)',
      );
    });

    it('fails the bootstrap at once when nothing listens at the address, without the password', async () => {
      const port = await closedPort();
      // Far beyond the test's own timeout: a refused connection must not wait for it.
      const moduleRef = await compile({
        redis: { url: `redis://app:${PASSWORD}@127.0.0.1:${port}`, connectTimeoutMs: 600_000 },
      });
      const error = await moduleRef.init().then(
        () => new Error('the module started'),
        (e: Error) => e,
      );
      expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
      expect(error.message).toMatch(
        new RegExp(`^cannot connect to Redis at 127\\.0\\.0\\.1:${port}: .*ECONNREFUSED`),
      );
      expect(error.message).not.toContain(PASSWORD);
      expect(moduleRef.get(IdempotencyStore).constructor).toBe(RedisIdempotencyStore);
      expect(builtStore(moduleRef).client.isOpen).toBe(false);
    });

    it('never loads the redis package unless store: { redis } asks for it', async () => {
      const run = (env: Record<string, string>) =>
        promisify(execFile)(
          process.execPath,
          ['-r', '@swc-node/register', 'test/http/store-options-app.ts'],
          {
            cwd: ROOT,
            env: {
              ...process.env,
              SWC_NODE_PROJECT: path.join(ROOT, 'tsconfig.json'),
              ...env,
            },
          },
        ).then(({ stdout }) => JSON.parse(stdout) as { loaded: boolean });
      const [memory, redis] = await Promise.all([
        run({ STORE: 'memory' }),
        run({ STORE: 'redis', REDIS_URL: redisUrl(), KEY_PREFIX: prefix }),
      ]);
      expect({ memory, redis }).toEqual({ memory: { loaded: false }, redis: { loaded: true } });
    }, 60_000);

    describe.runIf(hasRedisBinaries().available)('on a Redis Cluster', () => {
      let cluster: RedisServers;
      let clusterAdmin: AnyRedisClient;

      beforeAll(async () => {
        cluster = await startCluster();
        clusterAdmin = await connectCluster(cluster.ports);
      }, 60_000);
      afterAll(async () => {
        clusterAdmin?.destroy();
        await cluster?.stop();
      });

      it('cluster: true takes the URLs as seed nodes and creates a Cluster client', async () => {
        const seed = `redis://127.0.0.1:${cluster.ports[0]}`;
        const { app, url } = await startHttpApp('express', {
          imports: [
            IdempotencyModule.forRoot({
              store: { redis: { url: [seed], cluster: true, keyPrefix: prefix } },
            }),
          ],
          controllers: [PaymentsController],
        });
        const store = builtStore(app);
        try {
          expect(store.cluster).toBe(true);
          const key = await expectReplay(url);
          expect(await scanAll(clusterAdmin, `${prefix}*`)).toContain(
            store.keys.record('PaymentsController.create', key).key,
          );
        } finally {
          await app.close();
        }
        expect(store.client.isOpen).toBe(false);
      });
    });
  },
);
