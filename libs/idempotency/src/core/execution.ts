import {
  IdempotencyCompletionError,
  IdempotencyConfigError,
  IdempotencyLeaseLostError,
  IdempotencyPayloadError,
  IdempotencyStoreUnavailableError,
} from './errors';
import { describeError } from './error-text';
import type { ReleaseReason } from './events';
import type { ExecutionPolicy } from './policy';
import { isNotExecuted } from './strict';
import { encodeNotStorable, notStorableReason } from './payload';
import { appendReceipt } from './receipt-writer';
import type { ReceiptOutcome } from './receipts';
import type { EngineRuntime } from './runtime';
import type {
  Lease,
  StoredPayload,
  Suspension,
  TransactionalCompletion,
  TransactionRunner,
} from './store';

export type { CompletionRetryOptions } from './runtime';

/** How a completion ended for the caller: stored, or refused because another owner has the record now. */
export type CompletionResult = 'stored' | 'lease-lost';

/** What the lifecycle ends a held record with: an `Execution`, or a resumption's pair of them. */
export interface Holding {
  readonly keyDigest: string;
  readonly signal: AbortSignal;
  complete(payload: StoredPayload): Promise<CompletionResult>;
  completeNotStorable(reason: string): Promise<CompletionResult>;
  release(reason?: 'action-failed' | 'answered-early' | 'resumption-refused'): Promise<void>;
  fail(error: unknown, entered?: boolean): Promise<void>;
  suspend(suspension: Suspension): Promise<void>;
}

/**
 * One acquired record, from the acquisition to its completion or release. A
 * heartbeat extends the lease every `leaseMs / 2` until then, so an action
 * may outlive its lease without being stolen; if the lease is lost anyway
 * (the store refused an extension) `signal` aborts.
 */
export class Execution implements Holding {
  /** Made when `signal` is first read: most callers never read it. */
  private controller: AbortController | undefined = undefined;
  private lost: IdempotencyLeaseLostError | undefined = undefined;
  private digest: string | (() => string);
  private readonly timer: NodeJS.Timeout;
  private readonly startedAt = performance.now();
  private settled = false;
  private finished = false;

  constructor(
    private readonly context: EngineRuntime,
    readonly scope: string,
    /**
     * The record's name in logs and events (scope and key digest), or a
     * function computing it: it is then computed once, when first needed.
     */
    keyDigest: string | (() => string),
    private readonly lease: Lease,
    /** Strict mode: a failed action makes the record AMBIGUOUS (see `fail`). */
    private readonly strictness?: Pick<ExecutionPolicy, 'strict' | 'notExecuted'>,
    /** Receipts on: the record's receipt chain (`chainOfRecord`). */
    private readonly receiptChain?: number,
  ) {
    this.digest = keyDigest;
    this.timer = setInterval(() => void this.beat(), Math.max(1, Math.floor(lease.leaseMs / 2)));
    this.timer.unref();
  }

  /** The record's name in logs and events: scope and key digest. */
  get keyDigest(): string {
    if (typeof this.digest === 'function') this.digest = this.digest();
    return this.digest;
  }

