import { ContractHarness, ContractScale, DEFAULT_SCALE } from './harness';
import { scenarioContext, STORE_CONTRACT } from './scenarios';

type Body = () => unknown;

/**
 * The four functions of a test runner the kit registers its scenarios with.
 * Jest's globals and Vitest's (with or without `globals: true`: pass
 * `import * as vitest from 'vitest'`) fit as they are; node:test and Mocha
 * fit as `{ describe, it, beforeAll: before, afterAll: after }`.
 */
export interface TestRunner {
  describe: (name: string, body: () => void) => unknown;
  it: (name: string, body: Body, timeout?: number) => unknown;
  beforeAll: (body: Body, timeout?: number) => unknown;
  afterAll: (body: Body, timeout?: number) => unknown;
}

export interface DescribeContractOptions {
  scale?: Partial<ContractScale>;
  /**
   * Whose clock decides leases and TTLs (as `ContractHarness.clock`; needed
   * here because tests are registered before the harness exists). Default `store`.
   */
  clock?: 'store' | 'process';
  /** Who removes expired records (as `ContractHarness.expiry`). Default `purge`. */
  expiry?: 'purge' | 'backend';
  /**
   * Register the strict-mode scenarios: the store declares `strictMode`
   * (checked when they run). Default false.
   */
  strictMode?: boolean;
  /**
   * Register the recorded-step scenarios: the store declares `steps`
   * (checked when they run). Default false.
   */
  steps?: boolean;
  /**
   * Register the continuation scenarios: the store declares `continuations`
   * (checked when they run). Default false.
   */
  continuations?: boolean;
  /** Per-scenario timeout. Default 60 s (the wake-up race over 10,000 iterations takes a while). */
  timeoutMs?: number;
}

/**
 * Registers the whole contract as tests of your runner:
 *
 *   describeIdempotencyStoreContract('MyStore', async () => ({ store: new MyStore() }));        // Jest
 *   describeIdempotencyStoreContract('MyStore', makeHarness, { runner: vitest });              // Vitest
 *
 * `makeHarness` runs once, before the first scenario; each scenario uses a
 * scope of its own. A scenario the store cannot support (an in-process store
 * keeps time by the process clock: `{ clock: 'process' }`) is not registered.
 */
export function describeIdempotencyStoreContract(
  name: string,
  makeHarness: () => Promise<ContractHarness>,
  options: DescribeContractOptions & { runner?: TestRunner } = {},
): void {
  const runner = options.runner ?? globalRunner();
  const scale = { ...DEFAULT_SCALE, ...options.scale };
  const timeout = options.timeoutMs ?? 60_000;
  let harness: ContractHarness | undefined;
  let ready: Promise<ContractHarness> | undefined;
  const harnessReady = () =>
    (ready ??= makeHarness().then(async (made) => {
      harness = made;
      await made.store.init?.();
      if (made.other && made.other !== made.store) await made.other.init?.();
      return made;
    }));
  runner.describe(`IdempotencyStore contract: ${name}`, () => {
    runner.beforeAll(() => harnessReady(), timeout);
    runner.afterAll(async () => {
      if (!harness) return;
      await harness.store.close?.();
      if (harness.other && harness.other !== harness.store) await harness.other.close?.();
      await harness.close?.();
    }, timeout);
    const declared = {
      clock: options.clock ?? 'store',
      expiry: options.expiry ?? 'purge',
      strictMode: options.strictMode ?? false,
      steps: options.steps ?? false,
      continuations: options.continuations ?? false,
    } as unknown as ContractHarness;
    const applicable = STORE_CONTRACT.filter((s) => !s.notApplicable?.(declared));
    for (const group of [...new Set(applicable.map((s) => s.group))]) {
      runner.describe(group, () => {
        for (const scenario of applicable.filter((s) => s.group === group)) {
          runner.it(
            `${scenario.title(scale)} [${scenario.id}]`,
            async () => {
              const made = await harnessReady();
              if ((made.clock ?? 'store') !== declared.clock) {
                throw new Error(
                  `the harness says clock: '${made.clock}'; pass the same to describeIdempotencyStoreContract's options`,
                );
              }
              if ((made.expiry ?? 'purge') !== declared.expiry) {
                throw new Error(
                  `the harness says expiry: '${made.expiry}'; pass the same to describeIdempotencyStoreContract's options`,
                );
              }
              if (declared.strictMode && !made.store.strictMode) {
                throw new Error(
                  "describeIdempotencyStoreContract was told strictMode: true, but the harness's store does not declare strictMode",
                );
              }
              if (declared.steps && !made.store.steps) {
                throw new Error(
                  "describeIdempotencyStoreContract was told steps: true, but the harness's store does not declare steps",
                );
              }
              if (declared.continuations && !made.store.continuations) {
                throw new Error(
                  "describeIdempotencyStoreContract was told continuations: true, but the harness's store does not declare continuations",
                );
              }
              await scenario.run(scenarioContext(made, scale, scenario.id));
            },
            timeout,
          );
        }
      });
    }
  });
}

function globalRunner(): TestRunner {
  const g = globalThis as unknown as Partial<TestRunner>;
  if (!g.describe || !g.it || !g.beforeAll || !g.afterAll) {
    throw new Error(
      "describeIdempotencyStoreContract: no test runner globals (describe, it, beforeAll, afterAll); pass them: { runner: await import('vitest') }",
    );
  }
  return g as TestRunner;
}
