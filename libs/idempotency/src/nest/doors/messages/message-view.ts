import type { ExecutionContext } from '@nestjs/common';
import { keyFromBytes } from '../../../core/key';
import { rawKafkaBytes } from './kafka-bytes';
import { microservices } from './microservices';

/**
 * The `message` root of key expressions: a plain, read-only view of the
 * transport's message. Kafka's key and headers are bytes; they are given as
 * strings without loss (UTF-8 text as it is, anything else as `hex:…`, see
 * `keyFromBytes`), so two different keys never become one.
 */
export function messageView(context: ExecutionContext): Record<string, unknown> {
  const rpcContext = context.switchToRpc().getContext() as unknown;
  const { KafkaContext, RmqContext } = microservices();
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
  // Other transports (NATS, Redis, MQTT, TCP, gRPC): their context arguments, as they are.
  const args = (rpcContext as { getArgs?: () => unknown[] } | undefined)?.getArgs?.() ?? [];
  return { args };
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
