import type { CallHandler, ExecutionContext } from '@nestjs/common';
import type { HttpAdapterHost } from '@nestjs/core';
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { from, lastValueFrom, Observable } from 'rxjs';
import type { IdempotencyEngine } from '../../core/engine';
import {
  IdempotencyCompletionError,
  IdempotencyFingerprintMismatchException,
  IdempotencyInFlightException,
  IdempotencyKeyError,
  IdempotencyLeaseLostError,
  IdempotencyOutcomeUnknownException,
  IdempotencyPayloadError,
  IdempotencyStoreUnavailableError,
} from '../../core/errors';
import { keptAmbiguous, type Execution } from '../../core/execution';
import type { IdempotencyEvent } from '../../core/events';
import { keyDigest } from '../../core/key';
import type { IdempotencyLogger } from '../../core/logger';
import { encodeHttpResponse, HttpResponseRecord, notStorableReason } from '../../core/payload';
import type { HandlerPlan } from '../handler-plan';
import { NEVER_STORED_HEADERS, StoredHttpResponse } from '../idempotency.options';
import type { HttpKeySource } from '../handler-options';
import { evaluateKey, ResolvedKey } from '../key-resolver';
import type { ModuleSettings } from '../module-settings';
import { completionFailureReturned, LOST_IN_STRICT_MODE } from '../strict/completion';
import {
  completeAnsweredEarly,
  outcomeUnknownProblem,
  replayedResponse,
} from '../strict/http-strict';
import { handleNext, HandlerEntry } from '../strict/handler-entry';
import type { IdempotencyTransactionRunner } from '../transaction/transaction-runner';
import { requestFingerprint, storedFileFields } from './fingerprint';
import { readKeyHeader } from './key-header';
import { IdempotencyHttpException, problem, ProblemDetails } from './problem';
import { FinishedResponse, HeldResponse, Outgoing } from './raw-response';

type ObservedOutcome = Extract<IdempotencyEvent, { type: 'observed' }>['wouldHave'];

/** The parts of an Express or Fastify request the adapter reads. */
interface HttpRequest {
  method: string;
  url: string;
  originalUrl?: string;
  headers: Record<string, string | string[] | undefined>;
  rawHeaders?: string[];
  raw?: { rawHeaders?: string[] };
  body?: unknown;
  params?: Record<string, unknown>;
  query?: Record<string, unknown>;
  user?: unknown;
  file?: unknown;
  files?: unknown;
}

/**
 * HTTP handlers: the key (header, expression or function), the body checks,
 * the fingerprint, and the response. What is stored is the response as the
 * client receives it, held back from the socket until it is stored (every
 * interceptor, serializer and filter has run by then); a replay writes those
 * stored bytes, whatever the application's interceptors do with the replayed
 * value on its way out.
 */
