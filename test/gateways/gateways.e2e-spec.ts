import { ArgumentsHost, Catch, INestApplication, UseFilters } from '@nestjs/common';
import { IoAdapter } from '@nestjs/platform-socket.io';
import { WsAdapter } from '@nestjs/platform-ws';
import { Test } from '@nestjs/testing';
import {
  BaseWsExceptionFilter,
  MessageBody,
  SubscribeMessage,
  WebSocketGateway,
  WsException,
} from '@nestjs/websockets';
import { randomUUID } from 'node:crypto';
import { AddressInfo } from 'node:net';
import {
  GatewayKeySource,
  Idempotent,
  IdempotencyConfigError,
  IdempotencyModule,
} from 'nest-idempotency';
import { DEFAULT_MAX_KEY_LENGTH, InMemoryIdempotencyStore } from 'nest-idempotency/core';
import { io, Socket } from 'socket.io-client';
import { WebSocket } from 'ws';
import { CuttableStore, openCuttableStore } from '../support/cuttable-store';
import { Gate } from '../support/gate';
import { describeEachStore, OpenedStore, openStore } from '../support/stores';

/**
 * `@Idempotent` on a WebSocket gateway's `@SubscribeMessage` handlers, on the
 * `ws` and `socket.io` adapters, over real sockets on loopback: the handler
 * runs once per `data.requestId`, every duplicate gets the first
 * acknowledgement, and refusals arrive as the gateway's `exception` event
 * with their code and `retryAfterMs`.
 */

interface Payment {
  paymentId: string;
  requestId: string;
  amount: number;
}

/** Executions per request id, and the gates a test holds a handler on. */
const runs = new Map<string, number>();
const held = { entered: new Gate(), release: new Gate() };

function ran(requestId: string): void {
  runs.set(requestId, (runs.get(requestId) ?? 0) + 1);
}

@WebSocketGateway()
class PaymentsGateway {
  @SubscribeMessage('pay')
  @Idempotent({ key: 'data.requestId' })
  async pay(
    @MessageBody() data: { requestId?: string; amount: number; hold?: boolean; fail?: boolean },
  ): Promise<Payment> {
    ran(data.requestId ?? '');
    if (data.hold) {
      held.entered.open();
      await held.release.promise;
    }
    if (data.fail) throw new WsException('the provider timed out');
    return { paymentId: randomUUID(), requestId: data.requestId ?? '', amount: data.amount };
  }

  @SubscribeMessage('reserve')
  @Idempotent({ key: 'data.requestId', waitTimeout: 'PT0S' })
  async reserve(@MessageBody() data: { requestId: string; hold?: boolean }): Promise<Payment> {
    ran(data.requestId);
    if (data.hold) {
      held.entered.open();
      await held.release.promise;
    }
    return { paymentId: randomUUID(), requestId: data.requestId, amount: 0 };
  }

  /** Fingerprinted by the amount, in strict mode: a throw leaves the outcome unknown. */
  @SubscribeMessage('refund')
  @Idempotent({
    key: 'data.requestId',
    fingerprint: (source) =>
      String(((source as GatewayKeySource).data as { amount: number }).amount),
    onExpiredLease: 'refuse',
  })
  refund(@MessageBody() data: { requestId: string; amount: number; fail?: boolean }): Payment {
    ran(`refund:${data.requestId}`);
    if (data.fail) throw new WsException('the provider timed out');
    return { paymentId: randomUUID(), requestId: data.requestId, amount: -data.amount };
  }
}

/**
 * Nest 11's `BaseWsExceptionFilter` hands an exception to `client.emit`,
 * which on the `ws` adapter's native WebSocket only fires on the server, so a
 * ws client never hears of any gateway error; Nest 12's sends it. On Nest 11
 * the gateway gets the filter docs/gateways-and-commands.md shows, which
 * sends it as Nest 12 does (Nest applies no global filter to gateways).
 */
@Catch()
class SendExceptionsFilter extends BaseWsExceptionFilter {
  override catch(exception: unknown, host: ArgumentsHost): void {
    const client = host
      .switchToWs()
      .getClient<{ readyState?: unknown; send(text: string): void }>();
    if (typeof client.readyState !== 'number') return super.catch(exception, host);
    const data =
      exception instanceof WsException
        ? exception.getError()
        : { status: 'error', message: 'Internal server error' };
    client.send(JSON.stringify({ event: 'exception', data }));
  }
}
if (!('isNativeWebSocket' in BaseWsExceptionFilter.prototype)) {
  UseFilters(new SendExceptionsFilter())(PaymentsGateway);
}

