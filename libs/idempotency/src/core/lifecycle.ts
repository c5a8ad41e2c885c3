import type { IdempotencyContext } from './context';
import { runInContext } from './current-context';
import { describeError } from './error-text';
import {
  IdempotencyCompletionError,
  IdempotencyConfigError,
  IdempotencyLeaseLostError,
  IdempotencyPayloadError,
  IdempotencyStoreUnavailableError,
} from './errors';
import type { ObservedOutcome } from './events';
import {
  continuationToken,
  isSuspendedAnswer,
  newContinuationId,
  type SuspendedAnswer,
} from './continuation';
import { keptAmbiguous, type Execution, type Holding } from './execution';
import { encodeValue } from './payload';
import { admitResumption } from './resumption';
import { keyDigest } from './key';
import { begin, type CallOptions } from './look';
import { notStorableReason } from './payload';
import type { ExecutionPolicy } from './policy';
import { refusalOf, type Refusal } from './refusal';
import type { EngineRuntime } from './runtime';
import type { StoredPayload, Suspension, TransactionRunner } from './store';

/**
 * The one lifecycle of an idempotent call, whatever door it came through: the
 * look (and the wait inside the store), observe mode, the run with its
 * heartbeat and abort signal, the transaction, strict mode, the capture of
 * the result, its completion and what a failed completion means, refusals
 * and events. `IdempotencyEngine.run` and every Nest door go through it; a
 * door supplies only what differs (`CallRequest`, `CallWork`) and renders the
 * `CallOutcome`.
 */

/** Who is calling, as the door read it. */
export type CallIdentity =
  | ({ kind: 'key' } & CallOptions)
  /** No key was sent (or the key source gave none). */
  | { kind: 'absent' }
  /** The door found the request unusable before any look (a malformed key header, an unreadable body). */
  | { kind: 'refused'; refusal: Refusal };

export interface CallRequest {
  identity: CallIdentity;
  /**
   * A resumption (`@Idempotent({ resumes })`, `engine.resume`): the scope whose
   * suspended record it resumes and the token the caller presented. The
   * call's own key, if any, is its own record, completed with the same result.
   */
  resumes?: { scope: string; token: string | undefined };
  /** Whether a call without a key is refused (`idempotency-key-missing`) or run without a record. */
  required: boolean;
  /** Observe mode: the work always runs, its result is never changed, and events say what enforce would do. */
  observe?: boolean;
}

/** What differs per door: how the work runs, and how its result is captured as the caller receives it. */
export interface CallWork<T> {
  /** Runs the work (for a Nest handler, the rest of its chain). */
  invoke(invocation: Invocation): Promise<T>;
  /** Strict mode: whether the work's own body began (a guard or pipe that threw did not). Default: it did. */
  entered?(): boolean;
  /** Called once the work returned, before its result is captured (HTTP hands the value on, to be written). */
  returned?(value: T): void;
  /**
   * The stored form of what the caller receives (`keyDigest` names the
   * record in a log line; it is computed when called). A throw counts as `not-storable`.
   */
  capture(value: T, keyDigest: () => string): Capture | Promise<Capture>;
  /** `completion: 'transaction'`: the runner the work and the record's completion share. */
  transaction?: TransactionRunner;
  /**
   * The work returned `ctx.suspend(answer, …)`: what the door hands on for
   * `answer`, carrying `token` to the caller (HTTP: 202 and the
   * `Idempotency-Continuation` header). A door without it cannot suspend.
   */
  suspended?(answer: unknown, token: string): T;
  /**
   * The work reads its context as the current one (a handler's
   * `@IdempotencyCtx()` parameter), so it runs with the context current.
   * Otherwise it runs as it was called: the first AsyncLocalStorage entered
   * turns on promise hooks that cost every later promise in the process.
   */
  readsContext?: boolean;
}

