/** A retry is never advised sooner than this: a client should not spin. */
export const MIN_RETRY_AFTER_MS = 100;
/** Completions a scope needs before its own times are trusted over the lease left. */
const SAMPLES_NEEDED = 3;
/** Weight of the newest completion in the running average. */
const WEIGHT = 0.2;
/** Scopes remembered; the oldest is forgotten past this (scopes are per handler, so few). */
const MAX_SCOPES = 1000;

interface Average {
  meanMs: number;
  samples: number;
}

/**
 * How long each scope's actions recently took in this process (an
 * exponentially weighted mean of completion times), so that a duplicate told
 * "in flight" is advised to come back when an answer is likely rather than
 * only when the holder's lease would run out. Internal to the engine.
 */
export class ScopeDurations {
  private readonly averages = new Map<string, Average>();

  /** Records one completed action of `scope` that ran for `ms`. */
  record(scope: string, ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) return;
    const average = this.averages.get(scope);
    if (average) {
      average.meanMs += WEIGHT * (ms - average.meanMs);
      average.samples++;
      return;
    }
    if (this.averages.size >= MAX_SCOPES) {
      this.averages.delete(this.averages.keys().next().value as string);
    }
    this.averages.set(scope, { meanMs: ms, samples: 1 });
  }

  /**
   * When to retry a key of `scope` that is in flight with `leaseLeftMs` left
   * on its lease: the scope's typical action time once it has a few samples,
   * never less than MIN_RETRY_AFTER_MS and never more than the lease left
   * (after which the key can be taken over whatever became of its holder).
   */
  retryAfterMs(scope: string, leaseLeftMs: number): number {
    const average = this.averages.get(scope);
    if (!average || average.samples < SAMPLES_NEEDED) return leaseLeftMs;
    const estimate = Math.max(MIN_RETRY_AFTER_MS, Math.ceil(average.meanMs));
    return Math.min(estimate, Math.max(leaseLeftMs, MIN_RETRY_AFTER_MS));
  }
}