type Reply = { kind: 'ack'; value: Payment } | { kind: 'exception'; error: WsError };

interface WsError {
  status: string;
  code: string;
  message: string;
  retryAfterMs?: number;
}

/** A client of either adapter: sends one message and resolves with its acknowledgement or its exception. */
interface TestClient {
  send(event: string, data: Record<string, unknown>): Promise<Reply>;
  close(): void;
}

/**
 * Replies are matched to their message by `requestId`; an `exception` event
 * carries none, so it answers the oldest message still waiting on that client
 * (the refusal tests keep one message in flight per client).
 */
class PendingReplies {
  private readonly pending: { requestId: unknown; resolve: (reply: Reply) => void }[] = [];

  add(requestId: unknown): Promise<Reply> {
    return new Promise((resolve) => this.pending.push({ requestId, resolve }));
  }

  ack(value: Payment): void {
    const index = this.pending.findIndex((entry) => entry.requestId === value.requestId);
    if (index >= 0) this.pending.splice(index, 1)[0].resolve({ kind: 'ack', value });
  }

  exception(error: WsError): void {
    this.pending.shift()?.resolve({ kind: 'exception', error });
  }
}

async function socketIoClient(url: string): Promise<TestClient> {
  const socket: Socket = io(url, { transports: ['websocket'], forceNew: true });
  const replies = new PendingReplies();
  socket.on('exception', (error: WsError) => replies.exception(error));
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('connect_error', reject);
  });
  return {
    send: (event, data) => {
      const reply = replies.add(data.requestId);
      socket.emit(event, data, (value: Payment) => replies.ack(value));
      return reply;
    },
    close: () => socket.close(),
  };
}

async function wsClient(url: string): Promise<TestClient> {
  const socket = new WebSocket(url.replace('http://', 'ws://'));
  const replies = new PendingReplies();
  socket.on('message', (raw: Buffer) => {
    const message = JSON.parse(raw.toString('utf8')) as { event?: string; data?: WsError };
    if (message.event === 'exception') replies.exception(message.data!);
    else replies.ack(message as unknown as Payment);
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve());
    socket.once('error', reject);
  });
  return {
    send: (event, data) => {
      const reply = replies.add(data.requestId);
      socket.send(JSON.stringify({ event, data }));
      return reply;
    },
    close: () => socket.close(),
  };
}

const ADAPTERS = {
  ws: { adapter: (app: INestApplication) => new WsAdapter(app), client: wsClient },
  'socket.io': { adapter: (app: INestApplication) => new IoAdapter(app), client: socketIoClient },
} as const;

