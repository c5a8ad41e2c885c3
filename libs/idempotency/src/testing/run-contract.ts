import { AssertionError } from 'node:assert';
import { ContractHarness, ContractScale, DEFAULT_SCALE } from './harness';
import { ContractScenario, scenarioContext, ScenarioSetupError, STORE_CONTRACT } from './scenarios';

export type Grade = 'PASS' | 'FAIL' | 'N/A';

export interface ScenarioResult {
  id: string;
  group: string;
  title: string;
  grade: Grade;
  /** What was measured; for FAIL what went wrong, for N/A why it could not run. */
  measured: string;
  durationMs: number;
}

export interface RunContractOptions {
  scale?: Partial<ContractScale>;
  /** Only these scenario ids (default: all). */
  only?: readonly string[];
  /** Stops between scenarios. */
  signal?: AbortSignal;
  /** Called after each scenario. */
  onResult?: (result: ScenarioResult) => void;
}

/**
 * Grades a store against the contract without a test runner: each scenario
 * PASS, FAIL (what broke) or N/A (why it could not run). `nest-idempotency
 * verify` runs it against the user's own database.
 */
export async function runIdempotencyStoreContract(
  harness: ContractHarness,
  options: RunContractOptions = {},
): Promise<ScenarioResult[]> {
  const scale = { ...DEFAULT_SCALE, ...options.scale };
  const results: ScenarioResult[] = [];
  await harness.store.init?.();
  if (harness.other && harness.other !== harness.store) await harness.other.init?.();
  for (const scenario of selected(options.only)) {
    if (options.signal?.aborted) break;
    const result = await grade(scenario, harness, scale);
    results.push(result);
    options.onResult?.(result);
  }
  return results;
}

function selected(only: readonly string[] | undefined): readonly ContractScenario[] {
  if (!only) return STORE_CONTRACT;
  const unknown = only.filter((id) => !STORE_CONTRACT.some((s) => s.id === id));
  if (unknown.length > 0) throw new Error(`unknown contract scenario ${unknown.join(', ')}`);
  return STORE_CONTRACT.filter((s) => only.includes(s.id));
}

async function grade(
  scenario: ContractScenario,
  harness: ContractHarness,
  scale: ContractScale,
): Promise<ScenarioResult> {
  const base = { id: scenario.id, group: scenario.group, title: scenario.title(scale) };
  const reason = scenario.notApplicable?.(harness);
  if (reason) return { ...base, grade: 'N/A', measured: reason, durationMs: 0 };
  const started = performance.now();
  try {
    const measured = await scenario.run(scenarioContext(harness, scale, scenario.id));
    return { ...base, grade: 'PASS', measured, durationMs: performance.now() - started };
  } catch (error) {
    const durationMs = performance.now() - started;
    if (error instanceof ScenarioSetupError) {
      return { ...base, grade: 'N/A', measured: error.message, durationMs };
    }
    const measured =
      error instanceof AssertionError || error instanceof Error ? error.message : String(error);
    return { ...base, grade: 'FAIL', measured, durationMs };
  }
}
