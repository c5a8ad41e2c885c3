import type { CallHandler, ExecutionContext } from '@nestjs/common';
import { createHash } from 'node:crypto';
import { from, lastValueFrom, Observable } from 'rxjs';
import stringify from 'safe-stable-stringify';
import type { IdempotencyEngine } from '../../core/engine';
import {
  IdempotencyCompletionError,
  IdempotencyError,
  IdempotencyFingerprintMismatchException,
  IdempotencyInFlightException,
  IdempotencyKeyError,
  IdempotencyOutcomeUnknownException,
  IdempotencyLeaseLostError,
  IdempotencyPayloadError,
  IdempotencyStoreUnavailableError,
} from '../../core/errors';
import type { IdempotencyEvent } from '../../core/events';
import { keyDigest } from '../../core/key';
import type { IdempotencyLogger } from '../../core/logger';
import { encodeValue, notStorableReason } from '../../core/payload';
import type { StoredPayload } from '../../core/store';
import { keptAmbiguous, type Execution } from '../../core/execution';
import type { HandlerPlan } from '../handler-plan';
import { readKeyHeader } from '../http/key-header';
import type { StoredRpcResult } from '../idempotency.options';
import type { GraphqlKeySource } from '../handler-options';
import { evaluateKey, ResolvedKey } from '../key-resolver';
import type { ModuleSettings } from '../module-settings';
import { toPlain } from '../plain-value';
import { replayedValue } from '../replayed-value';
import type { IdempotencyTransactionRunner } from '../transaction/transaction-runner';
import { graphqlRefusal, isGraphqlRefusal } from './graphql-errors';
import { handleNext, HandlerEntry } from '../strict/handler-entry';
import { completionFailureReturned, LOST_IN_STRICT_MODE } from '../strict/completion';

type ObservedOutcome = Extract<IdempotencyEvent, { type: 'observed' }>['wouldHave'];

/** What the drivers put in the GraphQL context: `req` always (Apollo, Mercurius), `reply` on Mercurius. */
interface GraphqlRequestContext {
  req?: {
    headers?: Record<string, unknown>;
    rawHeaders?: string[];
    raw?: { rawHeaders?: string[] };
    user?: unknown;
    res?: { setHeader(name: string, value: string): void; getHeader(name: string): unknown };
  };
  reply?: { header(name: string, value: string): unknown; getHeader(name: string): unknown };
}

interface ResolverInfo {
  fieldName: string;
  parentType?: { name: string };
}

/**
 * GraphQL `@Mutation()` resolvers (Apollo, Mercurius): the key from the HTTP
 * request's key header or an expression over the arguments, the fingerprint
 * over the mutation's name and arguments, the stored result (the resolver's
 * value as JSON), and refusals as GraphQL errors with `extensions.code`. A
 * replay sets `Idempotent-Replayed: true` on the HTTP response where the
 * driver exposes it (Express, Mercurius).
 */
export class GraphqlIdempotency {
  constructor(
    private readonly engine: IdempotencyEngine,
    private readonly settings: ModuleSettings,
    private readonly logger: IdempotencyLogger,
    private readonly transactions?: IdempotencyTransactionRunner,
  ) {}

  handle(context: ExecutionContext, next: CallHandler, plan: HandlerPlan): Observable<unknown> {
    return from(this.run(context, next, plan));
  }

