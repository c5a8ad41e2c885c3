/** @type {import('jest').Config} */
const common = {
  preset: 'ts-jest',
  testTimeout: 30000,
  testEnvironment: 'node',
  moduleNameMapper: {
    '^nest-idempotency/testing$': '<rootDir>/libs/idempotency/src/testing',
    '^nest-idempotency$': '<rootDir>/libs/idempotency/src',
  },
  transform: { '^.+\\.ts$': ['ts-jest', {}] },
};

/**
 * The fault suite (test/faults) kills and stops processes, restarts a PostgreSQL
 * and takes minutes, so plain `jest` (npm test) leaves it out; it is there only
 * when selected: `npm run test:faults` (jest --selectProjects faults --runInBand).
 */
function faultsSelected() {
  const argv = process.argv;
  return argv.some((arg, i) => {
    if (arg.startsWith('--selectProjects=')) return arg.split('=')[1].split(',').includes('faults');
    if (arg !== '--selectProjects') return false;
    for (let j = i + 1; j < argv.length && !argv[j].startsWith('-'); j++)
      if (argv[j] === 'faults') return true;
    return false;
  });
}

const faults = {
  ...common,
  displayName: 'faults',
  testMatch: ['<rootDir>/test/faults/**/*.fault-spec.ts'],
  globalSetup: '<rootDir>/test/faults/support/results-setup.js',
  globalTeardown: '<rootDir>/test/faults/support/results-teardown.js',
};

module.exports = {
  globalSetup: '<rootDir>/test/support/global-setup.js',
  globalTeardown: '<rootDir>/test/support/global-teardown.js',
  testTimeout: 30000,
  projects: [
    { ...common, displayName: 'unit', testMatch: ['<rootDir>/libs/**/*.spec.ts'] },
    { ...common, displayName: 'store', testMatch: ['<rootDir>/test/stores/**/*.spec.ts'] },
    { ...common, displayName: 'e2e', testMatch: ['<rootDir>/test/**/*.e2e-spec.ts'] },
    ...(faultsSelected() ? [faults] : []),
  ],
};
