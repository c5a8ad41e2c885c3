import type { CallHandler, ExecutionContext } from '@nestjs/common';
import { from, lastValueFrom, Observable } from 'rxjs';
import type { IdempotencyEngine } from '../../core/engine';
import {
  IdempotencyCompletionError,
  IdempotencyError,
  IdempotencyFingerprintMismatchException,
  IdempotencyInFlightException,
  IdempotencyKeyError,
  IdempotencyLeaseLostError,
  IdempotencyOutcomeUnknownException,
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
import type { StoredRpcResult } from '../idempotency.options';
import type { RpcKeySource } from '../handler-options';
import { evaluateKey, ResolvedKey } from '../key-resolver';
import type { ModuleSettings } from '../module-settings';
import { toPlain } from '../plain-value';
import { replayedValue } from '../replayed-value';
import { messageView } from './message-view';
import { microservices } from './microservices';
import type { IdempotencyTransactionRunner } from '../transaction/transaction-runner';
import { settleDelivery } from './rmq-settlement';
import { rpcExceptions } from './rpc-exceptions';
import { handleNext, HandlerEntry } from '../strict/handler-entry';
import { completionFailureReturned, LOST_IN_STRICT_MODE } from '../strict/completion';
import { refuseOutcomeUnknown } from '../strict/message-strict';

/** How soon a caller whose attempt lost its key to a newer owner may retry (to be replayed). */
const TAKEN_OVER_RETRY_MS = 1000;

type ObservedOutcome = Extract<IdempotencyEvent, { type: 'observed' }>['wouldHave'];

/**
 * Message handlers (`@MessagePattern`, `@EventPattern`): the key from the
 * payload or the transport's message, the stored result (the handler's return
 * value as JSON), the replay, and refusals as RPC exceptions, with RabbitMQ
 * deliveries settled when their handler does not run.
 */
export class MessageIdempotency {
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
    const exceptions = rpcExceptions();
    const source: RpcKeySource = {
      type: 'rpc',
      data: context.switchToRpc().getData(),
      message: messageView(context),
      context,
    };
    if (plan.observe) return this.observe(context, next, plan, source);
    let resolved: ResolvedKey;
    try {
      resolved = evaluateKey(plan, source);
    } catch (error) {
      // Only the library's own verdict is the message's fault; a key function's bug is not.
      if (!(error instanceof IdempotencyKeyError)) throw error;
      return this.reject(context, plan, 'idempotency-key-invalid', error.message);
    }
    if (resolved.kind === 'absent') {
      if (plan.required) {
        return this.reject(
          context,
          plan,
          'idempotency-key-missing',
          `${plan.where}: the message has no idempotency key`,
        );
      }
      return this.runHandler(plan, next);
    }
    const fingerprint =
      plan.fingerprint === false || plan.fingerprint === 'default'
        ? null
        : (plan.fingerprint(source) ?? null);

    let begun;
    try {
      begun = await this.engine.begin(plan.policy, {
        key: resolved.key,
        fingerprint,
        tenant: this.settings.options.tenant?.(context),
      });
    } catch (error) {
      if (error instanceof IdempotencyOutcomeUnknownException) {
        return refuseOutcomeUnknown(context, plan, error, this.logger);
      }
      if (error instanceof IdempotencyInFlightException) {
        settleDelivery(context, plan.rmq!, 'inFlight', error.retryAfterMs);
        throw exceptions.inFlight(error.retryAfterMs, error.scope, error.keyDigest);
      }
      if (error instanceof IdempotencyStoreUnavailableError) {
        this.logger.warn(`${plan.where}: idempotency store unavailable: ${error.message}`);
        settleDelivery(context, plan.rmq!, 'unavailable', error.retryAfterMs);
        throw exceptions.unavailable(
          error.retryAfterMs,
          'the idempotency store is unavailable; retry later',
        );
      }
      if (error instanceof IdempotencyFingerprintMismatchException) {
        return this.reject(
          context,
          plan,
          'idempotency-key-reused',
          `${error.keyDigest} was already used with a different message`,
        );
      }
      if (error instanceof IdempotencyKeyError) {
        return this.reject(context, plan, 'idempotency-key-invalid', error.message);
      }
      throw error;
    }

    if (begun.kind === 'replayed') {
      settleDelivery(context, plan.rmq!, 'replayed');
      const lost = notStorableReason(begun.payload);
      if (lost !== undefined) {
        // The handler ran once; its result is not there to replay, and it is not run again.
        // An event needs no answer; a request is told.
        if (plan.isEvent) return null;
        throw exceptions.rejected(
          'idempotency-result-not-storable',
          `${plan.where}: the message was processed, but its result could not be recorded for replay; it is not run again`,
        );
      }
      const replayed = replayedValue(begun.payload, plan);
      if (replayed.kind === 'error') {
        if (plan.isEvent) return null;
        throw exceptions.rejected('idempotency-replayed-error', replayed.message);
      }
      // Always a value: an empty stream would make Kafka retry and a request/reply hang.
      return replayed.value ?? null;
    }
    const { execution } = begun;
    if (plan.completion === 'transaction')
      return this.inTransaction(context, next, plan, execution);
    let value: unknown;
    const entry = plan.policy.strict ? new HandlerEntry() : undefined;
    try {
      value = await (entry ? handleNext(next, entry) : this.runHandler(plan, next));
    } catch (error) {
      // Released (strict mode: AMBIGUOUS, once the handler's body was entered).
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
        // The handler ran: its record must say so, or a redelivery would run it again.
        this.logger.error(
          `${plan.where}: the result for ${execution.keyDigest} cannot be stored: ${notStorable}`,
        );
        await execution.completeNotStorable(notStorable!);
      } else {
        await execution.complete(payload);
      }
    } catch (error) {
      if (error instanceof IdempotencyPayloadError) {
        // Too large for the store: the record says the handler ran (completed without a
        // result), so a redelivery is not run again; this delivery gets its value.
        this.logger.error(`${plan.where}: ${error.message}`);
        return value;
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
        throw exceptions.rejected(
          error instanceof IdempotencyCompletionError
            ? 'idempotency-completion-failed'
            : 'idempotency-error',
          error.message,
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

  /**
   * `completion: 'transaction'`: the handler runs inside a database
   * transaction that also completes the record. Nothing of a rolled-back
   * attempt remains, so each failure is answered as "nothing happened".
   */
  private async inTransaction(
    context: ExecutionContext,
    next: CallHandler,
    plan: HandlerPlan,
    execution: Execution,
  ): Promise<unknown> {
    const exceptions = rpcExceptions();
    const entry = plan.policy.strict ? new HandlerEntry() : undefined;
    try {
      return await execution.runInTransaction(
        this.transactions!.runnerFor(this.engine.store),
        async () => {
          const value = await handleNext(next, entry);
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
        // Strict mode: moved to AMBIGUOUS by a duplicate; a redelivery would only be refused.
        return this.reject(context, plan, 'idempotency-outcome-unknown', LOST_IN_STRICT_MODE);
      }
      if (error instanceof IdempotencyLeaseLostError) {
        // Another attempt holds the key now; this one left nothing behind.
        settleDelivery(context, plan.rmq!, 'inFlight', TAKEN_OVER_RETRY_MS);
        throw exceptions.inFlight(TAKEN_OVER_RETRY_MS, plan.policy.scope, execution.keyDigest);
      }
      if (keptAmbiguous(error)) {
        // Strict mode: the commit failed after the handler ran; a redelivery would only be
        // refused as AMBIGUOUS, so the delivery is settled as refused now.
        return this.reject(context, plan, 'idempotency-outcome-unknown', (error as Error).message);
      }
      if (error instanceof IdempotencyStoreUnavailableError) {
        this.logger.warn(`${plan.where}: ${error.message}`);
        settleDelivery(context, plan.rmq!, 'unavailable', error.retryAfterMs);
        throw exceptions.unavailable(error.retryAfterMs, error.message);
      }
      if (error instanceof IdempotencyPayloadError) {
        this.logger.error(`${plan.where}: ${error.message}`);
        return this.reject(context, plan, 'idempotency-result-not-storable', error.message);
      }
      throw error; // the handler's own error: rolled back, and the key free again (strict: AMBIGUOUS)
    }
  }

  /**
   * Observe mode: the handler runs whatever the record says (no refusal, no
   * settlement: the handler settles its own delivery), and an `observed`
   * event says what enforce mode would have done.
   */
  private async observe(
    context: ExecutionContext,
    next: CallHandler,
    plan: HandlerPlan,
    source: RpcKeySource,
  ): Promise<unknown> {
    const run = () => this.runHandler(plan, next);
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
      resolved = evaluateKey(plan, source);
    } catch (error) {
      if (!(error instanceof IdempotencyKeyError)) throw error;
      report('key-invalid');
      return run();
    }
    if (resolved.kind === 'absent') {
      if (plan.required) report('key-missing');
      return run();
    }
    const fingerprint =
      plan.fingerprint === false || plan.fingerprint === 'default'
        ? null
        : (plan.fingerprint(source) ?? null);
    let begun;
    try {
      begun = await this.engine.begin(
        plan.policy,
        { key: resolved.key, fingerprint, tenant },
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
      // Observing never changes what the caller gets.
      this.logger.warn(
        `${plan.where}: observe mode could not record ${execution.keyDigest}: ${(error as Error).message}`,
      );
    }
    return value;
  }

  /**
   * The handler's value as stored: JSON (class instances as class-transformer
   * makes them plain, when it is installed, as ClassSerializerInterceptor
   * would, so fields it excludes are never stored). `sanitize` sees a copy.
   */
  private encode(value: unknown): StoredPayload {
    const plain = toPlain(value);
    if (!this.settings.options.sanitize) return encodeValue(plain);
    const copy: StoredRpcResult = {
      kind: 'rpc',
      value: plain === undefined ? undefined : JSON.parse(JSON.stringify(plain) ?? 'null'),
    };
    return encodeValue((this.settings.options.sanitize(copy) as StoredRpcResult).value);
  }

  /**
   * A message that can never succeed as sent. A request is answered with the
   * error; a RabbitMQ delivery is settled by the handler's rules; a Kafka event
   * is skipped (its offset committed) with an error in the log, since
   * throwing would make kafkajs retry it forever and stall its partition.
   */
  private reject(
    context: ExecutionContext,
    plan: HandlerPlan,
    code: string,
    message: string,
  ): null {
    const { KafkaContext } = microservices();
    if (plan.isEvent && context.switchToRpc().getContext() instanceof KafkaContext) {
      this.logger.error(
        `${plan.where}: Kafka event skipped (${code}), it can never be processed as sent: ${message}`,
      );
      return null;
    }
    this.logger.warn(`${plan.where}: delivery refused (${code}): ${message}`);
    settleDelivery(context, plan.rmq!, 'rejected');
    throw rpcExceptions().rejected(code, message);
  }
}