/** What one run of the work is given. */
export interface Invocation {
  /** Aborted when the record's lease is lost while the work runs. */
  signal: AbortSignal;
  /**
   * Whether `capture` will be asked for the result (a door that must hold
   * something back to capture it, such as HTTP's response, holds only then).
   */
  capturing: boolean;
  /** `completion: 'transaction'`: the transaction's handle (a TypeORM `EntityManager`). */
  tx?: unknown;
  /**
   * The record's context (absent when the work runs without a record); for
   * work that `readsContext`, also the current one while it runs
   * (`currentIdempotencyContext`).
   */
  context?: IdempotencyContext;
}

export type Capture =
  | { kind: 'stored'; payload: StoredPayload }
  /** The work ran, but what it answered cannot be stored (not JSON, a sanitizer threw, too large). */
  | { kind: 'not-storable'; reason: string; cause?: unknown }
  /** Something answered the caller before the work returned (HTTP: an outer interceptor's timeout). */
  | { kind: 'answered-early' };

export type CallOutcome<T> =
  /** The work ran. `failure`: its result was not recorded, and the caller is told so (or, by its door's rules, gets the value anyway). */
  | { kind: 'executed'; value: T; failure?: RecordFailure; continuation?: string }
  /** `continuation`: the record is SUSPENDED, and `payload` is its answer. */
  | { kind: 'replayed'; payload: StoredPayload; completedAt: Date; continuation?: string }
  /** Nothing ran. `error`: the typed error the refusal stands for, where the look raised one. */
  | { kind: 'refused'; refusal: Refusal; error?: Error };

/** Why a result that ran was not recorded: as a door renders it, and as plain code is thrown it. */
export interface RecordFailure {
  refusal: Refusal;
  error: Error;
}

/** Thrown inside a transaction to roll it back when the caller was answered before the work returned. */
class AnsweredEarly extends Error {
  constructor() {
    super('the response was sent before the handler returned');
  }
}

export async function performCall<T>(
  runtime: EngineRuntime,
  policy: ExecutionPolicy,
  request: CallRequest,
  work: CallWork<T>,
): Promise<CallOutcome<T>> {
  if (request.observe) return observe(runtime, policy, request, work);
  const { identity } = request;
  if (identity.kind === 'refused') return identity;
  if (identity.kind === 'absent') {
    if (request.required) return { kind: 'refused', refusal: { code: 'idempotency-key-missing' } };
    if (request.resumes) return resume(runtime, policy, request.resumes, undefined, work);
    return { kind: 'executed', value: await invokeUnrecorded(work) };
  }
  let begun;
  try {
    begun = await begin(runtime, policy, identity);
  } catch (error) {
    return {
      kind: 'refused',
      refusal: refusalFromLook(error, policy, runtime),
      error: error as Error,
    };
  }
  if (begun.kind === 'replayed') {
    const lost = notStorableReason(begun.payload);
    if (lost === undefined) return begun;
    return {
      kind: 'refused',
      refusal: { code: 'idempotency-result-not-storable' },
      error: new IdempotencyPayloadError(
        `the action already ran, but its result could not be stored (${lost}); it is not run again`,
      ),
    };
  }
  const { execution, context } = begun;
  if (request.resumes) {
    return resume(runtime, policy, request.resumes, { execution, tenant: identity.tenant }, work);
  }
  return work.transaction
    ? runInTransaction(runtime, policy, execution, context, work, work.transaction)
    : runAndComplete(runtime, policy, execution, context, work);
}

/** A resumption, once its own record (if it has a key) is held: see ./resumption.ts. */
async function resume<T>(
  runtime: EngineRuntime,
  policy: ExecutionPolicy,
  resumes: { scope: string; token: string | undefined },
  own: { execution: Execution; tenant: string | undefined } | undefined,
  work: CallWork<T>,
): Promise<CallOutcome<T>> {
  const admission = await admitResumption(runtime, policy, resumes, own);
  if (admission.kind === 'refused') return admission;
  return runAndComplete(runtime, policy, admission.holding, admission.context, work);
}

/** A look that refused: the refusal it stands for, logged where an operator should hear of it. */
function refusalFromLook(error: unknown, policy: ExecutionPolicy, runtime: EngineRuntime): Refusal {
  const refusal = refusalOf(error);
  if (refusal === undefined) throw error;
  if (refusal.code === 'idempotency-store-unavailable') {
    runtime.logger.warn(
      `${policy.where}: idempotency store unavailable: ${(error as Error).message}`,
    );
  }
  return refusal;
}

