import { Controller, INestApplication, INestMicroservice } from '@nestjs/common';
import {
  ClientProxy,
  ClientProxyFactory,
  ClientOptions,
  EventPattern,
  MessagePattern,
  MicroserviceOptions,
  Payload,
} from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { lastValueFrom } from 'rxjs';
import { AcquireRequest, AcquireResult, Idempotent, IdempotencyModule } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { Gate } from './gate';
import { dropSchema, openDataSource, scratchSchema } from './postgres';

/**
 * One set of scenarios for the microservice transports that have no
 * settlement of their own (NATS, MQTT, Redis, TCP): the same consumer on a
 * real server, sent the same message sequentially and concurrently, counting
 * the handler's runs, the replies and the refusals. Each spec describes its
 * transport (server and client options, how a key travels in its metadata).
 */
export interface TransportUnderTest {
  /** For test names and scratch names (letters only). */
  name: string;
  /** Read when the suite starts (after the spec's own `beforeAll`, which may pick a port). */
  server(): MicroserviceOptions;
  client(): ClientOptions;
  /** The key expression over the transport's metadata, and how a payload is sent with such a key. */
  metadataKey?: { expression: string; send(data: object, key: string): unknown };
  /** `hybrid`: an HTTP application with the transport connected (`connectMicroservice`). */
  mode?: 'standalone' | 'hybrid';
}

interface Quote {
  quoteId: string;
  token: string;
}

/** The store, telling the test each acquisition's outcome (a duplicate that waits is told once, when it ends). */
class ObservedStore extends TypeOrmIdempotencyStore {
  readonly outcomes = new EventEmitter();
  override async tryAcquire(request: AcquireRequest): Promise<AcquireResult> {
    const result = await super.tryAcquire(request);
    this.outcomes.emit(request.key, result.kind);
    return result;
  }
}

