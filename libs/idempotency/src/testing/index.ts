// The harness a store provides to the kit.
export { DEFAULT_SCALE } from './harness';
export type { ContractHarness, ContractScale } from './harness';

// The scenarios.
export { STORE_CONTRACT, ScenarioSetupError, scenarioContext } from './scenarios';
export type { ContractScenario, ScenarioContext } from './scenarios';

// Running them: as a test suite of the application's runner, or as a report.
export { describeIdempotencyStoreContract } from './describe-contract';
export type { DescribeContractOptions, TestRunner } from './describe-contract';
export { runIdempotencyStoreContract } from './run-contract';
export type { Grade, RunContractOptions, ScenarioResult } from './run-contract';
