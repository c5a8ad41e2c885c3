import { IdempotencyConfigError } from '../../../core/errors';
import { NEST_METADATA } from '../../nest-metadata';

/** `Transport.GRPC`, as `@GrpcMethod` records it beside the pattern. */
const GRPC_TRANSPORT = 4;
/** `GrpcMethodStreamingType.NO_STREAMING`: `@GrpcMethod`; the others are the two streaming decorators. */
const UNARY = 'no_stream';

/**
 * Whether a message handler is a gRPC method, refusing the streaming ones
 * (`@GrpcStreamMethod`, `@GrpcStreamCall`) at bootstrap: a stream has no one
 * value to record and replay, and its effects happen message by message.
 */
export function compileGrpcMethod(handler: object, where: string): boolean {
  if (Reflect.getMetadata(NEST_METADATA.transport, handler) !== GRPC_TRANSPORT) return false;
  const patterns = ([] as unknown[]).concat(Reflect.getMetadata(NEST_METADATA.pattern, handler));
  const streaming = patterns
    .map((pattern) => (pattern as { streaming?: unknown } | undefined)?.streaming)
    .find((kind) => kind !== undefined && kind !== UNARY);
  if (streaming !== undefined) {
    throw new IdempotencyConfigError(
      `${where}: @Idempotent applies to unary gRPC methods (@GrpcMethod), and this one streams (${streaming === 'rx_stream' ? '@GrpcStreamMethod' : '@GrpcStreamCall'}); a stream has no single response to record and replay. Make the method unary, or use IdempotencyEngine inside it per message`,
    );
  }
  return true;
}
