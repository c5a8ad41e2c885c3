import { IntrinsicException } from '@nestjs/common';
import { DoorPeer } from '../door-peer';

type GraphQL = typeof import('graphql');

/** `graphql`, loaded at bootstrap when the application has mutations: only GraphQL applications install it. */
const peer = new DoorPeer<GraphQL>(
  'graphql',
  '@Idempotent GraphQL mutations need the graphql package, which could not be loaded: ',
);

export function graphqlModule(): GraphQL {
  return peer.get();
}

/** The stable `extensions.code` of each refusal. */
export const GRAPHQL_CODES = {
  'idempotency-key-missing': 'IDEMPOTENCY_KEY_MISSING',
  'idempotency-key-invalid': 'IDEMPOTENCY_KEY_INVALID',
  'idempotency-in-flight': 'IDEMPOTENCY_IN_FLIGHT',
  'idempotency-key-reused': 'IDEMPOTENCY_KEY_REUSED',
  'idempotency-store-unavailable': 'IDEMPOTENCY_STORE_UNAVAILABLE',
  'idempotency-completion-failed': 'IDEMPOTENCY_COMPLETION_FAILED',
  'idempotency-result-not-storable': 'IDEMPOTENCY_RESULT_NOT_STORABLE',
  'idempotency-outcome-unknown': 'IDEMPOTENCY_OUTCOME_UNKNOWN',
  'idempotency-replayed-error': 'IDEMPOTENCY_REPLAYED_ERROR',
} as const;

export type GraphqlRefusalCode = keyof typeof GRAPHQL_CODES;

/**
 * A refusal as an `@Idempotent` mutation throws it: the client's mistake (no
 * key, a key reused with other arguments) or a retry hint, never a server
 * error. An `IntrinsicException`, so Nest's exception handling does not log it
 * as one, with its stack; it carries GraphQL `extensions` (`code`, e.g.
 * `IDEMPOTENCY_IN_FLIGHT`, and `retryAfterMs` where a retry can succeed), which
 * graphql-js puts on the `GraphQLError` the client receives (this error is its
 * `originalError`). `@Catch(IdempotencyGraphqlRefusal)` catches it in a filter.
 */
export class IdempotencyGraphqlRefusal extends IntrinsicException {
  readonly code: string;
  readonly extensions: { code: string; retryAfterMs?: number };

  constructor(message: string, extensions: { code: string; retryAfterMs?: number }) {
    super(message);
    this.name = 'IdempotencyGraphqlRefusal';
    this.code = extensions.code;
    this.extensions = extensions;
  }
}

/** A refusal as a GraphQL error: `extensions.code` and, where a retry can succeed, `extensions.retryAfterMs`. */
export function graphqlRefusal(
  code: GraphqlRefusalCode,
  message: string,
  retryAfterMs?: number,
): Error {
  return new IdempotencyGraphqlRefusal(message, {
    code: GRAPHQL_CODES[code],
    ...(retryAfterMs === undefined ? {} : { retryAfterMs: Math.max(1, Math.ceil(retryAfterMs)) }),
  });
}

/** True for an error `graphqlRefusal` made. */
export function isGraphqlRefusal(error: unknown): boolean {
  return error instanceof IdempotencyGraphqlRefusal;
}

/** Loads `graphql` at bootstrap (with `import()` where `require` cannot), failing it when the package is missing, rather than the first mutation. */
export function requireGraphql(): Promise<void> {
  return peer.load();
}
