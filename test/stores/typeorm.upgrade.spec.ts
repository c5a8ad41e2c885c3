import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import {
  decodeHttpResponse,
  decodeValue,
  encodeValue,
  IdempotencyStoreSchemaError,
} from 'nest-idempotency';
import {
  createIdempotencyMigration,
  createIdempotencyMigrations,
  createTableSql,
  TypeOrmIdempotencyStore,
} from 'nest-idempotency/typeorm';
import { recordIdOf } from '../../libs/idempotency/src/stores/sql/table';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { acquireRequest } from '../support/store-assertions';

/**
 * A database that nest-idempotency 0.1 made and filled, brought up to date in
 * place: the 0.1 table (payload jsonb, no `watched`), rows as 0.1 wrote them,
 * then the upgrade, after which every record is still there and replays.
 */

const quiet = { warn: () => undefined, error: () => undefined };
const TABLE = 'idempotency_records';
const MIGRATIONS_TABLE = 'typeorm_migrations';

/** What 0.1's Nest adapter stored for an HTTP response: `{"v": result}`, the body as its own `{"v": …}` JSON text. */
const HTTP_PAYLOAD_01 =
  '{"v": {"kind":"http","status":201,"headers":{"content-type":"application/json; charset=utf-8"},"bodyJson":"{\\"v\\":{\\"z\\":1,\\"a\\":2}}"}}';
/** ...and for a message handler's result. */
const RPC_PAYLOAD_01 = '{"v":{"kind":"rpc","value":{"ok":true}}}';
/** ...and through the engine directly: a plain value, and a result of `undefined` (no "v"). */
const VALUE_PAYLOAD_01 = '{"v": {"b": [1, 2], "a": null}}';
const UNDEFINED_PAYLOAD_01 = '{}';

interface Seeded {
  scope: string;
  key: string;
  state: 'COMPLETE' | 'IN_PROGRESS';
  fingerprint: string | null;
  payload: string | null;
}

/** Every column of every row, the payload as text, ordered: before the upgrade and after, they must match. */
async function rowsOf(admin: DataSource, schema: string, payloadAsText: string) {
  return admin.query(
    `SELECT encode(id, 'hex') AS id, scope, "key", state, lease_id::text AS lease_id,
        lease_expires_at, expires_at, fingerprint, ${payloadAsText} AS payload, created_at, completed_at
     FROM "${schema}"."${TABLE}" ORDER BY id`,
  );
}

