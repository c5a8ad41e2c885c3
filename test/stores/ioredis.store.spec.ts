import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { createClient } from 'redis';
import {
  AcquireRequest,
  encodeValue,
  IdempotencyConfigError,
  IdempotencyLeaseLostError,
  IdempotencyStoreUnavailableError,
} from 'nest-idempotency';
import { RedisIdempotencyStore } from '../../libs/idempotency/src/redis';
import { connectIoredis, connectIoredisCluster } from '../support/ioredis';
import { describeIfRedis } from '../support/redis';
import {
  settledClusterNodes,
  hasRedisBinaries,
  RedisServers,
  startCluster,
  startRedisServer,
  startStandalone,
} from '../support/redis-server';
import { acquired, acquireRequest, StoreLogs } from '../support/store-assertions';

/**
 * What the conformance kit cannot see, for a store on ioredis: the client
 * told apart and checked at construction, NOSCRIPT, an outage, and WAIT sent
 * on the connection that took the write (on a Cluster: the key's master), on
 * servers of this file's own.
 */

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const request = (scope: string, key: string, overrides: Partial<AcquireRequest> = {}) =>
  acquireRequest(scope, key, { leaseMs: 10_000, ttlMs: 60_000, ...overrides });

describe('RedisIdempotencyStore on ioredis: the client', () => {
  it('tells an ioredis Redis and Cluster apart without connecting them, and says so', () => {
    const redis = new Redis({ lazyConnect: true });
    const cluster = new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true });
    const onRedis = new RedisIdempotencyStore(redis);
    const onCluster = new RedisIdempotencyStore(cluster);
    expect([onRedis.clientLibrary, onRedis.cluster]).toEqual(['ioredis', false]);
    expect([onCluster.clientLibrary, onCluster.cluster]).toEqual(['ioredis', true]);
    expect(onRedis.client).toBe(redis);
    expect(redis.status).toBe('wait');
    expect(cluster.status).toBe('wait');
    const fromUrl = RedisIdempotencyStore.fromUrl('redis://127.0.0.1:6379');
    expect(fromUrl.clientLibrary).toBe('node-redis');
  });

  const refusal = (make: () => unknown) => {
    try {
      make();
    } catch (error) {
      return error as Error;
    }
    throw new Error('not refused');
  };

  it('refuses an ioredis client with keyPrefix, and anything that is no client, with IdempotencyConfigError', () => {
    const prefixed = refusal(
      () => new RedisIdempotencyStore(new Redis({ lazyConnect: true, keyPrefix: 'app:' })),
    );
    expect(prefixed).toBeInstanceOf(IdempotencyConfigError);
    expect(prefixed.message).toMatch(/keyPrefix/);
    const prefixedCluster = refusal(
      () =>
        new RedisIdempotencyStore(
          new Cluster([{ host: '127.0.0.1', port: 1 }], {
            lazyConnect: true,
            keyPrefix: 'app:',
          }),
        ),
    );
    expect(prefixedCluster).toBeInstanceOf(IdempotencyConfigError);
    const none = refusal(() => new RedisIdempotencyStore({} as never));
    expect(none).toBeInstanceOf(IdempotencyConfigError);
    expect(none.message).toMatch(/ioredis 5/);
  });

  it('refuses, when the store is made, an auto-pipelining ioredis client without a Buffer method the store sends through', () => {
    // ioredis 5 has every one; a client without evalshaBuffer stands for one that does not.
    const pipelined = new Redis({ lazyConnect: true, enableAutoPipelining: true });
    expect(() => new RedisIdempotencyStore(pipelined)).not.toThrow();
    Object.defineProperty(pipelined, 'evalshaBuffer', { value: undefined });
    const refused = refusal(() => new RedisIdempotencyStore(pipelined));
    expect(refused).toBeInstanceOf(IdempotencyConfigError);
    expect(refused.message).toMatch(/enableAutoPipelining on but no evalshaBuffer;/);
    // Without auto-pipelining the store sends callBuffer, and needs none of them.
    const plain = new Redis({ lazyConnect: true });
    Object.defineProperty(plain, 'evalshaBuffer', { value: undefined });
    expect(() => new RedisIdempotencyStore(plain)).not.toThrow();
    expect(pipelined.status).toBe('wait');
  });
});

