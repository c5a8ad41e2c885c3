import { randomUUID } from 'node:crypto';
import { AddressInfo, createServer } from 'node:net';
import { createCluster } from 'redis';
import { AcquireRequest, encodeValue } from 'nest-idempotency';
import { RedisIdempotencyStore } from '../../libs/idempotency/src/redis';
import {
  ClusterClient,
  connectCluster,
  connectStandalone,
  describeIfRedis,
  mastersOf,
  StandaloneClient,
} from '../support/redis';
import { addressOf, ExecutedCommand, MonitorSpy } from '../support/redis-traffic';
import { hasRedisBinaries, RedisServers, startCluster } from '../support/redis-server';
import { acquired, acquireRequest } from '../support/store-assertions';

/**
 * The Cluster side of the store, on a Redis Cluster of three masters this
 * file starts (and kills in afterAll): records spread over the shards, one
 * script call per operation on the shard that holds the record, sharded
 * pub/sub only for watched records, subscriber connections the store's own.
 */

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const request = (scope: string, key: string, overrides: Partial<AcquireRequest> = {}) =>
  acquireRequest(scope, key, { leaseMs: 10_000, ttlMs: 60_000, ...overrides });

function nextWait(store: RedisIdempotencyStore, scope: string): Promise<void> {
  return new Promise((resolve) => {
    const stop = store.onWait((waiting) => {
      if (waiting !== scope) return;
      stop();
      resolve();
    });
  });
}

