import type { CallHandler, ExecutionContext } from '@nestjs/common';
import type { HttpAdapterHost } from '@nestjs/core';
import type { ServerResponse } from 'node:http';
import type { IdempotencyEngine } from '../../../core/engine';
import { IdempotencyKeyError } from '../../../core/errors';
import type { CallIdentity, CallOutcome, Capture } from '../../../core/lifecycle';
import type { IdempotencyLogger } from '../../../core/logger';
import { encodeHttpResponse } from '../../../core/payload';
import type { HandlerPlan } from '../../config/handler-plan';
import type { HttpKeySource } from '../../config/handler-options';
import { requestFingerprint } from './fingerprint';
import { readKeyHeader } from './key-header';
import type { IdempotencyHttpException } from './problem';
import { FinishedResponse, HeldResponse } from './raw-response';
import { evaluateKey } from '../../config/key-resolver';
import type { ModuleSettings } from '../../config/module-settings';
import type { IdempotencyTransactionRunner } from '../../transaction/transaction-runner';
import { Door, invalidKey } from '../door';
import { problemFor } from './http-refusals';
import { bodySize, fingerprintParts, hasBody, HttpRequest, nodeResponse } from './http-request';
import {
  asOutgoing,
  continuationHeader,
  CONTINUATION_HEADER,
  isProblem,
  recordOf,
  replayedResponse,
  replayOf,
  suspendedAnswer,
  valueOf,
} from './http-response';
import { ResponseCapture } from './response-capture';

/**
 * HTTP routes: the key (header, expression or function), the body checks and
 * the fingerprint; the response as the client receives it, held back from
 * the socket until it is stored (every interceptor, serializer and filter has
 * run by then); a replay writes those stored bytes; refusals are problem
 * documents.
 */
export class HttpDoor extends Door {
  constructor(
    engine: IdempotencyEngine,
    settings: ModuleSettings,
    private readonly adapterHost: HttpAdapterHost,
    logger: IdempotencyLogger,
    transactions?: IdempotencyTransactionRunner,
  ) {
    super(engine, settings, logger, transactions);
  }

  protected serve(
    context: ExecutionContext,
    next: CallHandler,
    plan: HandlerPlan,
  ): Promise<unknown> {
    const http = context.switchToHttp();
    const request = http.getRequest<HttpRequest>();
    const response = http.getResponse<unknown>();
    const res = nodeResponse(response);
    const capture: ResponseCapture = new ResponseCapture(res, (finished, digest) =>
      this.stored(plan, finished, digest, capture.continuation),
    );
    const outcome = this.perform(
      plan,
      this.identify(request, context, plan),
      this.work(next, plan, capture),
      plan.resumes === undefined ? undefined : continuationHeader(request),
    );
    // The handler's value goes on as soon as it returns (`returned`); the outcome
    // settles `value` first only when the handler did not return (a replay, a refusal, a failure).
    const { value } = capture;
    outcome.then(
      (done) => {
        try {
          value.resolve(this.render(done, plan, response, res, capture));
        } catch (error) {
          value.reject(error);
        }
      },
      (error: unknown) => {
        // Whatever failed after the handler returned, its response goes out as written.
        capture.answerAsWritten();
        value.reject(error);
      },
    );
    return value.promise;
  }

  private render(
    outcome: CallOutcome<unknown>,
    plan: HandlerPlan,
    response: unknown,
    res: ServerResponse,
    capture: ResponseCapture,
  ): unknown {
    switch (outcome.kind) {
      case 'refused':
        throw this.refuse(response, problemFor(outcome.refusal, plan, this.settings.keyHeader));
      case 'replayed': {
        const stored = replayedResponse(outcome.payload, plan);
        // Whatever the chain makes of the value on its way out, the stored bytes are written.
        new HeldResponse(res, (finished) => replayOf(stored, finished));
        return valueOf(stored);
      }
      case 'executed': {
        const failure = outcome.failure;
        // Observing never changes what the client gets.
        const token = outcome.continuation;
        if (token !== undefined && failure === undefined) {
          capture.answer((finished) => suspendedAnswer(finished, plan.suspendStatus!, token));
        } else if (failure === undefined || plan.observe) capture.answerAsWritten();
        else {
          const exception = this.typed(problemFor(failure.refusal, plan, this.settings.keyHeader));
          capture.answer((finished) => asOutgoing(exception, finished));
        }
        return outcome.value;
      }
    }
  }

