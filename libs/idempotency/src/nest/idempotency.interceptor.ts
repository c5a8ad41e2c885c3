import {
  CallHandler,
  ExecutionContext,
  Inject,
  Injectable,
  Logger,
  NestInterceptor,
} from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { from, lastValueFrom, Observable } from 'rxjs';
import { ExecuteOutcome, ExecuteRequest, IdempotencyEngine } from '../core/engine';
import {
  IdempotencyCompletionError,
  IdempotencyError,
  IdempotencyFingerprintMismatchException,
  IdempotencyInFlightException,
  IdempotencyKeyError,
  IdempotencyPayloadError,
  IdempotencyStoreUnavailableError,
} from '../core/errors';
import { assertValidKey, DEFAULT_MAX_KEY_LENGTH } from '../core/key';
import { HandlerPlan } from './handler-plan';
import { HttpKeySource, KeySource, RpcKeySource } from './idempotent.decorator';
import { IdempotencyExplorer } from './idempotency.explorer';
import { IDEMPOTENCY_MODULE_OPTIONS } from './idempotency.module-definition';
import {
  DEFAULT_KEY_HEADER,
  DEFAULT_MAX_BODY_BYTES,
  NEVER_STORED_HEADERS,
} from './idempotency.options';
import type {
  IdempotencyModuleOptions,
  StoredHttpResponse,
  StoredResult,
  StoredRpcResult,
} from './idempotency.options';
import { requestFingerprint } from './http/fingerprint';
import { readKeyHeader } from './http/key-header';
import {
  PersistedHttpResponse,
  persistHttpResponse,
  restoreHttpResponse,
} from './http/stored-response';
import { problem } from './http/problem';
import { messageView, rmqHandles } from './rpc/message-view';
import {
  IdempotencyInFlightRpcException,
  IdempotencyRpcException,
  IdempotencyStoreUnavailableRpcException,
} from './rpc/rpc-exceptions';

type ResolvedKey = { kind: 'key'; key: string } | { kind: 'absent' };