  private async run(
    context: ExecutionContext,
    next: CallHandler,
    plan: HandlerPlan,
  ): Promise<unknown> {
    const [, args, gqlContext, info] = context.getArgs() as [
      unknown,
      Record<string, unknown> | undefined,
      GraphqlRequestContext | undefined,
      ResolverInfo,
    ];
    const request = gqlContext?.req;
    const source: GraphqlKeySource = {
      type: 'graphql',
      args: args ?? {},
      headers: request?.headers ?? {},
      user: request?.user,
      fieldName: info.fieldName,
      context,
    };
    const run = () => this.runHandler(plan, next);
    if (plan.observe) return this.observe(context, run, plan, source, gqlContext);

    const resolved = this.resolveKey(plan, source, gqlContext);
    if (resolved.kind === 'absent') {
      if (plan.required) {
        throw graphqlRefusal(
          'idempotency-key-missing',
          plan.key.kind === 'header'
            ? `${plan.where} requires the ${this.settings.keyHeader} header`
            : `${plan.where}: the mutation has no idempotency key (key: ${plan.key.kind === 'expression' ? `'${plan.key.expression.source}'` : 'a function'})`,
        );
      }
      return run();
    }
    const tenant = this.settings.options.tenant?.(context);
    let begun;
    try {
      begun = await this.engine.begin(plan.policy, {
        key: resolved.key,
        fingerprint: fingerprintOf(plan, source, info),
        tenant,
      });
    } catch (error) {
      throw this.refusal(error, plan);
    }
    if (begun.kind === 'replayed') {
      if (notStorableReason(begun.payload) !== undefined) throw notStorableRefusal(plan);
      const replayed = replayedValue(begun.payload, plan);
      if (replayed.kind === 'error')
        throw graphqlRefusal('idempotency-replayed-error', replayed.message);
      markReplayed(gqlContext);
      return replayed.value ?? null;
    }

    const { execution } = begun;
    const entry = plan.policy.strict ? new HandlerEntry() : undefined;
    if (plan.completion === 'transaction')
      return this.inTransaction(() => handleNext(next, entry), plan, execution, entry);
    let value: unknown;
    try {
      value = await (entry ? handleNext(next, entry) : run());
    } catch (error) {
      // Released (strict mode: AMBIGUOUS, once the resolver's body was entered).
      await execution.fail(error, entry?.entered ?? true);
      throw error;
    }
    let payload: StoredPayload | undefined;
    let notStorable: string | undefined;
    try {
      payload = this.encode(value);
    } catch (error) {
      notStorable = (error as Error).message;
    }
    try {
      if (payload === undefined) {
        // The resolver ran: its record must say so, or a retry would run it again.
        this.logger.error(
          `${plan.where}: the result for ${execution.keyDigest} cannot be stored: ${notStorable}`,
        );
        await execution.completeNotStorable(notStorable!);
        throw notStorableRefusal(plan);
      }
      await execution.complete(payload);
    } catch (error) {
      if (error instanceof IdempotencyPayloadError) {
        // Too large for the store: the record says so (completed without a result).
        this.logger.error(`${plan.where}: ${error.message}`);
        throw notStorableRefusal(plan);
      }
      if (
        error instanceof IdempotencyCompletionError &&
        plan.policy.onCompletionFailure === 'return'
      ) {
        this.logger.error(`${plan.where}: ${error.message}`);
        this.logger.warn(completionFailureReturned(plan, execution));
        return value;
      }
      if (error instanceof IdempotencyError) {
        this.logger.error(`${plan.where}: ${error.message}`);
        throw graphqlRefusal(
          'idempotency-completion-failed',
          'the mutation was processed but its outcome could not be recorded',
          1000,
        );
      }
      throw error;
    }
    return value;
  }

  /**
   * Runs the handler where nothing is completed in its transaction (no key,
   * observe mode, separate completion): under `completion: 'transaction'` it
   * still runs in a transaction of its own, so it reaches
   * `IdempotencyTransaction.manager` on every path.
   */
  private runHandler(plan: HandlerPlan, next: CallHandler): Promise<unknown> {
    const run = () => lastValueFrom(next.handle(), { defaultValue: undefined });
    if (plan.completion !== 'transaction') return run();
    return this.transactions!.runnerFor(this.engine.store)(run);
  }

