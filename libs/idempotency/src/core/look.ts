import { IdempotencyContext } from './context';
import { IdempotencyFingerprintMismatchError, IdempotencyInFlightError } from './errors';
import { fingerprintsConflict } from './decide';
import { describeError } from './error-text';
import { Execution } from './execution';
import { continuationToken } from './continuation';
import { assertValidKey, keyDigest, recordLocator, storedScope } from './key';
import { chainOfRecord } from './receipt-writer';
import type { ExecutionPolicy } from './policy';
import type { EngineRuntime } from './runtime';
import { answerAmbiguous, assertStrictModeSupported } from './strict';
import { RecordedSteps, UNRECORDED_STEPS } from './steps';
import type { Lease, StoredPayload } from './store';

/**
 * The look: the first step of every call. Validates the key, asks the store
 * for the record (the store may wait for a holder's outcome), and hands back
 * either the stored payload of a completed record or an `Execution` that
 * the caller must end. Strict mode's AMBIGUOUS records are answered here
 * (./strict.ts).
 */

/** One call: which key, and what identifies the request behind it. */
export interface CallOptions {
  key: string;
  /** A record first taken with another fingerprint refuses this call (`IdempotencyFingerprintMismatchError`). */
  fingerprint?: string | null;
  /** The principal the call acts for: part of the record's identity, never logged. */
  tenant?: string;
  /**
   * The tenant was applied by default (from the caller's identity), where
   * earlier versions applied none: a first execution is first answered from
   * a completed record of the same key written without a tenant, so a key
   * used before the upgrade and retried after it is not run again.
   */
  untenantedFallback?: boolean;
}

/**
 * What `begin` found: the record is ours to run (with the context its work
 * is handed), or it was already completed.
 */
export type BeginOutcome =
  | { kind: 'acquired'; execution: Execution; context: IdempotencyContext }
  /** `continuation`: the record is SUSPENDED; `payload` is its answer, and this its token. */
  | { kind: 'replayed'; payload: StoredPayload; completedAt: Date; continuation?: string };

/**
 * Validates the key, acquires (the store may wait for a holder's outcome), and either hands back the stored
 * payload of a completed record or an `Execution` that the caller must end
 * with `complete(payload)` or `release()`. Throws
 * `IdempotencyInFlightError` (still held after the wait),
 * `IdempotencyFingerprintMismatchError`, `IdempotencyKeyError` and the
 * store's `IdempotencyStoreUnavailableError`.
 *
 * `options.observing`: observe mode, where the caller runs the action
 * whatever the record says and reports an `observed` event itself; the
 * `replayed`, `in-flight` and `fingerprint-mismatch` events, which would
 * count refusals and replays that never happened, are not emitted.
 */
