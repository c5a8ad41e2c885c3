import { Controller, Get, INestApplication, Module } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import {
  IdempotencyConfigError,
  IdempotencyHealthIndicator,
  IdempotencyModule,
  InMemoryIdempotencyStore,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { ADAPTERS, send, startHttpApp } from '../support/http-app';
import { parsePgUrl, SilentForwarder } from '../support/tcp-proxy';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';

/**
 * The terminus indicator as an application wires it: TerminusModule's real
 * HealthCheckService behind GET /health, over HTTP on both adapters, with the
 * PostgreSQL store reached through a forwarder that can go silent.
 */
@Controller('health')
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly idempotency: IdempotencyHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.idempotency.isHealthy('idempotency')]);
  }

  @Get('bounded')
  @HealthCheck()
  bounded() {
    return this.health.check([() => this.idempotency.isHealthy('records', { timeoutMs: 200 })]);
  }
}

@Module({
  imports: [TerminusModule],
  controllers: [HealthController],
  providers: [IdempotencyHealthIndicator],
})
class HealthModule {}

const OPERATION_TIMEOUT_MS = 500;

describe.each(ADAPTERS)('terminus health over %s', (adapter) => {
  describe.each([
    ['with ping()', false],
    ['without ping() (checked with a find)', true],
  ])('a PostgreSQL store %s', (_name, withoutPing) => {
    const schema = scratchSchema('health');
    let forwarder: SilentForwarder;
    let setup: DataSource;
    let dataSource: DataSource;
    let app: INestApplication;
    let url: string;

    beforeAll(async () => {
      setup = await openDataSource();
      forwarder = new SilentForwarder(parsePgUrl(testDatabaseUrl()));
      await forwarder.start();
      const through = new URL(testDatabaseUrl());
      through.hostname = '127.0.0.1';
      through.port = String(forwarder.port);
      dataSource = await openDataSource({ url: through.toString(), extra: { max: 4 } });
      const store = new TypeOrmIdempotencyStore(dataSource, {
        schema,
        ensureSchema: true,
        operationTimeoutMs: OPERATION_TIMEOUT_MS,
      });
      // A store written before ping() existed.
      if (withoutPing) Object.defineProperty(store, 'ping', { value: undefined });
      ({ app, url } = await startHttpApp(adapter, {
        imports: [IdempotencyModule.forRoot({ store }), HealthModule],
      }));
    });
    afterAll(async () => {
      await forwarder?.cut();
      await app?.close().catch(() => undefined);
      await dataSource?.destroy().catch(() => undefined);
      await dropSchema(setup, schema);
      await setup.destroy();
    });

    it('is up while the database answers, and down (503) within the store timeout once it goes silent', async () => {
      const up = await send(url, 'GET', '/health');
      expect(up.status).toBe(200);
      expect(up.json()).toEqual({
        status: 'ok',
        info: { idempotency: { status: 'up' } },
        error: {},
        details: { idempotency: { status: 'up' } },
      });

      forwarder.goSilent();
      const started = performance.now();
      const down = await send(url, 'GET', '/health');
      const tookMs = performance.now() - started;
      expect(down.status).toBe(503);
      const body = down.json() as Record<string, unknown>;
      expect(body).toMatchObject({
        status: 'error',
        error: {
          idempotency: {
            status: 'down',
            message: `PostgreSQL did not answer ${withoutPing ? 'find' : 'ping'} within ${OPERATION_TIMEOUT_MS} ms`,
          },
        },
      });
      expect(tookMs).toBeGreaterThanOrEqual(OPERATION_TIMEOUT_MS - 50);
      expect(tookMs).toBeLessThan(OPERATION_TIMEOUT_MS + 2000);

      // The indicator's own bound, shorter than the store's, answers first.
      const bounded = await send(url, 'GET', '/health/bounded');
      expect(bounded.status).toBe(503);
      expect(bounded.json()).toMatchObject({
        error: {
          records: {
            status: 'down',
            message: 'the idempotency store did not answer the health check within 200 ms',
          },
        },
      });
    });
  });
});

describe('IdempotencyHealthIndicator options', () => {
  it('refuses a timeoutMs that is not a positive number, naming the method', async () => {
    const { app } = await startHttpApp('express', {
      imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore() }), HealthModule],
    });
    try {
      const indicator = app.get(IdempotencyHealthIndicator);
      await expect(indicator.isHealthy('idempotency', { timeoutMs: 0 })).rejects.toThrow(
        new IdempotencyConfigError(
          'IdempotencyHealthIndicator.isHealthy: timeoutMs must be a positive number of milliseconds, got 0',
        ),
      );
      await expect(indicator.isHealthy()).resolves.toEqual({ idempotency: { status: 'up' } });
    } finally {
      await app.close();
    }
  });
});