  /** Aborted when the lease was lost while the action ran. */
  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.lost !== undefined) this.controller.abort(this.lost);
    }
    return this.controller.signal;
  }

  /**
   * Stores the result and ends the execution. Retries a store that cannot be
   * reached (the record stays ours meanwhile: the heartbeat keeps beating);
   * throws `IdempotencyCompletionError` when every attempt failed, leaving the
   * record IN_PROGRESS (the work happened, so it is not released).
   * A payload the store refuses (`IdempotencyPayloadError`: too large) is
   * replaced by a not-storable marker, so a duplicate is refused instead of
   * run again, and the error is thrown.
   */
  async complete(payload: StoredPayload): Promise<CompletionResult> {
    this.settle();
    try {
      return await this.completeWithRetry(payload);
    } finally {
      this.finish();
    }
  }

  /**
   * The action ran but its result cannot be stored (not JSON, too large):
   * completes the record with a marker saying so, so that a duplicate is
   * refused rather than run a second time. Throws what `complete` throws.
   */
  completeNotStorable(reason: string): Promise<CompletionResult> {
    this.context.emit(() => ({
      type: 'not-storable',
      scope: this.scope,
      keyDigest: this.keyDigest,
      reason,
    }));
    return this.complete(encodeNotStorable(reason));
  }

  /**
   * `completion: 'transaction'`: runs `work` (the action, and what makes its
   * payload) in a transaction from `runner`, and completes the record as a
   * statement of that same transaction, so the action's writes and the
   * completion commit together or not at all:
   *
   * - `work` throws: the transaction rolls back and the record is released;
   *   the error is rethrown.
   * - the lease was lost before the completion (a steal after a stall): the
   *   transaction rolls back and `IdempotencyLeaseLostError` is thrown; the
   *   newer owner's result stands, and this attempt left nothing behind.
   * - the commit fails: nothing happened; the record is released (fenced: a
   *   commit that did land in fact is left as it is) and a retriable
   *   `IdempotencyStoreUnavailableError` is thrown.
   *
   * Strict mode (`onExpiredLease: 'refuse'`) declares effects outside the
   * database, which no rollback undoes: where the record would be released
   * after the action began (`entered()`: an adapter's `HandlerEntry`), it
   * becomes AMBIGUOUS instead, as `fail` makes it, unless the error says the
   * action did not execute (`notExecuted`); a failed commit then throws
   * `IdempotencyStoreUnavailableError` saying so, not "safe to retry".
   */
  async runInTransaction<Tx, T>(
    runner: TransactionRunner<Tx>,
    work: (tx: Tx) => Promise<{ value: T; payload: StoredPayload }>,
    entered: () => boolean = () => true,
  ): Promise<T> {
    const transactional = this.context.store.transactional as
      TransactionalCompletion<Tx> | undefined;
    if (!transactional) {
      throw new IdempotencyConfigError(
        `${this.scope}: completion in a transaction needs a store that supports it (store.transactional); this store does not`,
      );
    }
    let stage = 'work' as 'work' | 'complete' | 'commit';
    // The action's time, up to its completion's write (the commit is the store's time).
    let workMs = 0;
    // Whether the runner called `work` at all (it may fail to begin its transaction).
    let began = false;
    let lost = false as boolean;
    let committedPayload: StoredPayload | null = null;
    try {
      const value = await runner(async (tx) => {
        began = true;
        const { value, payload } = await work(tx);
        committedPayload = payload;
        stage = 'complete';
        workMs = performance.now() - this.startedAt;
        this.settle(); // from here a refused heartbeat may be our own completion
        // The completion's write locks the record until the commit: a heartbeat would
        // only wait behind our own lock, holding a pooled connection while it waits
        // (a slow commit then drains the pool). Nobody can take the record meanwhile.
        clearInterval(this.timer);
        if ((await transactional.completeIn(tx, this.lease, payload)) === 'lease-lost') {
          lost = true;
          throw new IdempotencyLeaseLostError(
            `lease on ${this.keyDigest} was lost before its transaction committed; the transaction was rolled back and the newer owner's result stands`,
          );
        }
        stage = 'commit';
        return value;
      });
      this.finish();
      transactional.afterCommit?.(this.lease);
      this.completed(workMs);
      await this.receipt('completed', committedPayload);
      return value;
    } catch (error) {
      this.settled = true;
      this.finish();
      if (lost) {
        this.context.logger.warn((error as Error).message);
        this.context.emit(() => ({
          type: 'lease-lost',
          scope: this.scope,
          keyDigest: this.keyDigest,
          during: 'complete',
        }));
        throw error;
      }
      if (
        this.strictness?.strict &&
        began &&
        entered() &&
        !(stage === 'work' && isNotExecuted(this.strictness, error, this.context.logger))
      ) {
        const kept = await this.markAmbiguousQuietly(stage !== 'work');
        if (stage !== 'commit') throw error;
        if (kept) {
          throw markKeyKept(
            new IdempotencyStoreUnavailableError(
              `the transaction for ${this.keyDigest} did not commit (${describeError(error)}); strict mode cannot know what the action did outside the database, so its record is AMBIGUOUS until it is resolved`,
              1000,
              { cause: error },
            ),
          );
        }
        // Not ours to mark: the commit landed after all (or a newer owner holds the key).
        throw new IdempotencyStoreUnavailableError(
          `the transaction for ${this.keyDigest} reported a failure (${describeError(error)}) but may have committed: its record is no longer in progress; a retry gets what it holds`,
          1000,
          { cause: error },
        );
      }
      await this.releaseQuietly(stage === 'commit' ? 'commit-failed' : 'action-failed');
      if (stage === 'commit') {
        throw new IdempotencyStoreUnavailableError(
          `the transaction for ${this.keyDigest} did not commit (${describeError(error)}); nothing was recorded and the action's writes were rolled back, so it is safe to retry`,
          1000,
          { cause: error },
        );
      }
      throw error;
    }
  }

  /**
   * `ctx.suspend`: moves the record to SUSPENDED (its answer, state and
   * continuation kept, reserved for `holdMs` by the store's clock) and ends
   * the execution: the heartbeat stops, since nobody holds a suspended
   * record. Throws what the store throws (`IdempotencyLeaseLostError`: a
   * newer attempt holds the record; `IdempotencyStoreUnavailableError`): the
   * record then stays IN_PROGRESS until its lease lapses.
   */
  async suspend(suspension: Suspension): Promise<void> {
    this.settle();
    try {
      await this.context.store.continuations!.suspend(this.lease, suspension);
      this.context.emit(() => ({
        type: 'suspended',
        scope: this.scope,
        keyDigest: this.keyDigest,
        holdMs: suspension.holdMs,
      }));
    } finally {
      this.finish();
    }
  }

  /** Deletes the record (the action failed: it leaves no trace); never throws. */
  async release(
    reason: 'action-failed' | 'answered-early' | 'resumption-refused' = 'action-failed',
  ): Promise<void> {
    this.settle();
    try {
      await this.releaseQuietly(reason);
    } finally {
      this.finish();
    }
  }

  /**
   * The action threw `error`. Outside strict mode this is `release`. In
   * strict mode the record becomes AMBIGUOUS (fenced by the lease), unless
   * the action was never `entered` (it failed before the handler's body ran:
   * a pipe, a guard) or the error is known not to have executed
   * (`IdempotencyNotExecutedError`, the `notExecuted` option): then it is
   * released. Never throws.
   */
  async fail(error: unknown, entered = true): Promise<void> {
    if (
      !this.strictness?.strict ||
      !entered ||
      isNotExecuted(this.strictness, error, this.context.logger)
    ) {
      return this.release('action-failed');
    }
    this.settle();
    try {
      await this.markAmbiguousQuietly();
    } finally {
      this.finish();
    }
  }

  /**
   * False when the record was no longer this execution's to mark (its lease
   * was lost, or its completion landed after all); true otherwise, including
   * when the mark failed (the record stays IN_PROGRESS until its lease lapses,
   * and then becomes AMBIGUOUS).
   */
  private async markAmbiguousQuietly(uncommitted = false): Promise<boolean> {
    const { store, logger, emit } = this.context;
    try {
      await store.strictMode!.markAmbiguous(this.lease, 'action-failed');
      logger.warn(
        uncommitted
          ? `the action for ${this.keyDigest} ran, but its transaction did not commit; strict mode makes its record AMBIGUOUS until it is resolved`
          : `the action for ${this.keyDigest} threw after it began; strict mode makes its record AMBIGUOUS until it is resolved`,
      );
      emit(() => ({
        type: 'ambiguous',
        scope: this.scope,
        keyDigest: this.keyDigest,
        reason: 'action-failed',
      }));
    } catch (error) {
      if (error instanceof IdempotencyLeaseLostError) {
        emit(() => ({
          type: 'lease-lost',
          scope: this.scope,
          keyDigest: this.keyDigest,
          during: 'mark-ambiguous',
        }));
        return false;
      }
      // Still IN_PROGRESS: once its lease runs out, the next contender finds it AMBIGUOUS.
      logger.warn(
        `marking ${this.keyDigest} AMBIGUOUS failed; its lease will lapse and the next attempt finds it AMBIGUOUS: ${describeError(error)}`,
      );
    }
    return true;
  }

  private settle(): void {
    if (this.settled)
      throw new Error(`${this.keyDigest}: the execution was already completed or released`);
    this.settled = true;
  }

  /**
   * The record is COMPLETE: the scope's action times learn this one (`workMs`:
   * up to the first completion attempt, so a slow store is not taken for a
   * slow action), and listeners hear of it (`actionMs`: up to the stored result).
   */
  private completed(workMs: number): void {
    this.context.durations.record(this.scope, workMs);
    this.context.emit(() => ({
      type: 'completed',
      scope: this.scope,
      keyDigest: this.keyDigest,
      actionMs: performance.now() - this.startedAt,
    }));
  }

  /** Receipts on: appends the record's receipt (never throws; see `appendReceipt`). */
  private async receipt(outcome: ReceiptOutcome, payload: StoredPayload | null): Promise<void> {
    if (this.receiptChain === undefined) return;
    await appendReceipt(
      this.context,
      { scope: this.scope, keyDigest: this.keyDigest, chain: this.receiptChain },
      outcome,
      payload,
    );
  }

  private finish(): void {
    this.finished = true;
    clearInterval(this.timer);
  }

  private async beat(): Promise<void> {
    if (this.finished) return;
    try {
      const kept = await this.context.store.extend(this.lease);
      // Once the action has settled, a refusal may be our own completion landing
      // first; completion reports a lease that is really lost.
      if (kept || this.finished || this.settled) return;
      clearInterval(this.timer);
      this.context.logger.warn(
        `lease on ${this.keyDigest} was lost while the action ran; aborting its signal`,
      );
      this.context.emit(() => ({
        type: 'lease-lost',
        scope: this.scope,
        keyDigest: this.keyDigest,
        during: 'heartbeat',
      }));
      this.lost = new IdempotencyLeaseLostError(`lease on ${this.keyDigest} was lost`);
      this.controller?.abort(this.lost);
    } catch (error) {
      // The store is unreachable: keep beating, the lease may still be ours.
      if (!this.finished) {
        this.context.logger.warn(`heartbeat for ${this.keyDigest} failed: ${describeError(error)}`);
      }
    }
  }

  private async completeWithRetry(payload: StoredPayload): Promise<CompletionResult> {
    // The action's time, without the completion's retries (a slow store is not a slow action).
    const workMs = performance.now() - this.startedAt;
    const { store, retry, logger, emit } = this.context;
    let delay = retry.initialDelayMs;
    for (let attempt = 1; ; attempt++) {
      try {
        await store.complete(this.lease, payload);
        this.completed(workMs);
        if (this.receiptChain !== undefined) await this.receipt('completed', payload);
        return 'stored';
      } catch (error) {
        if (error instanceof IdempotencyLeaseLostError) {
          // Someone else owns the record now; their result stands, ours is still the caller's.
          logger.warn(
            `completion of ${this.keyDigest} refused: the lease was lost; the newer owner's result stands`,
          );
          emit(() => ({
            type: 'lease-lost',
            scope: this.scope,
            keyDigest: this.keyDigest,
            during: 'complete',
          }));
          return 'lease-lost';
        }
        if (error instanceof IdempotencyPayloadError && notStorableReason(payload) === undefined) {
          // Too large: record that the action ran, so that nothing runs it again.
          payload = encodeNotStorable(error.message);
          emit(() => ({
            type: 'not-storable',
            scope: this.scope,
            keyDigest: this.keyDigest,
            reason: error.message,
          }));
          await this.completeWithRetry(payload);
          throw new IdempotencyPayloadError(
            `${this.keyDigest}: ${error.message}; the action ran, so its record is completed without a result and a duplicate is refused`,
            { cause: error },
          );
        }
        if (attempt >= retry.attempts) {
          emit(() => ({
            type: 'completion-failed',
            scope: this.scope,
            keyDigest: this.keyDigest,
            attempts: attempt,
            error: describeError(error),
          }));
          throw new IdempotencyCompletionError(
            `the action for ${this.keyDigest} ran but its result could not be stored after ${attempt} attempts: ${describeError(error)}`,
            this.scope,
            this.keyDigest,
            { cause: error },
          );
        }
        emit(() => ({
          type: 'completion-retry',
          scope: this.scope,
          keyDigest: this.keyDigest,
          attempt,
          error: describeError(error),
        }));
        logger.warn(
          `completion of ${this.keyDigest} failed (attempt ${attempt}), retrying in ${delay} ms: ${describeError(error)}`,
        );
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, retry.maxDelayMs);
      }
    }
  }

  private async releaseQuietly(reason: ReleaseReason): Promise<void> {
    const { store, logger, emit } = this.context;
    try {
      await store.release(this.lease);
      emit(() => ({ type: 'released', scope: this.scope, keyDigest: this.keyDigest, reason }));
      // Released after a failure (not when something merely answered the caller first).
      if (reason !== 'answered-early') await this.receipt('released', null);
    } catch (error) {
      if (error instanceof IdempotencyLeaseLostError) {
        emit(() => ({
          type: 'lease-lost',
          scope: this.scope,
          keyDigest: this.keyDigest,
          during: 'release',
        }));
        return;
      }
      // The lease will lapse and the next caller steals it; the original error matters more.
      logger.warn(
        `release of ${this.keyDigest} failed; its lease will lapse instead: ${describeError(error)}`,
      );
      emit(() => ({
        type: 'release-failed',
        scope: this.scope,
        keyDigest: this.keyDigest,
        error: describeError(error),
      }));
    }
  }
}

/**
 * Set on the error a strict-mode transactional execution throws when its
 * commit failed and its record was made AMBIGUOUS: the key is kept until the
 * outcome is resolved, so adapters answer without inviting a retry.
 */
const KEY_KEPT = Symbol('nest-idempotency.key-kept');

function markKeyKept<E extends object>(error: E): E {
  Object.defineProperty(error, KEY_KEPT, { value: true, enumerable: false });
  return error;
}

/** True for the error of a failed strict-mode commit whose record is now AMBIGUOUS. */
export function keptAmbiguous(error: unknown): boolean {
  return typeof error === 'object' && error !== null && KEY_KEPT in error;
}
