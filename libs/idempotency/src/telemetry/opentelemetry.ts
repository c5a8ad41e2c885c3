import type { Attributes, Counter, Histogram, Meter, Tracer } from '@opentelemetry/api';
import { IdempotencyConfigError } from '../core/errors';
import type { IdempotencyEngine } from '../core/engine';
import type { IdempotencyEvent } from '../core/events';
import { scopeOfStored, storedKeyDigest } from '../core/key';
import { optionalPeer } from '../core/optional-peer';
import type {
  AcquireRequest,
  AcquireResult,
  IdempotencyRecordView,
  IdempotencyStore,
  Lease,
  ListFilter,
  RecordId,
  StoredPayload,
  StepSupport,
  ContinuationSupport,
  StrictModeSupport,
  TransactionalCompletion,
} from '../core/store';
import type { ReceiptSupport } from '../core/receipts';

/**
 * OpenTelemetry for the library, through `@opentelemetry/api` alone (the
 * application brings the SDK and its exporters). Metrics come from the
 * engine's events; spans and store timings from wrapping the store. A raw key
 * is never an attribute: records are named by `idempotency.key_digest`.
 *
 * | Instrument | Kind, unit | Attributes |
 * |---|---|---|
 * | `idempotency.outcomes` | counter, `{call}` | `idempotency.scope`, `idempotency.outcome` (`executed`, `replayed`, `in_flight`, …; `would_replayed`, … in observe mode) |
 * | `idempotency.acquire.duration` | histogram, `s` | `idempotency.scope`, `idempotency.outcome` |
 * | `idempotency.wait.duration` | histogram, `s` | `idempotency.scope` |
 * | `idempotency.action.duration` | histogram, `s` | `idempotency.scope` |
 * | `idempotency.store.operation.duration` | histogram, `s` | `idempotency.store.operation`, `error.type` |
 * | `idempotency.purge.records` | counter, `{record}` | — |
 * | `idempotency.steps` | counter, `{step}` | `idempotency.scope`, `idempotency.step.outcome` (`recorded`, `replayed`) |
 * | `idempotency.continuations` | counter, `{call}` | `idempotency.scope`, `idempotency.continuation.outcome` (`suspended`, `replayed`, `resumed`, `refused_invalid`, `refused_unknown`, `refused_consumed`, `refused_lapsed`) |
 * | `idempotency.receipts` | counter, `{receipt}` | `idempotency.scope`, `idempotency.receipt.outcome` (`completed`, `released`, `resolved_completed`, `resolved_not_executed`, `failed`) |
 *
 * Every histogram advises `IDEMPOTENCY_DURATION_BUCKETS_SECONDS` as its
 * bucket boundaries; an SDK View of the application's still overrides them.
 */
export interface IdempotencyTelemetryOptions {
  /** Default: `metrics.getMeter('nest-idempotency')`. */
  meter?: Meter;
  /** Default: `trace.getTracer('nest-idempotency')`. */
  tracer?: Tracer;
}

/**
 * Bucket boundaries, in seconds, advised for every duration histogram: from
 * 100 µs (a replay from the cache, a Redis round trip) to 30 s (a slow
 * handler, a long wait), roughly 1-2.5-5 per decade. The SDK's default
 * boundaries (0, 5, 10, 25 … 10000) are meant for milliseconds: in seconds
 * they would put nearly every observation in the first bucket.
 */
export const IDEMPOTENCY_DURATION_BUCKETS_SECONDS: readonly number[] = Object.freeze([
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
  30,
]);

/** The options every duration histogram is created with. */
function durationHistogram(description: string) {
  return {
    unit: 's',
    description,
    // A copy per instrument: the SDK keeps the array it is given.
    advice: { explicitBucketBoundaries: [...IDEMPOTENCY_DURATION_BUCKETS_SECONDS] },
  };
}

type Api = typeof import('@opentelemetry/api');
let loaded: Api | undefined;

/**
 * `@opentelemetry/api`, loaded when telemetry is first asked for: it is an
 * optional peer. CommonJS in Node, so `require` loads it in every runtime.
 */
