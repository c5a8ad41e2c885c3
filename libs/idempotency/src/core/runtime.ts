import type { DerivedKeySecret } from './derived-key';
import type { ScopeDurations } from './durations';
import type { IdempotencyEvent } from './events';
import type { IdempotencyLogger } from './logger';
import type { IdempotencyStore } from './store';

/** How a completion that the store could not take is retried before the caller is told. */
export interface CompletionRetryOptions {
  /** Attempts in all, the first included. */
  attempts: number;
  initialDelayMs: number;
  maxDelayMs: number;
}

/**
 * What the parts of one engine share: its store, its logger, its completion
 * retries, and its event channel. Internal: built by `IdempotencyEngine`.
 */
export interface EngineRuntime {
  store: IdempotencyStore;
  logger: IdempotencyLogger;
  retry: CompletionRetryOptions;
  /** Events are built only when someone listens: the hot path allocates nothing for them. */
  emit: (event: () => IdempotencyEvent) => void;
  /** Recent action times per scope, for the retry advice given to a duplicate in flight. */
  durations: ScopeDurations;
  /** What `IdempotencyContext.deriveKey` derives with (the `derivedKeys` option, checked). */
  derivedKeys: DerivedKeySecret;
  /** `receipts: true`: terminal records append a receipt (the store declares `receipts`). */
  receipts: boolean;
}
