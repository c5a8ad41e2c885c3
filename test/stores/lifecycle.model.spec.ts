import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import type { DataSource } from 'typeorm';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { RedisIdempotencyStore } from 'nest-idempotency/redis';
import { lifecycleCommands, ModelRun, StoreSession } from './model/commands';
import { ExpiryRule, LifecycleModel } from './model/lifecycle-model';
import {
  inMemoryUnderTest,
  mariadbUnderTest,
  postgresUnderTest,
  redisUnderTest,
  StoreUnderTest,
} from './model/stores-under-test';
import { dropTable, mariadbAvailable, openMysqlDataSource, scratchTable } from '../support/mariadb';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import {
  AnyRedisClient,
  connectStandalone,
  deletePrefix,
  describeIfRedis,
  probeRedisSync,
  redisUrl,
  scratchPrefix,
} from '../support/redis';

/**
 * Model-based test of the record lifecycle: random interleavings of acquire
 * (waitTimeoutMs 0), complete, release, extend, lease expiry, TTL expiry and
 * purge, across two keys and every lease issued in the run (stale ones on
 * purpose), run in lockstep on a store and the reference model in
 * model/lifecycle-model.ts: the PostgreSQL store with a fresh in-memory store,
 * then the MariaDB store, then the Redis store (standalone), each on its own
 * run of generated sequences. After every step each store's outcome and every
 * key's find() must equal the model's. How time passes is explained in
 * model/stores-under-test.ts; Redis follows the model's `backend` expiry rule
 * (a record is gone once purgeable), the others its `purge` rule.
 *
 * A failure prints the shrunk command sequence (fast-check's counterexample),
 * then the failing run step by step with what the model expected.
 */

const RUNS = 100;
const MAX_COMMANDS = 30;
/** Batches of RUNS sequences a test may take to cover its required edges. */
const MAX_BATCHES = 4;

/**
 * Edges of the lifecycle every green run must have exercised (some label of the
 * model's contains the text), so the property cannot pass vacuously, e.g. after
 * a generator change that never expires a lease. With these settings the rarest
 * is hit about 8 times per 100 runs on average; in a model-only simulation of
 * 5000 suites none was ever missed. Other labels are counted, not required.
 */
const COMMON_EDGES = [
  'acquire → acquired (absent)',
  'acquire → acquired (stole an expired lease)',
  'acquire → duplicate',
  'acquire → in-flight (past its TTL, lease live)',
  'acquire → fingerprint-mismatch',
  'complete → done (lease expired, not stolen)',
  '(stale lease of this key)', // fencing after a steal, for complete, release or extend
  "(another key's lease)",
  'release → done',
  'extend → true',
  'extend → false',
  'purge spares IN_PROGRESS past its TTL with a live lease',
  'purge spares IN_PROGRESS with an expired lease within its TTL',
];

const REQUIRED_EDGES: Record<ExpiryRule, string[]> = {
  purge: [
    ...COMMON_EDGES,
    'acquire → acquired (replaced a COMPLETE record past its TTL)',
    'purge removes COMPLETE',
    'purge removes IN_PROGRESS',
  ],
  // A purgeable record is gone at once: nothing is left for a purge, or for an
  // acquisition to replace; what is checked instead is that it went.
  backend: [...COMMON_EDGES, 'the backend expires COMPLETE', 'the backend expires IN_PROGRESS'],
};

/** Strict mode's edges, required of a strict run besides its rule's. */
const STRICT_EDGES = [
  'acquire → ambiguous (moved: lease expired)',
  'acquire → ambiguous (strict)',
  'acquire → ambiguous (not strict)',
  'markAmbiguous → done',
  'markAmbiguous → lease-lost',
  'resolve → resolved (completed)',
  'resolve → resolved (not-executed)',
  'resolve → not-ambiguous',
  'complete → lease-lost (AMBIGUOUS)',
];

/** Transactional completion's edges, required of a transactional run besides its rule's. */
const TRANSACTIONAL_EDGES = [
  'completeIn → committed',
  'completeIn → rolled back (still IN_PROGRESS)',
  'completeIn → lease-lost',
];

/**
 * Runs RUNS generated sequences against `stores()` (fresh stores or a fresh
 * scope per run; `reset` empties what a purge counts) and the model, then
 * checks the coverage.
 */
async function agreeWithModel(
  expiry: ExpiryRule,
  stores: () => Promise<StoreUnderTest[]>,
  reset: () => Promise<unknown> = async () => undefined,
  /** Strict mode too (stores that declare `strictMode`): its edges are then required as well. */
  strict = false,
  /** Transactional completion too (stores that declare `transactional`): its edges as well. */
  transactional = false,
): Promise<void> {
  const coverage = new Map<string, number>();
  const setup = async () => {
    await reset();
    const scope = `model-${randomUUID()}`;
    const sessions: StoreSession[] = (await stores()).map((sut) => {
      if (sut.expiry !== expiry) throw new Error(`${sut.name} expires by ${sut.expiry}`);
      return { sut, scope, leases: [] };
    });
    return { model: new LifecycleModel(expiry), real: new ModelRun(sessions, coverage) };
  };

  const required = [
    ...REQUIRED_EDGES[expiry],
    ...(strict ? STRICT_EDGES : []),
    ...(transactional ? TRANSACTIONAL_EDGES : []),
  ];
  const missing = () =>
    required.filter((edge) => ![...coverage.keys()].some((label) => label.includes(edge)));

  // Coverage is random: a batch can miss a rare edge by chance (a CI run once
  // missed 'purge removes IN_PROGRESS' in the strict run). A missed edge buys
  // another batch of fresh random sequences, up to MAX_BATCHES; a generator
  // that cannot reach an edge at all still fails, after the last batch.
  let batches = 0;
  do {
    await fc.assert(
      fc.asyncProperty(lifecycleCommands(MAX_COMMANDS, strict, transactional), (commands) =>
        fc.asyncModelRun(setup, commands),
      ),
      { numRuns: RUNS },
    );
    batches += 1;
  } while (missing().length > 0 && batches < MAX_BATCHES);

  expect({ missed: missing(), batches, seen: Object.fromEntries(coverage) }).toMatchObject({
    missed: [],
  });
}