function otel(): Api {
  if (!loaded) {
    try {
      loaded = optionalPeer<Api>('@opentelemetry/api');
    } catch (error) {
      throw new IdempotencyConfigError(
        `telemetry needs @opentelemetry/api, which could not be loaded: ${(error as Error).message}`,
        { cause: error },
      );
    }
  }
  return loaded;
}

/** `idempotency.outcome` for each event that ends (or changes) a call. */
const OUTCOME: Partial<Record<IdempotencyEvent['type'], string>> = {
  acquired: 'acquired',
  completed: 'executed',
  replayed: 'replayed',
  'in-flight': 'in_flight',
  'fingerprint-mismatch': 'fingerprint_mismatch',
  released: 'released',
  'lease-lost': 'lease_lost',
  'completion-retry': 'completion_retry',
  'completion-failed': 'completion_failed',
  'not-storable': 'not_storable',
  'release-failed': 'release_failed',
  ambiguous: 'ambiguous',
  'outcome-unknown': 'outcome_unknown',
  resolved: 'resolved',
  'reconcile-failed': 'reconcile_failed',
};

interface Instruments {
  outcomes: Counter;
  acquire: Histogram;
  wait: Histogram;
  action: Histogram;
  purged: Counter;
  steps: Counter;
  continuations: Counter;
  receipts: Counter;
}

/**
 * Records the engine's events as metrics; returns the unsubscribe function.
 * An acquisition that took an expired lease over counts as `stolen` too.
 */
export function instrumentIdempotencyEngine(
  engine: IdempotencyEngine,
  options: IdempotencyTelemetryOptions = {},
): () => void {
  const meter = options.meter ?? otel().metrics.getMeter('nest-idempotency');
  const instruments: Instruments = {
    outcomes: meter.createCounter('idempotency.outcomes', {
      unit: '{call}',
      description: 'Edges and outcomes of idempotent calls, by scope and outcome',
    }),
    acquire: meter.createHistogram(
      'idempotency.acquire.duration',
      durationHistogram('Time to acquire a key or learn its outcome, waiting included'),
    ),
    wait: meter.createHistogram(
      'idempotency.wait.duration',
      durationHistogram("Time a duplicate waited inside the store for the holder's outcome"),
    ),
    action: meter.createHistogram(
      'idempotency.action.duration',
      durationHistogram(
        'Time from the acquisition to the stored result (the handler and its response)',
      ),
    ),
    purged: meter.createCounter('idempotency.purge.records', {
      unit: '{record}',
      description: 'Expired records deleted by purge runs',
    }),
    steps: meter.createCounter('idempotency.steps', {
      unit: '{step}',
      description: 'Recorded steps (ctx.step): run and recorded, or answered from the record',
    }),
    continuations: meter.createCounter('idempotency.continuations', {
      unit: '{call}',
      description:
        'Continuations (ctx.suspend): suspended, answered while suspended, resumed, refused',
    }),
    receipts: meter.createCounter('idempotency.receipts', {
      unit: '{receipt}',
      description:
        'Receipts appended for terminal records (receipts: true), and appends that failed',
    }),
  };
  return engine.onEvent((event) => record(instruments, event));
}

