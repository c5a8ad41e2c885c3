import {
  IdempotencyCompletionError,
  IdempotencyFingerprintMismatchException,
  IdempotencyInFlightException,
  IdempotencyLeaseLostError,
  IdempotencyPayloadError,
} from './errors';
import { Duration, parseDuration } from './duration';
import { IdempotencyEvent, IdempotencyEventListener } from './events';
import { assertValidKey, assertValidScope, DEFAULT_MAX_KEY_LENGTH, keyDigest } from './key';
import { IdempotencyLogger } from './logger';
import { IdempotencyStore, RecordId } from './store';

export interface ExecuteRequest {
  scope: string;
  key: string;
  lease: Duration;
  waitTimeout: Duration;
  ttl: Duration;
  fingerprint?: string;
}

/** `P` is what the store holds: by default the action's value itself. */
export type ExecuteOutcome<T, P = T> =
  { kind: 'executed'; value: T } | { kind: 'replayed'; value: P; completedAt: Date };

export interface CompletionRetryOptions {
  /** Attempts in all, the first included. */
  attempts: number;
  initialDelayMs: number;
  maxDelayMs: number;
}

export interface IdempotencyEngineOptions {
  logger?: IdempotencyLogger;
  maxKeyLength?: number;
  completionRetry?: Partial<CompletionRetryOptions>;
}

const DEFAULT_RETRY: CompletionRetryOptions = {
  attempts: 6,
  initialDelayMs: 100,
  maxDelayMs: 2000,
};

const consoleLogger: IdempotencyLogger = {
  warn: (m) => console.warn(`[nest-idempotency] ${m}`),
  error: (m) => console.error(`[nest-idempotency] ${m}`),
};

/**
 * acquire → run with heartbeat → complete, or release when the action throws.
 * Framework-free: the Nest adapter and plain code use the same engine.
 */
export class IdempotencyEngine {
  private readonly logger: IdempotencyLogger;
  private readonly maxKeyLength: number;
  private readonly retry: CompletionRetryOptions;
  private readonly listeners = new Set<IdempotencyEventListener>();

  constructor(
    readonly store: IdempotencyStore,
    options: IdempotencyEngineOptions = {},
  ) {
    this.logger = options.logger ?? consoleLogger;
    this.maxKeyLength = options.maxKeyLength ?? DEFAULT_MAX_KEY_LENGTH;
    this.retry = { ...DEFAULT_RETRY, ...options.completionRetry };
  }

