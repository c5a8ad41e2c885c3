import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { Controller, INestMicroservice } from '@nestjs/common';
import {
  GrpcMethod,
  GrpcStreamCall,
  GrpcStreamMethod,
  MicroserviceOptions,
  Transport,
} from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { Observable, of } from 'rxjs';
import {
  Idempotent,
  IdempotencyConfigError,
  IdempotencyModule,
  InMemoryIdempotencyStore,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { freePort } from '../support/free-port';
import { Gate } from '../support/gate';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';
import { parsePgUrl, TcpProxy } from '../support/tcp-proxy';

const PROTO = join(__dirname, 'fixtures/payments.proto');

interface ChargeRequest {
  orderId: string;
  amount: number;
}
interface ChargeReply extends ChargeRequest {
  token: string;
}

const runs = new Map<string, number>();
const holds = new Map<string, { entered: Gate; release: Gate }>();
const charge = (request: ChargeRequest): ChargeReply => {
  runs.set(request.orderId, (runs.get(request.orderId) ?? 0) + 1);
  // A negative amount: the method throws (after its work may have begun).
  if (request.amount < 0) throw new Error('the provider timed out');
  return { orderId: request.orderId, amount: request.amount, token: randomUUID() };
};

@Controller()
class PaymentsController {
  @GrpcMethod('Payments', 'Charge')
  @Idempotent({ waitTimeout: 'PT15S' })
  charge(request: ChargeRequest): ChargeReply {
    return charge(request);
  }

  @GrpcMethod('Payments', 'Hold')
  @Idempotent({ waitTimeout: 'PT0S' })
  async hold(request: ChargeRequest): Promise<ChargeReply> {
    const reply = charge(request);
    const hold = holds.get(request.orderId);
    if (hold) {
      hold.entered.open();
      await hold.release.promise;
    }
    return reply;
  }

  @GrpcMethod('Payments', 'ChargeByField')
  @Idempotent({ key: 'data.orderId' })
  chargeByField(request: ChargeRequest): ChargeReply {
    return charge(request);
  }

  @GrpcMethod('Payments', 'ChargeByRequestId')
  @Idempotent({ key: 'message.metadata["x-request-id"]' })
  chargeByRequestId(request: ChargeRequest): ChargeReply {
    return charge(request);
  }

  /** Strict mode: a throw leaves the outcome unknown. */
  @GrpcMethod('Payments', 'Strict')
  @Idempotent({ onExpiredLease: 'refuse' })
  strict(request: ChargeRequest): ChargeReply {
    return charge(request);
  }

  @GrpcMethod('Payments', 'Outage')
  @Idempotent()
  outage(request: ChargeRequest): ChargeReply {
    return charge(request);
  }
}

type Outcome =
  | { ok: true; reply: ChargeReply }
  | { ok: false; code: grpc.status; details: string; trailers: Record<string, unknown> };

describe('unary gRPC methods over a loopback channel', () => {
  const schema = scratchSchema('grpc');
  let dataSource: DataSource;
  let proxied: DataSource;
  let proxy: TcpProxy;
  let app: INestMicroservice;
  let client: grpc.Client & Record<string, grpc.requestCallback<ChargeReply> & unknown>;

  beforeAll(async () => {
    dataSource = await openDataSource();
    // The Outage method's store reaches PostgreSQL through a proxy the test can cut.
    const target = parsePgUrl(testDatabaseUrl());
    proxy = new TcpProxy(target.host, target.port);
    const viaProxy = new URL(testDatabaseUrl());
    viaProxy.hostname = '127.0.0.1';
    viaProxy.port = String(await proxy.start());
    proxied = await openDataSource({ url: viaProxy.toString(), extra: { max: 5 } });
    const store = new TypeOrmIdempotencyStore(proxied, {
      schema,
      ensureSchema: true,
      operationTimeoutMs: 1000,
    });
    const port = await freePort();
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store })],
      controllers: [PaymentsController],
    }).compile();
    app = moduleRef.createNestMicroservice<MicroserviceOptions>({
      transport: Transport.GRPC,
      options: { package: 'idempotency.test', protoPath: PROTO, url: `127.0.0.1:${port}` },
      logger: false,
    });
    await app.listen();
    const definition = protoLoader.loadSync(PROTO);
    const loaded = grpc.loadPackageDefinition(definition) as unknown as {
      idempotency: { test: { Payments: grpc.ServiceClientConstructor } };
    };
    client = new loaded.idempotency.test.Payments(
      `127.0.0.1:${port}`,
      grpc.credentials.createInsecure(),
    ) as unknown as typeof client;
  });
  afterAll(async () => {
    client?.close();
    await app?.close();
    await proxied?.destroy();
    await proxy?.cut();
    if (dataSource) {
      await dropSchema(dataSource, schema);
      await dataSource.destroy();
    }
  });

  /** One call; `keys` go out as `idempotency-key` metadata entries (none, one, or several). */
  function call(method: string, request: ChargeRequest, ...keys: string[]): Promise<Outcome> {
    const metadata = new grpc.Metadata();
    for (const key of keys) metadata.add('idempotency-key', key);
    return callWith(method, request, metadata);
  }
  function callWith(
    method: string,
    request: ChargeRequest,
    metadata: grpc.Metadata,
  ): Promise<Outcome> {
    return new Promise((resolve) => {
      (
        client[method] as unknown as (
          request: ChargeRequest,
          metadata: grpc.Metadata,
          callback: (error: grpc.ServiceError | null, reply?: ChargeReply) => void,
        ) => void
      ).call(client, request, metadata, (error, reply) => {
        if (!error) return resolve({ ok: true, reply: reply! });
        resolve({
          ok: false,
          code: error.code,
          details: error.details,
          trailers: error.metadata.getMap(),
        });
      });
    });
  }
  const request = (): ChargeRequest => ({ orderId: randomUUID(), amount: 42 });

  it('runs a method once for sequential and 20 concurrent calls with one key, replaying the stored message', async () => {
    const key = randomUUID();
    const body = request();
    const first = await call('Charge', body, key);
    expect(first).toEqual({ ok: true, reply: { ...body, token: expect.any(String) } });
    for (let i = 0; i < 3; i++) expect(await call('Charge', body, key)).toEqual(first);
    const concurrentKey = randomUUID();
    const concurrentBody = request();
    const replies = await Promise.all(
      Array.from({ length: 20 }, () => call('Charge', concurrentBody, concurrentKey)),
    );
    expect(new Set(replies.map((reply) => JSON.stringify(reply))).size).toBe(1);
    expect(replies[0].ok).toBe(true);
    expect([runs.get(body.orderId), runs.get(concurrentBody.orderId)]).toEqual([1, 1]);
  });

  it('keys a method by a request field (data.orderId)', async () => {
    const body = request();
    const replies = await Promise.all(
      Array.from({ length: 20 }, () => call('ChargeByField', body)),
    );
    expect(new Set(replies.map((reply) => JSON.stringify(reply))).size).toBe(1);
    expect(replies[0].ok).toBe(true);
    expect(runs.get(body.orderId)).toBe(1);
  });

  it('keys a method by another metadata entry (message.metadata["x-request-id"])', async () => {
    const requestId = randomUUID();
    const withId = () => {
      const metadata = new grpc.Metadata();
      metadata.set('x-request-id', requestId);
      return metadata;
    };
    const [a, b] = [request(), request()];
    const first = await callWith('ChargeByRequestId', a, withId());
    expect(first).toMatchObject({ ok: true, reply: { orderId: a.orderId } });
    // The same id with another request: its fingerprint differs, so it is refused, not run.
    expect(await callWith('ChargeByRequestId', b, withId())).toMatchObject({
      ok: false,
      code: grpc.status.ALREADY_EXISTS,
    });
    expect(await callWith('ChargeByRequestId', a, withId())).toEqual(first);
    expect([runs.get(a.orderId), runs.get(b.orderId)]).toEqual([1, undefined]);
  });

  it('answers calls in flight past waitTimeout with ABORTED and retry-after-ms', async () => {
    const key = randomUUID();
    const body = request();
    const hold = { entered: new Gate(), release: new Gate() };
    holds.set(body.orderId, hold);
    const first = call('Hold', body, key);
    await hold.entered.promise;
    const refused = await Promise.all(Array.from({ length: 20 }, () => call('Hold', body, key)));
    for (const outcome of refused) {
      expect(outcome).toMatchObject({
        ok: false,
        code: grpc.status.ABORTED,
        trailers: { 'idempotency-code': 'idempotency-in-flight' },
      });
      if (outcome.ok) continue;
      expect(Number(outcome.trailers['retry-after-ms'])).toBeGreaterThan(0);
      expect(outcome.details).not.toContain(key);
    }
    hold.release.open();
    const reply = await first;
    expect(reply.ok).toBe(true);
    expect(await call('Hold', body, key)).toEqual(reply);
    expect(runs.get(body.orderId)).toBe(1);
  });

  it('refuses a key reused with another request message with ALREADY_EXISTS', async () => {
    const key = randomUUID();
    const body = request();
    expect((await call('Charge', body, key)).ok).toBe(true);
    const other = { ...body, amount: 43 };
    expect(await call('Charge', other, key)).toMatchObject({
      ok: false,
      code: grpc.status.ALREADY_EXISTS,
      trailers: { 'idempotency-code': 'idempotency-key-reused' },
    });
    expect(runs.get(body.orderId)).toBe(1);
  });

  it('refuses a call without a key, or with two, with INVALID_ARGUMENT, running nothing', async () => {
    const missing = request();
    expect(await call('Charge', missing)).toMatchObject({
      ok: false,
      code: grpc.status.INVALID_ARGUMENT,
      trailers: { 'idempotency-code': 'idempotency-key-missing' },
    });
    const twice = request();
    expect(await call('Charge', twice, randomUUID(), randomUUID())).toMatchObject({
      ok: false,
      code: grpc.status.INVALID_ARGUMENT,
      trailers: { 'idempotency-code': 'idempotency-key-invalid' },
    });
    const tooLong = request();
    expect(await call('Charge', tooLong, 'k'.repeat(300))).toMatchObject({
      ok: false,
      code: grpc.status.INVALID_ARGUMENT,
    });
    expect([runs.get(missing.orderId), runs.get(twice.orderId), runs.get(tooLong.orderId)]).toEqual(
      [undefined, undefined, undefined],
    );
  });

  it('answers a method that throws with its own error and frees the key: the retry runs', async () => {
    const key = randomUUID();
    const body = { orderId: randomUUID(), amount: -1 };
    for (let i = 0; i < 2; i++) {
      const failed = await call('Charge', body, key);
      expect(failed).toMatchObject({ ok: false, code: grpc.status.UNKNOWN });
      expect(failed).not.toHaveProperty(['trailers', 'idempotency-code']);
    }
    expect(runs.get(body.orderId)).toBe(2);
  });

  it('in strict mode, answers a call whose earlier outcome is unknown with FAILED_PRECONDITION, no retry-after-ms, every time', async () => {
    const key = randomUUID();
    const body = { orderId: randomUUID(), amount: -1 };
    const failed = await call('Strict', body, key);
    // The method's own error: not a refusal.
    expect(failed).toMatchObject({ ok: false });
    expect(failed).not.toHaveProperty(['trailers', 'idempotency-code']);
    for (let i = 0; i < 2; i++) {
      const retry = await call('Strict', body, key);
      expect(retry).toMatchObject({
        ok: false,
        code: grpc.status.FAILED_PRECONDITION,
        trailers: { 'idempotency-code': 'idempotency-outcome-unknown' },
      });
      if (retry.ok) continue;
      expect(retry.trailers['retry-after-ms']).toBeUndefined();
      expect(retry.details).not.toContain(key);
    }
    expect(runs.get(body.orderId)).toBe(1);
  });

  it('answers UNAVAILABLE with retry-after-ms when the store is unreachable, and runs once it is back', async () => {
    const key = randomUUID();
    const body = request();
    await proxy.cut();
    try {
      expect(await call('Outage', body, key)).toMatchObject({
        ok: false,
        code: grpc.status.UNAVAILABLE,
        trailers: {
          'idempotency-code': 'idempotency-store-unavailable',
          'retry-after-ms': expect.stringMatching(/^\d+$/),
        },
      });
      expect(runs.get(body.orderId)).toBeUndefined();
    } finally {
      await proxy.restore();
    }
    expect(await call('Outage', body, key)).toMatchObject({ ok: true });
    expect(runs.get(body.orderId)).toBe(1);
  });
});

