import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { IdempotencyLeaseLostError } from '../../core/errors';
import { encodeValue } from '../../core/payload';
import type {
  AcquireRequest,
  AcquireResult,
  IdempotencyStore,
  Lease,
  ReplayedRecord,
} from '../../core/store';
import type { ContractHarness, ContractScale } from '../harness';

/** What a scenario works with: the instances, a scope of its own, and helpers. */
export interface ScenarioContext {
  store: IdempotencyStore;
  other: IdempotencyStore;
  harness: ContractHarness;
  scale: ContractScale;
  scope: string;
  request(key: string, overrides?: Partial<AcquireRequest>): AcquireRequest;
  /** Acquires `key` (on `store` unless told), failing the scenario if it is not acquired. */
  acquire(key: string, overrides?: Partial<AcquireRequest>, on?: IdempotencyStore): Promise<Lease>;
  /** The harness's raw snapshot of a scope, or the records as reads show them. */
  snapshot(scope?: string): Promise<string>;
}

/**
 * One behaviour of the contract. `run` throws (an `AssertionError`) when the
 * store breaks it, and otherwise returns what it measured, for `verify`.
 */
export interface ContractScenario {
  /** Stable: `verify --json` and the docs name scenarios by it. */
  id: string;
  group: string;
  title: (scale: ContractScale) => string;
  /** Why the scenario cannot run against this harness, or undefined when it can. */
  notApplicable?: (harness: ContractHarness) => string | undefined;
  run: (ctx: ScenarioContext) => Promise<string>;
}

export const TTL_MS = 600_000;

/**
 * A scenario could not set up what it checks (the store refused an
 * acquisition the scenario needs first). `verify` grades it N/A: it is not a
 * pass, but the store did not break the behaviour under test either.
 */
export class ScenarioSetupError extends Error {}
export const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
export const bytes = (value: unknown) => encodeValue(value);

export function duplicate(result: AcquireResult, what = 'the result'): ReplayedRecord {
  assert.equal(result.kind, 'duplicate', `expected a replay of ${what}, got ${result.kind}`);
  return result as ReplayedRecord;
}

export async function leaseLost(call: Promise<unknown>, what: string): Promise<void> {
  await assert.rejects(
    call,
    IdempotencyLeaseLostError,
    `${what} was not refused with IdempotencyLeaseLostError`,
  );
}

/** Resolves once a duplicate waits inside `store.tryAcquire`, or after `fallbackMs` for a store that cannot say. */
export function nextWait(store: IdempotencyStore, scope: string, fallbackMs = 150): Promise<void> {
  if (!store.onWait) return delay(fallbackMs).then(() => undefined);
  return new Promise((resolve) => {
    const stop = store.onWait!((waiting) => {
      if (waiting !== scope) return;
      stop();
      resolve();
    });
  });
}

export const round = (ms: number) =>
  Math.abs(ms) < 10 ? Math.round(ms * 10) / 10 : Math.round(ms);
export const median = (values: number[]) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/** Builds a scenario's context over a harness, with a scope of its own. */
export function scenarioContext(
  harness: ContractHarness,
  scale: ContractScale,
  scenarioId: string,
): ScenarioContext {
  const store = harness.store;
  const other = harness.other ?? store;
  const scope = `contract-${scenarioId}-${randomUUID()}`;
  const request = (key: string, overrides: Partial<AcquireRequest> = {}): AcquireRequest => ({
    scope,
    key,
    leaseMs: 10_000,
    waitTimeoutMs: 0,
    ttlMs: 60_000,
    fingerprint: null,
    ...overrides,
  });
  return {
    store,
    other,
    harness,
    scale,
    scope,
    request,
    async acquire(key, overrides = {}, on = store) {
      const result = await on.tryAcquire(request(key, { ttlMs: TTL_MS, ...overrides }));
      if (result.kind !== 'acquired') {
        throw new ScenarioSetupError(`could not set up: acquiring ${key} returned ${result.kind}`);
      }
      return result.lease;
    },
    async snapshot(of = scope) {
      if (harness.snapshot) return harness.snapshot(of);
      return JSON.stringify(await store.list({ scope: of, limit: 1000 }));
    },
  };
}
