import { metrics } from '@opentelemetry/api';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import {
  ConsoleMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';

export interface DemoMetrics {
  /** Where the metrics go, for the start-up log. */
  description: string;
  shutdown(): Promise<void>;
}

/**
 * DEMO_METRICS=console prints the library's metrics every DEMO_METRICS_INTERVAL_MS
 * (default 10 s); DEMO_METRICS=prometheus serves them at
 * http://127.0.0.1:DEMO_METRICS_PORT/metrics (default 9464). Registered as the
 * global meter provider before the application starts, so `telemetry: true`
 * in IdempotencyModule finds it.
 */
export async function startDemoMetrics(mode: string | undefined): Promise<DemoMetrics | undefined> {
  if (!mode) return undefined;
  if (mode === 'console') {
    const intervalMs = Number(process.env.DEMO_METRICS_INTERVAL_MS ?? 10_000);
    const provider = new MeterProvider({
      readers: [
        new PeriodicExportingMetricReader({
          exporter: new ConsoleMetricExporter(),
          exportIntervalMillis: intervalMs,
        }),
      ],
    });
    metrics.setGlobalMeterProvider(provider);
    return { description: `printed every ${intervalMs} ms`, shutdown: () => provider.shutdown() };
  }
  if (mode === 'prometheus') {
    const port = Number(process.env.DEMO_METRICS_PORT ?? 9464);
    const exporter = new PrometheusExporter({ host: '127.0.0.1', port, preventServerStart: true });
    await exporter.startServer();
    const provider = new MeterProvider({ readers: [exporter] });
    metrics.setGlobalMeterProvider(provider);
    return {
      description: `served at http://127.0.0.1:${port}/metrics`,
      shutdown: () => provider.shutdown(),
    };
  }
  throw new Error(`DEMO_METRICS must be "console" or "prometheus", got ${JSON.stringify(mode)}`);
}
