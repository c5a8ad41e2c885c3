/**
 * `nest-idempotency/opentelemetry`: metrics from the engine's events and a
 * tracing store wrapper, through `@opentelemetry/api` (an optional peer; the
 * application brings the SDK). In a Nest application, `telemetry: true` in
 * `IdempotencyModule.forRoot` does both.
 */
// First: records that this build is loaded (see core/loaded-builds.ts).
import './core/loaded-builds';
export {
  IDEMPOTENCY_DURATION_BUCKETS_SECONDS,
  instrumentIdempotencyEngine,
  TracingIdempotencyStore,
} from './telemetry/opentelemetry';
export type { IdempotencyTelemetryOptions } from './telemetry/opentelemetry';
