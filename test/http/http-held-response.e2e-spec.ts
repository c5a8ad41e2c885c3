import {
  CallHandler,
  Controller,
  ExecutionContext,
  HttpCode,
  INestApplication,
  Injectable,
  NestInterceptor,
  Post,
  Res,
  UseInterceptors,
} from '@nestjs/common';
import { ExpressAdapter } from '@nestjs/platform-express';
import { Test } from '@nestjs/testing';
import { randomUUID } from 'node:crypto';
import http, { type ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import net from 'node:net';
import {
  Idempotent,
  IdempotencyModule,
  InMemoryIdempotencyStore,
  Lease,
  StoredPayload,
} from 'nest-idempotency';
import { Gate } from '../support/gate';
import { ADAPTERS, AdapterName, send, startHttpApp } from '../support/http-app';

/**
 * The held response on the connections real clients use: keep-alive
 * connections that carry held and unheld responses in turn, pipelined
 * requests (a response waiting for its turn has no socket yet), a wrapper a
 * middleware put on `res.end` before the hold, and what the application
 * sees of a response it ended while its record is still being stored. On
 * Express the hold sits on the application's response prototype, on
 * Fastify on the response itself (see raw-response.ts, prototype-hold.ts).
 */
/** The in-memory store whose completions wait for `open`, once `armed`; `reached(n)`: n of them are waiting. */
class GatedStore extends InMemoryIdempotencyStore {
  armed = false;
  open = new Gate();
  private waiting = 0;
  private readonly watchers: { count: number; resolve: () => void }[] = [];

  arm(): void {
    this.armed = true;
    this.open = new Gate();
    this.waiting = 0;
  }

  reached(count: number): Promise<void> {
    const watcher = new Gate();
    this.watchers.push({ count, resolve: () => watcher.open() });
    this.notify();
    return watcher.promise;
  }

  override async complete(lease: Lease, payload: StoredPayload): Promise<void> {
    if (this.armed) {
      this.waiting++;
      this.notify();
      await this.open.promise;
    }
    return super.complete(lease, payload);
  }

  private notify(): void {
    for (const watcher of this.watchers) if (this.waiting >= watcher.count) watcher.resolve();
  }
}

let runs = 0;
let lastResponse: ServerResponse | undefined;
/** How often the wrapper an inner interceptor put on `res.end` ran, per request id. */
const innerEnds = new Map<string, number>();

/** Listed above `@Idempotent`, so it runs inside it: wraps `res.end` after the hold started, and counts its calls. */
@Injectable()
class WrapEndInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler) {
    const http = context.switchToHttp();
    const request = http.getRequest<{ headers: Record<string, string | undefined> }>();
    const response = http.getResponse<{ raw?: ServerResponse } & ServerResponse>();
    const res = response.raw ?? response;
    const id = request.headers['x-inner'] ?? '';
    const end = res.end;
    innerEnds.set(id, 0);
    res.end = function (this: ServerResponse, ...args: unknown[]) {
      innerEnds.set(id, innerEnds.get(id)! + 1);
      return (end as (...a: unknown[]) => ServerResponse).apply(this, args);
    } as ServerResponse['end'];
    return next.handle();
  }
}

@Controller('held')
class HeldController {
  @Post('charge')
  @HttpCode(200)
  @Idempotent({ scope: 'held-charges' })
  charge() {
    return { charged: ++runs };
  }

  @Post('inner')
  @HttpCode(200)
  @UseInterceptors(WrapEndInterceptor)
  @Idempotent({ scope: 'held-inner' })
  inner() {
    return { inner: ++runs, text: 'ünïcode' };
  }

  @Post('fails')
  @Idempotent({ scope: 'held-fails' })
  fails(): never {
    throw new Error('the handler failed');
  }

  @Post('plain')
  @HttpCode(200)
  plain() {
    return { plain: true, padding: 'x'.repeat(64) };
  }

  @Post('watched')
  @HttpCode(200)
  @Idempotent({ scope: 'held-watched' })
  watched(@Res({ passthrough: true }) response: { raw?: ServerResponse } & ServerResponse) {
    lastResponse = response.raw ?? response;
    return { watched: ++runs };
  }
}