/**
 * Runs the work where the lifecycle records nothing of it (observe mode hands
 * it the `context` of a record it took); under `completion: 'transaction'`
 * still in a transaction of its own.
 */
function invokeUnrecorded<T>(
  work: CallWork<T>,
  capturing = false,
  context?: IdempotencyContext,
): Promise<T> {
  const signal = NEVER_ABORTED;
  return work.transaction
    ? work.transaction((tx) => invoke(work, { signal, capturing, tx, context }))
    : invoke(work, { signal, capturing, context });
}

/**
 * One run of the work; for work that reads its context, with the record's
 * context current while it runs (none without a record).
 */
function invoke<T>(work: CallWork<T>, invocation: Invocation): Promise<T> {
  if (work.readsContext !== true) return work.invoke(invocation);
  return runInContext(invocation.context, () => work.invoke(invocation));
}

const NEVER_ABORTED = new AbortController().signal;

/**
 * The invocation of a run its record follows. Its `signal` is the
 * execution's, made when first read: an AbortController costs more than the
 * rest of a fresh key's bookkeeping, and the doors never read it. A class, as
 * an object literal with a getter takes V8's slow path.
 */
class RecordedRun implements Invocation {
  readonly capturing = true;

  constructor(
    private readonly execution: Holding,
    readonly context: IdempotencyContext,
    readonly tx?: unknown,
  ) {}

  get signal(): AbortSignal {
    return this.execution.signal;
  }
}

/** `completion: 'separate'`: the work runs, then its captured result completes the record. */
async function runAndComplete<T>(
  runtime: EngineRuntime,
  policy: ExecutionPolicy,
  execution: Holding,
  context: IdempotencyContext,
  work: CallWork<T>,
): Promise<CallOutcome<T>> {
  let value: T;
  let suspension: Omit<Suspension, 'answer'> | undefined;
  let token = '';
  try {
    value = await invoke(work, new RecordedRun(execution, context));
    if (isSuspendedAnswer(value)) {
      suspension = suspensionFor(runtime, policy, value, work);
      token = continuationToken(context.locator(), suspension.continuation);
      value = work.suspended!(value.answer, token);
    }
  } catch (error) {
    // Released; in strict mode AMBIGUOUS once the work's body began.
    await execution.fail(error, work.entered?.() ?? true);
    throw error;
  }
  work.returned?.(value);
  const capture = await captureOf(work, value, execution);
  if (suspension !== undefined && capture.kind === 'stored') {
    const kept = { ...suspension, answer: capture.payload };
    return suspend(runtime, policy, execution, value, kept, token);
  }
  switch (capture.kind) {
    case 'answered-early':
      await answeredEarly(runtime, policy, execution);
      return { kind: 'executed', value };
    case 'not-storable':
      // The work ran: its record must say so, or a duplicate would run it again.
      runtime.logger.error(
        `${policy.where}: the result for ${execution.keyDigest} cannot be stored: ${capture.reason}`,
      );
      try {
        await execution.completeNotStorable(capture.reason);
      } catch (error) {
        runtime.logger.error(`${policy.where}: ${(error as Error).message}`);
      }
      return {
        kind: 'executed',
        value,
        failure: {
          refusal: { code: 'idempotency-result-not-storable' },
          error: new IdempotencyPayloadError(
            `${execution.keyDigest}: ${capture.reason}; the action ran, so its record is completed without a result and a duplicate is refused`,
            { cause: capture.cause },
          ),
        },
      };
    case 'stored':
      return complete(runtime, policy, execution, value, capture.payload);
  }
}

/**
 * What the store keeps of a suspension (its answer filled in once captured).
 * Throws `IdempotencyConfigError` where nothing can suspend, and what
 * encoding the state throws (not JSON): the work then counts as failed.
 */
