import { createHash } from 'node:crypto';
import type { ExecutionContext } from '@nestjs/common';
import type { CallIdentity } from '../../../core/lifecycle';
import type { HandlerPlan } from '../../config/handler-plan';
import type { RpcKeySource } from '../../config/handler-options';
import { invalidKey } from '../door';
import { MessageDoor } from '../messages/message.door';
import type { RpcExceptions } from '../messages/rpc-exceptions';
import { grpcExceptions } from './grpc-exceptions';
import { GrpcMetadata, isGrpcMetadata, metadataView } from './grpc-metadata';

/**
 * Unary gRPC methods (`@GrpcMethod`): the message door's lifecycle, with the
 * key from the call's metadata (the `idempotency-key` entry, the name of
 * HTTP's key header) unless the handler names another source, and refusals
 * as gRPC statuses with the retry delay in the trailing metadata.
 */
export class GrpcDoor extends MessageDoor {
  protected override keySource(context: ExecutionContext): RpcKeySource {
    const rpc = context.switchToRpc();
    return {
      type: 'rpc',
      data: rpc.getData(),
      message: { metadata: metadataView(callMetadata(context)) },
      context,
    };
  }

  protected override exceptions(context: ExecutionContext): RpcExceptions {
    return grpcExceptions(callMetadata(context));
  }

  protected override identify(
    plan: HandlerPlan,
    source: RpcKeySource,
    context: ExecutionContext,
  ): CallIdentity {
    if (plan.key.kind !== 'header') return super.identify(plan, source, context);
    const name = this.settings.keyHeader.toLowerCase();
    const values = callMetadata(context)?.get(name) ?? [];
    if (values.length > 1) return invalidKey(`metadata ${name} was sent ${values.length} times`);
    const [value] = values;
    if (value !== undefined && typeof value !== 'string') {
      return invalidKey(`metadata ${name} must be text, not binary`);
    }
    // HTTP/2 hands an entry sent twice over as one value joined with ", ".
    if (value?.includes(',')) {
      return invalidKey(`metadata ${name} was sent several times (or holds a comma)`);
    }
    return this.identity(context, value, () => this.fingerprintOf(plan, source), undefined);
  }

  /** By default, the request message: a key sent again with another request is refused. */
  protected override fingerprintOf(plan: HandlerPlan, source: RpcKeySource): string | null {
    if (plan.fingerprint === 'default') return requestDigest(source.data);
    return super.fingerprintOf(plan, source);
  }
}

/** Stable: proto-loader decodes a message's fields in the order the .proto declares them. */
function requestDigest(data: unknown): string {
  return createHash('sha256')
    .update(JSON.stringify(data ?? null))
    .digest('base64url');
}

function callMetadata(context: ExecutionContext): GrpcMetadata | undefined {
  const metadata = context.switchToRpc().getContext() as unknown;
  return isGrpcMetadata(metadata) ? metadata : undefined;
}
