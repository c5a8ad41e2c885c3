import {
  IdempotencyCompletionError,
  IdempotencyConfigError,
  IdempotencyFingerprintMismatchException,
  IdempotencyInFlightException,
  IdempotencyPayloadError,
} from './errors';
import type { IdempotencyEvent, IdempotencyEventListener } from './events';
import { CompletionRetryOptions, describeError, Execution, ExecutionContext } from './execution';
import { assertValidKey, keyDigest, storedScope } from './key';
import type { IdempotencyLogger } from './logger';
import { decodeValue, encodeValue } from './payload';
import { compilePolicy, ExecutionPolicy, PolicyOptions } from './policy';
import { answerAmbiguous, assertStrictModeSupported } from './strict';
import type {
  IdempotencyStore,
  StoredPayload,
  TransactionalCompletion,
  TransactionRunner,
} from './store';

/** One call: which key, and what identifies the request behind it. */
export interface CallOptions {
  key: string;
  /** A record first taken with another fingerprint refuses this call (`IdempotencyFingerprintMismatchException`). */
  fingerprint?: string | null;
  /** The principal the call acts for: part of the record's identity, never logged. */
  tenant?: string;
}

/** A whole request for `execute`: the policy and the call in one object. */
export interface ExecuteRequest extends PolicyOptions, CallOptions {}

export type ExecuteOutcome<T> =
  { kind: 'executed'; value: T } | { kind: 'replayed'; value: T; completedAt: Date };

/** What `begin` found: the record is ours to run, or it was already completed. */
export type BeginOutcome =
  | { kind: 'acquired'; execution: Execution }
  | { kind: 'replayed'; payload: StoredPayload; completedAt: Date };

export interface IdempotencyEngineOptions {
  logger?: IdempotencyLogger;
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
 *
 *   const engine = new IdempotencyEngine(store);
 *   const charge = engine.policy({ scope: 'charges', ttl: 'P1D' });   // checked once
 *   const outcome = await engine.run(charge, { key }, async (signal) => chargeCard(signal));
 */
export class IdempotencyEngine {
  private readonly listeners = new Set<IdempotencyEventListener>();
  private readonly context: ExecutionContext;

  constructor(
    readonly store: IdempotencyStore,
    options: IdempotencyEngineOptions = {},
  ) {
    this.context = {
      store,
      logger: options.logger ?? consoleLogger,
      retry: { ...DEFAULT_RETRY, ...options.completionRetry },
      // Events are built only when someone listens: the hot path allocates nothing for them.
      emit: (event) => {
        if (this.listeners.size > 0) this.dispatch(event());
      },
    };
  }

  /** Hands `event` to the listeners (for the parts of the library that act beside the engine, such as the purge). */
  publish(event: IdempotencyEvent): void {
    if (this.listeners.size > 0) this.dispatch(event);
  }