  /** `completion: 'transaction'`: the resolver runs in a transaction that also completes the record. */
  private async inTransaction(
    run: () => Promise<unknown>,
    plan: HandlerPlan,
    execution: Execution,
    entry: HandlerEntry | undefined,
  ): Promise<unknown> {
    try {
      return await execution.runInTransaction(
        this.transactions!.runnerFor(this.engine.store),
        async () => {
          const value = await run();
          let payload: StoredPayload;
          try {
            payload = this.encode(value);
          } catch (error) {
            throw new IdempotencyPayloadError(
              `the result for ${execution.keyDigest} cannot be stored (${(error as Error).message}); the transaction was rolled back`,
              { cause: error },
            );
          }
          return { value, payload };
        },
        () => entry?.entered ?? true,
      );
    } catch (error) {
      if (error instanceof IdempotencyLeaseLostError && plan.policy.strict) {
        // Strict mode: moved to AMBIGUOUS by a duplicate; nothing invites a retry.
        throw graphqlRefusal(
          'idempotency-outcome-unknown',
          `${plan.where}: ${LOST_IN_STRICT_MODE}`,
        );
      }
      if (error instanceof IdempotencyLeaseLostError) {
        // Another attempt holds the key now; this one left nothing behind.
        throw graphqlRefusal(
          'idempotency-in-flight',
          'a request with this idempotency key is still being processed',
          1000,
        );
      }
      if (error instanceof IdempotencyStoreUnavailableError) {
        this.logger.warn(`${plan.where}: ${error.message}`);
        // Strict mode: its record AMBIGUOUS, the key is kept; nothing invites a retry.
        throw keptAmbiguous(error)
          ? graphqlRefusal(
              'idempotency-store-unavailable',
              'the mutation did not commit; its writes were rolled back, and strict mode keeps its key until the outcome is resolved',
            )
          : graphqlRefusal(
              'idempotency-store-unavailable',
              'the mutation did not commit; nothing happened; retry later',
              error.retryAfterMs,
            );
      }
      if (error instanceof IdempotencyPayloadError) {
        this.logger.error(`${plan.where}: ${error.message}`);
        throw graphqlRefusal(
          'idempotency-result-not-storable',
          `${plan.where}: the mutation's result could not be recorded for replay, so its writes were rolled back`,
        );
      }
      throw error; // the resolver's own error: rolled back, and the key free again (strict: AMBIGUOUS)
    }
  }

  private resolveKey(
    plan: HandlerPlan,
    source: GraphqlKeySource,
    gqlContext: GraphqlRequestContext | undefined,
  ): ResolvedKey {
    if (plan.key.kind !== 'header') {
      try {
        return evaluateKey(plan, source);
      } catch (error) {
        // Only the library's own verdict is the client's fault; a key function's bug is not.
        if (!(error instanceof IdempotencyKeyError)) throw error;
        throw graphqlRefusal('idempotency-key-invalid', error.message);
      }
    }
    const request = gqlContext?.req;
    const header = readKeyHeader(
      request?.rawHeaders ?? request?.raw?.rawHeaders,
      request?.headers ?? {},
      this.settings.keyHeader,
    );
    if (header.kind === 'invalid') {
      throw graphqlRefusal('idempotency-key-invalid', `${plan.where}: ${header.reason}`);
    }
    return header.kind === 'absent' ? { kind: 'absent' } : { kind: 'key', key: header.key };
  }

  private refusal(error: unknown, plan: HandlerPlan): unknown {
    if (error instanceof IdempotencyOutcomeUnknownException) {
      return graphqlRefusal(
        'idempotency-outcome-unknown',
        `${plan.where}: an earlier request with this idempotency key may have been processed and its outcome is unknown; it is not processed again until the record is resolved`,
      );
    }
    if (error instanceof IdempotencyInFlightException) {
      return graphqlRefusal(
        'idempotency-in-flight',
        'a request with this idempotency key is still being processed',
        error.retryAfterMs,
      );
    }
    if (error instanceof IdempotencyFingerprintMismatchException) {
      return graphqlRefusal(
        'idempotency-key-reused',
        'this idempotency key was already used with different arguments',
      );
    }
    if (error instanceof IdempotencyKeyError)
      return graphqlRefusal('idempotency-key-invalid', error.message);
    if (error instanceof IdempotencyStoreUnavailableError) {
      this.logger.warn(`${plan.where}: idempotency store unavailable: ${error.message}`);
      return graphqlRefusal(
        'idempotency-store-unavailable',
        'the idempotency store is unavailable; retry later',
        error.retryAfterMs,
      );
    }
    if (error instanceof IdempotencyCompletionError) {
      return graphqlRefusal('idempotency-completion-failed', error.message, 1000);
    }
    return error;
  }