export class HttpIdempotency {
  constructor(
    private readonly engine: IdempotencyEngine,
    private readonly settings: ModuleSettings,
    private readonly adapterHost: HttpAdapterHost,
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
    const http = context.switchToHttp();
    const request = http.getRequest<HttpRequest>();
    const response = http.getResponse<ServerResponse | { raw: ServerResponse }>();
    const raw = ('raw' in response ? response.raw : response) as ServerResponse;

    if (plan.observe) return this.observe(context, next, plan, request, raw);
    let resolved: ResolvedKey;
    let fingerprint: string | null;
    try {
      resolved = this.resolveKey(request, context, plan);
      if (resolved.kind === 'key') fingerprint = this.fingerprint(request, context, plan);
    } catch (error) {
      if (error instanceof IdempotencyHttpException) throw this.refuse(response, error);
      throw error;
    }
    if (resolved.kind === 'absent') {
      if (plan.required) {
        throw this.refuse(
          response,
          problem(
            400,
            'idempotency-key-missing',
            plan.key.kind === 'header'
              ? `${plan.where} requires the ${this.settings.keyHeader} header`
              : `${plan.where}: the request has no idempotency key (key: ${plan.key.kind === 'expression' ? `'${plan.key.expression.source}'` : 'a function'})`,
          ),
        );
      }
      return this.runHandler(plan, next);
    }
    const bodyBytes = bodySize(request);
    if (bodyBytes > this.settings.maxBodyBytes) {
      throw this.refuse(
        response,
        problem(
          413,
          'idempotency-body-too-large',
          `request body is ${bodyBytes} bytes; idempotent requests accept at most ${this.settings.maxBodyBytes}`,
        ),
      );
    }

    let begun;
    try {
      begun = await this.engine.begin(plan.policy, {
        key: resolved.key,
        fingerprint: fingerprint!,
        tenant: this.settings.options.tenant?.(context),
      });
    } catch (error) {
      throw this.refuse(response, this.refusal(error, plan));
    }

    if (begun.kind === 'replayed') {
      if (notStorableReason(begun.payload) !== undefined)
        throw this.refuse(response, notStorableProblem());
      // A record resolved by an operator or a reconcile hook holds a value, not a response.
      const stored = replayedResponse(begun.payload, plan);
      // Whatever the chain makes of the value on its way out, the stored bytes are written.
      new HeldResponse(raw, async (finished) => replayOf(stored, finished));
      return valueOf(stored);
    }
    if (plan.completion === 'transaction')
      return this.executeInTransaction(next, plan, raw, begun.execution);
    return this.execute(next, plan, raw, begun.execution);
  }

  /**
   * Observe mode: the handler runs whatever the record says, its response goes
   * out as it is, and an `observed` event says what enforce mode would have
   * done. A first execution is still recorded, so later duplicates can be told.
   */
  private async observe(
    context: ExecutionContext,
    next: CallHandler,
    plan: HandlerPlan,
    request: HttpRequest,
    raw: ServerResponse,
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
    let fingerprint: string | null;
    try {
      resolved = this.resolveKey(request, context, plan);
      if (resolved.kind === 'absent') {
        if (plan.required) report('key-missing');
        return run();
      }
      fingerprint = this.fingerprint(request, context, plan);
    } catch (error) {
      if (!(error instanceof IdempotencyHttpException)) throw error;
      report(
        error.problem.code === 'idempotency-body-unreadable' ? 'body-unreadable' : 'key-invalid',
      );
      return run();
    }
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
    return this.execute(next, plan, raw, begun.execution, true);
  }

  /** Runs the handler; the response the adapter then writes is stored before the client gets it. */
  private async execute(
    next: CallHandler,
    plan: HandlerPlan,
    raw: ServerResponse,
    execution: Execution,
    observing = false,
  ): Promise<unknown> {
    let returned = false;
    let answeredEarly = false;
    const held = new HeldResponse(raw, async (finished): Promise<Outgoing> => {
      if (!returned) {
        // Something answered before the handler returned (an outer timeout, say).
        answeredEarly = true;
        return { kind: 'as-finished' };
      }
      const outgoing = await this.complete(plan, execution, finished);
      // Observing never changes what the client gets.
      return observing ? { kind: 'as-finished' } : outgoing;
    });
    let value: unknown;
    const entry = plan.policy.strict ? new HandlerEntry() : undefined;
    try {
      value = await (entry ? handleNext(next, entry) : this.runHandler(plan, next));
    } catch (error) {
      // The action failed: the error response goes out as it is, and the key is free again
      // (strict mode: AMBIGUOUS, once the handler's body was entered).
      held.release();
      await execution.fail(error, entry?.entered ?? true);
      throw error;
    }
    if (answeredEarly && plan.policy.strict) {
      // The handler ran: strict mode never frees its key for a second run.
      await completeAnsweredEarly(execution, plan, this.logger);
      return value;
    }
    if (answeredEarly) {
      this.logger.warn(
        `${plan.where}: the response was sent before the handler returned (an interceptor answered first); ${execution.keyDigest} was released`,
      );
      await execution.release('answered-early');
      return value;
    }
    returned = true;
    return value;
  }

