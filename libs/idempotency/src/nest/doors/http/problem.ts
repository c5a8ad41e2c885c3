import { ArgumentsHost, Catch, ExceptionFilter, HttpException } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { brandErrorClass, isBrandedInstance } from '../../../core/error-brand';

/** An RFC 9457 problem document. */
export interface ProblemDetails {
  type: string;
  title: string;
  status: number;
  detail: string;
  /** Machine-readable reason, stable across versions. */
  code: string;
  retryAfterSeconds?: number;
}

/**
 * How the interceptor refuses a request: an `HttpException` whose response is
 * the problem document. Before throwing it the interceptor sets
 * `Content-Type: application/problem+json` (and `Retry-After` where it
 * applies) on the response, so Nest's own exception handling sends it as a
 * problem document; your exception filters (a catch-all `@Catch()` included)
 * see it like any other `HttpException` and may render it their own way.
 */
export class IdempotencyHttpException extends HttpException {
  constructor(
    readonly problem: ProblemDetails,
    readonly headers: Record<string, string> = {},
  ) {
    super(problem, problem.status);
  }

  /** True for this class's errors from either build of the package (see core/error-brand.ts). */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return isBrandedInstance(this, value);
  }
}
brandErrorClass(IdempotencyHttpException, 'IdempotencyHttpException');

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  409: 'Conflict',
  413: 'Content Too Large',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Content',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

export function problem(
  status: number,
  code: string,
  detail: string,
  retryAfterMs?: number,
): IdempotencyHttpException {
  const headers: Record<string, string> = {};
  const body: ProblemDetails = {
    type: 'about:blank',
    title: TITLES[status] ?? 'Error',
    status,
    detail,
    code,
  };
  if (retryAfterMs !== undefined) {
    const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
    headers['Retry-After'] = String(seconds);
    body.retryAfterSeconds = seconds;
  }
  return new IdempotencyHttpException(body, headers);
}

/**
 * Optional: writes refusals as problem documents even where an application's
 * own catch-all filter would render them otherwise. Not registered by the
 * module; add it with `@UseFilters` or `APP_FILTER` if you want it.
 */
@Catch(IdempotencyHttpException)
export class IdempotencyProblemFilter implements ExceptionFilter<IdempotencyHttpException> {
  constructor(private readonly adapterHost: HttpAdapterHost) {}

  catch(exception: IdempotencyHttpException, host: ArgumentsHost): void {
    const adapter = this.adapterHost.httpAdapter;
    const response = host.switchToHttp().getResponse();
    for (const [name, value] of Object.entries(exception.headers))
      adapter.setHeader(response, name, value);
    adapter.setHeader(response, 'Content-Type', 'application/problem+json');
    // A string body keeps our Content-Type on both adapters.
    adapter.reply(response, JSON.stringify(exception.problem), exception.problem.status);
  }
}