describe('upgrading a 0.1 table in place', () => {
  let admin: DataSource;
  const cleanups: Array<() => Promise<unknown>> = [];

  beforeAll(async () => {
    admin = await openDataSource();
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  });
  afterAll(async () => {
    await admin?.destroy();
  });

  async function newDataSource(options: Parameters<typeof openDataSource>[0] = {}) {
    const dataSource = await openDataSource(options);
    cleanups.push(() => (dataSource.isInitialized ? dataSource.destroy() : Promise.resolve()));
    return dataSource;
  }

  function newStore(dataSource: DataSource, schema: string, ensureSchema = false) {
    const store = new TypeOrmIdempotencyStore(dataSource, { schema, logger: quiet, ensureSchema });
    cleanups.push(() => store.close());
    return store;
  }

  /** The 0.1 database: its table (createTableSql alone) and the rows 0.1 wrote into it. */
  async function seed01(schema: string): Promise<Seeded[]> {
    for (const sql of createTableSql({ schema, table: TABLE })) await admin.query(sql);
    const run = randomUUID();
    const records: Seeded[] = [
      {
        scope: 'PaymentsController.create',
        key: `order-${run}`,
        state: 'COMPLETE',
        fingerprint: 'fp-http',
        payload: HTTP_PAYLOAD_01,
      },
      {
        scope: 'orders.created',
        key: `message-${run}`,
        state: 'COMPLETE',
        fingerprint: null,
        payload: RPC_PAYLOAD_01,
      },
      {
        scope: 'engine',
        key: `value-${run}`,
        state: 'COMPLETE',
        fingerprint: null,
        payload: VALUE_PAYLOAD_01,
      },
      {
        scope: 'engine',
        key: `nothing-${run}`,
        state: 'COMPLETE',
        fingerprint: null,
        payload: UNDEFINED_PAYLOAD_01,
      },
      {
        scope: 'PaymentsController.create',
        key: `running-${run}`,
        state: 'IN_PROGRESS',
        fingerprint: 'fp-running',
        payload: null,
      },
    ];
    for (const record of records) {
      const complete = record.state === 'COMPLETE';
      await admin.query(
        `INSERT INTO "${schema}"."${TABLE}"
           (id, scope, "key", state, lease_id, lease_expires_at, expires_at, fingerprint, payload, created_at, completed_at)
         VALUES ($1, $2, $3, $4, $5, $6, now() + interval '1 day', $7, $8::jsonb,
                 now() - interval '1 hour', $9)`,
        [
          recordIdOf(record.scope, record.key),
          record.scope,
          record.key,
          record.state,
          complete ? null : randomUUID(),
          complete ? null : new Date(Date.now() + 10 * 60_000),
          record.fingerprint,
          record.payload,
          complete ? new Date(Date.now() - 30 * 60_000) : null,
        ],
      );
    }
    return records;
  }

  /** Every record still there, as it was, replaying what 0.1 stored; the IN_PROGRESS one still held. */
  async function expectPreservedAndReplaying(
    schema: string,
    records: Seeded[],
    before: unknown[],
  ): Promise<void> {
    // The same rows, column for column; the payload's bytes are 0.1's jsonb as its text.
    expect(await rowsOf(admin, schema, `convert_from(payload, 'UTF8')`)).toEqual(before);
    const watched: Array<{ watched: boolean }> = await admin.query(
      `SELECT watched FROM "${schema}"."${TABLE}"`,
    );
    expect(watched).toEqual(records.map(() => ({ watched: false })));

    const store = newStore(admin, schema);
    await store.init(); // the upgraded table passes the shape check
    const [http, rpc, value, nothing, running] = records;

    const httpReplay = await store.tryAcquire(
      acquireRequest(http.scope, http.key, { fingerprint: 'fp-http' }),
    );
    if (httpReplay.kind !== 'duplicate') throw new Error(`HTTP record: ${httpReplay.kind}`);
    const response = decodeHttpResponse(httpReplay.payload);
    expect(response.status).toBe(201);
    expect(response.headers).toEqual({ 'content-type': 'application/json; charset=utf-8' });
    expect(response.body.toString('utf8')).toBe('{"z":1,"a":2}');
    expect(JSON.parse(response.body.toString('utf8'))).toEqual({ z: 1, a: 2 });
    expect(httpReplay.fingerprint).toBe('fp-http');
    expect(httpReplay.completedAt).toBeInstanceOf(Date);
    expect(httpReplay.expiresInMs).toBeGreaterThan(23 * 3_600_000);
    await expect(
      store.tryAcquire(acquireRequest(http.scope, http.key, { fingerprint: 'another' })),
    ).resolves.toEqual({ kind: 'fingerprint-mismatch' });

    const rpcReplay = await store.tryAcquire(acquireRequest(rpc.scope, rpc.key));
    if (rpcReplay.kind !== 'duplicate') throw new Error(`RPC record: ${rpcReplay.kind}`);
    expect(decodeValue(rpcReplay.payload)).toEqual({ ok: true });

    const valueReplay = await store.tryAcquire(acquireRequest(value.scope, value.key));
    if (valueReplay.kind !== 'duplicate') throw new Error(`value record: ${valueReplay.kind}`);
    expect(decodeValue(valueReplay.payload)).toEqual({ b: [1, 2], a: null });

    const nothingReplay = await store.tryAcquire(acquireRequest(nothing.scope, nothing.key));
    if (nothingReplay.kind !== 'duplicate')
      throw new Error(`undefined record: ${nothingReplay.kind}`);
    expect(decodeValue(nothingReplay.payload)).toBeUndefined();

    // Reads show the same bytes a replay hands back.
    const view = await store.find({ scope: http.scope, key: http.key });
    expect(view?.state).toBe('COMPLETE');
    expect(view?.payload?.equals(httpReplay.payload)).toBe(true);

    // The record a 0.1 instance was running is still IN_PROGRESS under its live lease.
    const held = await store.find({ scope: running.scope, key: running.key });
    expect(held).toMatchObject({
      state: 'IN_PROGRESS',
      leaseExpired: false,
      fingerprint: 'fp-running',
    });
    expect(held && 'payload' in held).toBe(false);
    const contender = await store.tryAcquire(acquireRequest(running.scope, running.key));
    expect(contender.kind).toBe('in-flight');
    expect((contender as { retryAfterMs: number }).retryAfterMs).toBeGreaterThan(9 * 60_000);
    expect((contender as { retryAfterMs: number }).retryAfterMs).toBeLessThanOrEqual(10 * 60_000);
    // The contender's look wrote nothing.
    const [{ state }] = await admin.query(
      `SELECT state FROM "${schema}"."${TABLE}" WHERE "key" = $1`,
      [running.key],
    );
    expect(state).toBe('IN_PROGRESS');

    // New records work on the upgraded table alongside the old ones.
    const fresh = await store.tryAcquire(acquireRequest('after-upgrade', 'k'));
    if (fresh.kind !== 'acquired') throw new Error(`new key: ${fresh.kind}`);
    await store.complete(fresh.lease, encodeValue({ fresh: true }));
    const freshReplay = await store.tryAcquire(acquireRequest('after-upgrade', 'k'));
    if (freshReplay.kind !== 'duplicate') throw new Error(`new key replay: ${freshReplay.kind}`);
    expect(freshReplay.payload.equals(encodeValue({ fresh: true }))).toBe(true);
  }

  it('refuses the 0.1 table naming the upgrade; the TypeORM migrations upgrade it keeping every record', async () => {
    const schema = scratchSchema('upgrade');
    cleanups.push(() => dropSchema(admin, schema));
    const records = await seed01(schema);
    const before = await rowsOf(admin, schema, 'payload::text');
    expect(before).toHaveLength(records.length);

    // The 0.1 store's database: its migration recorded as run in TypeORM's own table.
    const database01 = await newDataSource({
      schema,
      migrationsTableName: MIGRATIONS_TABLE,
      migrations: [createIdempotencyMigration({ schema })],
    });
    await expect(database01.showMigrations()).resolves.toBe(true); // creates TypeORM's table; 1 pending
    await admin.query(
      `INSERT INTO "${schema}"."${MIGRATIONS_TABLE}" ("timestamp", name) VALUES ($1, $2)`,
      [1764460800000, 'CreateIdempotencyRecords1764460800000'],
    );
    await expect(database01.showMigrations()).resolves.toBe(false);

    // 0.2 refuses to run on the old shape, and says what to run.
    const error = await newStore(admin, schema)
      .init()
      .then(
        () => undefined,
        (e: Error) => e,
      );
    expect(error).toBeInstanceOf(IdempotencyStoreSchemaError);
    expect(error!.message).toContain(`table ${schema}.${TABLE} has the wrong shape`);
    expect(error!.message).toContain('column "payload" is jsonb, expected bytea');
    expect(error!.message).toContain('column "watched" is missing (expected boolean)');
    expect(error!.message).toContain(
      'it was made by nest-idempotency 0.1: run the upgrade migration (createIdempotencyMigrations() includes it)',
    );
    // ...having changed nothing.
    expect(await rowsOf(admin, schema, 'payload::text')).toEqual(before);

    const database02 = await newDataSource({
      schema,
      migrationsTableName: MIGRATIONS_TABLE,
      migrations: createIdempotencyMigrations({ schema }),
    });
    const ran = await database02.runMigrations();

    expect(ran.map((m) => m.name)).toEqual([
      'UpgradeIdempotencyRecords1764547200000',
      'AddIdempotencyAmbiguousState1764633600000',
      'AddIdempotencySteps1764806400000',
      'AddIdempotencyContinuations1764892800000',
      'AddIdempotencyReceipts1764979200000',
    ]);
    await expect(database02.showMigrations()).resolves.toBe(false);
    await expectPreservedAndReplaying(schema, records, before);
  });

  it('upgrades the 0.1 table the same way with ensureSchema, keeping every record', async () => {
    const schema = scratchSchema('upgrade');
    cleanups.push(() => dropSchema(admin, schema));
    const records = await seed01(schema);
    const before = await rowsOf(admin, schema, 'payload::text');

    await newStore(admin, schema, true).init();

    await expectPreservedAndReplaying(schema, records, before);
  });
});