  /**
   * `completion: 'transaction'`: the handler runs inside a database
   * transaction, which stays open until the response it produced is held
   * back, then completes the record with that response and commits. The
   * response goes out only after the commit: a client never sees an answer
   * whose writes could still roll back. Every failure rolls the handler's
   * writes back and frees the key, so the answer is "nothing happened"
   * (strict mode: AMBIGUOUS once the handler began, see Execution.runInTransaction).
   */
  private async executeInTransaction(
    next: CallHandler,
    plan: HandlerPlan,
    raw: ServerResponse,
    execution: Execution,
  ): Promise<unknown> {
    const returned = deferred<unknown>();
    const finished = deferred<FinishedResponse>();
    const settled = deferred<Outgoing>();
    let handlerReturned = false;
    let answeredEarly = false;
    const held = new HeldResponse(raw, (response): Promise<Outgoing> => {
      if (!handlerReturned) {
        // Something answered before the handler returned: its writes are rolled back.
        answeredEarly = true;
        return Promise.resolve({ kind: 'as-finished' });
      }
      finished.resolve(response);
      return settled.promise;
    });
    const entry = plan.policy.strict ? new HandlerEntry() : undefined;
    const transaction = execution.runInTransaction(
      this.transactions!.runnerFor(this.engine.store),
      async () => {
        let value: unknown;
        try {
          value = await handleNext(next, entry);
        } catch (error) {
          returned.reject(error);
          throw error;
        }
        if (answeredEarly) {
          returned.resolve(value);
          throw new AnsweredEarly();
        }
        handlerReturned = true;
        returned.resolve(value);
        const response = await finished.promise;
        const record = this.recordOf(plan, response);
        return { value: undefined, payload: encodeHttpResponse(record) };
      },
      () => entry?.entered ?? true,
    );
    transaction.then(
      () => settled.resolve({ kind: 'as-finished' }),
      (error: unknown) => {
        // Only a response held back waits for this; a failed handler's goes out as it is.
        if (!handlerReturned) return;
        void finished.promise.then((response) =>
          settled.resolve(this.transactionFailure(plan, execution, error, response)),
        );
      },
    );
    try {
      return await returned.promise;
    } catch (error) {
      // The handler failed: rolled back and released before its error response goes out.
      await transaction.catch(() => undefined);
      held.release();
      throw error;
    } finally {
      if (answeredEarly) {
        await transaction.catch(() => undefined);
        this.logger.warn(
          `${plan.where}: the response was sent before the handler returned (an interceptor answered first); its transaction was rolled back and ${execution.keyDigest} ${plan.policy.strict && entry?.entered ? 'made AMBIGUOUS (strict mode)' : 'released'}`,
        );
      }
    }
  }

  /** What the client gets when a transactional completion did not commit. */
  private transactionFailure(
    plan: HandlerPlan,
    execution: Execution,
    error: unknown,
    response: FinishedResponse,
  ): Outgoing {
    let refusal: ReturnType<typeof problem>;
    // Strict mode, the commit failed after the handler ran: the record is AMBIGUOUS
    // (Execution.runInTransaction), so a retry is refused until someone resolves it; no
    // Retry-After invites one. (A result that cannot be stored leaves it AMBIGUOUS too.)
    const kept =
      keptAmbiguous(error) ||
      (plan.policy.strict &&
        (error instanceof IdempotencyPayloadError || error instanceof NotStorable));
    const outcome = kept
      ? 'its writes were rolled back, and strict mode keeps the key until the outcome is resolved'
      : 'nothing happened';
    if (error instanceof IdempotencyLeaseLostError && plan.policy.strict) {
      // Strict mode steals no lease: one that ran out was moved to AMBIGUOUS by a
      // duplicate, so a retry is refused until the record is resolved, not "later".
      refusal = problem(
        409,
        'idempotency-outcome-unknown',
        `${plan.where}: ${LOST_IN_STRICT_MODE}`,
      );
    } else if (error instanceof IdempotencyLeaseLostError) {
      // A newer attempt holds the key; this one left nothing behind.
      refusal = problem(
        409,
        'idempotency-in-flight',
        'a request with this idempotency key is still being processed',
        1000,
      );
    } else if (error instanceof IdempotencyPayloadError || error instanceof NotStorable) {
      this.logger.error(`${plan.where}: ${(error as Error).message}`);
      refusal = problem(
        500,
        'idempotency-result-not-storable',
        `the response could not be recorded for replay, so the request was rolled back; ${outcome}`,
      );
    } else {
      this.logger.warn(
        `${plan.where}: the transaction for ${execution.keyDigest} did not commit: ${(error as Error).message}`,
      );
      refusal = problem(
        503,
        'idempotency-store-unavailable',
        kept
          ? `the request did not commit; ${outcome}`
          : 'the request did not commit; nothing happened; retry later',
        kept
          ? undefined
          : error instanceof IdempotencyStoreUnavailableError
            ? error.retryAfterMs
            : 1000,
      );
    }
    return asOutgoing(refusal, this.settings.problemType, response);
  }