describeIfRedis(hasRedisBinaries(), 'the redis-server binary')(
  'RedisIdempotencyStore (Redis Cluster)',
  () => {
    let servers: RedisServers;
    let cluster: ClusterClient;
    let store: RedisIdempotencyStore;
    let nodes: StandaloneClient[];
    const prefix = 'cspec:';

    beforeAll(async () => {
      servers = await startCluster();
      cluster = await connectCluster(servers.ports);
      store = new RedisIdempotencyStore(cluster, { keyPrefix: prefix });
      await store.init();
      nodes = await Promise.all(
        servers.ports.map((port) => connectStandalone(`redis://127.0.0.1:${port}`)),
      );
    }, 60_000);

    afterAll(async () => {
      await store?.close();
      cluster?.destroy();
      nodes?.forEach((n) => n.destroy());
      await servers?.stop();
    }, 30_000);

    it('is a Cluster store; records of one scope spread over all three masters', async () => {
      expect(store.cluster).toBe(true);
      const scope = `spread-${randomUUID()}`;
      for (let i = 0; i < 30; i++) await acquired(store.tryAcquire(request(scope, `k${i}`)));
      const perMaster = await Promise.all(
        nodes.map(
          async (node) =>
            (await node.scan('0', { MATCH: store.keys.pattern(scope), COUNT: 1000 })).keys.length,
        ),
      );
      expect(perMaster.every((n) => n > 0)).toBe(true);
      const listed = await store.list({ scope, limit: 1000 });
      expect(listed).toHaveLength(30);
      // newest first, across the shards
      expect(listed.map((r) => r.key)).toEqual(Array.from({ length: 30 }, (_, i) => `k${29 - i}`));
      expect((await store.list({ scope, limit: 5 })).map((r) => r.key)).toEqual([
        'k29',
        'k28',
        'k27',
        'k26',
        'k25',
      ]);
    });

    it('one script call per operation, sent to the master that holds the record (MONITOR on every master)', async () => {
      const spies = await Promise.all(
        servers.ports.map((port) => MonitorSpy.start(`redis://127.0.0.1:${port}`)),
      );
      try {
        const storeAddresses = new Set(
          await Promise.all((await mastersOf(cluster)).map((node) => addressOf(node))),
        );
        const sent = async () => {
          const all: ExecutedCommand[] = [];
          for (const spy of spies) all.push(...(await spy.since()));
          return all.filter((c) => storeAddresses.has(c.from)).map((c) => c.name);
        };
        await sent();
        const scope = `rt-${randomUUID()}`;
        const measured: Record<string, string[]> = {};
        const lease = await acquired(
          store.tryAcquire(request(scope, 'k', { waitTimeoutMs: 5000 })),
        );
        measured.acquire = await sent();
        expect(await store.extend(lease)).toBe(true);
        measured.extend = await sent();
        await store.complete(lease, encodeValue(1));
        measured.complete = await sent();
        expect((await store.tryAcquire(request(scope, 'k', { waitTimeoutMs: 5000 }))).kind).toBe(
          'duplicate',
        );
        measured.replay = await sent();
        await store.find({ scope, key: 'k' });
        measured.find = await sent();
        const other = await acquired(store.tryAcquire(request(scope, 'r')));
        await sent();
        await store.release(other);
        measured.release = await sent();
        console.log(`[redis cluster round trips] ${JSON.stringify(measured)}`);
        for (const [operation, names] of Object.entries(measured))
          expect(names, operation).toEqual(['EVALSHA']);
      } finally {
        await Promise.all(spies.map((spy) => spy.stop()));
      }
    });

    it("SPUBLISHes a wake-up only for a record someone waits on, on the record's own channel", async () => {
      const scope = `notify-${randomUUID()}`;
      const listener = await connectCluster(servers.ports);
      const waiterCluster = await connectCluster(servers.ports);
      const waiter = new RedisIdempotencyStore(waiterCluster, {
        keyPrefix: prefix,
        pollIntervalMs: 60_000,
      });
      const received: string[] = [];
      const keys = [
        'unwatched-complete',
        'unwatched-release',
        'watched-complete',
        'watched-release',
      ];
      try {
        for (const key of keys) {
          await listener.sSubscribe(
            store.keys.record(scope, key).channel,
            (message, channel) => void received.push(`${channel} ${message}`),
          );
        }
        const id = (key: string) => store.keys.record(scope, key).id;
        const channel = (key: string) => store.keys.record(scope, key).channel;
        /** Messages on `key`'s channel up to a marker published there now (in order on that shard). */
        const messages = async (key: string) => {
          const marker = `marker-${randomUUID()}`;
          await cluster.sPublish(channel(key), marker);
          for (let i = 0; i < 100 && !received.some((m) => m.endsWith(marker)); i++)
            await delay(10);
          const upTo = received.findIndex((m) => m.endsWith(marker));
          expect(upTo).toBeGreaterThanOrEqual(0);
          return received.splice(0, upTo + 1).slice(0, -1);
        };

        const a = await acquired(store.tryAcquire(request(scope, 'unwatched-complete')));
        await store.complete(a, encodeValue('a'));
        expect(await messages('unwatched-complete')).toEqual([]);
        const b = await acquired(store.tryAcquire(request(scope, 'unwatched-release')));
        await store.release(b);
        expect(await messages('unwatched-release')).toEqual([]);

        const c = await acquired(store.tryAcquire(request(scope, 'watched-complete')));
        const waiting = nextWait(waiter, scope);
        const replay = waiter.tryAcquire(
          request(scope, 'watched-complete', { waitTimeoutMs: 10_000 }),
        );
        await waiting;
        await store.complete(c, encodeValue('c'));
        expect((await replay).kind).toBe('duplicate');
        expect(await messages('watched-complete')).toEqual([
          `${channel('watched-complete')} ${id('watched-complete')}`,
        ]);

        const d = await acquired(store.tryAcquire(request(scope, 'watched-release')));
        const waitingToo = nextWait(waiter, scope);
        const taker = waiter.tryAcquire(
          request(scope, 'watched-release', { waitTimeoutMs: 10_000 }),
        );
        await waitingToo;
        await store.release(d);
        expect((await taker).kind).toBe('acquired');
        expect(await messages('watched-release')).toEqual([
          `${channel('watched-release')} ${id('watched-release')}`,
        ]);
      } finally {
        await waiter.close();
        waiterCluster.destroy();
        listener.destroy();
      }
    });

    it('fromUrl starts on a Cluster whose first seed nodes refuse, by the seeds that answer', async () => {
      // Ports nothing listens on: the client tries the seeds in turn and takes the live one.
      const closed = await Promise.all(
        Array.from({ length: 5 }, async () => {
          const server = createServer();
          await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
          const { port } = server.address() as AddressInfo;
          await new Promise<void>((resolve) => server.close(() => resolve()));
          return port;
        }),
      );
      const own = RedisIdempotencyStore.fromUrl(
        [...closed, servers.ports[0]].map((port) => `redis://127.0.0.1:${port}`),
        {
          cluster: true,
          keyPrefix: prefix,
          logger: { warn: () => undefined, error: () => undefined },
        },
      );
      try {
        await own.init();
        const scope = `seeds-${randomUUID()}`;
        expect((await own.tryAcquire(request(scope, 'k'))).kind).toBe('acquired');
      } finally {
        await own.close();
      }
    });

    it('subscribes on the shards it waits on, unsubscribes after, and close() drops only its own connections', async () => {
      const scope = `subs-${randomUUID()}`;
      // Named, so the store's subscriber connections (duplicates of this client) can be told apart.
      const name = `subs-${randomUUID().slice(0, 8)}`;
      const appCluster: ClusterClient = createCluster({
        rootNodes: servers.ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })),
        defaults: { name },
      });
      appCluster.on('error', () => undefined);
      await appCluster.connect();
      const own = new RedisIdempotencyStore(appCluster, { keyPrefix: prefix });
      /** Shard-channel subscriptions (ssub) and pub/sub connections, summed over the masters. */
      const pubsub = async () => {
        let connections = 0;
        let shardChannels = 0;
        for (const node of nodes) {
          const lines = String(await node.sendCommand(['CLIENT', 'LIST', 'TYPE', 'pubsub']))
            .split('\n')
            .filter((line) => line.includes(` name=${name} `));
          connections += lines.length;
          for (const line of lines) shardChannels += Number(/ssub=(\d+)/.exec(line)?.[1] ?? 0);
        }
        return { connections, shardChannels };
      };
      try {
        const before = await pubsub();
        // Keys until every master holds one: the waiters then need a subscription on each shard.
        const keys: string[] = [];
        const masters = new Set<string>();
        for (let i = 0; masters.size < 3; i++) {
          const key = `k${i}`;
          const { key: redisKey } = own.keys.record(scope, key);
          const slot = Number(await nodes[0].sendCommand(['CLUSTER', 'KEYSLOT', redisKey]));
          const shard = cluster.slots[slot].master.address;
          if (masters.has(shard)) continue;
          masters.add(shard);
          keys.push(key);
        }
        const leases = await Promise.all(
          keys.map((key) => acquired(store.tryAcquire(request(scope, key)))),
        );
        const waits = keys.map(() => nextWait(own, scope));
        const results = keys.map((key) =>
          own.tryAcquire(request(scope, key, { waitTimeoutMs: 10_000 })),
        );
        results.forEach((result) => result.catch(() => undefined));
        await Promise.all(waits);
        // A shard's subscriber may still be connecting when its waiter starts waiting.
        let during = await pubsub();
        const settled = () =>
          during.connections - before.connections >= 3 &&
          during.shardChannels - before.shardChannels >= 3;
        for (let i = 0; i < 50 && !settled(); i++) {
          await delay(20);
          during = await pubsub();
        }
        expect(during.connections - before.connections).toBe(3); // one per shard
        expect(during.shardChannels - before.shardChannels).toBe(3); // one channel per waited record
        await Promise.all(leases.map((lease) => store.complete(lease, encodeValue(1))));
        expect((await Promise.all(results)).map((r) => r.kind)).toEqual([
          'duplicate',
          'duplicate',
          'duplicate',
        ]);
        for (let i = 0; i < 50 && (await pubsub()).shardChannels !== before.shardChannels; i++)
          await delay(20);
        expect((await pubsub()).shardChannels).toBe(before.shardChannels);
        await own.close();
        for (let i = 0; i < 50 && (await pubsub()).connections !== before.connections; i++)
          await delay(20);
        expect((await pubsub()).connections).toBe(before.connections);
        expect(appCluster.isOpen).toBe(true);
        expect((await own.tryAcquire(request(scope, keys[0]))).kind).toBe('duplicate');
      } finally {
        await own.close();
        appCluster.destroy();
      }
    });
  },
);