function record(instruments: Instruments, event: IdempotencyEvent): void {
  if (event.type === 'purge-run') {
    instruments.purged.add(event.purged);
    return;
  }
  const scope = { 'idempotency.scope': event.scope };
  if (event.type === 'observed') {
    // Observe mode: what enforce would have done (the handler ran anyway).
    const would = `would_${event.wouldHave.replace(/-/g, '_')}`;
    instruments.outcomes.add(1, { ...scope, 'idempotency.outcome': would });
    return;
  }
  if (event.type === 'step-recorded' || event.type === 'step-replayed') {
    const stepOutcome = event.type === 'step-recorded' ? 'recorded' : 'replayed';
    instruments.steps.add(1, { ...scope, 'idempotency.step.outcome': stepOutcome });
    return;
  }
  const continuation = continuationOutcome(event);
  if (continuation !== undefined) {
    instruments.continuations.add(1, {
      ...scope,
      'idempotency.continuation.outcome': continuation,
    });
    return;
  }
  if (event.type === 'receipt-appended' || event.type === 'receipt-failed') {
    const receiptOutcome =
      event.type === 'receipt-failed' ? 'failed' : event.outcome.replace(/-/g, '_');
    instruments.receipts.add(1, { ...scope, 'idempotency.receipt.outcome': receiptOutcome });
    return;
  }
  const outcome = OUTCOME[event.type];
  if (outcome) instruments.outcomes.add(1, { ...scope, 'idempotency.outcome': outcome });
  switch (event.type) {
    case 'acquired':
      if (event.stolen) instruments.outcomes.add(1, { ...scope, 'idempotency.outcome': 'stolen' });
      instruments.acquire.record(event.acquireMs / 1000, {
        ...scope,
        'idempotency.outcome': 'acquired',
      });
      break;
    case 'replayed':
      instruments.acquire.record(event.acquireMs / 1000, {
        ...scope,
        'idempotency.outcome': 'replayed',
      });
      break;
    case 'in-flight':
      instruments.acquire.record(event.acquireMs / 1000, {
        ...scope,
        'idempotency.outcome': 'in_flight',
      });
      break;
    case 'waited':
      instruments.wait.record(event.waitedMs / 1000, scope);
      break;
    case 'completed':
      instruments.action.record(event.actionMs / 1000, scope);
      break;
    default:
      break;
  }
}

function continuationOutcome(event: IdempotencyEvent): string | undefined {
  switch (event.type) {
    case 'suspended':
      return 'suspended';
    case 'suspension-replayed':
      return 'replayed';
    case 'resumed':
      return 'resumed';
    case 'resumption-refused':
      return `refused_${event.reason}`;
    default:
      return undefined;
  }
}

/**
 * A store whose every call is a span (a child of the caller's active span:
 * the request's, under an HTTP instrumentation) with its outcome as an
 * attribute, and a sample of `idempotency.store.operation.duration`.
 */
export class TracingIdempotencyStore implements IdempotencyStore {
  private readonly tracer: Tracer;
  private readonly duration: Histogram;
  readonly onWait?: (listener: (scope: string) => void) => () => void;
  readonly transactional?: TransactionalCompletion;
  readonly strictMode?: StrictModeSupport;
  readonly steps?: StepSupport;
  readonly continuations?: ContinuationSupport;
  readonly receipts?: ReceiptSupport;
  readonly ping?: () => Promise<void>;

  constructor(
    readonly inner: IdempotencyStore,
    options: IdempotencyTelemetryOptions = {},
  ) {
    this.tracer = options.tracer ?? otel().trace.getTracer('nest-idempotency');
    const meter = options.meter ?? otel().metrics.getMeter('nest-idempotency');
    this.duration = meter.createHistogram(
      'idempotency.store.operation.duration',
      durationHistogram('Duration of each store call'),
    );
    if (inner.onWait) this.onWait = (listener) => inner.onWait!(listener);
    if (inner.ping) this.ping = () => this.span('ping', {}, () => inner.ping!());
    const strict = inner.strictMode;
    if (strict) {
      this.strictMode = {
        markAmbiguous: (lease, reason) =>
          this.span('mark-ambiguous', { 'idempotency.ambiguity_reason': reason }, () =>
            strict.markAmbiguous(lease, reason),
          ),
        resolve: (id, resolution) =>
          this.span(
            'resolve',
            {
              'idempotency.scope': scopeOfStored(id.scope),
              'idempotency.key_digest': storedKeyDigest(id.scope, id.key),
              'idempotency.resolution': resolution.outcome,
            },
            () => strict.resolve(id, resolution),
            (result) => ({ 'idempotency.outcome': result.kind }),
          ),
      };
    }
    const steps = inner.steps;
    if (steps) {
      this.steps = {
        begin: (lease, name) => this.span('step-begin', {}, () => steps.begin(lease, name)),
        record: (lease, name, value) =>
          this.span('step-record', { 'idempotency.payload.size': value.length }, () =>
            steps.record(lease, name, value),
          ),
        list: (id) => this.span('step-list', {}, () => steps.list(id)),
      };
    }
    const continuations = inner.continuations;
    if (continuations) {
      this.continuations = {
        suspend: (lease, suspension) =>
          this.span(
            'suspend',
            { 'idempotency.payload.size': suspension.answer.length + suspension.state.length },
            () => continuations.suspend(lease, suspension),
          ),
        resume: (request) =>
          this.span(
            'resume',
            { 'idempotency.scope': scopeOfStored(request.scope) },
            () => continuations.resume(request),
            (result) => ({ 'idempotency.outcome': result.kind }),
          ),
      };
    }
    const receipts = inner.receipts;
    if (receipts) {
      this.receipts = {
        check: () => receipts.check(),
        append: (receipt) =>
          this.span('receipt', { 'idempotency.receipt.chain': receipt.chain }, () =>
            receipts.append(receipt),
          ),
        read: (chain, offset, limit) => receipts.read(chain, offset, limit),
        head: (chain) => receipts.head(chain),
      };
    }
    const transactional = inner.transactional;
    if (transactional) {
      this.transactional = {
        transaction: (work) => transactional.transaction(work),
        completeIn: (tx, lease, payload) =>
          this.span(
            'complete',
            { 'idempotency.payload.size': payload.length, 'idempotency.in_transaction': true },
            () => transactional.completeIn(tx, lease, payload),
            (result) => ({ 'idempotency.outcome': result }),
          ),
        ...(transactional.afterCommit
          ? { afterCommit: (lease: Lease) => transactional.afterCommit!(lease) }
          : {}),
      };
    }
  }