describeEachStore(
  'WebSocket gateways',
  (storeName) => {
    describe.each(['ws', 'socket.io'] as const)('the %s adapter', (adapterName) => {
      let opened: OpenedStore;
      let app: INestApplication;
      let url: string;
      const clients: TestClient[] = [];

      const connect = async (): Promise<TestClient> => {
        const client = await ADAPTERS[adapterName].client(url);
        clients.push(client);
        return client;
      };

      beforeAll(async () => {
        opened = await openStore(storeName, `gw_${adapterName.replace('.', '')}`);
        const moduleRef = await Test.createTestingModule({
          imports: [
            IdempotencyModule.forRoot({
              store: opened.store,
              defaults: { waitTimeout: 'PT10S' },
              purge: false,
            }),
          ],
          providers: [PaymentsGateway],
        }).compile();
        app = moduleRef.createNestApplication({ logger: false });
        app.useWebSocketAdapter(ADAPTERS[adapterName].adapter(app));
        await app.listen(0, '127.0.0.1');
        url = `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}`;
      });

      afterAll(async () => {
        for (const client of clients) client.close();
        await app?.close();
        await opened?.cleanup();
      });

      beforeEach(() => {
        held.entered = new Gate();
        held.release = new Gate();
      });

      it('runs a message once and answers a later duplicate with the first acknowledgement', async () => {
        const client = await connect();
        const requestId = randomUUID();
        const first = await client.send('pay', { requestId, amount: 100 });
        const again = await client.send('pay', { requestId, amount: 100 });
        const elsewhere = await (await connect()).send('pay', { requestId, amount: 100 });
        expect(first.kind).toBe('ack');
        expect(again).toEqual(first);
        expect(elsewhere).toEqual(first);
        expect(runs.get(requestId)).toBe(1);
      });

      it('runs 20 concurrent duplicates from 4 clients once, and every client gets the same acknowledgement', async () => {
        const senders = await Promise.all([connect(), connect(), connect(), connect()]);
        const requestId = randomUUID();
        const replies = await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            senders[i % 4].send('pay', { requestId, amount: 7 }),
          ),
        );
        expect(runs.get(requestId)).toBe(1);
        expect(replies[0].kind).toBe('ack');
        for (const reply of replies) expect(reply).toEqual(replies[0]);
      });

      it('runs different keys separately', async () => {
        const client = await connect();
        const ids = [randomUUID(), randomUUID(), randomUUID()];
        const replies = await Promise.all(
          ids.map((requestId) => client.send('pay', { requestId, amount: 1 })),
        );
        const paymentIds = replies.map((reply) =>
          reply.kind === 'ack' ? reply.value.paymentId : '',
        );
        expect(new Set(paymentIds).size).toBe(3);
        for (const requestId of ids) expect(runs.get(requestId)).toBe(1);
      });

      it('refuses a duplicate in flight past waitTimeout with its code and retryAfterMs, then replays', async () => {
        const holder = await connect();
        const others = await Promise.all([connect(), connect(), connect()]);
        const requestId = randomUUID();
        const first = holder.send('reserve', { requestId, hold: true });
        await held.entered.promise;
        const refusals = await Promise.all(
          others.map((client) => client.send('reserve', { requestId })),
        );
        for (const refusal of refusals) {
          expect(refusal.kind).toBe('exception');
          const error = (refusal as { error: WsError }).error;
          expect(error).toMatchObject({ status: 'error', code: 'idempotency-in-flight' });
          expect(error.retryAfterMs).toBeGreaterThan(0);
          // The record is named by its digest, never by the client's key.
          expect(error.message).not.toContain(requestId);
        }
        held.release.open();
        const answered = await first;
        expect(answered.kind).toBe('ack');
        expect(await others[0].send('reserve', { requestId })).toEqual(answered);
        expect(runs.get(requestId)).toBe(1);
      });

      it('refuses a message without a key as an exception with code idempotency-key-missing', async () => {
        const client = await connect();
        const reply = await client.send('pay', { amount: 5 });
        expect(reply).toMatchObject({
          kind: 'exception',
          error: { status: 'error', code: 'idempotency-key-missing' },
        });
        expect(runs.get('')).toBeUndefined();
      });

      it('refuses a key longer than the limit as an exception with code idempotency-key-invalid', async () => {
        const client = await connect();
        const requestId = 'k'.repeat(DEFAULT_MAX_KEY_LENGTH + 1);
        expect(await client.send('pay', { requestId, amount: 5 })).toMatchObject({
          kind: 'exception',
          error: { status: 'error', code: 'idempotency-key-invalid' },
        });
        expect(runs.get(requestId)).toBeUndefined();
      });

      it('answers a handler that throws with its own error and frees the key: the retry runs', async () => {
        const client = await connect();
        const requestId = randomUUID();
        for (let i = 0; i < 2; i++) {
          const reply = await client.send('pay', { requestId, amount: 2, fail: true });
          // The gateway's own error, as Nest renders it, not a refusal: no code.
          expectOwnError(reply);
        }
        expect(runs.get(requestId)).toBe(2);
      });

      it('refuses the same key with another message (a fingerprint function) with code idempotency-key-reused', async () => {
        const client = await connect();
        const requestId = randomUUID();
        const first = await client.send('refund', { requestId, amount: 10 });
        expect(first.kind).toBe('ack');
        const other = await client.send('refund', { requestId, amount: 99 });
        expect(other).toMatchObject({
          kind: 'exception',
          error: { status: 'error', code: 'idempotency-key-reused' },
        });
        expect((other as { error: WsError }).error.message).not.toContain(requestId);
        expect(await client.send('refund', { requestId, amount: 10 })).toEqual(first);
        expect(runs.get(`refund:${requestId}`)).toBe(1);
      });

      it('in strict mode, refuses a message whose earlier outcome is unknown with code idempotency-outcome-unknown and no retryAfterMs', async () => {
        const client = await connect();
        const requestId = randomUUID();
        expectOwnError(await client.send('refund', { requestId, amount: 5, fail: true }));
        for (let i = 0; i < 2; i++) {
          const retry = await client.send('refund', { requestId, amount: 5 });
          expect(retry).toMatchObject({
            kind: 'exception',
            error: { status: 'error', code: 'idempotency-outcome-unknown' },
          });
          expect((retry as { error: WsError }).error.retryAfterMs).toBeUndefined();
        }
        expect(runs.get(`refund:${requestId}`)).toBe(1);
      });
    });
  },
  ['postgres', 'redis'],
);

