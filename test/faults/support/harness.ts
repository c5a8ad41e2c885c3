import { ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describePayload, IdempotencyEngine, IdempotencyEvent } from 'nest-idempotency';
import {
  schemaSql,
  TypeOrmIdempotencyStore,
  TypeOrmIdempotencyStoreOptions,
} from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { dropSchema, openDataSource, testDatabaseUrl } from '../../support/postgres';
import type { ChildCommand, ChildMessage } from './protocol';

const ROOT = path.resolve(__dirname, '../../..');
const SCRIPTS = {
  worker: path.join(__dirname, 'engine-worker.ts'),
  app: path.join(__dirname, 'fault-app.ts'),
  pg: path.join(__dirname, 'pg-server.ts'),
  /** fault-app.ts on a Redis or MariaDB store (cases 9 to 11). */
  'store-app': path.join(__dirname, 'store-app.ts'),
  /** A Nest app whose handlers write a row, in the completion's transaction or not (case 12). */
  'tx-app': path.join(__dirname, 'tx-app.ts'),
  /** tx-app.ts's handler with the transaction of @nestjs-cls/transactional over an ORM (case 13). */
  'orm-tx-app': path.join(__dirname, 'orm-tx-app.ts'),
};
const ENV_PREFIX = {
  worker: 'FW_',
  app: 'FA_',
  pg: 'FP_',
  'store-app': 'FS_',
  'tx-app': 'FT_',
  'orm-tx-app': 'FO_',
};

/** Every child any spec started; `stopAllChildren` (afterAll) ends those still alive. */
const children = new Set<Child>();

/**
 * A child process (engine worker or Nest app) run with @swc-node/register, talking over
 * IPC. Every message it sends is kept, so a spec can wait for one that has
 * already arrived.
 */
export class Child {
  readonly messages: ChildMessage[] = [];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  pid = 0;
  port?: number;
  url?: string;
  private readonly chunks: Buffer[] = [];
  private readonly listeners = new Set<() => void>();
  private commands = 0;

  constructor(
    readonly kind: keyof typeof SCRIPTS,
    readonly name: string,
    readonly proc: ChildProcess,
  ) {
    proc.stdout!.on('data', (c: Buffer) => this.chunks.push(c));
    proc.stderr!.on('data', (c: Buffer) => this.chunks.push(c));
    proc.on('message', (message: ChildMessage) => {
      this.messages.push(message);
      for (const listener of [...this.listeners]) listener();
    });
    this.exited = once(proc, 'exit').then(([code, signal]) => {
      for (const listener of [...this.listeners]) listener();
      return { code, signal };
    });
  }

