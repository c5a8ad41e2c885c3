import { createPool, type Pool } from 'mysql2';
import { MysqlIdempotencyStore } from 'nest-idempotency/mysql';
import { cli } from '../cli/cli-harness';
import { mariadbAvailable, mysqlTestUrl, scratchTable } from '../support/mariadb';
import { expectReceiptsChains } from './receipts-scenario';

const quiet = { warn: () => undefined, error: () => undefined };

describe.runIf(mariadbAvailable())('receipts on MariaDB', () => {
  const table = scratchTable('receipts');
  const receipts = `\`${table}_receipts\``;
  let pool: Pool;
  let store: MysqlIdempotencyStore;
  const sql = async (text: string, values: unknown[] = []) => {
    await pool.promise().query(text, values);
  };

  beforeAll(async () => {
    pool = createPool({ uri: mysqlTestUrl(), connectionLimit: 10 });
    store = new MysqlIdempotencyStore(pool, { table, ensureSchema: true, logger: quiet });
    await store.receipts.check();
  });
  afterAll(async () => {
    await store?.close();
    for (const name of [table, `${table}_receipts`, `${table}_receipt_heads`]) {
      await sql(`DROP TABLE IF EXISTS \`${name}\``);
    }
    await pool?.promise().end();
  });

  it('chains every terminal record; receipts verify passes, then names an altered, a removed and a reordered receipt', async () => {
    await expectReceiptsChains({
      store,
      verify: () =>
        cli(['--table', table, 'receipts', 'verify'], { env: { DATABASE_URL: mysqlTestUrl() } }),
      alter: (chain, seq) =>
        sql(
          `UPDATE ${receipts} SET outcome = 'resolved-not-executed', result_digest = NULL WHERE chain = ? AND seq = ?`,
          [chain, seq],
        ),
      remove: (chain, seq) =>
        sql(`DELETE FROM ${receipts} WHERE chain = ? AND seq = ?`, [chain, seq]),
      swap: async (chain, a, b) => {
        await sql(`UPDATE ${receipts} SET seq = -seq WHERE chain = ? AND seq IN (?, ?)`, [
          chain,
          a,
          b,
        ]);
        await sql(
          `UPDATE ${receipts} SET seq = IF(seq = -?, ?, ?) WHERE chain = ? AND seq IN (-?, -?)`,
          [a, b, a, chain, a, b],
        );
      },
    });
  });

  it('with receipts on, a table without the receipts tables fails the check, naming the migration', async () => {
    const bare = scratchTable('receipts_bare');
    const made = new MysqlIdempotencyStore(pool, {
      table: bare,
      ensureSchema: true,
      logger: quiet,
    });
    const other = new MysqlIdempotencyStore(pool, { table: bare, logger: quiet });
    try {
      await made.init();
      await made.close();
      await sql(`DROP TABLE \`${bare}_receipts\``);
      // The store itself does not need them: it opens, and runs without receipts.
      await other.init();
      await expect(other.receipts.check()).rejects.toThrow(
        new RegExp(
          `${bare}_receipts does not exist: run the migration AddIdempotencyReceipts1764979200000`,
        ),
      );
    } finally {
      await other.close();
      for (const name of [bare, `${bare}_receipts`, `${bare}_receipt_heads`]) {
        await sql(`DROP TABLE IF EXISTS \`${name}\``);
      }
    }
  });
});