  /** The response as it is stored (sanitized); throws `NotStorable` when `sanitize` throws. */
  private recordOf(plan: HandlerPlan, finished: FinishedResponse): HttpResponseRecord {
    let record: HttpResponseRecord = {
      status: finished.status,
      headers: storedHeaders(finished.headers, plan.replayHeaders!),
      body: finished.body,
    };
    if (this.settings.options.sanitize) {
      try {
        record = this.sanitize(record);
      } catch (error) {
        throw new NotStorable(`sanitize threw: ${(error as Error).message}`);
      }
      record.headers = storedHeaders(record.headers, plan.replayHeaders!);
    }
    return record;
  }

  private async complete(
    plan: HandlerPlan,
    execution: Execution,
    finished: FinishedResponse,
  ): Promise<Outgoing> {
    let record: HttpResponseRecord = {
      status: finished.status,
      headers: storedHeaders(finished.headers, plan.replayHeaders!),
      body: finished.body,
    };
    try {
      if (this.settings.options.sanitize) {
        record = this.sanitize(record);
        // Whatever the sanitizer returned, the headers that are never stored stay out.
        record.headers = storedHeaders(record.headers, plan.replayHeaders!);
      }
    } catch (error) {
      return this.notStorable(
        plan,
        execution,
        finished,
        `sanitize threw: ${(error as Error).message}`,
      );
    }
    if (record.status >= 500) {
      this.logger.warn(
        `${plan.where}: the response sent after the handler returned is a ${record.status}; it is stored and replayed for ${execution.keyDigest}, since the handler ran`,
      );
    }
    try {
      await execution.complete(encodeHttpResponse(record));
      return { kind: 'as-finished' };
    } catch (error) {
      if (error instanceof IdempotencyCompletionError) {
        this.logger.error(error.message);
        if (plan.policy.onCompletionFailure === 'return') {
          this.logger.warn(completionFailureReturned(plan, execution));
          return { kind: 'as-finished' };
        }
        return asOutgoing(
          problem(
            503,
            'idempotency-completion-failed',
            'the request was processed but its outcome could not be recorded',
            1000,
          ),
          this.settings.problemType,
          finished,
        );
      }
      if (error instanceof IdempotencyPayloadError) {
        // Too large for the store: the record says so (completed without a result).
        this.logger.error(`${plan.where}: ${error.message}`);
        return asOutgoing(notStorableProblem(), this.settings.problemType, finished);
      }
      throw error;
    }
  }