  tryAcquire(request: AcquireRequest): Promise<AcquireResult> {
    return this.span(
      'acquire',
      {
        // Never the tenant: the handler's scope, and a digest that covers the tenant.
        'idempotency.scope': scopeOfStored(request.scope),
        'idempotency.key_digest': storedKeyDigest(request.scope, request.key),
      },
      () => this.inner.tryAcquire(request),
      (result) => ({ 'idempotency.outcome': result.kind }),
    );
  }

  complete(lease: Lease, payload: StoredPayload): Promise<void> {
    return this.span('complete', { 'idempotency.payload.size': payload.length }, () =>
      this.inner.complete(lease, payload),
    );
  }

  release(lease: Lease): Promise<void> {
    return this.span('release', {}, () => this.inner.release(lease));
  }

  extend(lease: Lease): Promise<boolean> {
    return this.span(
      'extend',
      {},
      () => this.inner.extend(lease),
      (kept) => ({ 'idempotency.outcome': kept ? 'extended' : 'lease_lost' }),
    );
  }

  purgeExpired(options?: { limit?: number }): Promise<number> {
    return this.span(
      'purge',
      {},
      () => this.inner.purgeExpired(options),
      (purged) => ({ 'idempotency.purged': purged }),
    );
  }

  find(id: RecordId): Promise<IdempotencyRecordView | null> {
    return this.span('find', {}, () => this.inner.find(id));
  }

  list(filter?: ListFilter): Promise<IdempotencyRecordView[]> {
    return this.span('list', {}, () => this.inner.list(filter));
  }

  async init(): Promise<void> {
    await this.inner.init?.();
  }

  async close(): Promise<void> {
    await this.inner.close?.();
  }

  private async span<T>(
    operation: string,
    attributes: Attributes,
    call: () => Promise<T>,
    outcome?: (result: T) => Attributes,
  ): Promise<T> {
    const { context, trace, SpanKind, SpanStatusCode } = otel();
    const span = this.tracer.startSpan(
      `idempotency ${operation}`,
      {
        kind: SpanKind.INTERNAL,
        attributes: { 'idempotency.store.operation': operation, ...attributes },
      },
      context.active(),
    );
    const started = performance.now();
    try {
      const result = await context.with(trace.setSpan(context.active(), span), call);
      if (outcome) span.setAttributes(outcome(result));
      this.duration.record((performance.now() - started) / 1000, {
        'idempotency.store.operation': operation,
      });
      return result;
    } catch (error) {
      const type = error instanceof Error ? error.name : 'Error';
      span.setAttribute('error.type', type);
      span.setStatus({ code: SpanStatusCode.ERROR, message: type });
      this.duration.record((performance.now() - started) / 1000, {
        'idempotency.store.operation': operation,
        'error.type': type,
      });
      throw error;
    } finally {
      span.end();
    }
  }
}
