/**
 * Case 11: MariaDB is SIGKILLed while calls are in their action and in their
 * completion, and started again on the same data folder and port (InnoDB
 * recovers from its redo log). The server is a private one this spec makes
 * with mariadb-install-db and starts itself, never the machine's.
 *
 * Callers (engine in this process, a Nest app in a child, each with its own
 * pool) are refused promptly while it is down (unavailable / 503), both
 * recover without a process restart, every record survives the crash
 * (innodb_flush_log_at_trx_commit=1), the completion retried across the
 * outage lands, and, counted in PostgreSQL, no key ran twice
 * (support/restart-scenario.ts).
 */
import { DataSource } from 'typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { recordResult, stopAllChildren } from './support/harness';
import { mariadbBinaries, PrivateMariadb } from './support/mariadb-server';
import { RestartFigures, runRestartScenario } from './support/restart-scenario';
import { createExecutionsTable } from './support/stores';

const OP_TIMEOUT_MS = 2000;
const REFUSAL_BOUND_MS = OP_TIMEOUT_MS + 1500;

const found = mariadbBinaries();
const HOW = 'apt-get install mariadb-server, or put mariadbd and mariadb-install-db on PATH';

/**
 * `describe` when the binaries are there; otherwise not run, with a warning
 * saying how to install them, or a failing test with
 * IDEMPOTENCY_TEST_REQUIRE_MARIADB=1 (CI).
 */
function describeIfMariadb(name: string, body: () => void): void {
  if (found.available) {
    describe(name, body);
  } else if (process.env.IDEMPOTENCY_TEST_REQUIRE_MARIADB === '1') {
    describe(name, () => {
      it('needs the MariaDB binaries (IDEMPOTENCY_TEST_REQUIRE_MARIADB=1)', () => {
        throw new Error(`${found.reason}; ${HOW}`);
      });
    });
  } else {
    console.warn(`\n[faults] case 11 skipped: ${found.reason}; ${HOW}.`);
    describe.runIf(found.available)(name, body);
  }
}

describeIfMariadb('fault 11: MariaDB restarted during actions and completions', () => {
  const schema = scratchSchema('fault_mariadb_restart');
  let pg: DataSource;
  let server: PrivateMariadb | undefined;
  let figures: RestartFigures | undefined;
  let setupMs = 0;

  beforeAll(async () => {
    const started = Date.now();
    if (!found.available) throw new Error(found.reason);
    server = await PrivateMariadb.create(found.binaries);
    setupMs = Date.now() - started;
    pg = await openDataSource({ extra: { max: 5 } });
    await createExecutionsTable(pg, schema);
  }, 90_000);

  afterAll(async () => {
    await stopAllChildren();
    await server?.remove();
    if (pg) {
      await dropSchema(pg, schema);
      await pg.destroy();
    }
  });

  it('refused while down, recovered after; nothing lost, nothing ran twice', async () => {
    figures = await runRestartScenario({
      label: 'mariadb',
      target: server!,
      config: {
        kind: 'mariadb',
        url: server!.url,
        table: 'idempotency_records',
        operationTimeoutMs: OP_TIMEOUT_MS,
      },
      durable: true,
      pg,
      schema,
      refusalBoundMs: REFUSAL_BOUND_MS,
    });
    // The crash was a crash: InnoDB ran its recovery at the restart.
    expect(server!.errorLog()).toMatch(/InnoDB: (Starting crash recovery|To recover:)/);
  }, 90_000);

  it('records its figures', () => {
    const f = figures!;
    expect(f).toBeDefined();
    recordResult({
      case: 11,
      title: 'MariaDB restarted (action, completion)',
      executionsExpected: f.executionsExpected,
      executionsObserved: f.executionsObserved,
      recordsLost: f.recordsLost,
      maxRecoveryMs: f.maxRecoveryMs,
      notes:
        `private mariadbd (10.11, innodb_flush_log_at_trx_commit=1) SIGKILLed and started again on ` +
        `its data folder (engine in the test process + Nest app in a child, operationTimeoutMs ` +
        `${OP_TIMEOUT_MS}, refusal bound ${REFUSAL_BOUND_MS} ms); ${f.refusals} refusals ` +
        `(unavailable / 503) in at most ${f.slowestRefusalMs} ms, ${f.statuses.get(503) ?? 0} × 503, ` +
        `0 × 500; ${f.recordsLost} of 8 records lost, ${f.ranTwice} keys ran twice; the completion ` +
        `failed ${f.completionRetries}x while down, then landed; back in ${f.restartMs} ms ` +
        `(crash recovery included), recovered ${f.maxRecoveryMs} ms after; data folder made in ${setupMs} ms`,
    });
  });
});
