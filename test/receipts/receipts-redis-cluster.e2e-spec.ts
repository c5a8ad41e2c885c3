import { IdempotencyEngine, type IdempotencyEvent } from 'nest-idempotency';
import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { RECEIPT_CHAINS } from '../../libs/idempotency/src/core/receipts';
import { cli } from '../cli/cli-harness';
import { type ClusterClient, connectCluster, describeIfRedis } from '../support/redis';
import { hasRedisBinaries, type RedisServers, startCluster } from '../support/redis-server';

const quiet = { warn: () => undefined, error: () => undefined };

describeIfRedis(hasRedisBinaries(), 'the redis-server binary')('receipts on Redis Cluster', () => {
  let servers: RedisServers;
  let cluster: ClusterClient;
  let store: RedisIdempotencyStore;
  const prefix = 'receipts-cluster:';

  beforeAll(async () => {
    servers = await startCluster();
    cluster = await connectCluster(servers.ports);
    store = new RedisIdempotencyStore(cluster, { keyPrefix: prefix, logger: quiet });
    await store.init();
  }, 60_000);
  afterAll(async () => {
    await store?.close();
    cluster?.destroy();
    await servers?.stop();
  }, 30_000);

  it('concurrent first executions chain on every shard; receipts verify passes', async () => {
    const engine = new IdempotencyEngine(store, { receipts: true, logger: quiet });
    const events: IdempotencyEvent[] = [];
    engine.onEvent((event) => events.push(event));
    const policy = engine.policy({ scope: 'receipts.cluster' });
    await Promise.all(
      Array.from({ length: 80 }, (_, i) => engine.run(policy, { key: `k-${i}` }, async () => i)),
    );
    expect(events.filter((e) => e.type === 'receipt-failed')).toEqual([]);
    expect(events.filter((e) => e.type === 'receipt-appended')).toHaveLength(80);
    const verified = await cli(['--redis-cluster', '--key-prefix', prefix, 'receipts', 'verify'], {
      env: { REDIS_URL: servers.ports.map((port) => `redis://127.0.0.1:${port}`).join(',') },
    });
    expect(verified.stderr).toBe('');
    expect(verified.stdout).toContain(`80 receipts in ${RECEIPT_CHAINS} chains verified`);
    expect(verified.code).toBe(0);
  });
});
