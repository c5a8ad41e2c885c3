import type { IdempotencyContext } from './context';
import type { SuspendedAnswer } from './continuation';
import { compileDerivedKeys, type DerivedKeyOptions } from './derived-key';
import { IdempotencyConfigError, IdempotencyError } from './errors';
import { ScopeDurations } from './durations';
import type { IdempotencyEvent, IdempotencyEventListener } from './events';
import { describeError } from './error-text';
import {
  performCall,
  type CallOutcome,
  type CallRequest,
  type CallWork,
  type Capture,
} from './lifecycle';
import { begin, type BeginOutcome, type CallOptions } from './look';
import type { IdempotencyLogger } from './logger';
import { decodeValue, encodeValue } from './payload';
import { compilePolicy, ExecutionPolicy, PolicyOptions } from './policy';
import type { CompletionRetryOptions, EngineRuntime } from './runtime';
import { assertStrictModeSupported } from './strict';
import type { IdempotencyStore, TransactionalCompletion, TransactionRunner } from './store';

export type { BeginOutcome, CallOptions } from './look';

/** A whole request for `execute`: the policy and the call in one object. */
export interface ExecuteRequest extends PolicyOptions, CallOptions {}

export type ExecuteOutcome<T> =
  | { kind: 'executed'; value: Exclude<T, SuspendedAnswer> }
  | { kind: 'replayed'; value: Exclude<T, SuspendedAnswer>; completedAt: Date }
  /**
   * The action returned `ctx.suspend(answer, …)`, now or in an earlier call:
   * `value` is the answer, and `continuation` the token `resume` takes.
   */
  | { kind: 'suspended'; value: AnswerOf<T>; continuation: string };

/** What an action that returns `ctx.suspend(answer, …)` answers while suspended (never for one that does not). */
export type AnswerOf<T> = T extends SuspendedAnswer<infer A> ? A : never;

export interface IdempotencyEngineOptions {
  logger?: IdempotencyLogger;
  completionRetry?: Partial<CompletionRetryOptions>;
  /** How `IdempotencyContext.deriveKey` derives keys: `{ secret }` makes them unguessable from the raw key. */
  derivedKeys?: DerivedKeyOptions;
  /**
   * Append a receipt for every record that reaches a terminal state
   * (completed, released after a failure, resolved): see docs/receipts.md.
   * Needs a store that keeps them (`store.receipts`). Default false.
   */
  receipts?: boolean;
}

/**
 * The work of one idempotent call: `signal` aborts when the record's lease is
 * lost; `context` names the record and derives keys for the calls it makes.
 */
export type IdempotentAction<T> = (signal: AbortSignal, context: IdempotencyContext) => Promise<T>;

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
 *   const outcome = await engine.run(charge, { key }, async (signal, ctx) =>
 *     chargeCard({ idempotencyKey: ctx.deriveKey('charge'), signal }),
 *   );
 */
export class IdempotencyEngine {
  private readonly listeners = new Set<IdempotencyEventListener>();
  private readonly context: EngineRuntime;