function suspensionFor(
  runtime: EngineRuntime,
  policy: ExecutionPolicy,
  answer: SuspendedAnswer,
  work: CallWork<unknown>,
): Omit<Suspension, 'answer'> {
  if (!runtime.store.continuations) {
    throw new IdempotencyConfigError(
      `${policy.where}: ctx.suspend needs a store with continuations (store.continuations); this store has none`,
    );
  }
  if (!work.suspended) {
    throw new IdempotencyConfigError(
      `${policy.where}: ctx.suspend works on HTTP routes and the engine; this handler's caller could not be given its continuation`,
    );
  }
  return {
    continuation: newContinuationId(),
    state: encodeValue(answer.state),
    holdMs: answer.holdMs,
  };
}

/** The suspension's answer was captured: the record keeps it, and the caller gets it with its token. */
async function suspend<T>(
  runtime: EngineRuntime,
  policy: ExecutionPolicy,
  execution: Holding,
  value: T,
  suspension: Suspension,
  token: string,
): Promise<CallOutcome<T>> {
  try {
    await execution.suspend(suspension);
  } catch (error) {
    runtime.logger.error(
      `${policy.where}: suspending ${execution.keyDigest} failed: ${describeError(error)}`,
    );
    const detail = `the request was suspended, but its record could not keep the suspension (${describeError(error)}); its continuation cannot be resumed`;
    return {
      kind: 'executed',
      value,
      failure: {
        refusal: { code: 'idempotency-completion-failed', detail },
        error: new IdempotencyCompletionError(detail, policy.scope, execution.keyDigest),
      },
    };
  }
  return { kind: 'executed', value, continuation: token };
}

/** The work's `capture`, where a throw (or a rejection) is `not-storable`; without a promise of its own. */
function captureOf<T>(work: CallWork<T>, value: T, execution: Holding): Capture | Promise<Capture> {
  try {
    const capture = work.capture(value, () => execution.keyDigest);
    return capture instanceof Promise ? capture.then(undefined, notStorable) : capture;
  } catch (error) {
    return notStorable(error);
  }
}

function notStorable(error: unknown): Capture {
  return { kind: 'not-storable', reason: (error as Error).message, cause: error };
}

async function complete<T>(
  runtime: EngineRuntime,
  policy: ExecutionPolicy,
  execution: Holding,
  value: T,
  payload: StoredPayload,
): Promise<CallOutcome<T>> {
  try {
    await execution.complete(payload);
    return { kind: 'executed', value };
  } catch (error) {
    if (error instanceof IdempotencyPayloadError) {
      // Too large for the store: the record says so (completed without a result).
      runtime.logger.error(`${policy.where}: ${error.message}`);
      return {
        kind: 'executed',
        value,
        failure: { refusal: { code: 'idempotency-result-not-storable' }, error },
      };
    }
    if (!(error instanceof IdempotencyCompletionError)) throw error;
    runtime.logger.error(`${policy.where}: ${error.message}`);
    if (policy.onCompletionFailure === 'return') {
      runtime.logger.warn(
        `${policy.where}: onCompletionFailure is 'return', so the caller gets the handler's response although its outcome was not recorded; ${execution.keyDigest} stays IN_PROGRESS and a retry after its lease may run the handler again`,
      );
      return { kind: 'executed', value };
    }
    return {
      kind: 'executed',
      value,
      failure: { refusal: { code: 'idempotency-completion-failed', detail: error.message }, error },
    };
  }
}

/**
 * The caller was answered before the work returned. The work ran, so strict
 * mode completes its record without a result (a retry is refused rather than
 * run again); otherwise the key is released.
 */
async function answeredEarly(
  runtime: EngineRuntime,
  policy: ExecutionPolicy,
  execution: Holding,
): Promise<void> {
  const { logger } = runtime;
  if (!policy.strict) {
    logger.warn(
      `${policy.where}: the response was sent before the handler returned (an interceptor answered first); ${execution.keyDigest} was released`,
    );
    return execution.release('answered-early');
  }
  logger.warn(
    `${policy.where}: the response was sent before the handler returned (an interceptor answered first); strict mode completes ${execution.keyDigest} without a result, so a retry is refused rather than run again`,
  );
  try {
    await execution.completeNotStorable('the response was sent before the handler returned');
  } catch (error) {
    logger.error(`${policy.where}: ${(error as Error).message}`);
  }
}

