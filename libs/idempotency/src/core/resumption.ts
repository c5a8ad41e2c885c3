import { parseContinuationToken } from './continuation';
import { IdempotencyContext } from './context';
import { describeError } from './error-text';
import { IdempotencyConfigError, IdempotencyResumptionRefusedError } from './errors';
import { Execution, type CompletionResult, type Holding } from './execution';
import { storedKeyDigest, storedScope } from './key';
import type { ExecutionPolicy } from './policy';
import { chainOfRecord } from './receipt-writer';
import { refusalOf, type Refusal } from './refusal';
import type { EngineRuntime } from './runtime';
import { RecordedSteps } from './steps';
import type { StoredPayload, Suspension } from './store';

/**
 * A resumption (`@Idempotent({ resumes })`, `engine.resume`): the token is
 * consumed by the store in the same operation that admits it, the work runs
 * holding the suspended record (with the state its suspension saved), and
 * its result completes that record. A call with a key of its own holds its
 * own record too, completed with the same result, so a retry of the
 * resumption replays rather than presenting a consumed token.
 */
export async function admitResumption(
  runtime: EngineRuntime,
  policy: ExecutionPolicy,
  resumes: { scope: string; token: string | undefined },
  own: { execution: Execution; tenant: string | undefined } | undefined,
): Promise<Admission> {
  const continuations = runtime.store.continuations;
  if (!continuations) {
    await own?.execution.release('resumption-refused');
    throw new IdempotencyConfigError(
      `${policy.where}: resumes needs a store with continuations (store.continuations); this store has none`,
    );
  }
  const refuse = async (
    reason: IdempotencyResumptionRefusedError['reason'],
  ): Promise<Admission> => {
    await own?.execution.release('resumption-refused');
    runtime.emit(() => ({ type: 'resumption-refused', scope: resumes.scope, reason }));
    const error = new IdempotencyResumptionRefusedError(resumes.scope, reason);
    return { kind: 'refused', refusal: { code: 'idempotency-resumption-refused', error }, error };
  };
  const parsed = parseContinuationToken(resumes.token);
  if (parsed === undefined) return refuse('invalid');
  let result;
  try {
    result = await continuations.resume({
      scope: storedScope(resumes.scope, own?.tenant),
      locator: parsed.locator,
      continuation: parsed.continuation,
      leaseMs: policy.leaseMs,
      ttlMs: policy.ttlMs,
    });
  } catch (error) {
    await own?.execution.release('resumption-refused');
    const refusal = refusalOf(error);
    if (refusal === undefined) throw error;
    runtime.logger.warn(`${policy.where}: resuming failed: ${describeError(error)}`);
    return { kind: 'refused', refusal, error: error as Error };
  }
  if (result.kind !== 'admitted') return refuse(result.kind);
  const { scope: stored, key } = result.id;
  const lease = result.lease;
  const digest = storedKeyDigest(stored, key);
  const execution = new Execution(
    runtime,
    resumes.scope,
    digest,
    lease,
    policy,
    runtime.receipts ? chainOfRecord(stored, key) : undefined,
  );
  const context = new IdempotencyContext(
    { scope: resumes.scope, key, tenant: tenantOf(stored, resumes.scope) },
    'resumption',
    () => digest,
    runtime.derivedKeys,
    new RecordedSteps(runtime, resumes.scope, () => digest, lease),
    result.state,
  );
  runtime.emit(() => ({ type: 'resumed', scope: resumes.scope, keyDigest: digest }));
  const holding = own ? new ResumedPair(runtime, execution, own.execution) : execution;
  return { kind: 'admitted', holding, context };
}

/** A resumption admitted (holding the suspended record, and its own if it has a key), or refused. */
export type Admission =
  | { kind: 'admitted'; holding: Holding; context: IdempotencyContext }
  | { kind: 'refused'; refusal: Refusal; error: Error };

/** The tenant a stored scope carries after the handler's scope, if any. */
function tenantOf(stored: string, scope: string): string | undefined {
  return stored === scope ? undefined : stored.slice(storedScope(scope, '').length);
}

/**
 * The suspended record a resumption holds, and the resumption's own record:
 * ended together, the suspended one first (it is what the result is for).
 * The own record's failures are logged: the result stands on the other.
 */
class ResumedPair implements Holding {
  constructor(
    private readonly runtime: EngineRuntime,
    private readonly resumed: Execution,
    private readonly own: Execution,
  ) {}

  get keyDigest(): string {
    return this.resumed.keyDigest;
  }

  get signal(): AbortSignal {
    return this.resumed.signal;
  }

  async complete(payload: StoredPayload): Promise<CompletionResult> {
    const result = await this.resumed.complete(payload).catch(async (error: unknown) => {
      await this.own.release('action-failed');
      throw error;
    });
    await this.quietly(this.own.complete(payload));
    return result;
  }

  async completeNotStorable(reason: string): Promise<CompletionResult> {
    const result = await this.resumed.completeNotStorable(reason);
    await this.quietly(this.own.completeNotStorable(reason));
    return result;
  }

  async release(reason?: 'action-failed' | 'answered-early' | 'resumption-refused'): Promise<void> {
    await this.resumed.release(reason);
    await this.own.release(reason);
  }

  async fail(error: unknown, entered?: boolean): Promise<void> {
    await this.resumed.fail(error, entered);
    await this.own.fail(error, entered);
  }

  async suspend(suspension: Suspension): Promise<void> {
    await this.resumed.suspend(suspension).catch(async (error: unknown) => {
      await this.own.release('action-failed');
      throw error;
    });
    await this.quietly(this.own.complete(suspension.answer));
  }

  private async quietly(ending: Promise<unknown>): Promise<void> {
    try {
      await ending;
    } catch (error) {
      this.runtime.logger.warn(
        `the resumption's own record ${this.own.keyDigest} could not be ended: ${describeError(error)}`,
      );
    }
  }
}
