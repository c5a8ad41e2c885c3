import type { IdempotencyEngine } from '../../../core/engine';
import { IdempotencyError, IdempotencyStoreUnavailableError } from '../../../core/errors';
import type { IdempotencyLogger } from '../../../core/logger';
import type { CallIdentity, CallOutcome } from '../../../core/lifecycle';
import { optionalPeer } from '../../../core/optional-peer';
import type { Refusal } from '../../../core/refusal';
import type { HandlerPlan } from '../../config/handler-plan';
import type { JobKeySource } from '../../config/handler-options';
import type { ModuleSettings } from '../../config/module-settings';
import { replayedValue } from '../../replayed-value';
import {
  type IdempotencyTransactionRunner,
  transactionFor,
} from '../../transaction/transaction-runner';
import { keyFromSource } from '../door';
import { storedValue } from '../stored-value';
import type { ProviderMethodRunner } from '../provider-methods/provider-method.registry';

/** The part of a BullMQ `Job` this door uses. */
interface JobLike {
  id?: string;
  name: string;
  data: unknown;
  moveToDelayed(timestamp: number, token?: string): Promise<void>;
}

type BullErrors = {
  DelayedError: new (message?: string) => Error;
  UnrecoverableError: new (message?: string) => Error;
};

/**
 * BullMQ jobs (`process(job, token)` of a `WorkerHost`): the key is `job.id`
 * or the `key` option over `job` and `data`; the stored result is the
 * returned value as JSON, and a replay completes the job with it. A job
 * whose twin is in flight goes back to BullMQ's delayed set for the twin's
 * `retryAfterMs` (`moveToDelayed` + `DelayedError`, which uses up none of
 * its attempts); a store outage fails the attempt (BullMQ's `attempts` and
 * `backoff` apply); a job that can never run as sent fails for good
 * (`UnrecoverableError`).
 */
export class JobDoor {
  constructor(
    private readonly engine: IdempotencyEngine,
    private readonly settings: ModuleSettings,
    private readonly logger: IdempotencyLogger,
    private readonly transactions: IdempotencyTransactionRunner,
  ) {}

  /** The runner `process` is bound to: `original` called on `instance` through the lifecycle. */
  runner(
    plan: HandlerPlan,
    instance: object,
    original: (...args: unknown[]) => unknown,
  ): ProviderMethodRunner {
    return (args) => this.serve(plan, args, () => Promise.resolve(original.apply(instance, args)));
  }

  private async serve(
    plan: HandlerPlan,
    args: unknown[],
    invoke: () => Promise<unknown>,
  ): Promise<unknown> {
    const job = args[0] as JobLike;
    const token = typeof args[1] === 'string' ? args[1] : undefined;
    const outcome: CallOutcome<unknown> = await this.engine.perform(
      plan.policy,
      { identity: this.identify(plan, job), required: plan.required, observe: plan.observe },
      {
        invoke,
        capture: (value) => ({ kind: 'stored', payload: storedValue(value, this.settings) }),
        transaction: transactionFor(plan, this.transactions, this.engine.store),
      },
    );
    switch (outcome.kind) {
      case 'executed':
        if (!outcome.failure || plan.observe) return outcome.value;
        // A result too large or not JSON: the record says the job ran; this run keeps its value.
        if (outcome.failure.refusal.code === 'idempotency-result-not-storable')
          return outcome.value;
        throw outcome.failure.error;
      case 'replayed': {
        const replayed = replayedValue(outcome.payload, plan);
        if (replayed.kind === 'error') throw this.unrecoverable(replayed.message);
        return replayed.value ?? null;
      }
      case 'refused':
        return this.refuse(plan, job, token, outcome.refusal, outcome.error);
    }
  }

  private identify(plan: HandlerPlan, job: JobLike): CallIdentity {
    const source: JobKeySource = {
      type: 'job',
      job: job as unknown as JobKeySource['job'],
      data: job.data,
    };
    let key: string | undefined;
    if (plan.key.kind === 'header') {
      key = job.id;
    } else {
      const found = keyFromSource(plan, source);
      if ('refused' in found) return found.refused;
      key = found.key;
    }
    if (key === undefined) return { kind: 'absent' };
    const fingerprint =
      typeof plan.fingerprint === 'function' ? (plan.fingerprint(source) ?? null) : null;
    return { kind: 'key', key, fingerprint };
  }

  private async refuse(
    plan: HandlerPlan,
    job: JobLike,
    token: string | undefined,
    refusal: Refusal,
    error: Error | undefined,
  ): Promise<never> {
    switch (refusal.code) {
      case 'idempotency-in-flight': {
        // Without the worker's token (process() called by hand) the job cannot be moved.
        if (token === undefined) throw error ?? this.unrecoverable(refusal.code);
        await job.moveToDelayed(Date.now() + refusal.retryAfterMs, token);
        const { DelayedError } = optionalPeer<BullErrors>('bullmq');
        throw new DelayedError(
          `${plan.where}: ${refusal.keyDigest} is in flight in another job; delayed ${refusal.retryAfterMs} ms`,
        );
      }
      case 'idempotency-store-unavailable':
        if (refusal.retryAfterMs !== undefined) {
          throw (
            error ??
            new IdempotencyStoreUnavailableError(
              refusal.detail ?? `${plan.where}: the idempotency store is unavailable`,
              refusal.retryAfterMs,
            )
          );
        }
        // Strict mode kept the key after a failed commit: a retry would only be refused.
        throw this.unrecoverable(`${plan.where}: ${refusal.detail ?? refusal.code}`, error);
      case 'idempotency-key-missing':
        throw this.unrecoverable(`${plan.where}: the job has no idempotency key`);
      case 'idempotency-key-reused':
        throw this.unrecoverable(
          `${plan.where}: ${refusal.keyDigest} was already used by a job with other data`,
        );
      case 'idempotency-result-not-storable':
        throw this.unrecoverable(
          `${plan.where}: the job was processed, but its result could not be recorded for replay; it is not run again`,
        );
      case 'idempotency-outcome-unknown':
        throw this.unrecoverable(
          error?.message ?? `${plan.where}: ${refusal.detail ?? refusal.code}`,
          error,
        );
      case 'idempotency-completion-failed':
        throw error ?? new IdempotencyError(`${plan.where}: ${refusal.detail}`);
      case 'idempotency-key-invalid':
      case 'idempotency-body-too-large':
      case 'idempotency-body-unreadable':
        throw this.unrecoverable(refusal.detail);
      case 'idempotency-resumption-refused':
        throw this.unrecoverable(refusal.error.message, refusal.error);
    }
  }

  /** A job that can never run as sent: BullMQ fails it without using up its other attempts. */
  private unrecoverable(message: string, cause?: unknown): Error {
    this.logger.warn(`job refused: ${message}`);
    const { UnrecoverableError } = optionalPeer<BullErrors>('bullmq');
    const error = new UnrecoverableError(message);
    if (cause !== undefined) Object.defineProperty(error, 'cause', { value: cause });
    return error;
  }
}
