/** `nest-idempotency/testing`: the store conformance kit. */
// First: records that this build is loaded (see core/loaded-builds.ts).
import './core/loaded-builds';
export * from './testing/index';
