import { ChildProcess, fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import path from 'node:path';
import { DataSource } from 'typeorm';
import { ADAPTERS, AdapterName, Reply, send } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';
import { describeEachStore, OpenedStore, openStore, StoreName } from '../support/stores';

const ROOT = path.resolve(__dirname, '../..');
const SCRIPT = path.join(__dirname, 'multi-process-app.ts');
const REQUESTS = 200;

/**
 * Which adapters each store's storm runs over. The storm is about the store
 * (two processes, one key, one execution); the adapters only carry it. Two
 * process starts cost seconds, so PostgreSQL keeps both adapters, as before,
 * and each other store runs over one of them, one each.
 */
const ADAPTERS_BY_STORE: Record<StoreName, readonly AdapterName[]> = {
  postgres: ADAPTERS,
  redis: ['express'],
  mariadb: ['fastify'],
};

interface AppProcess {
  child: ChildProcess;
  url: string;
  output: () => string;
}

/**
 * Forks one application process and resolves with its URL once it reports its
 * port. `storeEnv` names the records (`OpenedStore.env`); the executions are
 * written to the PostgreSQL ledger in `ledger`, whatever the store.
 */
async function startProcess(
  adapter: AdapterName,
  storeEnv: Record<string, string>,
  ledger: string,
): Promise<AppProcess> {
  const child = fork(SCRIPT, [], {
    cwd: ROOT,
    execArgv: ['-r', '@swc-node/register'],
    env: {
      ...process.env,
      SWC_NODE_PROJECT: path.join(ROOT, 'tsconfig.json'),
      ...storeEnv,
      MP_LEDGER_URL: testDatabaseUrl(),
      MP_LEDGER_SCHEMA: ledger,
      MP_ADAPTER: adapter,
    },
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  const chunks: Buffer[] = [];
  child.stdout!.on('data', (c: Buffer) => chunks.push(c));
  child.stderr!.on('data', (c: Buffer) => chunks.push(c));
  const output = () => Buffer.concat(chunks).toString('utf8');

  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (message: { port?: number }) => {
      if (typeof message?.port === 'number') resolve(message.port);
      else reject(new Error(`unexpected message from the app process: ${JSON.stringify(message)}`));
    });
    child.once('exit', (code, signal) =>
      reject(new Error(`app process exited (${code ?? signal}) before listening:\n${output()}`)),
    );
    child.once('error', reject);
  });
  return { child, url: `http://127.0.0.1:${port}`, output };
}

async function stopProcess(app: AppProcess | undefined): Promise<void> {
  if (!app || app.child.exitCode !== null || app.child.signalCode !== null) return;
  const exited = once(app.child, 'exit');
  app.child.kill('SIGTERM');
  // A process stuck in its shutdown must not outlive the suite.
  const force = setTimeout(() => app.child.kill('SIGKILL'), 10_000);
  try {
    await exited;
  } finally {
    clearTimeout(force);
  }
}

describeEachStore('HTTP across two OS processes', (storeName) => {
  describe.each(ADAPTERS_BY_STORE[storeName])('over %s', (adapter) => {
    let dataSource: DataSource;
    let opened: OpenedStore;
    const ledger = scratchSchema('http_mp');
    let apps: AppProcess[] = [];

    beforeAll(async () => {
      // The records: created once, here, as a migration would; both processes share them.
      opened = await openStore(storeName, 'http_mp');
      // The side effect: one row per execution, in PostgreSQL whatever the store.
      dataSource = await openDataSource();
      await dataSource.query(`CREATE SCHEMA "${ledger}"`);
      await dataSource.query(
        `CREATE TABLE "${ledger}".executions (pid int NOT NULL, charge uuid NOT NULL, at timestamptz NOT NULL DEFAULT now())`,
      );
      apps = await Promise.all([
        startProcess(adapter, opened.env, ledger),
        startProcess(adapter, opened.env, ledger),
      ]);
    }, 120_000);

    afterAll(async () => {
      await Promise.all(apps.map(stopProcess));
      await opened?.cleanup();
      if (dataSource) {
        await dropSchema(dataSource, ledger);
        await dataSource.destroy();
      }
    });

    it(`runs the handler exactly once for ${REQUESTS} concurrent requests with one key, spread over both`, async () => {
      expect(apps).toHaveLength(2);
      expect(new Set(apps.map((a) => a.child.pid)).size).toBe(2);
      const k = randomUUID();

      const replies: { app: AppProcess; reply: Reply }[] = await Promise.all(
        Array.from({ length: REQUESTS }, async (_, i) => {
          const app = apps[i % 2];
          const reply = await send(app.url, 'POST', '/charges', { key: k, body: { amount: 42 } });
          return { app, reply };
        }),
      );

      const executions = await dataSource.query<{ pid: number; charge: string }[]>(
        `SELECT pid, charge FROM "${ledger}".executions`,
      );
      expect(executions).toHaveLength(1);
      const [execution] = executions;
      expect(apps.map((a) => a.child.pid)).toContain(execution.pid);

      const statuses = replies.map(({ reply }) => reply.status);
      expect(statuses).not.toContain(500);
      expect(new Set(statuses)).toEqual(new Set([201]));
      const bodies = new Set(replies.map(({ reply }) => reply.text));
      expect(bodies.size).toBe(1);
      expect(replies[0].reply.json()).toEqual({
        charge: execution.charge,
        amount: 42,
        pid: execution.pid,
      });

      // One response came from the execution; every other one, in either process, is a replay.
      const fresh = replies.filter(
        ({ reply }) => reply.headers.get('idempotent-replayed') !== 'true',
      );
      expect(fresh).toHaveLength(1);
      expect(fresh[0].app.child.pid).toBe(execution.pid);
      const other = apps.find((a) => a.child.pid !== execution.pid)!;
      const fromOther = replies.filter(({ app }) => app === other);
      expect(fromOther).toHaveLength(REQUESTS / 2);
      for (const { reply } of fromOther)
        expect(reply.headers.get('idempotent-replayed')).toBe('true');

      const records = await opened.store.list({ scope: 'ChargesController.charge' });
      expect(records.map((r) => [r.key, r.state])).toEqual([[k, 'COMPLETE']]);
      for (const app of apps) expect(app.output()).not.toContain(k);
    }, 60_000);
  });
});