/**
 * Registered globally by `IdempotencyModule`; a no-op for handlers without
 * `@Idempotent`. Subclass and override the protected hooks to change how keys
 * are read or how refusals look.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  protected readonly logger = new Logger('Idempotency');

  constructor(
    protected readonly engine: IdempotencyEngine,
    protected readonly explorer: IdempotencyExplorer,
    protected readonly adapterHost: HttpAdapterHost,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) protected readonly options: IdempotencyModuleOptions,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const plan = this.explorer.planForHandler(context.getClass(), context.getHandler());
    if (!plan) return next.handle();
    switch (context.getType()) {
      case 'http':
        return from(this.handleHttp(context, next, plan));
      case 'rpc':
        return from(this.handleRpc(context, next, plan));
      default:
        return next.handle();
    }
  }

  protected async handleHttp(
    context: ExecutionContext,
    next: CallHandler,
    plan: HandlerPlan,
  ): Promise<unknown> {
    const http = context.switchToHttp();
    const request = http.getRequest();
    const response = http.getResponse();
    const adapter = this.adapterHost.httpAdapter;
    const source: HttpKeySource = {
      type: 'http',
      body: request.body,
      params: request.params ?? {},
      query: request.query ?? {},
      headers: request.headers ?? {},
      user: request.user,
      context,
    };
    const resolved = this.resolveHttpKey(request, source, plan);
    if (resolved.kind === 'absent') {
      if (plan.required) {
        throw problem(
          400,
          'idempotency-key-missing',
          plan.key.kind === 'header'
            ? `${plan.where} requires the ${this.keyHeaderName()} header`
            : `${plan.where}: the request has no idempotency key (key: ${plan.key.kind === 'expression' ? `'${plan.key.expression.source}'` : 'a function'})`,
        );
      }
      return lastValueFrom(next.handle(), { defaultValue: undefined });
    }
    this.assertKey(plan, resolved.key, (message) =>
      problem(400, 'idempotency-key-invalid', message),
    );
    const maxBody = this.options.http?.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
    const bodyBytes = bodySize(request);
    if (bodyBytes > maxBody) {
      throw problem(
        413,
        'idempotency-body-too-large',
        `request body is ${bodyBytes} bytes; idempotent requests accept at most ${maxBody}`,
      );
    }
    const fingerprint = this.fingerprint(plan, source, () =>
      requestFingerprint(plan.route!, request.body),
    );

    const outcome = await this.runOnce<PersistedHttpResponse>(
      context,
      plan,
      resolved.key,
      fingerprint,
      next,
      (body) =>
        persistHttpResponse(
          this.sanitize<StoredHttpResponse>({
            kind: 'http',
            status: readStatus(response),
            headers: this.captureHeaders(response, plan),
            body,
          }),
        ),
    );
    switch (outcome.kind) {
      case 'refused':
        throw this.httpRefusal(outcome.error, plan);
      case 'executed':
        return outcome.value;
      case 'replayed': {
        const stored = restoreHttpResponse(outcome.value);
        adapter.status(response, stored.status);
        for (const [name, value] of Object.entries(stored.headers))
          adapter.setHeader(response, name, value as string);
        adapter.setHeader(response, 'Idempotent-Replayed', 'true');
        return stored.body;
      }
    }
  }

  protected async handleRpc(
    context: ExecutionContext,
    next: CallHandler,
    plan: HandlerPlan,
  ): Promise<unknown> {
    const source: RpcKeySource = {
      type: 'rpc',
      data: context.switchToRpc().getData(),
      message: messageView(context),
      context,
    };
    let resolved: ResolvedKey;
    try {
      resolved = this.evaluateKey(plan, source);
    } catch (error) {
      throw new IdempotencyRpcException('idempotency-key-invalid', (error as Error).message);
    }
    if (resolved.kind === 'absent') {
      if (plan.required)
        throw new IdempotencyRpcException(
          'idempotency-key-missing',
          `${plan.where}: the message has no idempotency key`,
        );
      return lastValueFrom(next.handle(), { defaultValue: undefined });
    }
    this.assertKey(
      plan,
      resolved.key,
      (message) => new IdempotencyRpcException('idempotency-key-invalid', message),
    );
    const fingerprint = this.fingerprint(plan, source, () => undefined);

    const outcome = await this.runOnce<StoredRpcResult>(
      context,
      plan,
      resolved.key,
      fingerprint,
      next,
      (value) => this.sanitize({ kind: 'rpc', value }),
    );
    switch (outcome.kind) {
      case 'refused':
        if (
          outcome.error instanceof IdempotencyInFlightException &&
          this.options.rmq?.nackOnInFlight
        ) {
          rmqHandles(context)?.nack(true);
        }
        throw this.rpcRefusal(outcome.error, plan);
      case 'executed':
        return outcome.value;
      case 'replayed':
        if (this.options.rmq?.ackOnReplay) rmqHandles(context)?.ack();
        // Always a value: an empty stream would make Kafka retry and a request/reply hang.
        return outcome.value.value ?? null;
    }
  }

  /**
   * Runs the handler once per key. The handler's own error is rethrown as it
   * is; anything the library refused with comes back as `refused`.
   */
  private async runOnce<P>(
    context: ExecutionContext,
    plan: HandlerPlan,
    key: string,
    fingerprint: string | undefined,
    next: CallHandler,
    toPayload: (value: unknown) => P,
  ): Promise<ExecuteOutcome<unknown, P> | { kind: 'refused'; error: unknown }> {
    let handlerFailed = false;
    try {
      return await this.engine.execute<unknown, P>(
        this.executeRequest(context, plan, key, fingerprint),
        async () => {
          try {
            return await lastValueFrom(next.handle(), { defaultValue: undefined });
          } catch (error) {
            handlerFailed = true;
            throw error;
          }
        },
        toPayload,
      );
    } catch (error) {
      if (handlerFailed) throw error;
      return { kind: 'refused', error };
    }
  }

  /** The HTTP key: from the decorator's `key`, or the key header. */
  protected resolveHttpKey(
    request: {
      rawHeaders?: string[];
      raw?: { rawHeaders?: string[] };
      headers?: Record<string, unknown>;
    },
    source: HttpKeySource,
    plan: HandlerPlan,
  ): ResolvedKey {
    if (plan.key.kind !== 'header') {
      try {
        return this.evaluateKey(plan, source);
      } catch (error) {
        throw problem(400, 'idempotency-key-invalid', (error as Error).message);
      }
    }
    const header = readKeyHeader(
      request.rawHeaders ?? request.raw?.rawHeaders,
      request.headers ?? {},
      this.keyHeaderName(),
    );
    if (header.kind === 'invalid') throw problem(400, 'idempotency-key-invalid', header.reason);
    return header.kind === 'absent' ? { kind: 'absent' } : { kind: 'key', key: header.key };
  }

  protected evaluateKey(plan: HandlerPlan, source: KeySource): ResolvedKey {
    let value: unknown;
    if (plan.key.kind === 'function') {
      value = plan.key.fn(source);
    } else if (plan.key.kind === 'expression') {
      const result = plan.key.expression.evaluate(source as unknown as Record<string, unknown>);
      if (typeof result === 'object')
        throw new IdempotencyKeyError(`${plan.where}: key expression ${result.invalid}`);
      value = result;
    }
    if (value === undefined || value === null) return { kind: 'absent' };
    if (typeof value === 'number') value = String(value);
    if (typeof value !== 'string')
      throw new IdempotencyKeyError(
        `${plan.where}: key function returned ${typeof value}, not a string`,
      );
    return { kind: 'key', key: value };
  }

  protected keyHeaderName(): string {
    return this.options.http?.keyHeader ?? DEFAULT_KEY_HEADER;
  }

  private assertKey(plan: HandlerPlan, key: string, toError: (message: string) => Error): void {
    try {
      assertValidKey(plan.scope, key, this.options.http?.maxKeyLength ?? DEFAULT_MAX_KEY_LENGTH);
    } catch (error) {
      throw toError((error as Error).message);
    }
  }

  /** One literal: spreading an object into another costs microseconds per call on Node 20. */
  private executeRequest(
    context: ExecutionContext,
    plan: HandlerPlan,
    key: string,
    fingerprint: string | undefined,
  ): ExecuteRequest {
    const tenant = this.options.tenant?.(context);
    return {
      scope: tenant === undefined ? plan.scope : `${plan.scope}#tenant:${tenant}`,
      key,
      lease: plan.leaseMs,
      waitTimeout: plan.waitTimeoutMs,
      ttl: plan.ttlMs,
      fingerprint,
    };
  }

  private fingerprint(
    plan: HandlerPlan,
    source: KeySource,
    byDefault: () => string | undefined,
  ): string | undefined {
    if (plan.fingerprint === false) return undefined;
    if (plan.fingerprint === 'default') return byDefault();
    return plan.fingerprint(source);
  }

  private sanitize<T extends StoredResult>(result: T): T {
    return (this.options.sanitize ? this.options.sanitize(result) : result) as T;
  }

  private captureHeaders(
    response: { getHeaders?: () => Record<string, unknown> },
    plan: HandlerPlan,
  ): Record<string, string | string[]> {
    const out: Record<string, string | string[]> = {};
    const headers = response.getHeaders?.() ?? {};
    for (const [name, value] of Object.entries(headers)) {
      const lower = name.toLowerCase();
      if (
        value === undefined ||
        NEVER_STORED_HEADERS.includes(lower) ||
        !plan.replayHeaders!.has(lower)
      )
        continue;
      out[lower] = Array.isArray(value) ? value.map(String) : String(value);
    }
    return out;
  }

  protected httpRefusal(error: unknown, plan: HandlerPlan): unknown {
    if (error instanceof IdempotencyInFlightException) {
      return problem(
        409,
        'idempotency-in-flight',
        `a request with this ${this.keyHeaderName()} is still being processed`,
        error.retryAfterMs,
      );
    }
    if (error instanceof IdempotencyFingerprintMismatchException) {
      return problem(
        422,
        'idempotency-key-reused',
        `this ${this.keyHeaderName()} was already used with a different request`,
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
    if (error instanceof IdempotencyCompletionError) {
      this.logger.error(error.message);
      return problem(
        503,
        'idempotency-completion-failed',
        'the request was processed but its outcome could not be recorded',
        1000,
      );
    }
    if (error instanceof IdempotencyPayloadError) {
      this.logger.error(`${plan.where}: ${error.message}`);
      return problem(
        500,
        'idempotency-result-not-storable',
        'the response could not be recorded for replay; the key was released',
      );
    }
    return error;
  }

  protected rpcRefusal(error: unknown, plan: HandlerPlan): unknown {
    if (error instanceof IdempotencyInFlightException) {
      return new IdempotencyInFlightRpcException(error.retryAfterMs, error.scope, error.keyDigest);
    }
    if (error instanceof IdempotencyStoreUnavailableError) {
      this.logger.warn(`${plan.where}: idempotency store unavailable: ${error.message}`);
      return new IdempotencyStoreUnavailableRpcException(
        error.retryAfterMs,
        'the idempotency store is unavailable; retry later',
      );
    }
    if (error instanceof IdempotencyFingerprintMismatchException) {
      return new IdempotencyRpcException(
        'idempotency-key-reused',
        `${error.keyDigest} was already used with a different message`,
      );
    }
    if (error instanceof IdempotencyKeyError) {
      return new IdempotencyRpcException('idempotency-key-invalid', error.message);
    }
    if (error instanceof IdempotencyError) {
      this.logger.error(`${plan.where}: ${error.message}`);
      return new IdempotencyRpcException(error.name, error.message);
    }
    return error;
  }
}

function readStatus(response: { statusCode?: number }): number {
  return response.statusCode ?? 200;
}

function bodySize(request: { headers?: Record<string, unknown>; body?: unknown }): number {
  const declared = Number(request.headers?.['content-length']);
  if (Number.isFinite(declared) && declared > 0) return declared;
  if (request.body === undefined || request.body === null) return 0;
  if (typeof request.body === 'string' || Buffer.isBuffer(request.body))
    return Buffer.byteLength(request.body);
  return Buffer.byteLength(JSON.stringify(request.body) ?? '');
}
