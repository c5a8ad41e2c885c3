/**
 * The store contract: one file of scenarios per topic, run in this order by
 * `describeStoreContract`, `runStoreContract` and `nest-idempotency verify`.
 */
import { replayScenarios } from './replay.scenarios';
import { expiryScenarios } from './expiry.scenarios';
import { fencingScenarios } from './fencing.scenarios';
import { waitingScenarios } from './waiting.scenarios';
import { fingerprintScenarios } from './fingerprints.scenarios';
import { purgeScenarios } from './purge.scenarios';
import { readScenarios } from './reads.scenarios';
import { inputScenarios } from './inputs.scenarios';
import { clockScenarios } from './clock.scenarios';
import { strictScenarios } from './strict.scenarios';
import { stepScenarios } from './steps.scenarios';
import { continuationScenarios } from './continuations.scenarios';
import type { ContractScenario } from './support';

export { scenarioContext, ScenarioSetupError } from './support';
export type { ContractScenario, ScenarioContext } from './support';

/** The contract, in order. Behaviour changes land here first. */
export const STORE_CONTRACT: readonly ContractScenario[] = [
  ...replayScenarios,
  ...expiryScenarios,
  ...fencingScenarios,
  ...waitingScenarios,
  ...fingerprintScenarios,
  ...purgeScenarios,
  ...readScenarios,
  ...inputScenarios,
  ...clockScenarios,
  ...strictScenarios,
  ...stepScenarios,
  ...continuationScenarios,
];