  /** Subscribes to engine events; returns the unsubscribe function. */
  onEvent(listener: IdempotencyEventListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Checks and parses a scope's rules once (throws `IdempotencyConfigError`); reuse it for every call. */
  policy(options: PolicyOptions, where?: string): ExecutionPolicy {
    const policy = compilePolicy(options, where);
    assertStrictModeSupported(policy, this.context.store);
    return policy;
  }

  /**
   * Runs `action` once per (scope, key), storing its value as JSON; a replay
   * gets the stored value back (class instances as plain objects). Parses the
   * request's policy on every call: prefer `policy()` once and `run()`.
   */
  async execute<T>(
    request: ExecuteRequest,
    action: (signal: AbortSignal) => Promise<T>,
  ): Promise<ExecuteOutcome<T>> {
    return this.run(compilePolicy(request), request, action);
  }

  /** `execute` with a policy compiled once. The executing caller gets the value as the action returned it. */
  async run<T>(
    policy: ExecutionPolicy,
    call: CallOptions,
    action: (signal: AbortSignal) => Promise<T>,
  ): Promise<ExecuteOutcome<T>> {
    const begun = await this.begin(policy, call);
    if (begun.kind === 'replayed') {
      return {
        kind: 'replayed',
        value: decodeValue(begun.payload) as T,
        completedAt: begun.completedAt,
      };
    }
    const { execution } = begun;
    let value: T;
    try {
      value = await action(execution.signal);
    } catch (error) {
      // Released; in strict mode AMBIGUOUS unless the error says the action did not run.
      await execution.fail(error);
      throw error;
    }
    let payload: StoredPayload;
    try {
      payload = encodeValue(value);
    } catch (error) {
      // The action ran: its record must say so, or a duplicate would run it again.
      const reason = (error as Error).message;
      await execution.completeNotStorable(reason);
      throw new IdempotencyPayloadError(
        `${execution.keyDigest}: ${reason}; the action ran, so its record is completed without a result and a duplicate is refused`,
        { cause: error },
      );
    }
    try {
      await execution.complete(payload);
    } catch (error) {
      if (!(error instanceof IdempotencyCompletionError) || policy.onCompletionFailure !== 'return')
        throw error;
      // onCompletionFailure: 'return': the caller gets the value; the record stays IN_PROGRESS.
      this.context.logger.warn(
        `${error.message}; onCompletionFailure: 'return' hands the caller its value anyway`,
      );
    }
    return { kind: 'executed', value };
  }

  /**
   * `run`, with the action's writes and the record's completion in one
   * database transaction (the store must support it: `store.transactional`,
   * e.g. `TypeOrmIdempotencyStore` on PostgreSQL). The action gets the
   * transaction handle (a TypeORM `EntityManager`) and must write through it.
   * `options.transaction` runs the work in a transaction of your own making
   * (for instance one your framework already opened); by default the store
   * opens one. See `Execution.runInTransaction` for what each failure means.
   */
  async runInTransaction<T, Tx = unknown>(
    policy: ExecutionPolicy,
    call: CallOptions,
    action: (tx: Tx, signal: AbortSignal) => Promise<T>,
    options: { transaction?: TransactionRunner<Tx> } = {},
  ): Promise<ExecuteOutcome<T>> {
    const transactional = this.store.transactional as TransactionalCompletion<Tx> | undefined;
    if (!transactional) {
      throw new IdempotencyConfigError(
        `${policy.where}: runInTransaction needs a store that completes inside a database transaction (store.transactional, e.g. TypeOrmIdempotencyStore on PostgreSQL); this store does not`,
      );
    }
    const begun = await this.begin(policy, call);
    if (begun.kind === 'replayed') {
      return {
        kind: 'replayed',
        value: decodeValue(begun.payload) as T,
        completedAt: begun.completedAt,
      };
    }
    const { execution } = begun;
    const runner: TransactionRunner<Tx> =
      options.transaction ?? ((work) => transactional.transaction(work));
    const value = await execution.runInTransaction(runner, async (tx) => {
      const value = await action(tx, execution.signal);
      let payload: StoredPayload;
      try {
        payload = encodeValue(value);
      } catch (error) {
        // Nothing is committed: the writes roll back with the record's completion.
        throw new IdempotencyPayloadError(
          `${execution.keyDigest}: ${(error as Error).message}; the transaction was rolled back`,
          { cause: error },
        );
      }
      return { value, payload };
    });
    return { kind: 'executed', value };
  }

  /**
   * The low-level step adapters build on: validates the key, acquires (the
   * store may wait for a holder's outcome), and either hands back the stored
   * payload of a completed record or an `Execution` that the caller must end
   * with `complete(payload)` or `release()`. Throws
   * `IdempotencyInFlightException` (still held after the wait),
   * `IdempotencyFingerprintMismatchException`, `IdempotencyKeyError` and the
   * store's `IdempotencyStoreUnavailableError`.
   *
   * `options.observing`: observe mode, where the caller runs the action
   * whatever the record says and reports an `observed` event itself; the
   * `replayed`, `in-flight` and `fingerprint-mismatch` events, which would
   * count refusals and replays that never happened, are not emitted.
   */
  async begin(
    policy: ExecutionPolicy,
    call: CallOptions,
    options: { observing?: boolean } = {},
  ): Promise<BeginOutcome> {
    const emit = options.observing ? () => {} : this.context.emit;
    // The digest in its messages is the one events and logs use for this record.
    assertValidKey(policy.where, call.key, policy.maxKeyLength, (key) =>
      keyDigest(policy.scope, key, call.tenant),
    );
    if (policy.strict) assertStrictModeSupported(policy, this.context.store);
    const startedAt = performance.now();
    const result = await this.context.store.tryAcquire({
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
      this.context.emit(() => ({
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
        // The digest is computed when a log line or an event first needs it, then kept.
        const execution = new Execution(this.context, policy.scope, digest, result.lease, policy);
        this.context.emit(() => ({
          type: 'acquired',
          scope: policy.scope,
          keyDigest: execution.keyDigest,
          acquireMs: performance.now() - startedAt,
          stolen: result.stolen === true,
        }));
        return { kind: 'acquired', execution };
      }
      case 'in-flight': {
        const error = new IdempotencyInFlightException(result.retryAfterMs, policy.scope, digest());
        emit(() => ({
          type: 'in-flight',
          scope: policy.scope,
          keyDigest: error.keyDigest,
          retryAfterMs: result.retryAfterMs,
          acquireMs: performance.now() - startedAt,
        }));
        throw error;
      }
      case 'fingerprint-mismatch': {
        const error = new IdempotencyFingerprintMismatchException(policy.scope, digest());
        emit(() => ({
          type: 'fingerprint-mismatch',
          scope: policy.scope,
          keyDigest: error.keyDigest,
        }));
        throw error;
      }
      case 'ambiguous': {
        // Strict mode: ask the reconcile hook, or refuse (IdempotencyOutcomeUnknownException).
        const id = { scope: storedScope(policy.scope, tenant), key };
        const answer = await answerAmbiguous(this.context, policy, id, result, digest(), startedAt);
        return answer.kind === 'acquire-again' ? this.begin(policy, call, options) : answer;
      }
      default:
        return assertNever(result);
    }
  }

  private dispatch(event: IdempotencyEvent): void {
    for (const listener of this.listeners) {
      try {
        listener(event);
      } catch (error) {
        this.context.logger.error(`idempotency event listener threw: ${describeError(error)}`);
      }
    }
  }
}

function assertNever(value: never): never {
  throw new Error(`unexpected acquire result ${JSON.stringify(value)}`);
}
