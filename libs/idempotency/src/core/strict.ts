import {
  IdempotencyConfigError,
  IdempotencyNotExecutedError,
  IdempotencyOutcomeUnknownError,
} from './errors';
import { describeError } from './error-text';
import type { EngineRuntime } from './runtime';
import { encodeValue } from './payload';
import type { ExecutionPolicy, ReconcileAnswer } from './policy';
import { appendReceipt, chainOfRecord } from './receipt-writer';
import { withUnknownStep } from './steps';
import type { AmbiguousRecord, IdempotencyStore, StoredPayload } from './store';

/**
 * Strict mode in the engine: what the contender that finds an AMBIGUOUS
 * record does (ask the `reconcile` hook, resolve, replay or run), and
 * whether an action's error means it ran.
 */

/** Who a resolution by the `reconcile` hook is recorded as. */
export const RECONCILE_RESOLVER = 'reconcile';

/** Refuses strict mode on a store that does not declare it, naming where the policy came from. */
export function assertStrictModeSupported(policy: ExecutionPolicy, store: IdempotencyStore): void {
  if (policy.strict && !store.strictMode) {
    throw new IdempotencyConfigError(
      `${policy.where}: onExpiredLease: 'refuse' (strict mode) needs a store that supports it (store.strictMode: the in-memory, Redis and TypeORM stores); this store does not`,
    );
  }
}

/**
 * True when an action's error is known not to have executed: an
 * `IdempotencyNotExecutedError` in its cause chain, or the policy's
 * `notExecuted` predicate says so (a predicate that throws says no).
 */
export function isNotExecuted(
  policy: Pick<ExecutionPolicy, 'notExecuted'>,
  error: unknown,
  logger: EngineRuntime['logger'],
): boolean {
  if (IdempotencyNotExecutedError.isIn(error)) return true;
  if (!policy.notExecuted) return false;
  try {
    return policy.notExecuted(error) === true;
  } catch (thrown) {
    logger.error(`notExecuted threw; the error counts as executed: ${describeError(thrown)}`);
    return false;
  }
}

/** What the contender does next: replay the resolved payload, or acquire again (the record is gone). */
export type AmbiguousAnswer =
  { kind: 'replayed'; payload: StoredPayload; completedAt: Date } | { kind: 'acquire-again' };

/**
 * The record is AMBIGUOUS. With a `reconcile` hook the contender asks it:
 * `completed` resolves the record with the value and replays it,
 * `not-executed` resolves it (deleting it) so the caller acquires again, and
 * `unknown` (or a hook that throws) refuses. Without one, refuses. A record
 * resolved meanwhile by someone else is acquired again, to see what it is now.
 * Throws `IdempotencyOutcomeUnknownError` for a refusal.
 */
export async function answerAmbiguous(
  context: EngineRuntime,
  policy: ExecutionPolicy,
  id: { scope: string; key: string },
  given: AmbiguousRecord,
  keyDigest: string,
  acquireStartedAt: number,
): Promise<AmbiguousAnswer> {
  const { emit, logger, store } = context;
  const scope = policy.scope;
  const found = await withUnknownStep(context, id, given, keyDigest);
  const step = found.step === undefined ? {} : { step: found.step };
  if (found.transitioned) {
    logger.warn(
      `${keyDigest}: the holder's lease ran out and strict mode does not take it over; the record is AMBIGUOUS until it is resolved`,
    );
    emit(() => ({ type: 'ambiguous', scope, keyDigest, reason: found.reason, ...step }));
  }
  const answer =
    policy.reconcile && store.strictMode
      ? await ask(context, policy, id, found, keyDigest)
      : undefined;
  if (answer && answer.outcome !== 'unknown') {
    const strict = store.strictMode!;
    let payload: StoredPayload | undefined;
    if (answer.outcome === 'completed') {
      try {
        payload = encodeValue(answer.value);
      } catch (error) {
        logger.error(
          `${keyDigest}: reconcile answered completed with a value that cannot be stored (${describeError(error)}); the record stays AMBIGUOUS`,
        );
      }
    }
    if (answer.outcome === 'not-executed' || payload !== undefined) {
      const resolved = await strict.resolve(
        id,
        payload === undefined
          ? { outcome: 'not-executed', resolvedBy: RECONCILE_RESOLVER }
          : { outcome: 'completed', payload, ttlMs: policy.ttlMs, resolvedBy: RECONCILE_RESOLVER },
      );
      if (resolved.kind === 'not-ambiguous') return { kind: 'acquire-again' };
      if (context.receipts) {
        await appendReceipt(
          context,
          { scope, keyDigest, chain: chainOfRecord(id.scope, id.key) },
          payload === undefined ? 'resolved-not-executed' : 'resolved-completed',
          payload ?? null,
        );
      }
      emit(() => ({
        type: 'resolved',
        scope,
        keyDigest,
        outcome: answer.outcome as 'completed' | 'not-executed',
        resolver: RECONCILE_RESOLVER,
      }));
      if (payload === undefined) return { kind: 'acquire-again' };
      emit(() => ({
        type: 'replayed',
        scope,
        keyDigest,
        acquireMs: performance.now() - acquireStartedAt,
      }));
      return { kind: 'replayed', payload, completedAt: resolved.resolvedAt };
    }
  }
  emit(() => ({
    type: 'outcome-unknown',
    scope,
    keyDigest,
    reason: found.reason,
    ...step,
    acquireMs: performance.now() - acquireStartedAt,
  }));
  throw new IdempotencyOutcomeUnknownError(scope, keyDigest, found.since, found.reason, found.step);
}

async function ask(
  context: EngineRuntime,
  policy: ExecutionPolicy,
  id: { key: string },
  found: AmbiguousRecord,
  keyDigest: string,
): Promise<ReconcileAnswer> {
  try {
    const answer = await policy.reconcile!({
      scope: policy.scope,
      keyDigest,
      key: id.key,
      since: found.since,
      reason: found.reason,
      ...(found.step === undefined ? {} : { step: found.step }),
    });
    if (
      answer?.outcome === 'completed' ||
      answer?.outcome === 'not-executed' ||
      answer?.outcome === 'unknown'
    ) {
      return answer;
    }
    throw new Error(
      `it answered ${JSON.stringify(answer)}, not { outcome: 'completed' | 'not-executed' | 'unknown' }`,
    );
  } catch (error) {
    context.logger.error(
      `${keyDigest}: reconcile threw; the outcome stays unknown: ${describeError(error)}`,
    );
    context.emit(() => ({
      type: 'reconcile-failed',
      scope: policy.scope,
      keyDigest,
      error: describeError(error),
    }));
    return { outcome: 'unknown' };
  }
}
