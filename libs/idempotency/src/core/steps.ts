import { describeError } from './error-text';
import { IdempotencyConfigError, IdempotencyError } from './errors';
import { decodeValue, encodeValue } from './payload';
import type { EngineRuntime } from './runtime';
import type { AmbiguousRecord, Lease, RecordId } from './store';

/**
 * Recorded steps (`ctx.step(name, fn)`): `fn` runs once per record and name.
 * Its value is written into the record under the holder's lease, and an
 * attempt that takes the record over gets the value instead of running `fn`.
 */

/** Longest step name. */
export const MAX_STEP_NAME_LENGTH = 100;

/** Letters, digits and `. _ : -`: a name every store keeps verbatim (a JSON path, a hash field). */
const STEP_NAME = /^[A-Za-z0-9._:-]+$/;

/** Whether `name` can name a step (what stores check at their boundary). */
export function isStepName(name: unknown): name is string {
  return typeof name === 'string' && name.length <= MAX_STEP_NAME_LENGTH && STEP_NAME.test(name);
}

/** Throws `IdempotencyError` naming the step unless `name` can name one; `record` names the record. */
export function assertStepName(name: unknown, record: string): asserts name is string {
  const problem =
    typeof name !== 'string'
      ? `must be a string, got ${name === null ? 'null' : typeof name}`
      : name.length === 0
        ? 'must not be empty'
        : name.length > MAX_STEP_NAME_LENGTH
          ? `must be at most ${MAX_STEP_NAME_LENGTH} characters, got ${name.length}`
          : !STEP_NAME.test(name)
            ? 'may hold only letters, digits and . _ : -'
            : undefined;
  if (problem !== undefined) {
    const shown = typeof name === 'string' ? ` ${JSON.stringify(name.slice(0, 40))}` : '';
    throw new IdempotencyError(`${record}: step(name, fn): the step name${shown} ${problem}`);
  }
}

/** How `ctx.step` runs a step: recorded under a lease, or (observe mode, no record) just run. */
export interface StepRunner {
  run<T>(name: string, fn: () => T | Promise<T>): Promise<T>;
}

/** Observe mode: the work runs as if there were no idempotency, so its steps run every time. */
export const UNRECORDED_STEPS: StepRunner = {
  run: async (_name, fn) => fn(),
};

/** The steps of one execution, recorded under its lease. */
export class RecordedSteps implements StepRunner {
  private readonly running = new Set<string>();

  constructor(
    private readonly runtime: EngineRuntime,
    private readonly scope: string,
    private readonly keyDigest: () => string,
    private readonly lease: Lease,
  ) {}

  async run<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
    assertStepName(name, this.keyDigest());
    if (typeof fn !== 'function') {
      throw new IdempotencyError(
        `${this.keyDigest()}: step(${JSON.stringify(name)}, fn): fn must be a function`,
      );
    }
    const steps = this.runtime.store.steps;
    if (!steps) {
      throw new IdempotencyConfigError(
        `${this.scope}: step(${JSON.stringify(name)}) needs a store that records steps (store.steps); this store does not`,
      );
    }
    if (this.running.has(name)) {
      throw new IdempotencyError(
        `${this.keyDigest()}: step ${JSON.stringify(name)} is already running in this attempt; give each step its own name`,
      );
    }
    this.running.add(name);
    try {
      const recorded = await steps.begin(this.lease, name);
      if (recorded !== null) {
        this.runtime.emit(() => ({
          type: 'step-replayed',
          scope: this.scope,
          keyDigest: this.keyDigest(),
          step: name,
        }));
        return decodeValue(recorded) as T;
      }
      const startedAt = performance.now();
      const value = await fn();
      // Encoded before the write: a value that cannot be stored throws here, recording nothing.
      const payload = encodeValue(value);
      await steps.record(this.lease, name, payload);
      this.runtime.emit(() => ({
        type: 'step-recorded',
        scope: this.scope,
        keyDigest: this.keyDigest(),
        step: name,
        stepMs: performance.now() - startedAt,
      }));
      // What a takeover would get: the same JSON shape on every attempt.
      return decodeValue(payload) as T;
    } finally {
      this.running.delete(name);
    }
  }
}

/**
 * Strict mode: an AMBIGUOUS record with a step that began and recorded
 * nothing is `step-unknown`, naming that step (the first by name). A store
 * without steps, or a read that fails, leaves the record as the store said.
 */
export async function withUnknownStep(
  runtime: EngineRuntime,
  id: RecordId,
  found: AmbiguousRecord,
  keyDigest: string,
): Promise<AmbiguousRecord> {
  const steps = runtime.store.steps;
  if (!steps) return found;
  try {
    const unknown = (await steps.list(id)).find((step) => step.value === null);
    return unknown ? { ...found, reason: 'step-unknown', step: unknown.name } : found;
  } catch (error) {
    runtime.logger.warn(`${keyDigest}: reading the record's steps failed: ${describeError(error)}`);
    return found;
  }
}