  /** The handler ran but its response cannot be stored: complete without it, so nothing runs it twice. */
  private async notStorable(
    plan: HandlerPlan,
    execution: Execution,
    finished: FinishedResponse,
    reason: string,
  ): Promise<Outgoing> {
    this.logger.error(
      `${plan.where}: the response for ${execution.keyDigest} cannot be stored: ${reason}`,
    );
    try {
      await execution.completeNotStorable(reason);
    } catch (error) {
      this.logger.error(`${plan.where}: ${(error as Error).message}`);
    }
    return asOutgoing(notStorableProblem(), this.settings.problemType, finished);
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

  /** `sanitize` sees a copy: the body parsed from the bytes being sent, never the live object. */
  private sanitize(record: HttpResponseRecord): HttpResponseRecord {
    const isJson = /[/+]json\b/i.test(String(record.headers['content-type'] ?? ''));
    const view: StoredHttpResponse = {
      kind: 'http',
      status: record.status,
      headers: { ...record.headers },
      body:
        isJson && record.body.length > 0
          ? JSON.parse(record.body.toString('utf8'))
          : Buffer.from(record.body),
    };
    const out = this.settings.options.sanitize!(view) as StoredHttpResponse;
    const body = out.body;
    let bytes: Buffer;
    if (Buffer.isBuffer(body)) bytes = body;
    else if (isJson) bytes = Buffer.from(JSON.stringify(body) ?? '', 'utf8');
    else
      bytes = Buffer.from(typeof body === 'string' ? body : (JSON.stringify(body) ?? ''), 'utf8');
    return { status: out.status, headers: out.headers, body: bytes };
  }

  private resolveKey(
    request: HttpRequest,
    context: ExecutionContext,
    plan: HandlerPlan,
  ): ResolvedKey {
    if (plan.key.kind !== 'header') {
      try {
        return evaluateKey(plan, this.source(request, context));
      } catch (error) {
        // Only the library's own verdict is the client's fault; a key function's bug is not.
        if (!(error instanceof IdempotencyKeyError)) throw error;
        throw problem(400, 'idempotency-key-invalid', error.message);
      }
    }
    const header = readKeyHeader(
      request.rawHeaders ?? request.raw?.rawHeaders,
      request.headers ?? {},
      this.settings.keyHeader,
    );
    if (header.kind === 'invalid') {
      throw problem(400, 'idempotency-key-invalid', `${plan.where}: ${header.reason}`);
    }
    return header.kind === 'absent' ? { kind: 'absent' } : { kind: 'key', key: header.key };
  }

  private fingerprint(
    request: HttpRequest,
    context: ExecutionContext,
    plan: HandlerPlan,
  ): string | null {
    if (plan.fingerprint === false) return null;
    if (plan.fingerprint !== 'default')
      return plan.fingerprint(this.source(request, context)) ?? null;
    if (request.body === undefined && hasBody(request)) {
      // No parser ran before this check (multipart through a FileInterceptor listed
      // after @Idempotent, or a type without a parser): the body cannot be compared.
      throw problem(
        415,
        'idempotency-body-unreadable',
        `${plan.where}: the ${request.headers['content-type'] ?? 'request'} body was not parsed before the idempotency check, so a reused key with another body could not be detected; parse it first (put @UseInterceptors(FileInterceptor(…)) below @Idempotent()), or set the fingerprint option`,
      );
    }
    const url = request.originalUrl ?? request.url;
    const q = url.indexOf('?');
    return requestFingerprint(
      {
        method: request.method,
        path: q < 0 ? url : url.slice(0, q),
        query: q < 0 ? '' : url.slice(q + 1),
        body: request.body,
        files: uploadedFiles(request),
        params: request.params,
      },
      plan.fingerprintForm,
    );
  }

  private source(request: HttpRequest, context: ExecutionContext): HttpKeySource {
    return {
      type: 'http',
      body: request.body,
      params: request.params ?? {},
      query: request.query ?? {},
      headers: request.headers ?? {},
      user: request.user,
      context,
    };
  }

  /**
   * Readies a refusal: its `Retry-After` goes on the response now, and when the
   * application's exception handling (Nest's own, or a filter of yours) sends
   * the problem document as it is, it goes out as `application/problem+json`
   * (Nest 11's Express adapter would relabel it `application/json`). A filter
   * that renders something else is left alone.
   */
  private refuse(
    response: unknown,
    exception: ReturnType<typeof problem>,
  ): ReturnType<typeof problem> {
    exception.problem.type = this.settings.problemType(exception.problem.code);
    const adapter = this.adapterHost.httpAdapter;
    for (const [name, value] of Object.entries(exception.headers))
      adapter.setHeader(response, name, value);
    const raw = (
      response && typeof response === 'object' && 'raw' in response ? response.raw : response
    ) as ServerResponse;
    new HeldResponse(raw, async (finished) =>
      isProblem(finished, exception)
        ? {
            kind: 'replace',
            status: finished.status,
            headers: { ...finished.headers, 'content-type': 'application/problem+json' },
            body: finished.body,
          }
        : { kind: 'as-finished' },
    );
    return exception;
  }

  private refusal(error: unknown, plan: HandlerPlan): ReturnType<typeof problem> {
    if (error instanceof IdempotencyOutcomeUnknownException) return outcomeUnknownProblem(plan);
    if (error instanceof IdempotencyInFlightException) {
      return problem(
        409,
        'idempotency-in-flight',
        'a request with this idempotency key is still being processed',
        error.retryAfterMs,
      );
    }
    if (error instanceof IdempotencyFingerprintMismatchException) {
      return problem(
        422,
        'idempotency-key-reused',
        'this idempotency key was already used with a different request',
      );
    }
    if (error instanceof IdempotencyKeyError)
      return problem(400, 'idempotency-key-invalid', error.message);
    if (error instanceof IdempotencyStoreUnavailableError) {
      this.logger.warn(`${plan.where}: idempotency store unavailable: ${error.message}`);
      return problem(
        503,
        'idempotency-store-unavailable',
        'the idempotency store is unavailable; retry later',
        error.retryAfterMs,
      );
    }
    throw error;
  }
}

/** True when what is being sent is this refusal's problem document (whatever its Content-Type). */
function isProblem(finished: FinishedResponse, exception: ReturnType<typeof problem>): boolean {
  if (finished.status !== exception.problem.status || finished.body.length > 64 * 1024)
    return false;
  try {
    const sent = JSON.parse(finished.body.toString('utf8')) as Partial<ProblemDetails>;
    return sent.code === exception.problem.code && sent.detail === exception.problem.detail;
  } catch {
    return false;
  }
}

/** What goes out on a replay: the stored status, body and headers over the live response's own. */
function replayOf(stored: HttpResponseRecord, finished: FinishedResponse): Outgoing {
  const headers: OutgoingHttpHeaders = {};
  const live = finished.headers;
  for (const name of Object.keys(live)) {
    // What describes the body is the stored response's, not the re-serialized value's.
    if (!BODY_HEADERS.has(name)) headers[name] = live[name];
  }
  const kept = stored.headers;
  for (const name of Object.keys(kept)) headers[name] = kept[name];
  headers['idempotent-replayed'] = 'true';
  // Under CORS a browser only lets a page read the headers listed here.
  if (headers['access-control-allow-origin'] !== undefined) {
    const exposed = String(headers['access-control-expose-headers'] ?? '');
    if (!/(^|,)\s*(idempotent-replayed|\*)\s*(,|$)/i.test(exposed)) {
      headers['access-control-expose-headers'] = exposed
        ? `${exposed}, Idempotent-Replayed`
        : 'Idempotent-Replayed';
    }
  }
  return { kind: 'replace', status: stored.status, headers, body: stored.body };
}

const NEVER_STORED = new Set(NEVER_STORED_HEADERS);

const BODY_HEADERS = new Set([
  'content-type',
  'content-length',
  'etag',
  'transfer-encoding',
  'content-encoding',
]);

/** The stored body as the value outer interceptors see on a replay: parsed JSON, text, or bytes. */
function valueOf(stored: HttpResponseRecord): unknown {
  if (stored.body.length === 0) return undefined;
  const type = String(stored.headers['content-type'] ?? '');
  if (/[/+]json\b/i.test(type)) {
    try {
      return JSON.parse(stored.body.toString('utf8'));
    } catch {
      return stored.body.toString('utf8');
    }
  }
  return /^text\//i.test(type) ? stored.body.toString('utf8') : stored.body;
}

/** A response `sanitize` could not handle: in a transaction, a reason to roll back. */
class NotStorable extends Error {}

/** The response went out before the handler returned: in a transaction, a reason to roll back. */
class AnsweredEarly extends Error {
  constructor() {
    super('the response was sent before the handler returned');
  }
}

interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** The handler ran once, and what it answered could not be recorded: never run it again for this key. */
function notStorableProblem(): ReturnType<typeof problem> {
  return problem(
    500,
    'idempotency-result-not-storable',
    'the request was processed, but its response could not be recorded for replay; retrying with this key will not run it again',
  );
}

/** A problem document in place of the finished response, keeping its headers that do not describe the body (CORS, request ids). */
function asOutgoing(
  exception: ReturnType<typeof problem>,
  problemType: (code: string) => string,
  finished: FinishedResponse,
): Outgoing {
  exception.problem.type = problemType(exception.problem.code);
  const kept: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(finished.headers)) {
    if (!BODY_HEADERS.has(name) && !NEVER_STORED_HEADERS.includes(name)) kept[name] = value;
  }
  return {
    kind: 'replace',
    status: exception.problem.status,
    headers: {
      ...kept,
      'content-type': 'application/problem+json',
      ...Object.fromEntries(
        Object.entries(exception.headers).map(([k, v]) => [k.toLowerCase(), v]),
      ),
    },
    body: Buffer.from(JSON.stringify(exception.problem)),
  };
}

