import type { CallHandler, ExecutionContext } from '@nestjs/common';
import { Observable } from 'rxjs';
import type { IdempotencyEngine } from '../../core/engine';
import { IdempotencyKeyError } from '../../core/errors';
import type {
  CallIdentity,
  CallOutcome,
  CallRequest,
  CallWork,
  Capture,
  Invocation,
} from '../../core/lifecycle';
import type { TransactionRunner } from '../../core/store';
import type { IdempotencyLogger } from '../../core/logger';
import type { HandlerPlan } from '../config/handler-plan';
import type { KeySource } from '../config/handler-options';
import { evaluateKey } from '../config/key-resolver';
import type { ModuleSettings } from '../config/module-settings';
import { handleNext, HandlerEntry } from './handler-entry';
import { storedValue } from './stored-value';
import {
  type IdempotencyTransactionRunner,
  transactionFor,
} from '../transaction/transaction-runner';

/** What a door adds to the handler's chain: how its result is captured, and what runs around it. */
export interface DoorCapture {
  capture(value: unknown, keyDigest: () => string): Capture | Promise<Capture>;
  returned?(value: unknown): void;
  /** Before each run of the chain: whether its result is captured (HTTP holds its response back then). */
  starting?(capturing: boolean): void;
  /** A run of the chain threw (HTTP lets the error response go out as it is). */
  failed?(): void;
  /** `ctx.suspend`: what goes on for the answer, carrying the token (HTTP only). */
  suspended?(answer: unknown, token: string): unknown;
}

/**
 * A door of the application (HTTP routes, GraphQL mutations, message
 * handlers) as a port of the one lifecycle (`IdempotencyEngine.perform`,
 * core/lifecycle.ts): it reads who is calling, says how the handler's result
 * is captured as its caller receives it, and renders the outcome (a replay,
 * a refusal) in its own terms. Everything else (the look, the wait, observe
 * mode, the run, transactions, strict mode, completion) is the lifecycle's.
 */
export abstract class Door {
  constructor(
    protected readonly engine: IdempotencyEngine,
    protected readonly settings: ModuleSettings,
    protected readonly logger: IdempotencyLogger,
    private readonly transactions?: IdempotencyTransactionRunner,
  ) {}

  /** Serves one call of an `@Idempotent` handler. */
  handle(context: ExecutionContext, next: CallHandler, plan: HandlerPlan): Observable<unknown> {
    return new Observable((subscriber) => {
      let served: Promise<unknown>;
      try {
        served = this.serve(context, next, plan);
      } catch (error) {
        subscriber.error(error);
        return;
      }
      served.then(
        (value) => {
          subscriber.next(value);
          subscriber.complete();
        },
        (error: unknown) => subscriber.error(error),
      );
    });
  }

  protected abstract serve(
    context: ExecutionContext,
    next: CallHandler,
    plan: HandlerPlan,
  ): Promise<unknown>;

  /** The lifecycle, for this handler's plan. */
  protected perform(
    plan: HandlerPlan,
    identity: CallIdentity,
    work: CallWork<unknown>,
    /** A `resumes` route: the continuation token the caller presented. */
    token?: string,
  ): Promise<CallOutcome<unknown>> {
    const request: CallRequest = { identity, required: plan.required, observe: plan.observe };
    if (plan.resumes !== undefined) request.resumes = { scope: plan.resumes, token };
    return this.engine.perform(plan.policy, request, work);
  }

  /** The lifecycle for a handler whose answer is a value, stored as JSON (a reply, an acknowledgement). */
  protected performValue(
    plan: HandlerPlan,
    identity: CallIdentity,
    next: CallHandler,
  ): Promise<CallOutcome<unknown>> {
    return this.perform(
      plan,
      identity,
      this.work(next, plan, {
        capture: (value) => ({ kind: 'stored', payload: storedValue(value, this.settings) }),
      }),
    );
  }