  /** Observe mode: the resolver always runs; an `observed` event says what enforce would have done. */
  private async observe(
    context: ExecutionContext,
    run: () => Promise<unknown>,
    plan: HandlerPlan,
    source: GraphqlKeySource,
    gqlContext: GraphqlRequestContext | undefined,
  ): Promise<unknown> {
    const tenant = this.settings.options.tenant?.(context);
    const report = (wouldHave: ObservedOutcome, key?: string) =>
      this.engine.publish({
        type: 'observed',
        scope: plan.policy.scope,
        ...(key === undefined ? {} : { keyDigest: keyDigest(plan.policy.scope, key, tenant) }),
        wouldHave,
      });
    let resolved: ResolvedKey;
    try {
      resolved = this.resolveKey(plan, source, gqlContext);
    } catch (error) {
      if (isGraphqlRefusal(error)) {
        report('key-invalid');
        return run();
      }
      throw error;
    }
    if (resolved.kind === 'absent') {
      if (plan.required) report('key-missing');
      return run();
    }
    const info = (context.getArgs() as unknown[])[3] as ResolverInfo;
    let begun;
    try {
      begun = await this.engine.begin(
        plan.policy,
        { key: resolved.key, fingerprint: fingerprintOf(plan, source, info), tenant },
        { observing: true },
      );
    } catch (error) {
      if (error instanceof IdempotencyInFlightException) report('in-flight', resolved.key);
      else if (error instanceof IdempotencyFingerprintMismatchException)
        report('fingerprint-mismatch', resolved.key);
      else if (error instanceof IdempotencyKeyError) report('key-invalid');
      else if (error instanceof IdempotencyStoreUnavailableError)
        report('store-unavailable', resolved.key);
      else throw error;
      return run();
    }
    if (begun.kind === 'replayed') {
      report('replayed', resolved.key);
      return run();
    }
    const { execution } = begun;
    let value: unknown;
    try {
      value = await run();
    } catch (error) {
      await execution.release('action-failed');
      throw error;
    }
    try {
      let payload: StoredPayload | undefined;
      try {
        payload = this.encode(value);
      } catch (error) {
        await execution.completeNotStorable((error as Error).message);
      }
      if (payload !== undefined) await execution.complete(payload);
    } catch (error) {
      this.logger.warn(
        `${plan.where}: observe mode could not record ${execution.keyDigest}: ${(error as Error).message}`,
      );
    }
    return value;
  }

  /** The resolver's value as JSON; `sanitize` sees a copy (as `{ kind: 'rpc', value }`). */
  private encode(value: unknown): StoredPayload {
    const plain = toPlain(value);
    if (!this.settings.options.sanitize) return encodeValue(plain);
    const copy: StoredRpcResult = {
      kind: 'rpc',
      value: plain === undefined ? undefined : JSON.parse(JSON.stringify(plain) ?? 'null'),
    };
    return encodeValue((this.settings.options.sanitize(copy) as StoredRpcResult).value);
  }
}

/** The resolver ran once and its result is not there to replay: it is never run again for this key. */
function notStorableRefusal(plan: HandlerPlan): Error {
  return graphqlRefusal(
    'idempotency-result-not-storable',
    `${plan.where}: the mutation was processed, but its result could not be recorded for replay; retrying with this key will not run it again`,
  );
}

/** SHA-256 of the mutation (parent type and field) and its arguments as canonical JSON. */
function fingerprintOf(
  plan: HandlerPlan,
  source: GraphqlKeySource,
  info: ResolverInfo,
): string | null {
  if (plan.fingerprint === false) return null;
  if (plan.fingerprint !== 'default') return plan.fingerprint(source) ?? null;
  const text = `graphql\n${info.parentType?.name ?? 'Mutation'}.${info.fieldName}\n${stringify(source.args) ?? ''}`;
  return createHash('sha256').update(text).digest('base64url');
}

/** `Idempotent-Replayed: true` on the HTTP response, where the driver hands it over. */
function markReplayed(gqlContext: GraphqlRequestContext | undefined): void {
  const reply = gqlContext?.reply;
  const res = gqlContext?.req?.res;
  const set = reply
    ? (name: string, value: string) => reply.header(name, value)
    : res
      ? (name: string, value: string) => res.setHeader(name, value)
      : undefined;
  const get = reply
    ? (name: string) => reply.getHeader(name)
    : (name: string) => res?.getHeader(name);
  if (!set) return;
  set('Idempotent-Replayed', 'true');
  // Under CORS a browser only lets a page read the headers listed here.
  if (get('access-control-allow-origin') !== undefined) {
    const exposed = String(get('access-control-expose-headers') ?? '');
    if (!/(^|,)\s*(idempotent-replayed|\*)\s*(,|$)/i.test(exposed)) {
      set(
        'Access-Control-Expose-Headers',
        exposed ? `${exposed}, Idempotent-Replayed` : 'Idempotent-Replayed',
      );
    }
  }
}