/**
 * `completion: 'transaction'`: the work runs in a transaction that stays open
 * until its result is captured, then completes the record in it and commits
 * (see `Execution.runInTransaction` for what each failure leaves behind).
 * Every failure after the work returned is a refusal: nothing it wrote
 * remains.
 */
async function runInTransaction<T>(
  runtime: EngineRuntime,
  policy: ExecutionPolicy,
  execution: Execution,
  context: IdempotencyContext,
  work: CallWork<T>,
  runner: TransactionRunner,
): Promise<CallOutcome<T>> {
  let returned = false;
  let early = false;
  try {
    const value = await execution.runInTransaction(
      runner,
      async (tx) => {
        const value = await invoke(work, new RecordedRun(execution, context, tx));
        if (isSuspendedAnswer(value)) {
          // Rolled back, as the work's own failure: a suspension keeps nothing of a transaction.
          throw new IdempotencyConfigError(
            `${policy.where}: ctx.suspend cannot be used with completion: 'transaction' (a suspension commits nothing); use completion: 'separate'`,
          );
        }
        returned = true;
        work.returned?.(value);
        const capture = await captureOf(work, value, execution);
        if (capture.kind === 'answered-early') {
          early = true;
          throw new AnsweredEarly();
        }
        if (capture.kind === 'not-storable') {
          throw new IdempotencyPayloadError(
            `the result for ${execution.keyDigest} cannot be stored (${capture.reason}); the transaction was rolled back`,
            { cause: capture.cause },
          );
        }
        return { value, payload: capture.payload };
      },
      () => work.entered?.() ?? true,
    );
    return { kind: 'executed', value };
  } catch (error) {
    // The work's own error: rolled back, and the key free again (strict: AMBIGUOUS).
    if (!returned) throw error;
    if (early) {
      runtime.logger.warn(
        `${policy.where}: the response was sent before the handler returned (an interceptor answered first); its transaction was rolled back and ${execution.keyDigest} ${policy.strict && (work.entered?.() ?? true) ? 'made AMBIGUOUS (strict mode)' : 'released'}`,
      );
      return { kind: 'executed', value: undefined as T };
    }
    return {
      kind: 'executed',
      value: undefined as T,
      failure: {
        refusal: transactionRefusal(runtime, policy, execution, error),
        error: error as Error,
      },
    };
  }
}

/**
 * What the caller of a transactional completion that did not commit is told.
 * Strict mode keeps the key where the work ran and the commit failed (the
 * record is AMBIGUOUS), so nothing invites a retry there.
 */
function transactionRefusal(
  runtime: EngineRuntime,
  policy: ExecutionPolicy,
  execution: Execution,
  error: unknown,
): Refusal {
  const { logger } = runtime;
  const kept = keptAmbiguous(error) || (policy.strict && error instanceof IdempotencyPayloadError);
  const outcome = kept
    ? 'its writes were rolled back, and strict mode keeps the key until the outcome is resolved'
    : 'nothing happened';
  if (error instanceof IdempotencyLeaseLostError) {
    // Strict mode steals no lease: one that ran out was moved to AMBIGUOUS by a duplicate,
    // so a retry is refused until the record is resolved. Otherwise a newer attempt holds
    // the key, and this one left nothing behind.
    return policy.strict
      ? { code: 'idempotency-outcome-unknown', detail: LOST_IN_STRICT_MODE }
      : {
          code: 'idempotency-in-flight',
          retryAfterMs: TAKEN_OVER_RETRY_MS,
          scope: policy.scope,
          keyDigest: execution.keyDigest,
        };
  }
  if (error instanceof IdempotencyPayloadError) {
    logger.error(`${policy.where}: ${(error as Error).message}`);
    return {
      code: 'idempotency-result-not-storable',
      detail: `the result could not be recorded for replay, so its writes were rolled back; ${outcome}`,
    };
  }
  logger.warn(
    `${policy.where}: the transaction for ${execution.keyDigest} did not commit: ${(error as Error).message}`,
  );
  if (kept) {
    return {
      code: 'idempotency-store-unavailable',
      detail: `the request did not commit; ${outcome}`,
    };
  }
  return {
    code: 'idempotency-store-unavailable',
    detail: 'the request did not commit; nothing happened; retry later',
    retryAfterMs:
      error instanceof IdempotencyStoreUnavailableError ? error.retryAfterMs : TAKEN_OVER_RETRY_MS,
  };
}

