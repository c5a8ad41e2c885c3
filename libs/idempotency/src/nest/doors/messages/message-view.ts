import type { ExecutionContext } from '@nestjs/common';
import { keyFromBytes } from '../../../core/key';
import { rawKafkaBytes } from './kafka-bytes';
import { microservices } from './microservices';

/**
 * The `message` root of key expressions: a plain, read-only view of the
 * transport's message. Kafka's key and headers are bytes; they are given as
 * strings without loss (UTF-8 text as it is, anything else as `hex:…`, see
 * `keyFromBytes`), so two different keys never become one. NATS headers and
 * MQTT 5 user properties are there for keys a publisher sets (`Nats-Msg-Id`,
 * an `idempotency-key` property); gRPC's metadata is the gRPC door's (grpc.door.ts).
 */
export function messageView(context: ExecutionContext): Record<string, unknown> {
  const rpcContext = context.switchToRpc().getContext() as unknown;
  const { KafkaContext, RmqContext, NatsContext, MqttContext, RedisContext, TcpContext } =
    microservices.get();
  if (rpcContext instanceof KafkaContext) {
    const message = rpcContext.getMessage() as unknown as Record<string, unknown>;
    // The broker's bytes where they were kept; Nest's parsed text otherwise.
    const raw = rawKafkaBytes(message);
    return {
      key: bytesAsText(raw ? raw.key : message?.key),
      headers: decodeHeaders(raw ? raw.headers : message?.headers),
      topic: rpcContext.getTopic(),
      partition: rpcContext.getPartition(),
      offset: message?.offset,
      timestamp: message?.timestamp,
    };
  }
  if (rpcContext instanceof RmqContext) {
    const message = rpcContext.getMessage() as {
      fields?: object;
      properties?: { headers?: object };
    };
    return {
      properties: message?.properties ?? {},
      headers: message?.properties?.headers ?? {},
      fields: message?.fields ?? {},
    };
  }
  if (rpcContext instanceof NatsContext) {
    return { subject: rpcContext.getSubject(), headers: natsHeaders(rpcContext.getHeaders()) };
  }
  if (rpcContext instanceof MqttContext) {
    const packet = rpcContext.getPacket() as { properties?: { userProperties?: object } };
    return {
      topic: rpcContext.getTopic(),
      userProperties: { ...packet?.properties?.userProperties },
    };
  }
  if (rpcContext instanceof RedisContext) return { channel: rpcContext.getChannel() };
  if (rpcContext instanceof TcpContext) return { pattern: rpcContext.getPattern() };
  // Any other transport (a custom strategy's context): its arguments, as they are.
  const args = (rpcContext as { getArgs?: () => unknown[] } | undefined)?.getArgs?.() ?? [];
  return { args };
}

/**
 * NATS headers (nats.js `MsgHdrs`) as a plain object: each name as sent, with
 * its one value as a string, or an array when the header was sent several
 * times (so `Nats-Msg-Id` sent twice is not a key, rather than half of one).
 */
function natsHeaders(headers: unknown): Record<string, unknown> {
  const hdrs = headers as
    { keys?: () => string[]; values?: (name: string) => string[] } | undefined;
  if (!hdrs || typeof hdrs.keys !== 'function' || typeof hdrs.values !== 'function') return {};
  const view: Record<string, unknown> = {};
  for (const name of hdrs.keys()) {
    const values = hdrs.values(name);
    view[name] = values.length === 1 ? values[0] : values;
  }
  return view;
}

function bytesAsText(value: unknown): unknown {
  return value instanceof Uint8Array ? keyFromBytes(value) : value;
}

function decodeHeaders(headers: unknown): Record<string, unknown> {
  if (!headers || typeof headers !== 'object') return {};
  return Object.fromEntries(
    Object.entries(headers).map(([name, value]) => [
      name,
      Array.isArray(value) ? value.map(bytesAsText) : bytesAsText(value),
    ]),
  );
}
