import { Body, Controller, INestApplication, Post } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { Idempotent, IdempotencyModule } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import type { Pool } from 'pg';
import { DataSource } from 'typeorm';
import { CapturedLogs, startLoggedHttpApp } from '../support/captured-logs';
import { ADAPTERS, Reply } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';
import { parsePgUrl, TcpProxy } from '../support/tcp-proxy';
import { Probe } from './fixtures';

const probe = new Probe();

@Controller('outage')
class OutageController {
  @Post()
  @Idempotent()
  create(@Body() body: { amount: number }) {
    probe.ran('create');
    return { id: randomUUID(), amount: body.amount };
  }

  @Post('held')
  @Idempotent({ lease: '2s', waitTimeout: '10s' })
  async held() {
    probe.ran('held');
    await probe.pass('held');
    return { id: randomUUID() };
  }

  @Post('waits')
  @Idempotent({ waitTimeout: '5s' })
  waits() {
    probe.ran('waits');
    return { id: randomUUID() };
  }
}

/** Far above the store's 1 s operation timeout: a request still pending then is a hang. */
const HANG_MS = 15_000;

/** One request; a response that has not arrived within HANG_MS fails the test as a hang. */
async function post(
  url: string,
  path: string,
  key: string,
  body: unknown = { amount: 5 },
): Promise<Reply> {
  const response = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(HANG_MS),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, text, json: () => JSON.parse(text) };
}

