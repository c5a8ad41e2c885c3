import { SetMetadata } from '@nestjs/common';
import type { ExecutionContext } from '@nestjs/common';
import type { Duration } from '../core/duration';

export const IDEMPOTENT_METADATA = 'nest-idempotency:idempotent';

/** The read-only view a key function (or expression) sees for an HTTP request. */
export interface HttpKeySource {
  type: 'http';
  body: unknown;
  params: Record<string, unknown>;
  query: Record<string, unknown>;
  headers: Record<string, unknown>;
  user: unknown;
  context: ExecutionContext;
}

/** The read-only view a key function (or expression) sees for a message. */
export interface RpcKeySource {
  type: 'rpc';
  /** The payload, before pipes run. */
  data: unknown;
  /** The transport's message: Kafka key/headers/topic/partition/offset, RabbitMQ properties/headers/fields. */
  message: Record<string, unknown>;
  context: ExecutionContext;
}

export type KeySource = HttpKeySource | RpcKeySource;

export interface IdempotentOptions {
  /**
   * Where the key comes from: a function, or an expression over the read-only
   * roots (`body`, `params`, `query`, `headers`, `user` for HTTP; `data`,
   * `message` for messages), e.g. `'data.orderId'` or `'order:{body.customerId}:{body.orderId}'`.
   * HTTP default: the `Idempotency-Key` header.
   */
  key?: string | ((source: KeySource) => string | number | undefined);
  /** Record namespace. Default `ClassName.methodName`. */
  scope?: string;
  lease?: Duration;
  waitTimeout?: Duration;
  ttl?: Duration;
  /** HTTP default true: SHA-256 of method, route and canonical JSON body. `false`, or your own function. */
  fingerprint?: boolean | ((source: KeySource) => string | undefined);
  /** Whether a missing key is an error (default) or runs the handler without idempotency. */
  required?: boolean;
}

/**
 * Runs the decorated handler (or every handler of the decorated class) once per key.
 * Options on a method override those on its class, which override the module's defaults.
 */
export const Idempotent = (options: IdempotentOptions = {}) =>
  SetMetadata(IDEMPOTENT_METADATA, options);