function storedHeaders(
  headers: OutgoingHttpHeaders,
  allowed: Set<string>,
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const given of Object.keys(headers)) {
    const value = headers[given];
    const name = given.toLowerCase();
    if (value === undefined || !allowed.has(name) || NEVER_STORED.has(name)) continue;
    out[name] = Array.isArray(value) ? value.map(String) : String(value);
  }
  return out;
}

function hasBody(request: HttpRequest): boolean {
  const length = Number(request.headers['content-length']);
  return (
    (Number.isFinite(length) && length > 0) || request.headers['transfer-encoding'] !== undefined
  );
}

function bodySize(request: HttpRequest): number {
  const declared = Number(request.headers['content-length']);
  if (Number.isFinite(declared) && declared > 0) return declared;
  const body = request.body;
  if (body === undefined || body === null) return 0;
  if (typeof body === 'string' || Buffer.isBuffer(body)) return Buffer.byteLength(body);
  return Buffer.byteLength(JSON.stringify(body) ?? '');
}

/** multer's `file` / `files`, described by name, type, size and a digest of the content, never the bytes. */
function uploadedFiles(request: HttpRequest): unknown {
  if (request.file === undefined && request.files === undefined) return undefined;
  const describe = (file: unknown): unknown => {
    const f = file as {
      fieldname?: string;
      originalname?: string;
      mimetype?: string;
      size?: number;
      buffer?: Buffer;
      path?: string;
    };
    return {
      field: f.fieldname,
      name: f.originalname,
      type: f.mimetype,
      size: f.size,
      // The content, whether multer kept it in memory or wrote it to disk (under a random name).
      content: Buffer.isBuffer(f.buffer)
        ? createHash('sha256').update(f.buffer).digest('hex')
        : f.path
          ? createHash('sha256').update(readFileSync(f.path)).digest('hex')
          : storedFileFields(file as object),
    };
  };
  const files = request.files;
  return {
    file: request.file === undefined ? null : describe(request.file),
    files: Array.isArray(files)
      ? files.map(describe)
      : files && typeof files === 'object'
        ? Object.fromEntries(
            Object.entries(files).map(([k, v]) => [k, ([] as unknown[]).concat(v).map(describe)]),
          )
        : null,
  };
}
