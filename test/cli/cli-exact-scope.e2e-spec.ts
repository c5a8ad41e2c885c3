import { DataSource } from 'typeorm';
import { encodeValue, storedKeyDigest, storedScope } from 'nest-idempotency';
import { mysqlSchemaSql, TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import {
  dropTable,
  mariadbAvailable,
  mysqlTestUrl,
  openMysqlDataSource,
  scratchTable,
} from '../support/mariadb';
import { cli } from './cli-harness';

/**
 * Issue 20, item 6: utf8mb4_bin is a PAD SPACE collation, so `list --scope`
 * of tenant `acme` also listed tenant `acme `'s records on MariaDB. It lists
 * exactly that stored scope; `inspect` by digest finds exactly that record.
 */
describe.runIf(mariadbAvailable())('nest-idempotency list --scope on MariaDB', () => {
  let admin: DataSource;
  const table = scratchTable('exact');
  const at = (...args: string[]) =>
    cli(['--table', table, ...args], { env: { DATABASE_URL: mysqlTestUrl() } });
  const acme = storedScope('Orders.create', 'acme');
  const neighbours = [storedScope('Orders.create', 'acme '), storedScope('Orders.create', 'ACME')];

  beforeAll(async () => {
    admin = await openMysqlDataSource();
    for (const sql of mysqlSchemaSql({ table })) await admin.query(sql);
    const store = new TypeOrmIdempotencyStore(admin, { table });
    for (const [i, scope] of [acme, ...neighbours].entries()) {
      for (const key of ['order-1', 'order-1 ']) {
        const result = await store.tryAcquire({
          scope,
          key,
          leaseMs: 60_000,
          ttlMs: 600_000,
          waitTimeoutMs: 0,
          fingerprint: null,
        });
        if (result.kind !== 'acquired') throw new Error(`seed: ${result.kind}`);
        await store.complete(result.lease, encodeValue([i, key]));
      }
    }
    await store.close();
  });

  afterAll(async () => {
    if (admin) await dropTable(admin, table);
    await admin?.destroy();
  });

  it("lists only the tenant's own records, not those of a tenant with a trailing space or another case", async () => {
    const listed = await at('list', '--scope', acme, '--json');
    expect(listed.code).toBe(0);
    const records = JSON.parse(listed.stdout).records as Array<{ scope: string; key: string }>;
    expect(records.map((r) => [r.scope, r.key]).sort()).toEqual([
      [acme, 'order-1'],
      [acme, 'order-1 '],
    ]);
  });

  it('inspects by digest exactly the record of that stored scope', async () => {
    const digest = storedKeyDigest(acme, 'order-1');
    const inspected = await at('inspect', digest, '--json');
    expect(inspected.code).toBe(0);
    expect(JSON.parse(inspected.stdout).record).toMatchObject({ scope: acme, key: 'order-1' });
  });
});