  /** The stored form of the response the handler's chain wrote. */
  private stored(
    plan: HandlerPlan,
    finished: FinishedResponse,
    keyDigest: () => string,
    continuation: string | undefined,
  ): Capture {
    let record;
    try {
      record = recordOf(plan, finished, this.settings.options.sanitize);
    } catch (error) {
      return { kind: 'not-storable', reason: `sanitize threw: ${(error as Error).message}` };
    }
    if (continuation !== undefined) {
      // A suspension's answer, as its caller gets it and its duplicates replay it.
      record.status = plan.suspendStatus!;
      record.headers[CONTINUATION_HEADER] = continuation;
    }
    if (record.status >= 500) {
      this.logger.warn(
        `${plan.where}: the response sent after the handler returned is a ${record.status}; it is stored and replayed for ${keyDigest()}, since the handler ran`,
      );
    }
    return { kind: 'stored', payload: encodeHttpResponse(record) };
  }

  /** Who is calling: the key, the body checks and the fingerprint. */
  private identify(
    request: HttpRequest,
    context: ExecutionContext,
    plan: HandlerPlan,
  ): CallIdentity {
    let key: string | undefined;
    if (plan.key.kind === 'header') {
      const header = readKeyHeader(
        request.rawHeaders ?? request.raw?.rawHeaders,
        request.headers ?? {},
        this.settings.keyHeader,
      );
      if (header.kind === 'invalid') return invalidKey(`${plan.where}: ${header.reason}`);
      if (header.kind === 'key') key = header.key;
    } else {
      try {
        const resolved = evaluateKey(plan, this.source(request, context));
        if (resolved.kind === 'key') key = resolved.key;
      } catch (error) {
        // Only the library's own verdict is the client's fault; a key function's bug is not.
        if (!(error instanceof IdempotencyKeyError)) throw error;
        return invalidKey(error);
      }
    }
    if (key === undefined) return { kind: 'absent' };
    if (plan.fingerprint === 'default' && request.body === undefined && hasBody(request)) {
      // No parser ran before this check (multipart through a FileInterceptor listed
      // after @Idempotent, or a type without a parser): the body cannot be compared.
      return {
        kind: 'refused',
        refusal: {
          code: 'idempotency-body-unreadable',
          detail: `${plan.where}: the ${request.headers['content-type'] ?? 'request'} body was not parsed before the idempotency check, so a reused key with another body could not be detected; parse it first (put @UseInterceptors(FileInterceptor(…)) below @Idempotent()), or set the fingerprint option`,
        },
      };
    }
    const bytes = bodySize(request);
    if (!plan.observe && bytes > this.settings.maxBodyBytes) {
      return {
        kind: 'refused',
        refusal: {
          code: 'idempotency-body-too-large',
          detail: `request body is ${bytes} bytes; idempotent requests accept at most ${this.settings.maxBodyBytes}`,
        },
      };
    }
    return this.identity(
      context,
      key,
      () => this.fingerprint(request, context, plan),
      request.user,
    );
  }

  private fingerprint(request: HttpRequest, context: ExecutionContext, plan: HandlerPlan) {
    if (plan.fingerprint === false) return null;
    if (plan.fingerprint !== 'default')
      return plan.fingerprint(this.source(request, context)) ?? null;
    return requestFingerprint(fingerprintParts(request), plan.fingerprintForm);
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

  /** The problem document's `type`, from the module's `http.problemTypes`. */
  private typed(exception: IdempotencyHttpException): IdempotencyHttpException {
    exception.problem.type = this.settings.problemType(exception.problem.code);
    return exception;
  }

  /**
   * Readies a refusal: its `Retry-After` goes on the response now, and when the
   * application's exception handling (Nest's own, or a filter of yours) sends
   * the problem document as it is, it goes out as `application/problem+json`
   * (Nest 11's Express adapter would relabel it `application/json`). A filter
   * that renders something else is left alone.
   */
  private refuse(response: unknown, exception: IdempotencyHttpException): IdempotencyHttpException {
    this.typed(exception);
    const adapter = this.adapterHost.httpAdapter;
    for (const [name, value] of Object.entries(exception.headers))
      adapter.setHeader(response, name, value);
    new HeldResponse(nodeResponse(response), (finished) =>
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
}
