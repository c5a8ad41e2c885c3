import { DataSource } from 'typeorm';
import { encodeValue, IdempotencyEngine, keyDigest } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { cli, createRecordsTable, tableSnapshot } from './cli-harness';
import { expectDigestLookups } from './digest-scenario';

/**
 * Two keys whose SHA-256 share their first 12 hex digits (found offline by
 * cycle finding over 2^48 digests): one digest, two records.
 */
const COLLIDING = ['collide-1025c90ebdbf', 'collide-f15a9c0305b0'];

describe('nest-idempotency inspect and resolve by digest, on PostgreSQL', () => {
  let admin: DataSource;
  let store: TypeOrmIdempotencyStore;
  const schema = scratchSchema('cli_digest');
  const where = `${schema}.idempotency_records`;
  const at = (...args: string[]) => cli(['--schema', schema, ...args]);

  beforeAll(async () => {
    admin = await openDataSource();
    await createRecordsTable(admin, schema);
    store = new TypeOrmIdempotencyStore(admin, { schema });
  });
  afterAll(async () => {
    await store?.close();
    if (admin) await dropSchema(admin, schema);
    await admin?.destroy();
  });

  it('finds a record by scope/#digest or scope and #digest, a tenant’s by the digest its logs print', async () => {
    await expectDigestLookups(store, at, where);
  });

  it('goes from the strict-mode warning line to inspect and resolve with the name the line prints', async () => {
    const warnings: string[] = [];
    const engine = new IdempotencyEngine(store, {
      logger: { warn: (m) => warnings.push(m), error: (m) => warnings.push(m) },
    });
    const policy = engine.policy({ scope: 'ChargesController.charge', onExpiredLease: 'refuse' });
    const call = { key: 'order-1001-capture', tenant: 'acme' };
    await expect(
      engine.run(policy, call, async () => {
        throw new Error('the payment provider timed out');
      }),
    ).rejects.toThrow('the payment provider timed out');
    // The application's own line, as its logger received it.
    expect(warnings).toHaveLength(1);
    const name = /(\S+\/#[0-9a-f]{12})/.exec(warnings[0])?.[1];
    expect(name).toBe(keyDigest('ChargesController.charge', call.key, call.tenant));

    const inspected = await at('inspect', name!);
    expect(inspected.code).toBe(0);
    expect(inspected.stdout).toMatch(/│ state\s+│ AMBIGUOUS\s+│/);
    expect(inspected.stdout).not.toContain(call.key);
    const resolved = await at('resolve', name!, '--completed', '--payload', '{"charge":"ch_1"}');
    expect(resolved.code).toBe(0);
    // The next attempt replays what the operator said happened; the action does not run again.
    const replay = await engine.run(policy, call, async () => {
      throw new Error('must not run again');
    });
    expect(replay).toMatchObject({ kind: 'replayed', value: { charge: 'ch_1' } });
  });

  it('refuses a digest that two records share, listing both, and changes nothing', async () => {
    const scope = 'Collide.charge';
    const digest = keyDigest(scope, COLLIDING[0]);
    expect(keyDigest(scope, COLLIDING[1])).toBe(digest);
    const acquire = async (key: string) => {
      const acquired = await store.tryAcquire({
        scope,
        key,
        leaseMs: 600_000,
        ttlMs: 3_600_000,
        waitTimeoutMs: 0,
        fingerprint: null,
      });
      if (acquired.kind !== 'acquired') throw new Error(acquired.kind);
      return acquired.lease;
    };
    await store.strictMode.markAmbiguous(await acquire(COLLIDING[0]), 'action-failed');
    await store.complete(await acquire(COLLIDING[1]), encodeValue('done'));
    const before = await tableSnapshot(admin, schema);

    for (const args of [
      ['inspect', digest],
      ['resolve', digest, '--not-executed'],
      ['resolve', scope, `#${digest.slice(-12)}`, '--completed', '--json'],
    ]) {
      const run = await at(...args);
      expect(run.code).toBe(7);
      expect(run.stderr).toBe(
        `error: ${digest} names 2 records in ${where}: nothing was done; name the one you mean by its scope and raw key (--json prints them)\n`,
      );
    }
    const listed = await at('inspect', digest, '--json');
    expect(
      (JSON.parse(listed.stdout).matches as Array<{ key: string; state: string }>)
        .map((m) => [m.key, m.state])
        .sort(),
    ).toEqual([
      [COLLIDING[0], 'AMBIGUOUS'],
      [COLLIDING[1], 'COMPLETE'],
    ]);
    expect(await tableSnapshot(admin, schema)).toBe(before);
    // Named by its raw key, the AMBIGUOUS one is resolved as before.
    expect((await at('resolve', scope, COLLIDING[0], '--not-executed')).code).toBe(0);
  });

  it.each([
    [
      ['inspect', 'Orders.place'],
      "error: name the record: <scope> <key>, <scope>/#<digest> as the logs print it, or <scope> '#<digest>' (quoted: to a shell an unquoted # starts a comment)\n",
    ],
    [
      ['inspect', 'Orders.place/#f55ff16f66'],
      'error: Orders.place/#f55ff16f66 is not a record\'s name: after "/#" a digest has exactly 12 hex digits\n',
    ],
    [['resolve', '/#f55ff16f66f4', '--not-executed'], 'error: <scope> must not be empty\n'],
    [['resolve', 'Orders.place', '', '--not-executed'], 'error: <key> must not be empty\n'],
  ])('%j is a usage error (exit 2) before any connection', async (args, message) => {
    const run = await cli(args, { env: {} });
    expect(run).toEqual({ code: 2, stdout: '', stderr: message });
  });

  it('gives up a search that outlasts --timeout with what to do, exit 3', async () => {
    // The table is locked: the search waits on the lock until --timeout passes.
    const runner = admin.createQueryRunner();
    await runner.startTransaction();
    try {
      await runner.query(`LOCK TABLE "${schema}".idempotency_records IN ACCESS EXCLUSIVE MODE`);
      const run = await at('--timeout', '1500', 'inspect', 'Orders.place/#f55ff16f66f4');
      expect(run).toEqual({
        code: 3,
        stdout: '',
        stderr:
          'error: the search for Orders.place/#f55ff16f66f4 took longer than --timeout (1500 ms): it reads every record of the table once; raise --timeout, or name the record by its raw key\n',
      });
    } finally {
      await runner.rollbackTransaction();
      await runner.release();
    }
  });
});