export async function begin(
  runtime: EngineRuntime,
  policy: ExecutionPolicy,
  call: CallOptions,
  options: { observing?: boolean } = {},
): Promise<BeginOutcome> {
  const emit = options.observing ? () => {} : runtime.emit;
  // The digest in its messages is the one events and logs use for this record.
  assertValidKey(policy.where, call.key, policy.maxKeyLength, (key) =>
    keyDigest(policy.scope, key, call.tenant),
  );
  if (policy.strict) assertStrictModeSupported(policy, runtime.store);
  const startedAt = performance.now();
  const result = await runtime.store.tryAcquire({
    scope: storedScope(policy.scope, call.tenant),
    key: call.key,
    leaseMs: policy.leaseMs,
    waitTimeoutMs: policy.waitTimeoutMs,
    ttlMs: policy.ttlMs,
    fingerprint: call.fingerprint ?? null,
    onExpiredLease: policy.strict ? 'refuse' : 'steal',
  });
  // Only outcomes that log or emit need the digest; a replay usually does not.
  const { key, tenant } = call;
  const digest = () => keyDigest(policy.scope, key, tenant);
  if (result.waitedMs !== undefined) {
    const waitedMs = result.waitedMs;
    runtime.emit(() => ({
      type: 'waited',
      scope: policy.scope,
      keyDigest: digest(),
      waitedMs,
    }));
  }
  switch (result.kind) {
    case 'duplicate':
      emit(() => ({
        type: 'replayed',
        scope: policy.scope,
        keyDigest: digest(),
        acquireMs: performance.now() - startedAt,
      }));
      return { kind: 'replayed', payload: result.payload, completedAt: result.completedAt };
    case 'acquired': {
      if (call.untenantedFallback && call.tenant !== undefined && result.stolen !== true) {
        const earlier = await untenantedReplay(runtime, policy, call, result.lease);
        if (earlier) {
          emit(() => ({
            type: 'replayed',
            scope: policy.scope,
            keyDigest: digest(),
            acquireMs: performance.now() - startedAt,
          }));
          return earlier;
        }
      }
      // The digest is computed when a log line or an event first needs it, then kept.
      const execution = new Execution(
        runtime,
        policy.scope,
        digest,
        result.lease,
        policy,
        runtime.receipts ? chainOfRecord(storedScope(policy.scope, tenant), key) : undefined,
      );
      const context = new IdempotencyContext(
        { scope: policy.scope, key, tenant },
        result.stolen === true ? 'takeover' : 'first',
        () => execution.keyDigest,
        runtime.derivedKeys,
        options.observing
          ? UNRECORDED_STEPS
          : new RecordedSteps(runtime, policy.scope, () => execution.keyDigest, result.lease),
      );
      runtime.emit(() => ({
        type: 'acquired',
        scope: policy.scope,
        keyDigest: execution.keyDigest,
        acquireMs: performance.now() - startedAt,
        stolen: result.stolen === true,
      }));
      return { kind: 'acquired', execution, context };
    }
    case 'in-flight': {
      // The store knows the lease left; this process knows how long the scope's actions take.
      const retryAfterMs = runtime.durations.retryAfterMs(policy.scope, result.retryAfterMs);
      const error = new IdempotencyInFlightError(retryAfterMs, policy.scope, digest());
      emit(() => ({
        type: 'in-flight',
        scope: policy.scope,
        keyDigest: error.keyDigest,
        retryAfterMs,
        acquireMs: performance.now() - startedAt,
      }));
      throw error;
    }
    case 'fingerprint-mismatch': {
      const error = new IdempotencyFingerprintMismatchError(policy.scope, digest());
      emit(() => ({
        type: 'fingerprint-mismatch',
        scope: policy.scope,
        keyDigest: error.keyDigest,
      }));
      throw error;
    }
    case 'ambiguous': {
      // Strict mode: ask the reconcile hook, or refuse (IdempotencyOutcomeUnknownError).
      const id = { scope: storedScope(policy.scope, tenant), key };
      const answer = await answerAmbiguous(runtime, policy, id, result, digest(), startedAt);
      return answer.kind === 'acquire-again' ? begin(runtime, policy, call, options) : answer;
    }
    case 'suspended': {
      // The same answer as the suspended caller got, with the same token.
      emit(() => ({ type: 'suspension-replayed', scope: policy.scope, keyDigest: digest() }));
      const locator = recordLocator(storedScope(policy.scope, tenant), key);
      return {
        kind: 'replayed',
        payload: result.answer,
        completedAt: new Date(),
        continuation: continuationToken(locator, result.continuation),
      };
    }
    default:
      return assertNever(result);
  }
}

/**
 * A key first used before its tenant was applied by default has its record
 * under the scope alone. A first execution under the tenant's scope looks
 * there once; a completed record found is answered (the lease just taken is
 * given back) as the key's owner would have been answered before the
 * upgrade. Records written that way expire with their TTL.
 */
async function untenantedReplay(
  runtime: EngineRuntime,
  policy: ExecutionPolicy,
  call: CallOptions,
  lease: Lease,
): Promise<BeginOutcome | undefined> {
  const { store } = runtime;
  let found;
  try {
    found = await store.find({ scope: policy.scope, key: call.key });
  } catch (error) {
    await store.release(lease).catch(() => undefined);
    throw error;
  }
  if (found?.state !== 'COMPLETE' || found.payload === undefined) return undefined;
  try {
    await store.release(lease);
  } catch (error) {
    // Its lease lapses instead; the earlier record still answers.
    runtime.logger.warn(
      `release of ${keyDigest(policy.scope, call.key, call.tenant)} failed; its lease will lapse instead: ${describeError(error)}`,
    );
  }
  if (fingerprintsConflict(call.fingerprint ?? null, found.fingerprint)) {
    throw new IdempotencyFingerprintMismatchError(
      policy.scope,
      keyDigest(policy.scope, call.key, call.tenant),
    );
  }
  return { kind: 'replayed', payload: found.payload, completedAt: found.completedAt ?? new Date() };
}

function assertNever(value: never): never {
  throw new Error(`unexpected acquire result ${JSON.stringify(value)}`);
}
