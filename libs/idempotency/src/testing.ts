/** `nest-idempotency/testing`: the store conformance kit. */
export * from './testing/index';