describeIfRedis(hasRedisBinaries(), 'the redis-server binary')(
  'RedisIdempotencyStore on ioredis (standalone, a server of its own)',
  () => {
    let servers: RedisServers;
    beforeAll(async () => {
      servers = await startStandalone(1);
    }, 30_000);
    afterAll(async () => {
      await servers?.stop();
    });

    it.each([false, true])(
      'sends a script again as EVAL on NOSCRIPT (ioredis ReplyError) after SCRIPT FLUSH (enableAutoPipelining: %s)',
      async (enableAutoPipelining) => {
        const client = await connectIoredis(servers.servers[0].url, { enableAutoPipelining });
        const store = new RedisIdempotencyStore(client, { keyPrefix: `noscript-${randomUUID()}:` });
        try {
          await store.init();
          await client.call('SCRIPT', 'FLUSH');
          const lease = await acquired(store.tryAcquire(request('s', 'k')));
          await client.call('SCRIPT', 'FLUSH');
          await store.complete(lease, encodeValue({ bytes: 'ok' }));
          const replay = await store.tryAcquire(request('s', 'k'));
          expect(replay.kind).toBe('duplicate');
        } finally {
          await store.close();
          client.disconnect();
        }
      },
    );

    it.each([false, true])(
      'WAITs on the connection that wrote: no warning with the replica up, "0 of 1" with it paused (enableAutoPipelining: %s)',
      async (enableAutoPipelining) => {
        const [master, replica] = servers.servers;
        const client = await connectIoredis(master.url, { enableAutoPipelining });
        const replicaAdmin = await connectIoredis(replica.url);
        const logs = new StoreLogs();
        const prefix = `wait-${randomUUID()}:`;
        const store = new RedisIdempotencyStore(client, {
          keyPrefix: prefix,
          waitForReplicas: { replicas: 1, timeoutMs: 5000 },
          logger: logs,
        });
        const brief = new RedisIdempotencyStore(client, {
          keyPrefix: prefix,
          waitForReplicas: { replicas: 1, timeoutMs: 300 },
          logger: logs,
        });
        try {
          for (let i = 0; i < 100; i++) {
            const info = String(await client.info('replication'));
            if (/slave0:.*state=online/.test(info)) break;
            await delay(50);
          }
          for (let i = 0; i < 20; i++) {
            const lease = await acquired(store.tryAcquire(request('s', `up-${i}`)));
            await store.complete(lease, encodeValue(i));
            // WAIT returned: the replica has it now.
            const key = store.keys.record('s', `up-${i}`).key;
            expect(await replicaAdmin.hget(key, 'st')).toBe('COMPLETE');
          }
          expect(logs.lines).toEqual([]);
          // The replica stops acknowledging: WAIT runs out, and the store says so (by digest).
          await replica.process.kill('SIGSTOP');
          try {
            const lease = await acquired(brief.tryAcquire(request('s', 'paused')));
            const started = performance.now();
            await brief.complete(lease, encodeValue(1));
            expect(performance.now() - started).toBeGreaterThanOrEqual(250);
          } finally {
            replica.process.kill('SIGCONT');
          }
          expect(logs.lines).toHaveLength(1);
          expect(logs.lines[0]).toMatch(/^warn: complete of s\/#[0-9a-f]+: 0 of 1 replicas/);
          expect(logs.lines[0]).not.toContain('paused');
        } finally {
          await store.close();
          client.disconnect();
          replicaAdmin.disconnect();
        }
      },
    );

    it('gives IdempotencyStoreUnavailableError when the server dies, and works once it is back', async () => {
      const own = await startStandalone();
      const port = own.ports[0];
      const client = new Redis(own.servers[0].url, { retryStrategy: () => 50 });
      client.on('error', () => undefined);
      const store = new RedisIdempotencyStore(client, {
        operationTimeoutMs: 500,
        logger: new StoreLogs(),
      });
      try {
        const lease = await acquired(store.tryAcquire(request('s', 'k')));
        await own.servers[0].kill();
        const started = performance.now();
        await expect(store.complete(lease, encodeValue(1))).rejects.toBeInstanceOf(
          IdempotencyStoreUnavailableError,
        );
        await expect(store.tryAcquire(request('s', 'other'))).rejects.toBeInstanceOf(
          IdempotencyStoreUnavailableError,
        );
        expect(performance.now() - started).toBeLessThan(2000);
        own.servers[0] = await startRedisServer(own.dir, port);
        await new Promise<void>((resolve) =>
          client.status === 'ready' ? resolve() : client.once('ready', () => resolve()),
        );
        expect((await store.tryAcquire(request('s', 'k'))).kind).toBe('acquired');
        await expect(store.complete(lease, encodeValue(1))).rejects.toBeInstanceOf(
          IdempotencyLeaseLostError,
        );
      } finally {
        client.disconnect();
        await own.stop();
      }
    });
  },
);

describeIfRedis(hasRedisBinaries(), 'the redis-server binary')(
  'RedisIdempotencyStore on an ioredis Cluster (3 masters, a replica each)',
  () => {
    let servers: RedisServers;
    beforeAll(async () => {
      servers = await startCluster({ replicas: 1 });
    }, 60_000);
    afterAll(async () => {
      await servers?.stop();
    });

    it("keeps its reads on the keys' masters with auto-pipelining and scaleReads: 'slave' (replicas serve none)", async () => {
      // Redis lists a replica in CLUSTER SLOTS only once it has replicated something, and ioredis
      // sends reads only to the replicas it read there: write to every master, wait for the listing.
      const seed = await connectIoredisCluster(servers.ports);
      try {
        for (let i = 0; i < 64; i++) await seed.set(`seed-${i}`, '1');
        const deadline = Date.now() + 20_000;
        for (;;) {
          const ranges = (await seed.cluster('SLOTS')) as unknown[][];
          if (ranges.length > 0 && ranges.every((range) => range.length >= 4)) break;
          if (Date.now() > deadline) throw new Error('CLUSTER SLOTS lists no replica after 20 s');
          await delay(100);
        }
      } finally {
        seed.disconnect();
      }
      const client = await connectIoredisCluster(servers.ports, {
        enableAutoPipelining: true,
        scaleReads: 'slave',
      });
      const store = new RedisIdempotencyStore(client, { keyPrefix: `creads-${randomUUID()}:` });
      const nodes = await settledClusterNodes(servers.ports[0], 1);
      const replicaPorts = nodes.filter((n) => n.role !== 'master').map((n) => n.port);
      const cli = (port: number, ...args: string[]) =>
        spawnSync('redis-cli', ['-p', String(port), ...args], { encoding: 'utf8' }).stdout;
      const readsServed = () =>
        replicaPorts
          .map((port) => cli(port, 'info', 'commandstats'))
          .flatMap((info) => [
            ...info.matchAll(/^cmdstat_(get|hmget|lrange|hgetall):calls=(\d+)/gm),
          ])
          .reduce((sum, match) => sum + Number(match[2]), 0);
      try {
        expect(replicaPorts).toHaveLength(3);
        for (const port of replicaPorts) cli(port, 'config', 'resetstat');
        await store.init(); // writes a probe with SET, reads it back with GET
        for (const key of ['a', 'b', 'c', 'd']) {
          const lease = await acquired(store.tryAcquire(request('s', key)));
          await store.complete(lease, encodeValue(key));
        }
        const listed = await store.list({ scope: 's' }); // SCAN, then HMGET per key
        expect(listed.map((r) => r.state).sort()).toEqual(Array(4).fill('COMPLETE'));
        expect((await store.tryAcquire(request('s', 'a'))).kind).toBe('duplicate');
        expect(readsServed()).toBe(0);
      } finally {
        await store.close();
        client.disconnect();
      }
    });

    it("sends WAIT to the master of the record's slot: only a record whose master lost its replica warns", async () => {
      const client = await connectIoredisCluster(servers.ports);
      const logs = new StoreLogs();
      const prefix = `cwait-${randomUUID()}:`;
      const store = new RedisIdempotencyStore(client, {
        keyPrefix: prefix,
        waitForReplicas: { replicas: 1, timeoutMs: 300 },
        logger: logs,
      });
      const nodes = await settledClusterNodes(servers.ports[0], 1);
      try {
        // Keys until two land on different masters.
        const masterOf = async (key: string) => {
          for (const node of nodes.filter((n) => n.role === 'master')) {
            const direct = createClient({ url: `redis://127.0.0.1:${node.port}` });
            direct.on('error', () => undefined);
            await direct.connect();
            try {
              const slot = Number(await direct.sendCommand(['CLUSTER', 'KEYSLOT', key]));
              const owns = node.slots.some((range) => {
                const [from, to = from] = range.split('-').map(Number);
                return slot >= from && slot <= to;
              });
              if (owns) return node;
            } finally {
              direct.destroy();
            }
          }
          throw new Error(`no master for ${key}`);
        };
        const first = store.keys.record('s', 'a').key;
        const firstMaster = await masterOf(first);
        let other = 'b';
        for (
          let i = 0;
          (await masterOf(store.keys.record('s', other).key)).id === firstMaster.id;
          i++
        )
          other = `b${i}`;
        // Stop the replica of the first record's master only.
        const stopped = nodes.find((n) => n.masterId === firstMaster.id)!;
        const replicaProcess = servers.servers.find((s) => s.port === stopped.port)!.process;
        const a = await acquired(store.tryAcquire(request('s', 'a')));
        const b = await acquired(store.tryAcquire(request('s', other)));
        replicaProcess.kill('SIGSTOP');
        try {
          await store.complete(b, encodeValue(1));
          expect(logs.lines).toEqual([]);
          await store.complete(a, encodeValue(1));
        } finally {
          replicaProcess.kill('SIGCONT');
        }
        expect(logs.lines).toHaveLength(1);
        expect(logs.lines[0]).toMatch(/^warn: complete of s\/#[0-9a-f]+: 0 of 1 replicas/);
      } finally {
        await store.close();
        client.disconnect();
      }
    });
  },
);
