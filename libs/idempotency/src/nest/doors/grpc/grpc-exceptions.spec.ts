import { Metadata, status } from '@grpc/grpc-js';
import { IdempotencyInFlightError } from '../../../core/errors';
import { microservices } from '../messages/microservices';
import { grpcExceptions } from './grpc-exceptions';

type StatusError = { code: number; details: string; metadata: Metadata };

/** Each refusal's status and trailers, as docs/grpc.md's table states them. */
describe('grpcExceptions', () => {
  beforeAll(() => microservices.load());

  const statusOf = (exception: unknown) => (exception as { getError(): StatusError }).getError();

  it('in flight: ABORTED, with idempotency-code and retry-after-ms trailers', () => {
    const exception = grpcExceptions(new Metadata()).inFlight(1234, 'S.m', 'S.m/#abc');
    const error = statusOf(exception);
    expect(error.code).toBe(status.ABORTED);
    expect(error.details).toContain('S.m/#abc');
    expect(error.metadata).toBeInstanceOf(Metadata);
    expect(error.metadata.getMap()).toEqual({
      'idempotency-code': 'idempotency-in-flight',
      'retry-after-ms': '1234',
    });
    expect(exception).toBeInstanceOf(IdempotencyInFlightError);
  });

  it('store unavailable: UNAVAILABLE, with retry-after-ms', () => {
    const error = statusOf(grpcExceptions(new Metadata()).unavailable(500, 'down'));
    expect(error.code).toBe(status.UNAVAILABLE);
    expect(error.metadata.getMap()).toEqual({
      'idempotency-code': 'idempotency-store-unavailable',
      'retry-after-ms': '500',
    });
  });

  it.each([
    ['idempotency-key-missing', status.INVALID_ARGUMENT],
    ['idempotency-key-invalid', status.INVALID_ARGUMENT],
    ['idempotency-key-reused', status.ALREADY_EXISTS],
    ['idempotency-outcome-unknown', status.FAILED_PRECONDITION],
    ['idempotency-result-not-storable', status.FAILED_PRECONDITION],
    ['idempotency-replayed-error', status.FAILED_PRECONDITION],
    ['idempotency-completion-failed', status.INTERNAL],
    ['idempotency-error', status.INTERNAL],
  ])('%s: status %i, no retry-after-ms', (code, expected) => {
    const error = statusOf(grpcExceptions(new Metadata()).rejected(code, 'no'));
    expect(error.code).toBe(expected);
    expect(error.metadata.getMap()).toEqual({ 'idempotency-code': code });
  });
});