describe.each(['ws', 'socket.io'] as const)(
  'WebSocket gateways (%s) when the store is down',
  (adapterName) => {
    let cuttable: CuttableStore;
    let app: INestApplication;
    let client: TestClient;

    beforeAll(async () => {
      cuttable = await openCuttableStore('gw_down');
      const moduleRef = await Test.createTestingModule({
        imports: [IdempotencyModule.forRoot({ store: cuttable.store, purge: false })],
        providers: [PaymentsGateway],
      }).compile();
      app = moduleRef.createNestApplication({ logger: false });
      app.useWebSocketAdapter(ADAPTERS[adapterName].adapter(app));
      await app.listen(0, '127.0.0.1');
      const port = (app.getHttpServer().address() as AddressInfo).port;
      client = await ADAPTERS[adapterName].client(`http://127.0.0.1:${port}`);
    });
    afterAll(async () => {
      client?.close();
      await app?.close();
      await cuttable?.close();
    });

    it('refuses with code idempotency-store-unavailable and retryAfterMs, running nothing, and runs once the store is back', async () => {
      const requestId = randomUUID();
      await cuttable.cut();
      try {
        const reply = await client.send('pay', { requestId, amount: 3 });
        expect(reply).toMatchObject({
          kind: 'exception',
          error: { status: 'error', code: 'idempotency-store-unavailable' },
        });
        const error = (reply as { error: WsError }).error;
        expect(error.retryAfterMs).toBeGreaterThan(0);
        expect(error.message).not.toContain(requestId);
        expect(runs.get(requestId)).toBeUndefined();
      } finally {
        await cuttable.restore();
      }
      expect(await client.send('pay', { requestId, amount: 3 })).toMatchObject({ kind: 'ack' });
      expect(runs.get(requestId)).toBe(1);
    });
  },
);

describe('WebSocket gateways at bootstrap', () => {
  async function bootstrap(gateway: new () => object): Promise<unknown> {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore(), purge: false })],
      providers: [gateway],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    app.useWebSocketAdapter(new WsAdapter(app));
    try {
      await app.init();
      return undefined;
    } catch (error) {
      return error;
    } finally {
      await app.close();
    }
  }

  it('refuses a gateway handler without a key option, naming Class.method', async () => {
    @WebSocketGateway()
    class KeylessGateway {
      @SubscribeMessage('pay')
      @Idempotent()
      pay(): string {
        return 'ok';
      }
    }
    const error = await bootstrap(KeylessGateway);
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toContain('KeylessGateway.pay: option "key" is required');
  });

  it('refuses @Idempotent on a gateway method that is not a @SubscribeMessage handler', async () => {
    @WebSocketGateway()
    class HelperGateway {
      @Idempotent({ key: 'data.id' })
      helper(): string {
        return 'ok';
      }
    }
    const error = await bootstrap(HelperGateway);
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toContain('HelperGateway.helper');
    expect((error as Error).message).toContain('@SubscribeMessage');
  });

  it('refuses a key expression over a root gateways do not have', async () => {
    @WebSocketGateway()
    class BodyGateway {
      @SubscribeMessage('pay')
      @Idempotent({ key: 'body.id' })
      pay(): string {
        return 'ok';
      }
    }
    const error = await bootstrap(BodyGateway);
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toContain('BodyGateway.pay');
  });
});

/**
 * The handler's own `WsException('the provider timed out')`, as the Nest in use
 * renders it: `{ status: 'error', message }` (Nest 12 adds its `cause`), or,
 * with Nest 11's `ws` adapter, the bare message. Never with a refusal's `code`.
 */
function expectOwnError(reply: unknown): void {
  expect(reply).toHaveProperty('kind', 'exception');
  const error = (reply as { error: unknown }).error;
  if (typeof error === 'string') {
    expect(error).toBe('the provider timed out');
    return;
  }
  expect(error).toMatchObject({ status: 'error', message: 'the provider timed out' });
  expect(error).not.toHaveProperty('code');
}
