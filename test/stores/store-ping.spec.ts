import { IdempotencyStoreUnavailableError, InMemoryIdempotencyStore } from 'nest-idempotency';
import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { ReplayCachingStore } from '../../libs/idempotency/src/stores/cache/replay-cache.store';
import { TracingIdempotencyStore } from '../../libs/idempotency/src/telemetry/opentelemetry';
import { DataSource } from 'typeorm';
import {
  mariadbAvailable,
  mysqlTarget,
  mysqlUrlThroughPort,
  openMysqlDataSource,
} from '../support/mariadb';
import { openDataSource, testDatabaseUrl } from '../support/postgres';
import {
  connectCluster,
  connectStandalone,
  describeIfRedis,
  probeRedisSync,
  redisUrl,
} from '../support/redis';
import { hasRedisBinaries, RedisServers, startCluster } from '../support/redis-server';
import { parsePgUrl, SilentForwarder } from '../support/tcp-proxy';

/**
 * `ping()` on every built-in store: it resolves while the backend answers, and
 * throws `IdempotencyStoreUnavailableError` within the store's operation
 * timeout when the backend goes silent (a forwarder that accepts connections
 * and passes nothing on, as in a network partition) or is gone.
 */
const TIMEOUT_MS = 400;

/** Rejects with the store's unavailable error, and no later than the timeout plus scheduling slack. */
async function expectUnavailableWithinTimeout(ping: () => Promise<void>): Promise<void> {
  const started = performance.now();
  await expect(ping()).rejects.toBeInstanceOf(IdempotencyStoreUnavailableError);
  expect(performance.now() - started).toBeLessThan(TIMEOUT_MS + 1000);
}

describe('ping: in memory, and through the wrappers', () => {
  it('resolves on the in-memory store, and the replay cache and the tracing store pass it on', async () => {
    const store = new InMemoryIdempotencyStore();
    await expect(store.ping()).resolves.toBeUndefined();
    const cached = new ReplayCachingStore(store);
    const traced = new TracingIdempotencyStore(cached);
    await expect(traced.ping!()).resolves.toBeUndefined();
  });

  it('is absent from a wrapper whose store has none', () => {
    // A store of the SPI before ping existed.
    const withoutPing = new InMemoryIdempotencyStore();
    Object.defineProperty(withoutPing, 'ping', { value: undefined });
    expect(new ReplayCachingStore(withoutPing).ping).toBeUndefined();
    expect(new TracingIdempotencyStore(withoutPing).ping).toBeUndefined();
  });
});

describe('ping: TypeORM on PostgreSQL', () => {
  let forwarder: SilentForwarder;
  let dataSource: DataSource;

  beforeEach(async () => {
    forwarder = new SilentForwarder(parsePgUrl(testDatabaseUrl()));
    await forwarder.start();
    const url = new URL(testDatabaseUrl());
    url.hostname = '127.0.0.1';
    url.port = String(forwarder.port);
    dataSource = await openDataSource({ url: url.toString(), extra: { max: 2 } });
  });
  afterEach(async () => {
    await forwarder.cut();
    await dataSource.destroy().catch(() => undefined);
  });

  it('answers SELECT 1 without init(), and fails within operationTimeoutMs once the database goes silent', async () => {
    const store = new TypeOrmIdempotencyStore(dataSource, { operationTimeoutMs: TIMEOUT_MS });
    await expect(store.ping()).resolves.toBeUndefined();
    forwarder.goSilent();
    await expectUnavailableWithinTimeout(() => store.ping());
  });

  it('fails at once on a destroyed DataSource (a closed pool)', async () => {
    const store = new TypeOrmIdempotencyStore(dataSource, { operationTimeoutMs: TIMEOUT_MS });
    await dataSource.destroy();
    await expect(store.ping()).rejects.toThrow(
      new IdempotencyStoreUnavailableError(
        'ping: the DataSource is not initialized (destroyed while the application runs?)',
      ),
    );
  });
});

describe.runIf(mariadbAvailable())('ping: TypeORM on MariaDB', () => {
  it('answers, and fails within operationTimeoutMs once the database goes silent', async () => {
    const forwarder = new SilentForwarder(mysqlTarget());
    await forwarder.start();
    const dataSource = await openMysqlDataSource({
      url: mysqlUrlThroughPort(forwarder.port),
      poolSize: 2,
    });
    try {
      const store = new TypeOrmIdempotencyStore(dataSource, { operationTimeoutMs: TIMEOUT_MS });
      await expect(store.ping()).resolves.toBeUndefined();
      forwarder.goSilent();
      await expectUnavailableWithinTimeout(() => store.ping());
    } finally {
      await forwarder.cut();
      await dataSource.destroy().catch(() => undefined);
    }
  });
});

const redis = probeRedisSync();

describeIfRedis(redis, 'Redis')('ping: Redis standalone', () => {
  it('answers PING, and fails within operationTimeoutMs once the server goes silent', async () => {
    const target = new URL(redisUrl());
    const forwarder = new SilentForwarder({
      host: target.hostname,
      port: Number(target.port || 6379),
    });
    await forwarder.start();
    const client = await connectStandalone(`redis://127.0.0.1:${forwarder.port}`);
    try {
      const store = new RedisIdempotencyStore(client, { operationTimeoutMs: TIMEOUT_MS });
      await expect(store.ping()).resolves.toBeUndefined();
      forwarder.goSilent();
      await expectUnavailableWithinTimeout(() => store.ping());
    } finally {
      await forwarder.cut();
      client.destroy();
    }
  });

  it('fails at once when the client is closed', async () => {
    const client = await connectStandalone();
    const store = new RedisIdempotencyStore(client, { operationTimeoutMs: TIMEOUT_MS });
    client.destroy();
    await expect(store.ping()).rejects.toThrow(
      /Redis is unavailable during ping: the client is not open/,
    );
  });
});

const binaries = hasRedisBinaries();

describe.runIf(binaries.available)('ping: Redis Cluster', () => {
  let cluster: RedisServers;
  beforeAll(async () => {
    cluster = await startCluster();
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  it('answers while every master does, and fails within operationTimeoutMs when one stops answering', async () => {
    const client = await connectCluster(cluster.ports);
    try {
      const store = new RedisIdempotencyStore(client, { operationTimeoutMs: TIMEOUT_MS });
      await expect(store.ping()).resolves.toBeUndefined();
      const master = cluster.servers[2];
      master.process.kill('SIGSTOP'); // alive, connected, silent
      try {
        await expectUnavailableWithinTimeout(() => store.ping());
      } finally {
        master.process.kill('SIGCONT');
      }
      await expect(store.ping()).resolves.toBeUndefined();
    } finally {
      client.destroy();
    }
  });
});
