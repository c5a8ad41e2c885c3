/**
 * The options of `@Idempotent` (and the list of their keys) and the views a key function sees,
 * so the adapters read them without importing the decorator.
 */
import type { ExecutionContext } from '@nestjs/common';
import type { Duration } from '../../core/duration';
import type { ReconcileHook } from '../../core/policy';
import { optionKeys } from '../../core/option-keys';
import type { IdempotencyRmqOptions } from './idempotency.options';

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
  /**
   * The transport's message: Kafka key/headers/topic/partition/offset (bytes
   * as lossless strings, see docs/messages.md), RabbitMQ properties/headers/fields,
   * NATS subject/headers, MQTT topic/userProperties, Redis channel, TCP pattern,
   * gRPC metadata (docs/grpc.md).
   */
  message: Record<string, unknown>;
  context: ExecutionContext;
}

/** The read-only view a key function (or expression) sees for a GraphQL mutation. */
export interface GraphqlKeySource {
  type: 'graphql';
  /** The mutation's arguments, before pipes run. */
  args: Record<string, unknown>;
  /** The HTTP request's headers. */
  headers: Record<string, unknown>;
  user: unknown;
  /** The mutation field, e.g. `createPayment`. */
  fieldName: string;
  context: ExecutionContext;
}

/** The read-only view a key function (or expression) sees for a WebSocket gateway's message. */
export interface GatewayKeySource {
  type: 'ws';
  /** The message's data, before pipes run. */
  data: unknown;
  context: ExecutionContext;
}

/** The read-only view a key function (or expression) sees for a CQRS command. */
export interface CommandKeySource {
  type: 'command';
  /** The command `CommandBus.execute` was given. */
  command: unknown;
}

/** The read-only view a key function (or expression) sees for a BullMQ job. */
export interface JobKeySource {
  type: 'job';
  /** The BullMQ `Job` (its `id`, `name`, `queueName`, `opts`, `attemptsMade`…). */
  job: { id?: string; name: string; data: unknown } & Record<string, unknown>;
  /** The job's data (`job.data`). */
  data: unknown;
}

export type KeySource =
  | HttpKeySource
  | RpcKeySource
  | GraphqlKeySource
  | GatewayKeySource
  | CommandKeySource
  | JobKeySource;

export interface IdempotentOptions {
  /**
   * Where the key comes from: a function, or an expression over the read-only
   * roots (`body`, `params`, `query`, `headers`, `user` for HTTP; `data`,
   * `message` for messages; `args`, `headers`, `user` for GraphQL mutations;
   * `data` for a gateway's messages; `command` for CQRS commands; `job`,
   * `data` for BullMQ jobs), e.g. `'data.orderId'` or
   * `'order:{body.customerId}:{body.orderId}'`. HTTP and GraphQL default:
   * the `Idempotency-Key` header; BullMQ: `job.id`; a `@Cron` tick takes none
   * (its key is the tick's scheduled time).
   */
  key?: string | ((source: KeySource) => string | number | undefined);
  /** Record namespace. Default `ClassName.methodName` (refused at bootstrap if two handlers would share it). */
  scope?: string;
  lease?: Duration;
  waitTimeout?: Duration;
  ttl?: Duration;
  /**
   * HTTP default true: SHA-256 of the method, the concrete path, the canonical
   * query and the body; GraphQL: of the mutation's name and arguments.
   * `false`, or your own function.
   */
  fingerprint?: boolean | ((source: KeySource) => string | undefined);
  /** Whether a missing key is an error (default) or runs the handler without idempotency. */
  required?: boolean;
  /** RabbitMQ: this consumer's `noAck` and settlements, over the module's `rmq`. */
  rmq?: IdempotencyRmqOptions;
  /**
   * `observe`: the handler always runs and its response is never changed;
   * events (`observed`) and metrics say what `enforce` (the default) would
   * have done. For switching the library on in production before trusting it.
   */
  mode?: IdempotencyMode;
  /**
   * `separate` (default): the record is completed in a statement of its own
   * after the handler returns. `transaction`: the handler runs inside a
   * database transaction and the record is completed in it, so the handler's
   * writes and the completion commit together or not at all; the handler
   * writes through `IdempotencyTransaction.manager` (or `TransactionHost.tx`
   * with `@nestjs-cls/transactional`). Needs a store that supports it
   * (`TypeOrmIdempotencyStore`); otherwise refused at bootstrap.
   */
  completion?: IdempotencyCompletion;
  /**
   * `refuse` (strict mode): an expired lease is never taken over; the record
   * becomes AMBIGUOUS and every later attempt is refused (HTTP 409
   * `idempotency-outcome-unknown`) until it is resolved. A handler that throws
   * after its body began makes the record AMBIGUOUS too, unless `notExecuted`
   * (or an `IdempotencyNotExecutedError`) says it had no effect. Default
   * `steal`. Needs a store that supports it (in-memory, Redis).
   */
  onExpiredLease?: 'steal' | 'refuse';
  /** Strict mode: true for a handler error that had no effect (the record is released instead). */
  notExecuted?: (error: unknown) => boolean;
  /** Strict mode: asked what happened when an attempt finds the record AMBIGUOUS. */
  reconcile?: ReconcileHook;
  /**
   * When the handler ran but its outcome could not be recorded. `error`
   * (default): HTTP 503 `idempotency-completion-failed`, a typed error on the
   * other transports. `return`: the caller gets the handler's response, and a
   * warning is logged; a retry may run the handler again.
   */
  onCompletionFailure?: 'error' | 'return';
  /**
   * HTTP: this route resumes the records that `ctx.suspend` suspended in the
   * scope named here (the suspending handler's scope: `Class.method` unless
   * it set `scope`). It reads the token from the `Idempotency-Continuation`
   * header; the store admits one resumption per token, the handler gets the
   * saved state as `ctx.resumed`, and its result completes the suspended
   * record. Its own `Idempotency-Key` is optional here (`required` defaults
   * to false): with one, a retry of the resumption replays its answer.
   */
  resumes?: string;
}

/** Every key of `IdempotentOptions` (`tsc` fails when the two disagree); any other is refused at bootstrap. */
export const IDEMPOTENT_OPTION_KEYS = optionKeys<IdempotentOptions>()([
  'key',
  'scope',
  'lease',
  'waitTimeout',
  'ttl',
  'fingerprint',
  'required',
  'rmq',
  'mode',
  'completion',
  'onExpiredLease',
  'notExecuted',
  'reconcile',
  'onCompletionFailure',
  'resumes',
]);

export type IdempotencyMode = 'enforce' | 'observe';

export type IdempotencyCompletion = 'separate' | 'transaction';