export function describeTransportScenarios(transport: TransportUnderTest): void {
  // Patterns, subjects, topics and channels unique to this run: other suites share the servers.
  const p = `idem-${transport.name}-${randomUUID().slice(0, 8)}`;
  const runs = new Map<string, number>();
  const holds = new Map<string, { entered: Gate; release: Gate }>();
  const ran = (id: string) => runs.set(id, (runs.get(id) ?? 0) + 1);

  @Controller()
  class ScenarioConsumer {
    @MessagePattern(`${p}.quote`)
    @Idempotent({ key: 'data.quoteId', waitTimeout: 'PT15S' })
    async quote(@Payload() data: { quoteId: string }): Promise<Quote> {
      ran(data.quoteId);
      const hold = holds.get(data.quoteId);
      if (hold) {
        hold.entered.open();
        await hold.release.promise;
      }
      return { quoteId: data.quoteId, token: randomUUID() };
    }

    @MessagePattern(`${p}.hold`)
    @Idempotent({ key: 'data.quoteId', waitTimeout: 'PT0S' })
    async hold(@Payload() data: { quoteId: string }): Promise<Quote> {
      return this.quote(data);
    }

    @EventPattern<string>(`${p}.captured`)
    @Idempotent({ key: 'data.paymentId', waitTimeout: 'PT0S' })
    captured(@Payload() data: { paymentId: string }): void {
      ran(data.paymentId);
    }

    @MessagePattern(`${p}.meta`)
    @Idempotent({ key: transport.metadataKey?.expression ?? 'data.quoteId' })
    meta(@Payload() data: { quoteId: string }): Quote {
      ran(data.quoteId);
      return { quoteId: data.quoteId, token: randomUUID() };
    }
  }

  const schema = scratchSchema(transport.name);
  let dataSource: DataSource;
  let store: ObservedStore;
  let app: INestMicroservice | INestApplication;
  let client: ClientProxy;

  beforeAll(async () => {
    dataSource = await openDataSource();
    store = new ObservedStore(dataSource, { schema, ensureSchema: true });
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store })],
      controllers: [ScenarioConsumer],
    }).compile();
    if (transport.mode === 'hybrid') {
      const http = moduleRef.createNestApplication({ logger: false });
      http.connectMicroservice(transport.server());
      await http.startAllMicroservices();
      await http.init();
      app = http;
    } else {
      const microservice = moduleRef.createNestMicroservice<MicroserviceOptions>({
        ...transport.server(),
        logger: false,
      });
      await microservice.listen();
      app = microservice;
    }
    client = ClientProxyFactory.create(transport.client());
    await client.connect();
  });
  afterAll(async () => {
    await client?.close();
    await app?.close();
    if (dataSource) {
      await dropSchema(dataSource, schema);
      await dataSource.destroy();
    }
  });

  const send = (pattern: string, data: unknown) =>
    lastValueFrom(client.send<Quote>(`${p}.${pattern}`, data));
  const refusalOf = (pattern: string, data: unknown) =>
    send(pattern, data).then(
      (reply) => ({ replied: reply }) as const,
      (error: unknown) => ({ refused: error as Record<string, unknown> }) as const,
    );
  /** Resolves when the store has answered `count` acquisitions for `key`, with their outcomes. */
  const outcomes = (key: string, count: number) =>
    new Promise<string[]>((resolve) => {
      const seen: string[] = [];
      const listener = (kind: string) => {
        seen.push(kind);
        if (seen.length < count) return;
        store.outcomes.off(key, listener);
        resolve(seen);
      };
      store.outcomes.on(key, listener);
    });

  it('answers sequential duplicates of a @MessagePattern with the first reply, running it once', async () => {
    const quoteId = randomUUID();
    const first = await send('quote', { quoteId });
    for (let i = 0; i < 4; i++) expect(await send('quote', { quoteId })).toEqual(first);
    expect(first.quoteId).toBe(quoteId);
    expect(runs.get(quoteId)).toBe(1);
  });

  it('answers 20 concurrent duplicates with one run and one reply', async () => {
    const quoteId = randomUUID();
    const replies = await Promise.all(Array.from({ length: 20 }, () => send('quote', { quoteId })));
    expect(runs.get(quoteId)).toBe(1);
    expect(new Set(replies.map((reply) => reply.token)).size).toBe(1);
    expect(replies[0].quoteId).toBe(quoteId);
  });

  it('refuses duplicates in flight past waitTimeout with IdempotencyInFlightException and retryAfterMs', async () => {
    const quoteId = randomUUID();
    const hold = { entered: new Gate(), release: new Gate() };
    holds.set(quoteId, hold);
    const first = send('hold', { quoteId });
    await hold.entered.promise;
    const duplicates = await Promise.all(
      Array.from({ length: 20 }, () => refusalOf('hold', { quoteId })),
    );
    for (const duplicate of duplicates) {
      expect(duplicate).toEqual({
        refused: expect.objectContaining({
          code: 'idempotency-in-flight',
          name: 'IdempotencyInFlightException',
          retryAfterMs: expect.any(Number),
        }),
      });
      if ('refused' in duplicate) {
        expect(duplicate.refused.retryAfterMs).toBeGreaterThan(0);
        // The record is named by digest, never by its key.
        expect(JSON.stringify(duplicate.refused)).not.toContain(quoteId);
      }
    }
    hold.release.open();
    const reply = await first;
    expect(await send('hold', { quoteId })).toEqual(reply);
    expect(runs.get(quoteId)).toBe(1);
  });

  it('runs an @EventPattern once for an event emitted 5 times in a row, then 20 at once', async () => {
    const paymentId = randomUUID();
    const sequential = outcomes(paymentId, 1);
    await lastValueFrom(client.emit(`${p}.captured`, { paymentId }));
    expect(await sequential).toEqual(['acquired']);
    for (let i = 0; i < 4; i++) {
      const next = outcomes(paymentId, 1);
      await lastValueFrom(client.emit(`${p}.captured`, { paymentId }));
      expect(await next).not.toEqual(['acquired']);
    }
    const concurrent = outcomes(paymentId, 20);
    await Promise.all(
      Array.from({ length: 20 }, () => lastValueFrom(client.emit(`${p}.captured`, { paymentId }))),
    );
    expect((await concurrent).filter((kind) => kind === 'acquired')).toEqual([]);
    expect(runs.get(paymentId)).toBe(1);
  });

  if (transport.metadataKey) {
    const { expression, send: withKey } = transport.metadataKey;
    it(`keys a handler by the transport's metadata (${expression})`, async () => {
      const key = randomUUID();
      const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
      const first = await lastValueFrom(
        client.send<Quote>(`${p}.meta`, withKey({ quoteId: a }, key)),
      );
      // Same key, another payload: the stored reply, and the handler is not run.
      const again = await Promise.all(
        Array.from({ length: 10 }, () =>
          lastValueFrom(client.send<Quote>(`${p}.meta`, withKey({ quoteId: b }, key))),
        ),
      );
      for (const reply of again) expect(reply).toEqual(first);
      const other = await lastValueFrom(
        client.send<Quote>(`${p}.meta`, withKey({ quoteId: c }, randomUUID())),
      );
      expect(other.quoteId).toBe(c);
      expect([runs.get(a), runs.get(b), runs.get(c)]).toEqual([1, undefined, 1]);
    });

    it('refuses a request whose metadata has no key (idempotency-key-missing), not running it', async () => {
      const quoteId = randomUUID();
      const outcome = await refusalOf('meta', { quoteId });
      expect(outcome).toEqual({
        refused: expect.objectContaining({ code: 'idempotency-key-missing' }),
      });
      expect(runs.get(quoteId)).toBeUndefined();
    });
  }
}