  /** Subscribes to engine events; returns the unsubscribe function. */
  onEvent(listener: IdempotencyEventListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Runs `action` once per (scope, key). `toPayload` turns its value into what is
   * stored and replayed (the value itself by default); the executing caller
   * always gets the value as the action returned it.
   */
  async execute<T, P = T>(
    request: ExecuteRequest,
    action: (signal: AbortSignal) => Promise<T>,
    toPayload: (value: T) => P = (value) => value as unknown as P,
  ): Promise<ExecuteOutcome<T, P>> {
    assertValidScope(request.scope);
    assertValidKey(request.scope, request.key, this.maxKeyLength);
    const leaseMs = parseDuration(request.lease, 'lease', { allowZero: false }, request.scope);
    const waitTimeoutMs = parseDuration(
      request.waitTimeout,
      'waitTimeout',
      { allowZero: true },
      request.scope,
    );
    const ttlMs = parseDuration(request.ttl, 'ttl', { allowZero: false }, request.scope);
    const id: RecordId = { scope: request.scope, key: request.key };
    // Only for messages: a replay, the most frequent outcome, never needs it.
    const digest = () => keyDigest(request.scope, request.key);

    // Spelled out: on Node 20 (V8 11.3), `{ ...id, leaseMs }` costs microseconds per call.
    const acquired = await this.store.tryAcquire({
      scope: id.scope,
      key: id.key,
      leaseMs,
      waitTimeoutMs,
      ttlMs,
      fingerprint: request.fingerprint,
    });
    switch (acquired.kind) {
      case 'duplicate':
        return {
          kind: 'replayed',
          value: acquired.payload as P,
          completedAt: acquired.completedAt,
        };
      case 'in-flight':
        throw new IdempotencyInFlightException(acquired.retryAfterMs, request.scope, digest());
      case 'fingerprint-mismatch':
        throw new IdempotencyFingerprintMismatchException(request.scope, digest());
      case 'acquired':
        return {
          kind: 'executed',
          value: await this.run(id, digest(), acquired.leaseId, leaseMs, ttlMs, action, toPayload),
        };
      default:
        return assertNever(acquired);
    }
  }

  private async run<T>(
    id: RecordId,
    digest: string,
    leaseId: string,
    leaseMs: number,
    ttlMs: number,
    action: (signal: AbortSignal) => Promise<T>,
    toPayload: (value: T) => unknown,
  ): Promise<T> {
    const heartbeat = this.startHeartbeat(id, digest, leaseId, leaseMs);
    try {
      let value: T;
      try {
        value = await action(heartbeat.signal);
      } catch (error) {
        heartbeat.stop();
        await this.releaseQuietly(id, digest, leaseId);
        throw error;
      }
      heartbeat.settled();
      let payload: unknown;
      try {
        payload = toPayload(value);
      } catch (error) {
        await this.releaseQuietly(id, digest, leaseId);
        throw error;
      }
      await this.completeWithRetry(id, digest, leaseId, payload, ttlMs);
      return value;
    } finally {
      heartbeat.stop();
    }
  }

  private startHeartbeat(id: RecordId, digest: string, leaseId: string, leaseMs: number) {
    const controller = new AbortController();
    let stopped = false;
    let settled = false;
    const beat = async () => {
      try {
        const kept = await this.store.extend(id, leaseId, leaseMs);
        if (!kept && !stopped) {
          stopped = true;
          clearInterval(timer);
          // Once the action has settled, a refusal may be our own completion
          // landing first; completion reports a lease that is really lost.
          if (settled) return;
          this.logger.warn(`lease on ${digest} was lost while the action ran; aborting its signal`);
          this.emit({
            type: 'lease-lost',
            scope: id.scope,
            keyDigest: digest,
            during: 'heartbeat',
          });
          controller.abort(new IdempotencyLeaseLostError(`lease on ${digest} was lost`));
        }
      } catch (error) {
        // The store is unreachable: keep beating, the lease may still be ours.
        if (!stopped) this.logger.warn(`heartbeat for ${digest} failed: ${describe(error)}`);
      }
    };
    const timer = setInterval(() => void beat(), Math.max(1, Math.floor(leaseMs / 2)));
    timer.unref();
    return {
      signal: controller.signal,
      /** The action has finished: keep the lease while completing, but report nothing. */
      settled: () => {
        settled = true;
      },
      stop: () => {
        stopped = true;
        clearInterval(timer);
      },
    };
  }

  private async completeWithRetry(
    id: RecordId,
    digest: string,
    leaseId: string,
    value: unknown,
    ttlMs: number,
  ) {
    let delay = this.retry.initialDelayMs;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.store.complete(id, leaseId, value, ttlMs);
        return;
      } catch (error) {
        if (error instanceof IdempotencyLeaseLostError) {
          // Someone else owns the record now; their result stands, ours is still the caller's.
          this.logger.warn(
            `completion of ${digest} refused: the lease was lost; the newer owner's result stands`,
          );
          this.emit({ type: 'lease-lost', scope: id.scope, keyDigest: digest, during: 'complete' });
          return;
        }
        if (error instanceof IdempotencyPayloadError) {
          await this.releaseQuietly(id, digest, leaseId);
          throw new IdempotencyPayloadError(
            `${digest}: ${error.message}; the record was released`,
            { cause: error },
          );
        }
        if (attempt >= this.retry.attempts) {
          throw new IdempotencyCompletionError(
            `the action for ${digest} ran but its result could not be stored after ${attempt} attempts: ${describe(error)}`,
            id.scope,
            digest,
            { cause: error },
          );
        }
        this.emit({
          type: 'completion-retry',
          scope: id.scope,
          keyDigest: digest,
          attempt,
          error: describe(error),
        });
        this.logger.warn(
          `completion of ${digest} failed (attempt ${attempt}), retrying in ${delay} ms: ${describe(error)}`,
        );
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, this.retry.maxDelayMs);
      }
    }
  }

  private async releaseQuietly(id: RecordId, digest: string, leaseId: string): Promise<void> {
    try {
      await this.store.release(id, leaseId);
    } catch (error) {
      if (error instanceof IdempotencyLeaseLostError) {
        this.emit({ type: 'lease-lost', scope: id.scope, keyDigest: digest, during: 'release' });
        return;
      }
      // The lease will lapse and the next caller steals it; the original error matters more.
      this.logger.warn(
        `release of ${digest} failed; its lease will lapse instead: ${describe(error)}`,
      );
      this.emit({
        type: 'release-failed',
        scope: id.scope,
        keyDigest: digest,
        error: describe(error),
      });
    }
  }

  private emit(event: IdempotencyEvent): void {
    for (const listener of this.listeners) {
      try {
        listener(event);
      } catch (error) {
        this.logger.error(`idempotency event listener threw: ${describe(error)}`);
      }
    }
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

function assertNever(value: never): never {
  throw new Error(`unexpected acquire result ${JSON.stringify(value)}`);
}