/**
 * A fresh POST to the `watched` route at `path`, whose completion `store` holds back: the
 * response as the application saw it while its record was stored, the reply, and the response.
 */
async function whileStored(store: GatedStore, url: string, path: string) {
  store.arm();
  try {
    const answered = send(url, 'POST', path, { key: randomUUID(), body: {} });
    await store.reached(1);
    const res = lastResponse!;
    const during = { ended: res.writableEnded, finished: res.writableFinished };
    store.open.open();
    return { during, reply: await answered, res };
  } finally {
    store.armed = false;
    store.open.open();
  }
}

/** POSTs on `agent` (keep-alive, few sockets); resolves with the status, body and replay header. */
function post(
  url: string,
  agent: http.Agent,
  path: string,
  key?: string,
): Promise<{ status: number; body: string; replayed: boolean }> {
  return new Promise((resolve, reject) => {
    const request = http.request(`${url}${path}`, {
      method: 'POST',
      agent,
      headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
    });
    request.on('response', (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () =>
        resolve({
          status: response.statusCode!,
          body: Buffer.concat(chunks).toString('utf8'),
          replayed: response.headers['idempotent-replayed'] === 'true',
        }),
      );
    });
    request.on('error', reject);
    request.end('{}');
  });
}

describe.each(ADAPTERS)('the held response on real connections (%s)', (adapter: AdapterName) => {
  let app: INestApplication;
  let url: string;
  let store: GatedStore;
  /** What the middleware's wrapper of `res.end` was handed, per request id. */
  const wrapped = new Map<string, string>();

  beforeAll(async () => {
    store = new GatedStore();
    ({ app, url } = await startHttpApp(
      adapter,
      {
        imports: [IdempotencyModule.forRoot({ store, purge: false })],
        controllers: [HeldController],
      },
      (nest) => {
        // A middleware that wraps res.end before any interceptor runs (as a logger
        // or a compression middleware does): the hold is installed above it.
        nest.use(
          (
            req: { headers: Record<string, string | undefined> },
            res: ServerResponse,
            next: () => void,
          ) => {
            const id = req.headers['x-wrap'];
            if (id === undefined) return next();
            const end = res.end;
            res.end = function (this: ServerResponse, ...args: unknown[]) {
              const chunk = args[0];
              wrapped.set(id, Buffer.isBuffer(chunk) ? chunk.toString('latin1') : String(chunk));
              return (end as (...a: unknown[]) => ServerResponse).apply(this, args);
            } as ServerResponse['end'];
            next();
          },
        );
      },
    ));
  });
  afterAll(async () => {
    await app?.close();
  });

  it('keep-alive connections carry held and unheld responses in turn, each as its own', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 3 });
    try {
      const keys = Array.from({ length: 20 }, () => randomUUID());
      // A failed handler's response (its hold released) on the same sockets first.
      const failed = await Promise.all(
        keys.slice(0, 6).map((key) => post(url, agent, '/held/fails', key)),
      );
      expect(failed.map((r) => r.status)).toEqual([500, 500, 500, 500, 500, 500]);
      const firsts = await Promise.all(
        keys.map((key, i) =>
          i % 2 === 0 ? post(url, agent, '/held/charge', key) : post(url, agent, '/held/plain'),
        ),
      );
      // Replays and plain routes again, interleaved on the same few sockets.
      const seconds = await Promise.all(
        keys.map((key, i) =>
          i % 2 === 0 ? post(url, agent, '/held/charge', key) : post(url, agent, '/held/plain'),
        ),
      );
      for (let i = 0; i < keys.length; i++) {
        if (i % 2 === 1) {
          expect(firsts[i]).toEqual({
            status: 200,
            body: JSON.stringify({ plain: true, padding: 'x'.repeat(64) }),
            replayed: false,
          });
          expect(seconds[i]).toEqual(firsts[i]);
        } else {
          expect(firsts[i].status).toBe(200);
          expect(firsts[i].replayed).toBe(false);
          expect(JSON.parse(firsts[i].body)).toEqual({ charged: expect.any(Number) });
          expect(seconds[i]).toEqual({ ...firsts[i], replayed: true });
        }
      }
      const charged = firsts.filter((_, i) => i % 2 === 0).map((r) => r.body);
      expect(new Set(charged).size).toBe(keys.length / 2);
    } finally {
      agent.destroy();
    }
  });

  it('pipelined requests on one socket each get their own answer, in order', async () => {
    const keys = [randomUUID(), randomUUID(), randomUUID()];
    const request = (path: string, key?: string) =>
      `POST ${path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 2\r\n${
        key ? `Idempotency-Key: ${key}\r\n` : ''
      }\r\n{}`;
    // The first charge's completion waits, so the requests behind it are handled while it is
    // held: their responses wait for the socket (Node assigns it once the one before finishes).
    store.arm();
    const { port } = new URL(url);
    const socket = net.connect(Number(port), '127.0.0.1');
    const raw: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => raw.push(chunk));
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    // Five requests in one write: a later one is parsed while an earlier one is still held.
    socket.write(
      request('/held/charge', keys[0]) +
        request('/held/plain') +
        request('/held/charge', keys[1]) +
        request('/held/charge', keys[0]) +
        request('/held/charge', keys[2]).replace('Host: test', 'Host: test\r\nConnection: close'),
    );
    try {
      // The three fresh charges (the first, and two whose responses have no socket yet).
      await store.reached(3);
    } finally {
      store.armed = false;
      store.open.open();
    }
    await closed;
    const text = Buffer.concat(raw).toString('utf8');
    const bodies = [...text.matchAll(/\r\n\r\n(\{[^}]*\})/g)].map(
      (m) => JSON.parse(m[1]) as object,
    );
    const statuses = [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
    expect(statuses).toEqual([200, 200, 200, 200, 200]);
    expect(bodies).toHaveLength(5);
    expect(bodies[1]).toEqual({ plain: true, padding: 'x'.repeat(64) });
    expect(bodies[3]).toEqual(bodies[0]);
    const charged = [bodies[0], bodies[2], bodies[4]].map(
      (b) => (b as { charged: number }).charged,
    );
    expect(new Set(charged).size).toBe(3);
    expect(text.match(/idempotent-replayed: true/gi)).toHaveLength(1);
  });

  it("a wrapper a middleware put on res.end stays above the hold: it sees what goes out, the record the handler's response", async () => {
    const key = randomUUID();
    const first = await send(url, 'POST', '/held/charge', {
      key,
      body: {},
      headers: { 'x-wrap': 'first' },
    });
    const again = await send(url, 'POST', '/held/charge', {
      key,
      body: {},
      headers: { 'x-wrap': 'again' },
    });
    expect(first.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text).toBe(first.text);
    expect(wrapped.get('first')).toBe(first.text);
    expect(wrapped.get('again')).toBe(first.text);
    const record = await store.find({ scope: 'held-charges', key });
    expect(record?.state).toBe('COMPLETE');
  });

  it('a wrapper an inner interceptor put on res.end after the hold started runs once, with the bytes', async () => {
    const key = randomUUID();
    const first = await send(url, 'POST', '/held/inner', {
      key,
      body: {},
      headers: { 'x-inner': 'first' },
    });
    expect(first.status).toBe(200);
    expect(first.json()).toEqual({ inner: expect.any(Number), text: 'ünïcode' });
    expect(innerEnds.get('first')).toBe(1);
    const again = await send(url, 'POST', '/held/inner', {
      key,
      body: {},
      headers: { 'x-inner': 'again' },
    });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text).toBe(first.text);
    // A replay does not run the handler's chain, so the inner interceptor never saw it.
    expect(innerEnds.has('again')).toBe(false);
  });

  it('a second application of the same framework in the process holds its responses too', async () => {
    const other = await startHttpApp(adapter, {
      imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore(), purge: false })],
      controllers: [HeldController],
    });
    try {
      const key = randomUUID();
      const [here, there] = await Promise.all([
        send(url, 'POST', '/held/charge', { key, body: {} }),
        send(other.url, 'POST', '/held/charge', { key, body: {} }),
      ]);
      const [hereAgain, thereAgain] = await Promise.all([
        send(url, 'POST', '/held/charge', { key, body: {} }),
        send(other.url, 'POST', '/held/charge', { key, body: {} }),
      ]);
      // Two stores: each application ran the key once, and replays its own answer.
      expect(here.text).not.toBe(there.text);
      expect([hereAgain.text, thereAgain.text]).toEqual([here.text, there.text]);
      expect([hereAgain, thereAgain].map((r) => r.headers.get('idempotent-replayed'))).toEqual([
        'true',
        'true',
      ]);
    } finally {
      await other.app.close();
    }
  });

  it('an ended response reads as ended while its record is stored, and finished only once sent', async () => {
    const { during, reply, res } = await whileStored(store, url, '/held/watched');
    expect(during).toEqual({ ended: true, finished: false });
    expect(reply.status).toBe(200);
    expect(res.writableEnded).toBe(true);
    expect(res.writableFinished).toBe(true);
  });
});