  constructor(
    readonly store: IdempotencyStore,
    options: IdempotencyEngineOptions = {},
  ) {
    if (options.receipts !== undefined && typeof options.receipts !== 'boolean') {
      throw new IdempotencyConfigError(
        `IdempotencyEngine: receipts must be true or false, got ${JSON.stringify(options.receipts)}`,
      );
    }
    if (options.receipts && !store.receipts) {
      throw new IdempotencyConfigError(
        'IdempotencyEngine: receipts: true needs a store that keeps receipts (store.receipts: the in-memory, PostgreSQL, MySQL/MariaDB, TypeORM and Redis stores); this store does not',
      );
    }
    this.context = {
      store,
      receipts: options.receipts === true,
      logger: options.logger ?? consoleLogger,
      retry: { ...DEFAULT_RETRY, ...options.completionRetry },
      durations: new ScopeDurations(),
      derivedKeys: compileDerivedKeys(options.derivedKeys, 'IdempotencyEngine'),
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
    action: IdempotentAction<T>,
  ): Promise<ExecuteOutcome<T>> {
    return this.run(compilePolicy(request), request, action);
  }

  /** `execute` with a policy compiled once. The executing caller gets the value as the action returned it. */
  async run<T>(
    policy: ExecutionPolicy,
    call: CallOptions,
    action: IdempotentAction<T>,
  ): Promise<ExecuteOutcome<T>> {
    return valueOutcome(
      await this.perform<T>(policy, requestOf(call), {
        // A call with a key always has its record's context.
        invoke: ({ signal, context }) => action(signal, context!),
        capture: captureValue,
        suspended: (answer) => answer as T,
      }),
    );
  }

  /**
   * Resumes the record a `ctx.suspend` suspended: `token` is the
   * continuation its caller was given. The store admits one resumption per
   * token, from any process; `action` then runs holding the record (its
   * context's `resumed` is the state the suspension saved, `attempt` is
   * `'resumption'`), and its value completes the record, so duplicates of
   * the original key replay it. Throws `IdempotencyResumptionRefusedError`
   * (nothing ran) for a malformed token, one that names no suspended record
   * of `policy`'s scope, one resumed already, or one whose hold lapsed.
   */
  async resume<T>(
    policy: ExecutionPolicy,
    token: string,
    action: IdempotentAction<T>,
  ): Promise<ExecuteOutcome<T>> {
    return valueOutcome(
      await this.perform<T>(
        policy,
        { identity: { kind: 'absent' }, required: false, resumes: { scope: policy.scope, token } },
        {
          invoke: ({ signal, context }) => action(signal, context!),
          capture: captureValue,
          suspended: (answer) => answer as T,
        },
      ),
    );
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
    action: (tx: Tx, signal: AbortSignal, context: IdempotencyContext) => Promise<T>,
    options: { transaction?: TransactionRunner<Tx> } = {},
  ): Promise<ExecuteOutcome<T>> {
    const transactional = this.store.transactional as TransactionalCompletion<Tx> | undefined;
    if (!transactional) {
      throw new IdempotencyConfigError(
        `${policy.where}: runInTransaction needs a store that completes inside a database transaction (store.transactional, e.g. TypeOrmIdempotencyStore on PostgreSQL); this store does not`,
      );
    }
    const runner: TransactionRunner<Tx> =
      options.transaction ?? ((work) => transactional.transaction(work));
    return valueOutcome(
      await this.perform<T>(policy, requestOf(call), {
        invoke: ({ signal, tx, context }) => action(tx as Tx, signal, context!),
        capture: captureValue,
        transaction: runner as TransactionRunner,
      }),
    );
  }

  /**
   * The lifecycle every door goes through (see ./lifecycle.ts): the look,
   * observe mode, the run with its heartbeat, the transaction, strict mode,
   * the capture and completion of the result, and refusals, which come back
   * as a `CallOutcome` for the door to render rather than as errors.
   */
  perform<T>(
    policy: ExecutionPolicy,
    request: CallRequest,
    work: CallWork<T>,
  ): Promise<CallOutcome<T>> {
    return performCall(this.context, policy, request, work);
  }

  /**
   * The look alone (./look.ts): validates the key and acquires the record,
   * or hands back its stored payload. An `acquired` outcome's `Execution`
   * must be ended by the caller (`complete`, `release` or `fail`). Prefer
   * `run` or `perform`, which end it themselves.
   */
  begin(
    policy: ExecutionPolicy,
    call: CallOptions,
    options: { observing?: boolean } = {},
  ): Promise<BeginOutcome> {
    return begin(this.context, policy, call, options);
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

function requestOf(call: CallOptions): CallRequest {
  return {
    identity: {
      kind: 'key',
      key: call.key,
      fingerprint: call.fingerprint ?? null,
      tenant: call.tenant,
    },
    required: true,
  };
}

/** Plain code's results: the value as JSON, encoded once. */
function captureValue(value: unknown): Capture {
  return { kind: 'stored', payload: encodeValue(value) };
}

/** A lifecycle's outcome as plain code sees it: the value, or the typed error a refusal stands for. */
function valueOutcome<T>(outcome: CallOutcome<T>): ExecuteOutcome<T> {
  switch (outcome.kind) {
    case 'executed':
      if (outcome.failure) throw outcome.failure.error;
      if (outcome.continuation !== undefined) {
        return {
          kind: 'suspended',
          value: outcome.value as AnswerOf<T>,
          continuation: outcome.continuation,
        };
      }
      return { kind: 'executed', value: outcome.value as Exclude<T, SuspendedAnswer> };
    case 'replayed':
      if (outcome.continuation !== undefined) {
        return {
          kind: 'suspended',
          value: decodeValue(outcome.payload) as AnswerOf<T>,
          continuation: outcome.continuation,
        };
      }
      return {
        kind: 'replayed',
        value: decodeValue(outcome.payload) as Exclude<T, SuspendedAnswer>,
        completedAt: outcome.completedAt,
      };
    case 'refused':
      throw outcome.error ?? new IdempotencyError(`refused: ${outcome.refusal.code}`);
  }
}