const quiet = { warn: () => undefined, error: () => undefined };

describe('Record lifecycle: PostgreSQL and in-memory stores against a reference model', () => {
  let dataSource: DataSource;
  let schema: string;
  let postgres: StoreUnderTest;

  beforeAll(async () => {
    dataSource = await openDataSource();
    schema = scratchSchema('model');
    const store = new TypeOrmIdempotencyStore(dataSource, {
      schema,
      ensureSchema: true,
      logger: quiet,
    });
    await store.init();
    postgres = await postgresUnderTest(dataSource, store);
  });

  afterAll(async () => {
    await postgres?.store.close?.();
    if (dataSource?.isInitialized) {
      await dropSchema(dataSource, schema);
      await dataSource.destroy();
    }
  });

  it('agrees with the model after every step of random interleavings', async () => {
    // Each run: a fresh scope, an empty scratch table (purge counts cover the
    // whole table, so they are then this run's alone) and a fresh in-memory store.
    await agreeWithModel(
      'purge',
      async () => [postgres, await inMemoryUnderTest()],
      () => dataSource.query(`TRUNCATE "${schema}".idempotency_records`),
    );
  }, 300_000);

  it('agrees with the model in strict mode, AMBIGUOUS and resolution included', async () => {
    await agreeWithModel(
      'purge',
      async () => [postgres, await inMemoryUnderTest()],
      () => dataSource.query(`TRUNCATE "${schema}".idempotency_records`),
      true,
    );
  }, 300_000);

  it('agrees with the model with transactional completion, committed or rolled back', async () => {
    // PostgreSQL alone: the in-memory store has no transactions to complete in.
    await agreeWithModel(
      'purge',
      async () => [postgres],
      () => dataSource.query(`TRUNCATE "${schema}".idempotency_records`),
      false,
      true,
    );
  }, 300_000);
});

describe('Record lifecycle: in-memory store in strict mode against a reference model', () => {
  it('agrees with the model, AMBIGUOUS and resolution included', async () => {
    await agreeWithModel('purge', async () => [await inMemoryUnderTest()], undefined, true);
  }, 300_000);
});

describe.runIf(mariadbAvailable())(
  'Record lifecycle: MariaDB store against a reference model',
  () => {
    let dataSource: DataSource;
    const table = scratchTable('model');
    let mariadb: StoreUnderTest;

    beforeAll(async () => {
      dataSource = await openMysqlDataSource();
      const store = new TypeOrmIdempotencyStore(dataSource, {
        table,
        ensureSchema: true,
        logger: quiet,
      });
      await store.init();
      mariadb = await mariadbUnderTest(dataSource, store);
    });

    afterAll(async () => {
      await mariadb?.store.close?.();
      if (dataSource?.isInitialized) {
        await dropTable(dataSource, table);
        await dataSource.destroy();
      }
    });

    it('agrees with the model after every step of random interleavings', async () => {
      await agreeWithModel(
        'purge',
        async () => [mariadb],
        () => dataSource.query(`TRUNCATE TABLE \`${table}\``),
      );
    }, 300_000);

    it('agrees with the model in strict mode, AMBIGUOUS and resolution included', async () => {
      await agreeWithModel(
        'purge',
        async () => [mariadb],
        () => dataSource.query(`TRUNCATE TABLE \`${table}\``),
        true,
      );
    }, 300_000);

    it('agrees with the model with transactional completion, committed or rolled back', async () => {
      await agreeWithModel(
        'purge',
        async () => [mariadb],
        () => dataSource.query(`TRUNCATE TABLE \`${table}\``),
        false,
        true,
      );
    }, 300_000);
  },
);

describeIfRedis(probeRedisSync(), `Redis at ${redisUrl()}`)(
  'Record lifecycle: Redis store (standalone) against a reference model',
  () => {
    let client: AnyRedisClient;
    const prefix = scratchPrefix('model');
    let redis: StoreUnderTest;

    beforeAll(async () => {
      client = await connectStandalone(redisUrl());
      const store = new RedisIdempotencyStore(client, { keyPrefix: prefix, logger: quiet });
      await store.init();
      redis = await redisUnderTest(client, store);
    });

    afterAll(async () => {
      await redis?.store.close?.();
      if (client) {
        await deletePrefix(client, prefix);
        client.destroy();
      }
    });

    // Each run has a scope of its own; a purge has nothing to count on Redis.
    it('agrees with the model after every step of random interleavings', async () => {
      await agreeWithModel('backend', async () => [redis]);
    }, 300_000);

    it('agrees with the model in strict mode, AMBIGUOUS and resolution included', async () => {
      await agreeWithModel('backend', async () => [redis], undefined, true);
    }, 300_000);
  },
);
