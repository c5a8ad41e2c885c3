import {
  Body,
  Controller,
  DynamicModule,
  Headers,
  Inject,
  Injectable,
  INestApplication,
  Module,
  Post,
} from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import {
  decodeHttpResponse,
  Idempotent,
  IdempotencyEngine,
  IdempotencyModule,
  IdempotencyModuleOptions,
  IdempotencyStore,
  InjectIdempotencyStore,
  StoredResult,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { CapturedLogs, startLoggedHttpApp } from '../support/captured-logs';
import { ADAPTERS, Reply, send, sendRaw } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { RecordingStore } from '../support/recording-store';
import { Probe } from './fixtures';

const probe = new Probe();

@Controller('opts')
class OptionsController {
  @Post('echo')
  @Idempotent()
  echo(@Body() body: unknown) {
    probe.ran('echo');
    return { token: randomUUID(), body };
  }

  @Post('tenant')
  @Idempotent()
  tenant(@Headers('x-tenant') tenant: string | undefined, @Body() body: unknown) {
    probe.ran(`tenant:${tenant ?? '-'}`);
    return { tenant: tenant ?? null, token: randomUUID(), body };
  }

  @Post('card')
  @Idempotent()
  card() {
    probe.ran('card');
    return { id: randomUUID(), cardNumber: '4111111111111111', last4: '1111' };
  }

  /** No options: every duration comes from the module's `defaults`. */
  @Post('defaults')
  @Idempotent()
  async defaults() {
    probe.ran('defaults');
    await probe.pass('defaults');
    return { token: randomUUID() };
  }
}

@Controller('layered')
@Idempotent({ scope: 'layered-class', waitTimeout: '10s', ttl: 'PT2H' })
class LayeredController {
  /** Inherits the class's options (and the module's lease). */
  @Post('inherits')
  async inherits() {
    probe.ran('inherits');
    await probe.pass('inherits');
    return { token: randomUUID() };
  }

  /** Overrides the class's scope and wait; keeps its ttl and the module's lease. */
  @Post('overrides')
  @Idempotent({ scope: 'layered-method', waitTimeout: '250ms' })
  async overrides() {
    probe.ran('overrides');
    await probe.pass('overrides');
    return { token: randomUUID() };
  }
}

/** Redacts the card number from what is stored; the first caller still sees it. */
function redactCardNumber(result: StoredResult): StoredResult {
  if (result.kind !== 'http') return result;
  const body = result.body as Record<string, unknown> | null;
  if (!body || typeof body !== 'object' || !('cardNumber' in body)) return result;
  return { ...result, body: { ...body, cardNumber: '[redacted]' } };
}

const LEASE_MS = 45_000;
const HOUR_MS = 3_600_000;

function expectProblem(reply: Reply, status: number, code: string): void {
  expect(reply.status).toBe(status);
  expect(reply.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(reply.json()).toMatchObject({ status, code });
}

describe.each(ADAPTERS)('HTTP module options over %s', (adapter) => {
  let dataSource: DataSource;
  const schema = scratchSchema('http_opts');

  beforeAll(async () => {
    dataSource = await openDataSource();
  });
  afterAll(async () => {
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });
  beforeEach(() => probe.executions.clear());

  describe('forRoot: maxBodyBytes, tenant, sanitize, defaults', () => {
    let app: INestApplication;
    let url: string;
    let store: RecordingStore;
    const logs = new CapturedLogs();

    beforeAll(async () => {
      store = new RecordingStore(dataSource, { schema, ensureSchema: true, logger: logs.store });
      ({ app, url } = await startLoggedHttpApp(
        adapter,
        {
          imports: [
            IdempotencyModule.forRoot({
              store,
              http: { maxBodyBytes: 64 },
              tenant: (ctx) =>
                ctx.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>()
                  .headers['x-tenant'],
              sanitize: redactCardNumber,
              defaults: { waitTimeout: 'PT0S', lease: `${LEASE_MS}ms`, ttl: 'PT1H' },
            }),
          ],
          controllers: [OptionsController, LayeredController],
        },
        logs,
      ));
    });
    afterAll(async () => {
      await app?.close();
    });
    afterEach(() => {
      // Whatever happened, no raw key reached a log line.
      for (const request of store.acquires) expect(logs.text()).not.toContain(request.key);
    });

    describe('http.maxBodyBytes', () => {
      it('refuses a body over the limit with 413 problem+json, without running the handler', async () => {
        const k = randomUUID();
        const reply = await send(url, 'POST', '/opts/echo', {
          key: k,
          body: { note: 'x'.repeat(100) },
        });
        expectProblem(reply, 413, 'idempotency-body-too-large');
        expect(reply.text).not.toContain(k);
        expect(probe.count('echo')).toBe(0);
        await expect(store.find({ scope: 'OptionsController.echo', key: k })).resolves.toBeNull();
      });

      it('accepts exactly maxBodyBytes and refuses one byte more; a refused key stays unused', async () => {
        const k = randomUUID();
        const at = `{"note":"${'y'.repeat(53)}"}`;
        const over = `{"note":"${'y'.repeat(54)}"}`;
        expect(Buffer.byteLength(at)).toBe(64);

        const refused = await sendRaw(url, 'POST', '/opts/echo', ['Idempotency-Key', k], over);
        expectProblem(refused, 413, 'idempotency-body-too-large');
        expect(probe.count('echo')).toBe(0);

        const accepted = await sendRaw(url, 'POST', '/opts/echo', ['Idempotency-Key', k], at);
        expect(accepted.status).toBe(201);
        expect(accepted.json()).toMatchObject({ body: { note: 'y'.repeat(53) } });
        expect(probe.count('echo')).toBe(1);
      });
    });

    describe('tenant', () => {
      it("keeps each tenant's key apart: own execution, never the other's response; the same tenant replays", async () => {
        const k = randomUUID();
        const a1 = await send(url, 'POST', '/opts/tenant', {
          key: k,
          body: { amount: 1 },
          headers: { 'x-tenant': 'acme' },
        });
        // Another body under the same key: for the same tenant that would be a 422.
        const b1 = await send(url, 'POST', '/opts/tenant', {
          key: k,
          body: { amount: 2 },
          headers: { 'x-tenant': 'globex' },
        });
        expect(a1.status).toBe(201);
        expect(b1.status).toBe(201);
        expect(b1.headers.get('idempotent-replayed')).toBeNull();
        expect(a1.json()).toMatchObject({ tenant: 'acme', body: { amount: 1 } });
        expect(b1.json()).toMatchObject({ tenant: 'globex', body: { amount: 2 } });

        const a2 = await send(url, 'POST', '/opts/tenant', {
          key: k,
          body: { amount: 1 },
          headers: { 'x-tenant': 'acme' },
        });
        const b2 = await send(url, 'POST', '/opts/tenant', {
          key: k,
          body: { amount: 2 },
          headers: { 'x-tenant': 'globex' },
        });
        expect(a2.headers.get('idempotent-replayed')).toBe('true');
        expect(b2.headers.get('idempotent-replayed')).toBe('true');
        expect(a2.json()).toEqual(a1.json());
        expect(b2.json()).toEqual(b1.json());
        expect(probe.count('tenant:acme')).toBe(1);
        expect(probe.count('tenant:globex')).toBe(1);

        // Same tenant, same key, another body: that tenant's record answers.
        const reused = await send(url, 'POST', '/opts/tenant', {
          key: k,
          body: { amount: 2 },
          headers: { 'x-tenant': 'acme' },
        });
        expectProblem(reused, 422, 'idempotency-key-reused');

        const records = (await store.list({ limit: 1000 })).filter((r) => r.key === k);
        expect(records).toHaveLength(2);
        expect(new Set(records.map((r) => r.scope)).size).toBe(2);
        for (const record of records) expect(record.scope).toContain('OptionsController.tenant');
      });

      it('a request without a tenant gets its own execution too', async () => {
        const k = randomUUID();
        const tenant = await send(url, 'POST', '/opts/tenant', {
          key: k,
          body: {},
          headers: { 'x-tenant': 'acme' },
        });
        const anonymous = await send(url, 'POST', '/opts/tenant', { key: k, body: {} });
        expect(anonymous.status).toBe(201);
        expect(anonymous.headers.get('idempotent-replayed')).toBeNull();
        expect(anonymous.json()).toMatchObject({ tenant: null });
        expect(anonymous.json()).not.toEqual(tenant.json());
        expect(probe.count('tenant:acme')).toBe(1);
        expect(probe.count('tenant:-')).toBe(1);
      });
    });

    describe('sanitize', () => {
      it('stores (and so replays) the sanitized result while the first caller gets the real one', async () => {
        const k = randomUUID();
        const first = await send(url, 'POST', '/opts/card', { key: k });
        expect(first.status).toBe(201);
        const original = first.json() as { id: string; cardNumber: string; last4: string };
        expect(original.cardNumber).toBe('4111111111111111');

        const record = await store.find({ scope: 'OptionsController.card', key: k });
        expect(record?.state).toBe('COMPLETE');
        // The HTTP record keeps the (sanitized) body as the bytes replays write.
        const stored = decodeHttpResponse(record!.payload!);
        expect(stored.status).toBe(201);
        const storedBody = JSON.parse(stored.body.toString('utf8'));
        expect(storedBody).toEqual({ ...original, cardNumber: '[redacted]' });
        expect(record!.payload!.toString('utf8')).not.toContain('4111111111111111');

        const replay = await send(url, 'POST', '/opts/card', { key: k });
        expect(replay.status).toBe(201);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(replay.json()).toEqual(storedBody);
        expect(probe.count('card')).toBe(1);
      });
    });

    describe('defaults and @Idempotent precedence', () => {
      it('applies the module defaults when the decorator says nothing (waitTimeout PT0S: an immediate 409)', async () => {
        const k = randomUUID();
        const gate = probe.hold('defaults');
        const first = send(url, 'POST', '/opts/defaults', { key: k });
        await gate.entered.promise;

        const held = await store.find({ scope: 'OptionsController.defaults', key: k });
        expect(held?.state).toBe('IN_PROGRESS');
        expect(held!.leaseExpiresAt!.getTime() - held!.createdAt.getTime()).toBe(LEASE_MS);

        // The holder is parked until the gate opens; with the built-in 10 s wait this
        // duplicate would still be waiting. The store was asked not to wait at all.
        const duplicate = await send(url, 'POST', '/opts/defaults', { key: k });
        expectProblem(duplicate, 409, 'idempotency-in-flight');
        expect(Number(duplicate.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
        expect(duplicate.text).not.toContain(k);
        const requests = store.acquiresFor(k);
        expect(requests).toHaveLength(2);
        for (const r of requests) {
          expect(r).toMatchObject({
            scope: 'OptionsController.defaults',
            waitTimeoutMs: 0,
            leaseMs: LEASE_MS,
            ttlMs: HOUR_MS,
          });
        }

        gate.release.open();
        expect((await first).status).toBe(201);
        const done = await store.find({ scope: 'OptionsController.defaults', key: k });
        expect(done?.state).toBe('COMPLETE');
        expect(done!.expiresAt.getTime() - done!.completedAt!.getTime()).toBe(HOUR_MS);
        expect(probe.count('defaults')).toBe(1);
      });

      it('a class-level @Idempotent overrides the module defaults (scope, waitTimeout, ttl)', async () => {
        const k = randomUUID();
        const gate = probe.hold('inherits');
        const first = send(url, 'POST', '/layered/inherits', { key: k });
        await gate.entered.promise;

        const parked = store.nextAcquire((r) => r.key === k);
        const duplicate = send(url, 'POST', '/layered/inherits', { key: k });
        expect(await parked).toMatchObject({
          scope: 'layered-class',
          waitTimeoutMs: 10_000,
          ttlMs: 2 * HOUR_MS,
          leaseMs: LEASE_MS,
        });
        // The duplicate waits (class: 10 s) instead of the module's immediate 409.
        gate.release.open();
        const [a, b] = await Promise.all([first, duplicate]);
        expect(a.status).toBe(201);
        expect(b.status).toBe(201);
        expect(b.headers.get('idempotent-replayed')).toBe('true');
        expect(b.json()).toEqual(a.json());
        expect(probe.count('inherits')).toBe(1);

        const record = await store.find({ scope: 'layered-class', key: k });
        expect(record?.state).toBe('COMPLETE');
        expect(record!.expiresAt.getTime() - record!.completedAt!.getTime()).toBe(2 * HOUR_MS);
        await expect(
          store.find({ scope: 'LayeredController.inherits', key: k }),
        ).resolves.toBeNull();
      });

      it('a method-level @Idempotent overrides its class (scope, waitTimeout) and keeps the rest', async () => {
        const k = randomUUID();
        const gate = probe.hold('overrides');
        const first = send(url, 'POST', '/layered/overrides', { key: k });
        await gate.entered.promise;

        // Held until after the duplicate answers: a 10 s (class) wait would still be waiting.
        const duplicate = await send(url, 'POST', '/layered/overrides', { key: k });
        expectProblem(duplicate, 409, 'idempotency-in-flight');
        for (const r of store.acquiresFor(k)) {
          expect(r).toMatchObject({
            scope: 'layered-method',
            waitTimeoutMs: 250,
            ttlMs: 2 * HOUR_MS,
            leaseMs: LEASE_MS,
          });
        }

        gate.release.open();
        expect((await first).status).toBe(201);
        await expect(store.find({ scope: 'layered-method', key: k })).resolves.toMatchObject({
          state: 'COMPLETE',
        });
        await expect(store.find({ scope: 'layered-class', key: k })).resolves.toBeNull();
        expect(probe.count('overrides')).toBe(1);
      });
    });
  });

  describe('forRootAsync({ imports, useFactory, inject })', () => {
    const CONFIG = Symbol('IdempotencyConfig');
    interface IdempotencyConfig {
      store: IdempotencyStore;
      keyHeader: string;
    }

    @Module({})
    class ConfigModule {
      static with(config: IdempotencyConfig): DynamicModule {
        return {
          module: ConfigModule,
          providers: [{ provide: CONFIG, useValue: config }],
          exports: [CONFIG],
        };
      }
    }

    let app: INestApplication;
    let url: string;
    let store: TypeOrmIdempotencyStore;
    const factory = vi.fn(async (config: IdempotencyConfig): Promise<IdempotencyModuleOptions> => ({
      store: config.store,
      http: { keyHeader: config.keyHeader },
    }));

    beforeAll(async () => {
      store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
      ({ app, url } = await startLoggedHttpApp(
        adapter,
        {
          imports: [
            IdempotencyModule.forRootAsync({
              imports: [ConfigModule.with({ store, keyHeader: 'X-Request-Id' })],
              inject: [CONFIG],
              useFactory: factory,
            }),
          ],
          controllers: [OptionsController],
        },
        new CapturedLogs(),
      ));
    });
    afterAll(async () => {
      await app?.close();
    });

    it('builds the options from the injected provider and uses them', async () => {
      expect(factory).toHaveBeenCalledTimes(1);
      expect(factory.mock.calls[0][0]).toMatchObject({ store, keyHeader: 'X-Request-Id' });

      const k = randomUUID();
      const first = await send(url, 'POST', '/opts/echo', {
        body: { n: 1 },
        headers: { 'X-Request-Id': k },
      });
      const again = await send(url, 'POST', '/opts/echo', {
        body: { n: 1 },
        headers: { 'X-Request-Id': k },
      });
      expect(first.status).toBe(201);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.json()).toEqual(first.json());
      expect(probe.count('echo')).toBe(1);
      await expect(store.find({ scope: 'OptionsController.echo', key: k })).resolves.toMatchObject({
        state: 'COMPLETE',
      });

      // The factory's key header replaced the default one.
      const defaultHeader = await send(url, 'POST', '/opts/echo', { key: k, body: { n: 1 } });
      expectProblem(defaultHeader, 400, 'idempotency-key-missing');
      expect(defaultHeader.json()).toMatchObject({
        detail: expect.stringContaining('X-Request-Id'),
      });
    });
  });

  describe('isGlobal', () => {
    @Injectable()
    class ChargeService {
      constructor(
        @InjectIdempotencyStore() readonly store: IdempotencyStore,
        @Inject(IdempotencyEngine) readonly engine: IdempotencyEngine,
      ) {}

      async charge(key: string): Promise<{ token: string; replayed: boolean }> {
        const outcome = await this.engine.execute(
          { scope: 'ChargeService.charge', key, lease: '30s', waitTimeout: '5s', ttl: '1h' },
          async () => {
            probe.ran('service');
            return { token: randomUUID() };
          },
        );
        return { ...outcome.value, replayed: outcome.kind === 'replayed' };
      }
    }

    @Controller('feature')
    class FeatureController {
      constructor(private readonly service: ChargeService) {}

      @Post()
      charge(@Headers('x-charge-id') id: string) {
        return this.service.charge(id);
      }

      @Post('decorated')
      @Idempotent()
      decorated() {
        probe.ran('decorated');
        return { token: randomUUID() };
      }
    }

    /** Does not import IdempotencyModule. */
    @Module({ controllers: [FeatureController], providers: [ChargeService] })
    class FeatureModule {}

    it('is global: modules that do not import IdempotencyModule get the store, the engine and protected handlers', async () => {
      const store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
      const { app, url } = await startLoggedHttpApp(
        adapter,
        { imports: [IdempotencyModule.forRoot({ store }), FeatureModule] },
        new CapturedLogs(),
      );
      try {
        expect(app.get(ChargeService).store).toBe(store);

        const id = randomUUID();
        const a = await send(url, 'POST', '/feature', { headers: { 'x-charge-id': id } });
        const b = await send(url, 'POST', '/feature', { headers: { 'x-charge-id': id } });
        expect(a.status).toBe(201);
        expect(a.json()).toMatchObject({ replayed: false });
        expect(b.json()).toEqual({ ...(a.json() as object), replayed: true });
        expect(probe.count('service')).toBe(1);

        const k = randomUUID();
        const c = await send(url, 'POST', '/feature/decorated', { key: k });
        const d = await send(url, 'POST', '/feature/decorated', { key: k });
        expect(d.headers.get('idempotent-replayed')).toBe('true');
        expect(d.json()).toEqual(c.json());
        expect(probe.count('decorated')).toBe(1);
      } finally {
        await app.close();
      }
    });

    it('refuses isGlobal: false, since the module is always global', async () => {
      const store = new TypeOrmIdempotencyStore(dataSource, { schema });
      expect(() => IdempotencyModule.forRoot({ store, isGlobal: false })).toThrow(
        'IdempotencyModule: option "isGlobal" cannot be false',
      );
    });
  });
});
