import {
  Controller,
  INestApplication,
  MiddlewareConsumer,
  Module,
  NestModule,
  Post,
} from '@nestjs/common';
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { randomUUID } from 'node:crypto';
import { createServer, Server } from 'node:http';
import { AddressInfo } from 'node:net';
import {
  Idempotent,
  IdempotencyEvent,
  IdempotencyModule,
  IdempotencyPurgeScheduler,
  keyDigest,
} from 'nest-idempotency';
import { IDEMPOTENCY_DURATION_BUCKETS_SECONDS } from 'nest-idempotency/opentelemetry';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { ADAPTERS, send, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * Events, metrics and spans, read back through the OpenTelemetry SDK's
 * in-memory exporters. A middleware stands in for an HTTP instrumentation: it
 * makes a request span active, and the library's spans must be its children.
 */
const spans = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({
  spanProcessors: [new SimpleSpanProcessor(spans)],
});
const tracer = tracerProvider.getTracer('test');
const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const reader = new PeriodicExportingMetricReader({
  exporter: metricExporter,
  exportIntervalMillis: 3_600_000,
});
// A second reader: the Prometheus exporter, scraped over HTTP as Prometheus would.
const prometheus = new PrometheusExporter({ preventServerStart: true });
const meterProvider = new MeterProvider({ readers: [reader, prometheus] });
let scrapeServer: Server;
let scrapeUrl: string;

beforeAll(async () => {
  scrapeServer = createServer((req, res) => prometheus.getMetricsRequestHandler(req, res));
  await new Promise<void>((resolve) => scrapeServer.listen(0, '127.0.0.1', resolve));
  scrapeUrl = `http://127.0.0.1:${(scrapeServer.address() as AddressInfo).port}/metrics`;
});

/**
 * `le` → cumulative count of one histogram series in the Prometheus text format
 * (the exporter names it with or without the `_seconds` unit suffix, by version).
 */
function bucketsOf(
  text: string,
  metric: string,
  labels: Record<string, string>,
): Map<string, number> {
  const buckets = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${metric}_bucket{`) && !line.startsWith(`${metric}_seconds_bucket{`))
      continue;
    const [, labelText, value] = /^[^{]+\{(.*)\} (\S+)$/.exec(line)!;
    const found = Object.fromEntries(
      [...labelText.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]),
    );
    if (Object.entries(labels).every(([name, wanted]) => found[name] === wanted)) {
      buckets.set(found.le, Number(value));
    }
  }
  return buckets;
}
const contextManager = new AsyncLocalStorageContextManager().enable();
context.setGlobalContextManager(contextManager);

@Controller('telemetry')
class TelemetryController {
  @Post()
  @Idempotent()
  create() {
    return { id: randomUUID() };
  }
}

const events: IdempotencyEvent[] = [];

describe.each(ADAPTERS)('telemetry over %s', (adapter) => {
  const schema = scratchSchema('otel');
  let dataSource: DataSource;
  let app: INestApplication;
  let url: string;

  @Module({ controllers: [TelemetryController] })
  class RequestSpans implements NestModule {
    configure(consumer: MiddlewareConsumer) {
      consumer
        .apply((_req: unknown, _res: unknown, next: () => void) => {
          const span = tracer.startSpan('POST /telemetry');
          context.with(trace.setSpan(context.active(), span), () => {
            next();
            setImmediate(() => span.end());
          });
        })
        .forRoutes('*');
    }
  }

  beforeAll(async () => {
    dataSource = await openDataSource();
    ({ app, url } = await startHttpApp(adapter, {
      imports: [
        IdempotencyModule.forRoot({
          store: new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true }),
          telemetry: { meter: meterProvider.getMeter('test'), tracer },
          onEvent: (event) => events.push(event),
          tenant: (ctx) =>
            ctx.switchToHttp().getRequest<{ headers: Record<string, string> }>().headers[
              'x-tenant'
            ],
        }),
        RequestSpans,
      ],
    }));
  });
  afterAll(async () => {
    await app?.close();
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });

  it('emits an event per edge, never with the raw key; counts outcomes and times them as metrics', async () => {
    events.length = 0;
    const key = `raw-${randomUUID()}`;
    await send(url, 'POST', '/telemetry', { key });
    await send(url, 'POST', '/telemetry', { key });
    expect(events.map((e) => e.type)).toEqual(['acquired', 'completed', 'replayed']);
    const digest = keyDigest('TelemetryController.create', key);
    for (const event of events) {
      expect(event).toMatchObject({ scope: 'TelemetryController.create', keyDigest: digest });
      expect(JSON.stringify(event)).not.toContain(key);
    }

    await reader.forceFlush();
    const exported = metricExporter
      .getMetrics()
      .at(-1)!
      .scopeMetrics.flatMap((s) => s.metrics);
    const metric = (name: string) => exported.find((m) => m.descriptor.name === name);
    const outcomes = metric('idempotency.outcomes')!;
    const counted = (outcome: string) =>
      outcomes.dataPoints
        .filter(
          (p) =>
            p.attributes['idempotency.outcome'] === outcome &&
            p.attributes['idempotency.scope'] === 'TelemetryController.create',
        )
        .reduce((sum, p) => sum + (p.value as number), 0);
    expect(counted('executed')).toBeGreaterThanOrEqual(1);
    expect(counted('replayed')).toBeGreaterThanOrEqual(1);
    for (const name of [
      'idempotency.acquire.duration',
      'idempotency.action.duration',
      'idempotency.store.operation.duration',
    ]) {
      expect(metric(name)?.descriptor.unit, name).toBe('s');
      expect(metric(name)!.dataPoints.length).toBeGreaterThan(0);
    }
    expect(JSON.stringify(exported)).not.toContain(key);
  });

  it('exports every duration histogram through the Prometheus exporter with the advised buckets, from 100 µs to 30 s', async () => {
    const key = `raw-${randomUUID()}`;
    await send(url, 'POST', '/telemetry', { key });
    await send(url, 'POST', '/telemetry', { key });
    const response = await fetch(scrapeUrl);
    expect(response.status).toBe(200);
    const text = await response.text();
    const expectedLe = [...IDEMPOTENCY_DURATION_BUCKETS_SECONDS.map(String), '+Inf'];
    expect(expectedLe.slice(0, 4)).toEqual(['0.0001', '0.00025', '0.0005', '0.001']);
    const scope = { idempotency_scope: 'TelemetryController.create' };
    for (const [metric, labels] of [
      ['idempotency_acquire_duration', { ...scope, idempotency_outcome: 'acquired' }],
      ['idempotency_acquire_duration', { ...scope, idempotency_outcome: 'replayed' }],
      ['idempotency_action_duration', scope],
      ['idempotency_store_operation_duration', { idempotency_store_operation: 'acquire' }],
      ['idempotency_store_operation_duration', { idempotency_store_operation: 'complete' }],
    ] as const) {
      const buckets = bucketsOf(text, metric, labels);
      expect([...buckets.keys()], `${metric} ${JSON.stringify(labels)}`).toEqual(expectedLe);
      const total = buckets.get('+Inf')!;
      expect(total).toBeGreaterThan(0);
      // Local calls take a few milliseconds: they land below half a second, and not all in
      // the first bucket (the SDK's defaults would have put every one of them in le="5").
      expect(buckets.get('0.5'), metric).toBe(total);
      expect(buckets.get('0.0001')!, metric).toBeLessThan(total);
    }
    expect(text).not.toContain(key);
  });

  it('traces acquire and complete as child spans of the request span, with the outcome, never the key or the tenant', async () => {
    spans.reset();
    const key = `raw-${randomUUID()}`;
    const tenant = 'ann.smith@example.com';
    const headers = { 'x-tenant': tenant };
    await send(url, 'POST', '/telemetry', { key, headers });
    await send(url, 'POST', '/telemetry', { key, headers });
    const finished = spans.getFinishedSpans();
    const requests = finished.filter((s) => s.name === 'POST /telemetry');
    const acquires = finished.filter((s) => s.name === 'idempotency acquire');
    const completes = finished.filter((s) => s.name === 'idempotency complete');
    expect(acquires.map((s) => s.attributes['idempotency.outcome'])).toEqual([
      'acquired',
      'duplicate',
    ]);
    expect(completes).toHaveLength(1);
    const requestIds = new Set(requests.map((s) => s.spanContext().spanId));
    for (const span of [...acquires, ...completes]) {
      expect(requestIds.has(span.parentSpanContext?.spanId ?? '')).toBe(true);
    }
    expect(acquires[0].attributes['idempotency.key_digest']).toBe(
      keyDigest('TelemetryController.create', key, tenant),
    );
    expect(acquires[0].attributes['idempotency.scope']).toBe('TelemetryController.create');
    const attributes = JSON.stringify(finished.map((s) => s.attributes));
    expect(attributes).not.toContain(key);
    expect(attributes).not.toContain('ann.smith');
  });

  it('traces the scheduled purge as a store call, with the purge-run event', async () => {
    spans.reset();
    events.length = 0;
    const run = await app.get(IdempotencyPurgeScheduler).runOnce();
    const purges = spans.getFinishedSpans().filter((s) => s.name === 'idempotency purge');
    expect(purges.length).toBe(run.batches);
    expect(purges.length).toBeGreaterThanOrEqual(1);
    expect(events).toContainEqual(
      expect.objectContaining({ type: 'purge-run', purged: run.purged }),
    );
  });
});

afterAll(async () => {
  await new Promise((resolve) => scrapeServer?.close(resolve));
  await meterProvider.shutdown();
  await tracerProvider.shutdown();
  contextManager.disable();
});
