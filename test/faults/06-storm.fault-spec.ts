/**
 * Case 6: a storm of 1,000 concurrent requests with one key, spread over two
 * Nest applications in their own processes on one PostgreSQL. The client's
 * concurrency is bounded (keep-alive agents, 50 sockets per application), so
 * a 2-core machine copes. One execution, identical responses, no 500.
 */
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { scratchSchema, testDatabaseUrl } from '../support/postgres';
import {
  Child,
  executionsOf,
  expectNoRawKeys,
  recordResult,
  recordsOf,
  setUpFaultCase,
  startChild,
  tearDownFaultCase,
} from './support/harness';

const REQUESTS = 1000;
const SOCKETS_PER_APP = 50;
const HANG_MS = 30_000;

interface StormReply {
  app: number;
  status: number;
  replayed: boolean;
  contentType: string;
  body: string;
  ms: number;
}

function post(agent: http.Agent, port: number, key: string, body: string): Promise<StormReply> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        agent,
        host: '127.0.0.1',
        port,
        path: '/charges',
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          'idempotency-key': key,
        },
        timeout: HANG_MS,
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (c: Buffer) => chunks.push(c));
        response.on('end', () =>
          resolve({
            app: port,
            status: response.statusCode ?? 0,
            replayed: response.headers['idempotent-replayed'] === 'true',
            contentType: String(response.headers['content-type']),
            body: Buffer.concat(chunks).toString('utf8'),
            ms: Date.now() - started,
          }),
        );
        response.on('error', reject);
      },
    );
    request.on('timeout', () => request.destroy(new Error(`no response within ${HANG_MS} ms`)));
    request.on('error', reject);
    request.end(body);
  });
}

describe('fault 6: a storm of one key over two application processes', () => {
  const schema = scratchSchema('fault_storm');
  let admin: DataSource;
  let apps: Child[] = [];

  beforeAll(async () => {
    ({ admin } = await setUpFaultCase(schema, []));
    const env = { PG_URL: testDatabaseUrl(), SCHEMA: schema, WORK_MS: 250, POOL: 10 };
    apps = await Promise.all([startChild('app', 'app A', env), startChild('app', 'app B', env)]);
  }, 120_000);

  afterAll(() => tearDownFaultCase(admin, schema));

  it(`runs the handler once for ${REQUESTS} concurrent requests; every response is the same, none is a 500`, async () => {
    const key = randomUUID();
    const body = JSON.stringify({ amount: 1000 });
    const agents = apps.map(() => new http.Agent({ keepAlive: true, maxSockets: SOCKETS_PER_APP }));
    const started = Date.now();
    let replies: StormReply[];
    try {
      replies = await Promise.all(
        Array.from({ length: REQUESTS }, (_, i) =>
          post(agents[i % 2], apps[i % 2].port!, key, body),
        ),
      );
    } finally {
      for (const agent of agents) agent.destroy();
    }
    const elapsedMs = Date.now() - started;

    const statuses = new Map<number, number>();
    for (const r of replies) statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
    expect([...statuses]).toEqual([[201, REQUESTS]]);
    expect(new Set(replies.map((r) => r.body)).size).toBe(1);
    expect(new Set(replies.map((r) => r.contentType))).toEqual(
      new Set(['application/json; charset=utf-8']),
    );
    expect(replies.filter((r) => !r.replayed)).toHaveLength(1);

    const executions = await executionsOf(admin, schema, 'charges', key);
    expect(executions).toHaveLength(1);
    const value = JSON.parse(replies[0].body) as { charge: string; pid: number };
    expect(value).toEqual({ charge: executions[0].token, pid: executions[0].pid, amount: 1000 });
    // Both processes answered (half the requests each), one of them ran the handler.
    for (const app of apps) expect(replies.filter((r) => r.app === app.port)).toHaveLength(500);
    expect(apps.map((a) => a.pid)).toContain(executions[0].pid);
    const records = await recordsOf(admin, schema, 'charges', key);
    expect(records).toMatchObject([{ state: 'COMPLETE' }]);
    for (const app of apps) {
      expect(app.alive).toBe(true);
      expectNoRawKeys(app.output(), [key]);
    }

    const slowest = Math.max(...replies.map((r) => r.ms));
    recordResult({
      case: 6,
      title: 'Storm: 1,000 requests, one key, two apps',
      executionsExpected: 1,
      executionsObserved: executions.length,
      recordsLost: records[0]?.state === 'COMPLETE' ? 0 : 1,
      maxRecoveryMs: null,
      notes:
        `HTTP (Express) over 2 Nest processes, ${SOCKETS_PER_APP} client sockets each, handler 250 ms; ` +
        `${REQUESTS} × 201 (1 executed, ${REQUESTS - 1} replayed), one distinct body, 0 × 500; ` +
        `done in ${elapsedMs} ms, slowest response ${slowest} ms`,
    });
  }, 60_000);
});