/** The `express` that Nest's Express adapter runs (the outer application must be the same framework). */
function nestsExpress(): () => ExpressApp {
  const fromAdapter = createRequire(require.resolve('@nestjs/platform-express'));
  return fromAdapter('express') as () => ExpressApp;
}

type Handler = (req: unknown, res: { json(body: unknown): void }) => void;
interface ExpressApp {
  (req: http.IncomingMessage, res: ServerResponse): void;
  post(path: string, handler: Handler): void;
  use(path: string, app: unknown): void;
}

describe('a Nest application mounted inside another Express application', () => {
  let app: INestApplication;
  let server: http.Server | undefined;
  let url: string;
  const store = new GatedStore();

  beforeAll(async () => {
    const express = nestsExpress();
    const inner = express();
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store, purge: false })],
      controllers: [HeldController],
    }).compile();
    app = moduleRef.createNestApplication(new ExpressAdapter(inner), { logger: false });
    await app.init();
    // Express gives a request entering a mounted application that application's response
    // prototype, and the outer one's back when it leaves: both inherit the held methods.
    const outer = express();
    outer.post('/outer/plain', (_req, res) => res.json({ outer: true }));
    outer.use('/api', inner);
    const listening = http.createServer(outer);
    server = listening;
    await new Promise<void>((resolve) => listening.listen(0, '127.0.0.1', resolve));
    const { port } = listening.address() as net.AddressInfo;
    url = `http://127.0.0.1:${port}`;
  });
  afterAll(async () => {
    const listening = server;
    if (listening) await new Promise<void>((resolve) => listening.close(() => resolve()));
    await app?.close();
  });

  it('keeps a mounted response from the socket until its record is stored', async () => {
    const { during, reply, res } = await whileStored(store, url, '/api/held/watched');
    expect(during).toEqual({ ended: true, finished: false });
    expect(reply.status).toBe(200);
    expect(res.writableFinished).toBe(true);
  });

  it("holds and replays the mounted application's responses, and leaves the outer one's alone, on shared connections", async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 2 });
    try {
      const keys = Array.from({ length: 12 }, () => randomUUID());
      const round = () =>
        Promise.all(
          keys.map((key, i) =>
            i % 3 === 2
              ? post(url, agent, '/outer/plain')
              : post(url, agent, '/api/held/charge', key),
          ),
        );
      const firsts = await round();
      const seconds = await round();
      for (let i = 0; i < keys.length; i++) {
        if (i % 3 === 2) {
          expect(firsts[i]).toEqual({ status: 200, body: '{"outer":true}', replayed: false });
          expect(seconds[i]).toEqual(firsts[i]);
          continue;
        }
        expect(firsts[i].status).toBe(200);
        expect(firsts[i].replayed).toBe(false);
        expect(JSON.parse(firsts[i].body)).toEqual({ charged: expect.any(Number) });
        expect(seconds[i]).toEqual({ ...firsts[i], replayed: true });
      }
      const charged = firsts.filter((_, i) => i % 3 !== 2).map((r) => r.body);
      expect(new Set(charged).size).toBe(charged.length);
    } finally {
      agent.destroy();
    }
  });
});
