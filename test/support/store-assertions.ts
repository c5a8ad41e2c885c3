import {
  AcquireRequest,
  AcquireResult,
  decodeValue,
  encodeValue,
  Lease,
  ReplayedRecord,
} from 'nest-idempotency';

/**
 * What the store specs (test/stores/*.store.spec.ts, sql-store.spec.ts) share:
 * a request to acquire, the assertions on what an acquisition returned, a
 * bound on a hang, and the cleanups a test schedules for after it.
 */

/** A store logger that says nothing. */
export const quiet = { warn: () => undefined, error: () => undefined };

/** A store logger that keeps its lines (`warn: …`, `error: …`, `debug: …`). */
export class StoreLogs {
  readonly lines: string[] = [];
  warn = (m: string) => void this.lines.push(`warn: ${m}`);
  error = (m: string) => void this.lines.push(`error: ${m}`);
  debug = (m: string) => void this.lines.push(`debug: ${m}`);
}

/** An acquisition that does not wait: a 30 s lease, a 1 h record, no fingerprint. */
export function acquireRequest(
  scope: string,
  key: string,
  overrides: Partial<AcquireRequest> = {},
): AcquireRequest {
  return {
    scope,
    key,
    leaseMs: 30_000,
    waitTimeoutMs: 0,
    ttlMs: 3_600_000,
    fingerprint: null,
    ...overrides,
  };
}

/** Fails with a clear message instead of letting a hang run into the test timeout. */
export async function settlesWithin<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, hang]);
  } finally {
    clearTimeout(timer);
  }
}

/** The lease of an acquisition, failing the test on anything else. */
export function leaseOf(result: AcquireResult): Lease {
  if (result.kind !== 'acquired') throw new Error(`expected to acquire, got ${result.kind}`);
  return result.lease;
}

/** The lease of an acquisition still under way, failing the test on anything else. */
export async function acquired(result: Promise<AcquireResult>): Promise<Lease> {
  return leaseOf(await result);
}

/** The replay of a completed record, failing the test on anything else. */
export function replayOf(result: AcquireResult): ReplayedRecord {
  if (result.kind !== 'duplicate') throw new Error(`expected a replay, got ${result.kind}`);
  return result;
}

/** Asserts `result` replays exactly the bytes `encodeValue(value)` stored. */
export function expectReplayOf(result: AcquireResult, value: unknown): ReplayedRecord {
  const replay = replayOf(result);
  expect(replay.completedAt).toBeInstanceOf(Date);
  expect(replay.payload.equals(encodeValue(value))).toBe(true);
  expect(decodeValue(replay.payload)).toEqual(value);
  return replay;
}

/** The error `promise` rejects with, failing the test if it resolves. */
export async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected a rejection');
}

/**
 * Called inside a `describe`: returns `defer(cleanup)`, whose cleanups run
 * after each test, the last deferred first; a cleanup that fails is passed
 * over (what it closes may already be closed), and mocks are restored.
 */
export function cleanupsAfterEach(): (cleanup: () => Promise<unknown>) => void {
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    vi.restoreAllMocks();
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  });
  return (cleanup) => void cleanups.push(cleanup);
}