/** How soon a caller whose attempt lost its key to a newer owner may retry (to be replayed). */
const TAKEN_OVER_RETRY_MS = 1000;

/**
 * What a caller is told when, in strict mode with `completion: 'transaction'`,
 * its lease was lost before the commit: its writes rolled back, and the
 * record (moved to AMBIGUOUS by a duplicate that found the lease run out)
 * refuses a retry until it is resolved.
 */
export const LOST_IN_STRICT_MODE =
  "this request's lease on its idempotency key ran out before its transaction committed, so its writes were rolled back; strict mode has made the key's outcome unknown, and it is not processed again until the record is resolved";

/**
 * Observe mode: the work runs whatever the record says, its result goes out
 * as it is, and an `observed` event says what enforce mode would have done.
 * A first execution is still recorded, so later duplicates can be told.
 */
async function observe<T>(
  runtime: EngineRuntime,
  policy: ExecutionPolicy,
  request: CallRequest,
  work: CallWork<T>,
): Promise<CallOutcome<T>> {
  const { identity } = request;
  const report = (wouldHave: ObservedOutcome, key?: string, tenant?: string) =>
    runtime.emit(() => ({
      type: 'observed',
      scope: policy.scope,
      ...(key === undefined ? {} : { keyDigest: keyDigest(policy.scope, key, tenant) }),
      wouldHave,
    }));
  const unrecorded = async (): Promise<CallOutcome<T>> => ({
    kind: 'executed',
    value: await invokeUnrecorded(work),
  });
  if (identity.kind === 'refused') {
    report(
      identity.refusal.code === 'idempotency-body-unreadable' ? 'body-unreadable' : 'key-invalid',
    );
    return unrecorded();
  }
  if (identity.kind === 'absent') {
    if (request.required) report('key-missing');
    return unrecorded();
  }
  const { key, tenant } = identity;
  let begun;
  try {
    begun = await begin(runtime, policy, identity, { observing: true });
  } catch (error) {
    const refusal = refusalOf(error);
    switch (refusal?.code) {
      case 'idempotency-in-flight':
        report('in-flight', key, tenant);
        break;
      case 'idempotency-key-reused':
        report('fingerprint-mismatch', key, tenant);
        break;
      case 'idempotency-key-invalid':
        report('key-invalid');
        break;
      case 'idempotency-store-unavailable':
        report('store-unavailable', key, tenant);
        break;
      default:
        throw error;
    }
    return unrecorded();
  }
  if (begun.kind === 'replayed') {
    report('replayed', key, tenant);
    return unrecorded();
  }
  const { execution, context } = begun;
  let value: T;
  try {
    value = await invokeUnrecorded(work, true, context);
  } catch (error) {
    await execution.release('action-failed');
    throw error;
  }
  // Observe mode keeps nothing for a resumption: the caller gets the answer, and the record is released.
  if (isSuspendedAnswer(value)) {
    await execution.release('action-failed');
    return { kind: 'executed', value: value.answer as T };
  }
  work.returned?.(value);
  try {
    const capture = await captureOf(work, value, execution);
    if (capture.kind === 'stored') await execution.complete(capture.payload);
    else if (capture.kind === 'not-storable') await execution.completeNotStorable(capture.reason);
    else await execution.release('answered-early');
  } catch (error) {
    // Observing never changes what the caller gets.
    runtime.logger.warn(
      `${policy.where}: observe mode could not record ${execution.keyDigest}: ${describeError(error)}`,
    );
  }
  return { kind: 'executed', value };
}
