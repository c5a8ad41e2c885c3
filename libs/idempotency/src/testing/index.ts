export * from './harness';
export * from './scenarios';
export * from './run-contract';
export * from './describe-contract';
export * from '../core/store-input';
export * from '../core/byte-probe';
