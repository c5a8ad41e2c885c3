import { assertDerivedKeyName, deriveKeyOf, type DerivedKeySecret } from './derived-key';
import { suspensionOf, type SuspendedAnswer, type SuspendOptions } from './continuation';
import { keyHash, recordLocator, storedScope } from './key';
import { decodeValue } from './payload';
import type { StoredPayload } from './store';
import type { StepRunner } from './steps';

/**
 * How this attempt came to hold the record: `'first'`; `'takeover'` when it
 * took the record over from an earlier attempt whose lease ran out (a holder
 * that crashed or stalled), which may have begun the same work; or
 * `'resumption'` when a continuation admitted it (`ctx.resumed` holds the
 * state the suspension saved).
 */
export type IdempotencyAttempt = 'first' | 'takeover' | 'resumption';

/** Who the record is; held privately, so that the key and the tenant never show. */
interface RecordIdentity {
  scope: string;
  key: string;
  tenant: string | undefined;
}

/**
 * What an idempotent call knows about its record while its work runs: the
 * engine hands it to the action (`engine.run(policy, { key }, (signal, ctx) => …)`)
 * and a Nest handler takes it with `@IdempotencyCtx()`. It names the record
 * by digest only: the raw key and the tenant are not readable from it.
 * Made by the library; an application does not construct one.
 */
export class IdempotencyContext {
  readonly #record: RecordIdentity;
  readonly #keys: DerivedKeySecret;
  readonly #digest: () => string;
  readonly #steps: StepRunner;
  readonly #resumedState: StoredPayload | undefined;
  #hash: string | undefined = undefined;

  /** @internal */
  constructor(
    record: RecordIdentity,
    /** `'first'`, or `'takeover'` when the record was taken over from an expired lease. */
    readonly attempt: IdempotencyAttempt,
    keyDigest: () => string,
    keys: DerivedKeySecret,
    steps: StepRunner,
    /** A resumption: the state its suspension saved, in its stored form. */
    resumedState?: StoredPayload,
  ) {
    this.#steps = steps;
    this.#resumedState = resumedState;
    this.#record = record;
    this.#digest = keyDigest;
    this.#keys = keys;
  }

  /** The handler's scope (without the tenant). */
  get scope(): string {
    return this.#record.scope;
  }

  /** The record's name in logs and events: `scope/#` and 12 hex characters of a SHA-256 over its key and tenant. */
  get keyDigest(): string {
    return this.#digest();
  }

  /**
   * A key for the call named `name` that the work makes outside the process
   * (a charge, an e-mail): the same for this record and name on every
   * attempt, in every process, before and after a restart; another for
   * another name or record. 43 characters of base64url (`A–Z a–z 0–9 - _`).
   * With the `derivedKeys.secret` option it cannot be computed from the raw
   * key; without one, anyone who knows the raw key and the scope (and the
   * tenant) can. Throws `IdempotencyError` for a name that is empty, longer
   * than 200 characters or holds control characters.
   */
  deriveKey(name: string): string {
    assertDerivedKeyName(name, this.keyDigest);
    const { scope, key, tenant } = this.#record;
    this.#hash ??= keyHash(key, tenant);
    return deriveKeyOf(this.#keys, scope, this.#hash, name);
  }

  /**
   * Runs `fn` once for this record and `name`, and answers its value: the
   * value is written into the record under this attempt's lease (a stale
   * attempt cannot write it), and an attempt that takes the record over
   * gets the recorded value instead of running `fn` again. The value is
   * stored as JSON, so every attempt gets it as JSON gives it back. A step
   * that began and recorded nothing (its holder died meanwhile) runs again,
   * or, in strict mode, makes the record AMBIGUOUS (`step-unknown`). Names:
   * 1–100 letters, digits or `. _ : -`, each step its own. Needs a store
   * that records steps (`store.steps`: every built-in store); outside
   * enforce mode (`mode: 'observe'`) `fn` simply runs.
   */
  step<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
    return this.#steps.run(name, fn);
  }

  /**
   * Ends this attempt without a result, for now: the handler returns what
   * this returns. Its caller gets `answer` (HTTP: status 202 unless the route
   * sets `@HttpCode`, and the continuation token in the
   * `Idempotency-Continuation` header; the engine: a `suspended` outcome
   * with `continuation`), every duplicate meanwhile gets the same, and the
   * record stays reserved, with no heartbeat, for `hold`. A handler declared
   * `@Idempotent({ resumes: scope })` (the engine: `engine.resume`) admits
   * one resumption per token, hands it `state` as `ctx.resumed`, and its
   * result completes this record. A hold that lapses first leaves the record
   * to the next attempt (strict mode: AMBIGUOUS). Needs a store with
   * continuations (`store.continuations`: every built-in store).
   */
  suspend<A>(answer: A, options: SuspendOptions): SuspendedAnswer<A> {
    return suspensionOf(answer, options, this.keyDigest);
  }

  /** A resumption's state, as the suspension saved it (as JSON gives it back); undefined for any other attempt. */
  get resumed(): unknown {
    return this.#resumedState === undefined ? undefined : decodeValue(this.#resumedState);
  }

  /** @internal Where the store finds this record without its key (a continuation token carries it). */
  locator(): string {
    const { scope, key, tenant } = this.#record;
    return recordLocator(storedScope(scope, tenant), key);
  }

  /** What `console.log` and `JSON.stringify` show: the digest and the attempt, never the key. */
  toJSON(): { scope: string; keyDigest: string; attempt: IdempotencyAttempt } {
    return { scope: this.scope, keyDigest: this.keyDigest, attempt: this.attempt };
  }
}
