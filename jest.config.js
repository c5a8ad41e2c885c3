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

module.exports = {
  globalSetup: '<rootDir>/test/support/global-setup.js',
  globalTeardown: '<rootDir>/test/support/global-teardown.js',
  testTimeout: 30000,
  projects: [
    { ...common, displayName: 'unit', testMatch: ['<rootDir>/libs/**/*.spec.ts'] },
    { ...common, displayName: 'store', testMatch: ['<rootDir>/test/stores/**/*.spec.ts'] },
    { ...common, displayName: 'e2e', testMatch: ['<rootDir>/test/**/*.e2e-spec.ts'] },
  ],
};