  /**
   * The handler's chain (pipes, inner interceptors, the handler) as the
   * lifecycle's work: strict mode learns whether the handler's own body
   * began, and `completion: 'transaction'` runs it in the transaction that
   * completes its record.
   */
  protected work(next: CallHandler, plan: HandlerPlan, door: DoorCapture): CallWork<unknown> {
    return new ChainWork(
      next,
      door,
      plan.policy.strict ? new HandlerEntry() : undefined,
      transactionFor(plan, this.transactions, this.engine.store),
      plan.readsContext,
    );
  }

  /** The identity of a call keyed from `source` by the plan's key expression or function. */
  protected identityFrom(
    plan: HandlerPlan,
    source: KeySource,
    context: ExecutionContext,
    fingerprint: () => string | null,
  ): CallIdentity {
    const found = keyFromSource(plan, source);
    if ('refused' in found) return found.refused;
    return this.identity(context, found.key, fingerprint, undefined);
  }

  /** The identity of a call whose key is `key` (absent when undefined), with its tenant. */
  protected identity(
    context: ExecutionContext,
    key: string | undefined,
    fingerprint: () => string | null,
    user: unknown,
  ): CallIdentity {
    if (key === undefined) return { kind: 'absent' };
    const tenant = this.settings.tenantOf(context, user);
    return {
      kind: 'key',
      key,
      fingerprint: fingerprint(),
      tenant: tenant.tenant,
      untenantedFallback: tenant.derived,
    };
  }
}

/**
 * The handler's chain as the lifecycle's work, with its door's capture. A
 * class rather than an object of closures: one allocation per call.
 */
class ChainWork implements CallWork<unknown> {
  readonly suspended?: (answer: unknown, token: string) => unknown;

  constructor(
    private readonly next: CallHandler,
    private readonly door: DoorCapture,
    /** Strict mode: whether the handler's own body began. */
    private readonly entry: HandlerEntry | undefined,
    readonly transaction: TransactionRunner | undefined,
    readonly readsContext: boolean,
  ) {
    if (door.suspended) this.suspended = (answer, token) => door.suspended!(answer, token);
  }

  invoke({ capturing }: Invocation): Promise<unknown> {
    const door = this.door;
    door.starting?.(capturing);
    const run = handleNext(this.next, this.entry);
    if (!door.failed) return run;
    return run.catch((error: unknown) => {
      door.failed!();
      throw error;
    });
  }

  entered(): boolean {
    return this.entry?.entered ?? true;
  }

  returned(value: unknown): void {
    this.door.returned?.(value);
  }

  capture(value: unknown, keyDigest: () => string): Capture | Promise<Capture> {
    return this.door.capture(value, keyDigest);
  }
}

/** A client's key that the library refused, as the identity a door hands the lifecycle. */
export function invalidKey(error: IdempotencyKeyError | string): CallIdentity {
  return {
    kind: 'refused',
    refusal: {
      code: 'idempotency-key-invalid',
      detail: typeof error === 'string' ? error : error.message,
    },
  };
}

/** The key option in a refusal's words: `'order:{body.id}'`, or `a function`. */
export function keySourceText(plan: HandlerPlan): string {
  return plan.key.kind === 'expression' ? `'${plan.key.expression.source}'` : 'a function';
}

/**
 * The key a handler's template or key function yields from `source`
 * (`undefined`: none), or the refusal when the library judges the key
 * invalid. Only the library's own verdict is the caller's fault: a key
 * function's bug propagates as it is.
 */
export function keyFromSource(
  plan: HandlerPlan,
  source: KeySource,
): { key: string | undefined } | { refused: CallIdentity } {
  try {
    const resolved = evaluateKey(plan, source);
    return { key: resolved.kind === 'key' ? resolved.key : undefined };
  } catch (error) {
    if (!(error instanceof IdempotencyKeyError)) throw error;
    return { refused: invalidKey(error) };
  }
}
