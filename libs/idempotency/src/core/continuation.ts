import { randomBytes } from 'node:crypto';
import { parseDuration, type Duration } from './duration';
import { IdempotencyError } from './errors';

/**
 * Continuations: a handler that must wait for a party outside the request (a
 * card challenge, an approval) returns `ctx.suspend(answer, { hold })`. The
 * caller gets `answer` and a token; the record stays reserved for `hold`; one
 * resumption per token is admitted, and its result completes the record.
 */

/** What `ctx.suspend` takes besides the answer. */
export interface SuspendOptions {
  /** How long the record stays reserved for its resumption (the store's clock): `PT15M`, `15m`, or ms. */
  hold: Duration;
  /** What the resumption is handed as `ctx.resumed` (stored as JSON). Default: none (`null`). */
  state?: unknown;
}

const SUSPENSION = Symbol.for('nest-idempotency.SuspendedAnswer');

/**
 * What `ctx.suspend` returns, for the handler to return in turn: the answer
 * its caller gets now, the state its resumption gets, and the hold. Made by
 * the library; its fields are read by the lifecycle.
 */
export class SuspendedAnswer<A = unknown> {
  /** @internal */
  readonly [SUSPENSION] = true;

  /** @internal */
  constructor(
    readonly answer: A,
    readonly state: unknown,
    readonly holdMs: number,
  ) {}
}

/** Whether a handler returned `ctx.suspend(…)` (of either build of the package). */
export function isSuspendedAnswer(value: unknown): value is SuspendedAnswer {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as { [SUSPENSION]?: unknown })[SUSPENSION] === true
  );
}

/** Checks what `ctx.suspend` was given; throws `IdempotencyError` naming the record. */
export function suspensionOf<A>(
  answer: A,
  options: SuspendOptions,
  record: string,
): SuspendedAnswer<A> {
  if (typeof options !== 'object' || options === null || options.hold === undefined) {
    throw new IdempotencyError(
      `${record}: suspend(answer, { hold }): the hold is required (how long the record waits for its resumption, e.g. '15m')`,
    );
  }
  for (const name of Object.keys(options)) {
    if (name !== 'hold' && name !== 'state') {
      throw new IdempotencyError(
        `${record}: suspend(answer, options): unknown option "${name}" (known: hold, state)`,
      );
    }
  }
  const holdMs = parseDuration(options.hold, 'hold', 'hold', `${record}: suspend`);
  return new SuspendedAnswer(answer, options.state ?? null, holdMs);
}

/** A continuation's id: 128 random bits, base64url (22 characters). */
export function newContinuationId(): string {
  return randomBytes(16).toString('base64url');
}

/**
 * The token a caller presents to resume: the record's locator and the
 * continuation's id, `<64 hex>.<22 base64url>` (87 printable characters).
 * It names the record by hash: neither the raw key nor the tenant is in it.
 */
export function continuationToken(locator: string, continuation: string): string {
  return `${locator}.${continuation}`;
}

const TOKEN = /^([0-9a-f]{64})\.([A-Za-z0-9_-]{22})$/;

/** The parts of a token, or undefined for anything this library did not make. */
export function parseContinuationToken(
  token: unknown,
): { locator: string; continuation: string } | undefined {
  if (typeof token !== 'string') return undefined;
  const match = TOKEN.exec(token);
  return match ? { locator: match[1], continuation: match[2] } : undefined;
}

/** Why a resumption was refused: the token was malformed or named nothing resumable, consumed, or its hold lapsed. */
export type ResumptionRefusal = 'invalid' | 'unknown' | 'consumed' | 'lapsed';