describe('streaming gRPC methods at bootstrap', () => {
  @Controller()
  class ServerStreaming {
    @GrpcStreamMethod('Payments', 'Watch')
    @Idempotent()
    watch(requests: Observable<ChargeRequest>): Observable<ChargeReply> {
      return requests as unknown as Observable<ChargeReply>;
    }
  }

  @Controller()
  class ClientStreaming {
    @Idempotent({ key: 'data.orderId' })
    @GrpcStreamCall('Payments', 'Upload')
    upload(): Observable<ChargeReply> {
      return of();
    }
  }

  it.each([
    ['ServerStreaming.watch', ServerStreaming, '@GrpcStreamMethod'],
    ['ClientStreaming.upload', ClientStreaming, '@GrpcStreamCall'],
  ])('refuses @Idempotent on %s', async (where, controller, decorator) => {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore() })],
      controllers: [controller],
    }).compile();
    const app = moduleRef.createNestMicroservice<MicroserviceOptions>({
      transport: Transport.GRPC,
      options: { package: 'idempotency.test', protoPath: PROTO, url: '127.0.0.1:1' },
      logger: false,
    });
    const started = app.init();
    await expect(started).rejects.toThrow(IdempotencyConfigError);
    await expect(started).rejects.toThrow(`${where}: @Idempotent applies to unary gRPC methods`);
    await expect(started).rejects.toThrow(decorator);
    await app.close().catch(() => undefined);
  });
});