  get alive(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** Everything the child printed (stdout and stderr). */
  output(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }

  send(command: ChildCommand): void {
    this.proc.send(command);
  }

  /** The first message (already received or still to come) that matches; rejects on exit or timeout. */
  waitFor<M extends ChildMessage>(
    what: string,
    match: (message: ChildMessage) => message is M,
    timeoutMs: number,
  ): Promise<M> {
    return new Promise<M>((resolve, reject) => {
      const check = () => {
        const found = this.messages.find(match);
        if (found) {
          done();
          resolve(found);
        } else if (!this.alive) {
          done();
          reject(new Error(`${this.name} exited before ${what}:\n${this.output()}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`${this.name}: no ${what} within ${timeoutMs} ms:\n${this.output()}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        this.listeners.delete(check);
      };
      this.listeners.add(check);
      check();
    });
  }

  /** Sends a command answered by `done` and waits for that answer. */
  async command(cmd: 'pg-stop' | 'pg-start' | 'pg-shutdown', timeoutMs = 30_000): Promise<void> {
    const id = `${cmd}-${++this.commands}`;
    this.send({ cmd, id });
    const done = await this.waitFor(cmd, is.done(id), timeoutMs);
    if (done.error) throw new Error(`${this.name}: ${cmd} failed: ${done.error}`);
  }

  /**
   * SIGKILL (after SIGCONT, in case it is stopped) and wait for the exit. A
   * PostgreSQL-server child is first asked to stop its server, which would
   * otherwise outlive it.
   */
  async kill(): Promise<void> {
    if (!this.alive) return;
    if (this.kind === 'pg') {
      this.send({ cmd: 'pg-shutdown', id: 'shutdown' });
      const exited = await Promise.race([
        this.exited.then(() => true),
        new Promise<boolean>((r) => setTimeout(() => r(false), 15_000).unref()),
      ]);
      if (exited) return;
    }
    this.proc.kill('SIGCONT');
    this.proc.kill('SIGKILL');
    await this.exited;
  }
}

export const is = {
  ready: (m: ChildMessage): m is Extract<ChildMessage, { type: 'ready' }> => m.type === 'ready',
  entered:
    (id: string) =>
    (m: ChildMessage): m is Extract<ChildMessage, { type: 'entered' }> =>
      m.type === 'entered' && m.id === id,
  result:
    (id: string) =>
    (m: ChildMessage): m is Extract<ChildMessage, { type: 'result' }> =>
      m.type === 'result' && m.id === id,
  done:
    (id: string) =>
    (m: ChildMessage): m is Extract<ChildMessage, { type: 'done' }> =>
      m.type === 'done' && m.id === id,
  burst:
    (id: string) =>
    (m: ChildMessage): m is Extract<ChildMessage, { type: 'burst-result' }> =>
      m.type === 'burst-result' && m.id === id,
  waiters:
    (id: string) =>
    (m: ChildMessage): m is Extract<ChildMessage, { type: 'waiters' }> =>
      m.type === 'waiters' && m.id === id,
  purgeTraffic:
    (id: string) =>
    (m: ChildMessage): m is Extract<ChildMessage, { type: 'purge-traffic-result' }> =>
      m.type === 'purge-traffic-result' && m.id === id,
  event: (m: ChildMessage): m is Extract<ChildMessage, { type: 'event' }> => m.type === 'event',
};

/** What an operator is told: a lost lease, a completion retried, a release that failed. */
const OPERATOR_EVENTS = new Set(['lease-lost', 'completion-retry', 'release-failed']);

/** The operator events (see OPERATOR_EVENTS) a child reported so far. */
export function eventsOf(child: Child): IdempotencyEvent[] {
  return child.messages
    .filter(is.event)
    .map((m) => m.event)
    .filter((e) => OPERATOR_EVENTS.has(e.type));
}

/**
 * Forks a worker (engine over IPC) or an app (Nest over HTTP) with @swc-node/register and
 * resolves once it reports ready. `env` is prefixed FW_ (worker), FA_ (app), FP_ (pg), FS_
 * (store-app) or FT_ (tx-app).
 */
export async function startChild(
  kind: keyof typeof SCRIPTS,
  name: string,
  env: Record<string, string | number>,
  readyTimeoutMs = 60_000,
): Promise<Child> {
  const prefix = ENV_PREFIX[kind];
  const childEnv: NodeJS.ProcessEnv = {
    ...process.env,
    SWC_NODE_PROJECT: path.join(ROOT, 'tsconfig.json'),
  };
  for (const [k, v] of Object.entries(env)) childEnv[`${prefix}${k}`] = String(v);
  const processRef = fork(SCRIPTS[kind], [], {
    cwd: ROOT,
    execArgv: ['-r', '@swc-node/register'],
    env: childEnv,
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  const child = new Child(kind, name, processRef);
  children.add(child);
  const ready = await child.waitFor('ready', is.ready, readyTimeoutMs);
  child.pid = ready.pid;
  child.port = ready.port;
  child.url = ready.url;
  return child;
}

export async function stopAllChildren(): Promise<void> {
  await Promise.all([...children].map((c) => c.kill()));
  children.clear();
}

/**
 * The usual fixture of a fault case: a DataSource on the test server, the
 * case's tables in its scratch schema, and worker processes on that schema.
 */
export async function setUpFaultCase(
  schema: string,
  workers: string[],
  env: Record<string, string | number> = {},
): Promise<{ admin: DataSource; workers: Child[] }> {
  const admin = await openDataSource();
  await createFaultTables(admin, schema);
  const childEnv = { PG_URL: testDatabaseUrl(), SCHEMA: schema, ...env };
  return {
    admin,
    workers: await Promise.all(workers.map((name) => startChild('worker', name, childEnv))),
  };
}

export async function tearDownFaultCase(
  admin: DataSource | undefined,
  schema: string,
): Promise<void> {
  await stopAllChildren();
  if (!admin) return;
  await dropSchema(admin, schema);
  await admin.destroy();
}

/** The records table (as the migration creates it) and the executions table the actions write to. */
export async function createFaultTables(dataSource: DataSource, schema: string): Promise<void> {
  for (const statement of schemaSql({ schema, table: 'idempotency_records' })) {
    await dataSource.query(statement);
  }
  await dataSource.query(
    `CREATE TABLE "${schema}".executions (
       n bigserial PRIMARY KEY, scope text NOT NULL, "key" text NOT NULL, pid int NOT NULL,
       token uuid NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
  );
}

export interface ExecutionRow {
  scope: string;
  key: string;
  pid: number;
  token: string;
}

export async function executionsOf(
  dataSource: DataSource,
  schema: string,
  scope: string,
  key?: string,
): Promise<ExecutionRow[]> {
  return dataSource.query(
    `SELECT scope, "key", pid, token::text AS token FROM "${schema}".executions
     WHERE scope = $1 AND ($2::text IS NULL OR "key" = $2) ORDER BY n`,
    [scope, key ?? null],
  );
}

export interface RecordRow {
  key: string;
  state: 'IN_PROGRESS' | 'COMPLETE';
  /** The stored value, decoded (undefined while IN_PROGRESS). */
  payload: unknown;
}

export async function recordsOf(
  dataSource: DataSource,
  schema: string,
  scope: string,
  key?: string,
): Promise<RecordRow[]> {
  const rows = (await dataSource.query(
    `SELECT "key", state, payload FROM "${schema}".idempotency_records
     WHERE scope = $1 AND ($2::text IS NULL OR "key" = $2)`,
    [scope, key ?? null],
  )) as Array<{ key: string; state: RecordRow['state']; payload: Buffer | null }>;
  return rows.map((row) => ({
    key: row.key,
    state: row.state,
    payload: row.payload ? decodeStored(row.payload) : undefined,
  }));
}

/** A value the engine stored, or for an HTTP record its status and parsed body. */
function decodeStored(payload: Buffer): unknown {
  const described = describePayload(payload);
  if (described.kind !== 'http') return described.kind === 'value' ? described.value : described;
  return {
    status: described.status,
    body: described.body ? JSON.parse(described.body) : undefined,
  };
}

/** An engine in this (the test) process, on its own DataSource; its log lines are kept. */
export async function openEngine(
  url: string,
  schema: string,
  options: { pool?: number; store?: TypeOrmIdempotencyStoreOptions } = {},
): Promise<{
  dataSource: DataSource;
  store: TypeOrmIdempotencyStore;
  engine: IdempotencyEngine;
  logs: string[];
  events: IdempotencyEvent[];
  close: () => Promise<void>;
}> {
  const logs: string[] = [];
  const logger = {
    warn: (m: string) => logs.push(`warn: ${m}`),
    error: (m: string) => logs.push(`error: ${m}`),
    debug: (m: string) => logs.push(`debug: ${m}`),
  };
  const dataSource = await new DataSource({
    type: 'postgres',
    url,
    extra: { max: options.pool ?? 10 },
  }).initialize();
  const store = new TypeOrmIdempotencyStore(dataSource, { schema, logger, ...options.store });
  await store.init();
  const engine = new IdempotencyEngine(store, { logger });
  const events: IdempotencyEvent[] = [];
  engine.onEvent((e) => {
    if (OPERATOR_EVENTS.has(e.type)) events.push(e);
  });
  return {
    dataSource,
    store,
    engine,
    logs,
    events,
    close: async () => {
      await store.close();
      if (dataSource.isInitialized) await dataSource.destroy();
    },
  };
}

/** Fails if any raw key appears in `text` (logs carry digests only). */
export function expectNoRawKeys(text: string, keys: Iterable<string>): void {
  const leaked = [...keys].filter((k) => text.includes(k));
  expect(leaked).toEqual([]);
}

/** Figures for the summary table (test/faults/RESULTS.md), one file per case. */
export interface CaseResult {
  case: number;
  title: string;
  executionsExpected: number;
  executionsObserved: number;
  recordsLost: number;
  /** Longest time from the fault's end (or the fault itself) to a correct answer; null if not applicable. */
  maxRecoveryMs: number | null;
  notes: string;
}

export function resultsDir(): string {
  return (
    process.env.IDEMPOTENCY_FAULTS_RESULTS_DIR ?? path.join(os.tmpdir(), 'nest-idempotency-faults')
  );
}

export function recordResult(result: CaseResult): void {
  const dir = resultsDir();
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(
    dir,
    `case-${String(result.case).padStart(2, '0')}-${slug(result.title)}.json`,
  );
  fs.writeFileSync(file, JSON.stringify(result, null, 2));
}

function slug(text: string): string {
  return text
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-|-$/g, '')
    .slice(0, 40);
}