function expectUnavailable(reply: Reply, key: string): void {
  expect(reply.status).toBe(503);
  expect(reply.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  const retryAfter = Number(reply.headers.get('retry-after'));
  expect(Number.isInteger(retryAfter)).toBe(true);
  expect(retryAfter).toBeGreaterThanOrEqual(1);
  expect(reply.json()).toMatchObject({
    status: 503,
    code: 'idempotency-store-unavailable',
    retryAfterSeconds: retryAfter,
  });
  expect(reply.text).not.toContain(key);
}

/**
 * Listens where the database was and accepts connections without ever
 * answering: a database that hangs rather than refuses.
 */
class Blackhole {
  private readonly sockets = new Set<net.Socket>();
  private readonly server = net.createServer((socket) => {
    this.sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => this.sockets.delete(socket));
  });

  async start(port: number): Promise<this> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, '127.0.0.1', resolve);
    });
    return this;
  }

  get connections(): number {
    return this.sockets.size;
  }

  /** Drops the held connections (their clients see an error) and frees the port. */
  async stop(): Promise<void> {
    if (!this.server.listening) return;
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** Resolves once the DataSource's pg pool holds no client at all. */
function poolDrained(dataSource: DataSource): Promise<void> {
  const pool = (dataSource.driver as unknown as { master: Pool }).master;
  return new Promise((resolve) => {
    const check = () => {
      if (pool.totalCount > 0) return;
      pool.off('remove', check);
      resolve();
    };
    pool.on('remove', check);
    check();
  });
}

describe.each(ADAPTERS)('HTTP with the store unreachable, over %s', (adapter) => {
  let app: INestApplication;
  let url: string;
  let direct: DataSource;
  let proxied: DataSource;
  let proxy: TcpProxy;
  let store: TypeOrmIdempotencyStore;
  const logs = new CapturedLogs();
  const schema = scratchSchema('http_outage');

  // TcpProxy.restore() may only follow a cut: it listens on the same port again.
  let down = false;
  let stall: Blackhole | undefined;
  async function cut(): Promise<void> {
    await proxy.cut();
    down = true;
  }
  async function restore(): Promise<void> {
    await proxy.restore();
    down = false;
  }

  beforeAll(async () => {
    const target = parsePgUrl(testDatabaseUrl());
    proxy = new TcpProxy(target.host, target.port);
    const port = await proxy.start();
    const viaProxy = new URL(testDatabaseUrl());
    viaProxy.hostname = '127.0.0.1';
    viaProxy.port = String(port);

    direct = await openDataSource();
    proxied = await openDataSource({ url: viaProxy.toString(), extra: { max: 5 } });
    store = new TypeOrmIdempotencyStore(proxied, {
      schema,
      ensureSchema: true,
      operationTimeoutMs: 1000,
      logger: logs.store,
    });
    ({ app, url } = await startLoggedHttpApp(
      adapter,
      { imports: [IdempotencyModule.forRoot({ store })], controllers: [OutageController] },
      logs,
    ));
  });
  afterAll(async () => {
    await app?.close();
    await proxied?.destroy();
    await stall?.stop();
    if (!down) await proxy?.cut();
    await dropSchema(direct, schema);
    await direct.destroy();
  });
  beforeEach(() => probe.executions.clear());
  afterEach(async () => {
    // Leave the database reachable for the next test, even after a failure mid-outage.
    await stall?.stop();
    stall = undefined;
    if (down) await restore();
  });

  /** Sends the same request until it is no longer refused as unavailable (bounded). */
  async function untilServed(path: string, key: string, body?: unknown): Promise<Reply[]> {
    const replies: Reply[] = [];
    for (let attempt = 0; attempt < 50; attempt++) {
      const reply = await post(url, path, key, body);
      replies.push(reply);
      if (reply.status !== 503) return replies;
    }
    return replies;
  }

  it('answers 503 problem+json with Retry-After, never 500 or a hang, and recovers without a restart', async () => {
    const k = randomUUID();
    await cut();

    const refused = await post(url, '/outage', k);
    expectUnavailable(refused, k);
    expect(probe.count('create')).toBe(0);

    // Still down: the same again (pg may now be retrying a fresh connection).
    expectUnavailable(await post(url, '/outage', k), k);
    expect(probe.count('create')).toBe(0);
    await expect(
      direct.query(`SELECT count(*)::int AS n FROM "${schema}".idempotency_records`),
    ).resolves.toEqual([{ n: 0 }]);

    await restore();
    const replies = await untilServed('/outage', k);
    const served = replies[replies.length - 1];
    for (const reply of replies.slice(0, -1)) expectUnavailable(reply, k);
    expect(served.status).toBe(201);
    expect(served.headers.get('idempotent-replayed')).toBeNull();
    expect(served.json()).toMatchObject({ amount: 5 });
    expect(probe.count('create')).toBe(1);

    const replay = await post(url, '/outage', k);
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.json()).toEqual(served.json());
    expect(probe.count('create')).toBe(1);

    expect(logs.text()).toContain('idempotency store unavailable');
    expect(logs.text()).not.toContain(k);
  });

  it('a duplicate of a completed request gets 503 while the store is down, then its replay', async () => {
    const k = randomUUID();
    const first = await post(url, '/outage/waits', k);
    expect(first.status).toBe(201);

    await cut();
    expectUnavailable(await post(url, '/outage/waits', k), k);
    expect(probe.count('waits')).toBe(1);

    await restore();
    const replies = await untilServed('/outage/waits', k);
    const served = replies[replies.length - 1];
    expect(served.status).toBe(201);
    expect(served.headers.get('idempotent-replayed')).toBe('true');
    expect(served.json()).toEqual(first.json());
    expect(probe.count('waits')).toBe(1);
    expect(logs.text()).not.toContain(k);
  });

  it('answers 503 after operationTimeoutMs when the database accepts connections but never answers', async () => {
    const k = randomUUID();
    await cut();
    // Idle pooled connections die with the cut; wait until the pool has let go of
    // them, so the request below must open a connection to the blackhole.
    await poolDrained(proxied);
    stall = await new Blackhole().start(proxy.port);

    const refused = await post(url, '/outage', k);
    expectUnavailable(refused, k);
    expect(probe.count('create')).toBe(0);
    // The timeout, not a refused connection, produced this 503.
    expect(stall.connections).toBeGreaterThan(0);
    expect(logs.text()).toMatch(/did not answer acquire within 1000 ms/);

    await stall.stop();
    stall = undefined;
    await restore();
    const replies = await untilServed('/outage', k);
    const served = replies[replies.length - 1];
    expect(served.status).toBe(201);
    expect(served.headers.get('idempotent-replayed')).toBeNull();
    expect(probe.count('create')).toBe(1);
    expect(logs.text()).not.toContain(k);
  });

  it('the store drops while the handler runs: 503 completion-failed (not 500, not success); the lapsed lease lets a retry run', async () => {
    const k = randomUUID();
    const gate = probe.hold('held');
    const first = post(url, '/outage/held', k);
    await gate.entered.promise;
    await cut();
    gate.release.open();

    // The engine retries the completion, then gives up: the work happened, its outcome is unknown.
    const reply = await first;
    expect(reply.status).toBe(503);
    expect(reply.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(Number(reply.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(reply.json()).toMatchObject({ status: 503, code: 'idempotency-completion-failed' });
    expect(reply.text).not.toContain(k);
    expect(probe.count('held')).toBe(1);

    await restore();
    const left = await store.find({ scope: 'OutageController.held', key: k });
    expect(left?.state).toBe('IN_PROGRESS');
    // Once the 2 s lease has lapsed (a retry waits in the store for that), the retry runs again:
    // the documented price of an outcome that could not be recorded.
    const replies = await untilServed('/outage/held', k);
    const served = replies[replies.length - 1];
    expect(served.status).toBe(201);
    expect(served.headers.get('idempotent-replayed')).toBeNull();
    expect(probe.count('held')).toBe(2);
    expect(logs.text()).not.toContain(k);
  });
});
