import type { ExecutionContext } from '@nestjs/common';

/**
 * The `message` root of key expressions: a plain, read-only view of the
 * transport's message, with Kafka's Buffers decoded to strings.
 */
export function messageView(context: ExecutionContext): Record<string, unknown> {
  const rpcContext = context.switchToRpc().getContext() as
    { constructor?: { name?: string }; getArgs?: () => unknown[] } | undefined;
  const args = rpcContext?.getArgs?.() ?? [];
  switch (rpcContext?.constructor?.name) {
    case 'KafkaContext': {
      const [message, partition, topic] = args as [Record<string, unknown>, number, string];
      return {
        key: decode(message?.key),
        headers: decodeHeaders(message?.headers),
        topic,
        partition,
        offset: message?.offset,
        timestamp: message?.timestamp,
      };
    }
    case 'RmqContext': {
      const [message] = args as [{ fields?: object; properties?: { headers?: object } }];
      return {
        properties: message?.properties ?? {},
        headers: message?.properties?.headers ?? {},
        fields: message?.fields ?? {},
      };
    }
    default:
      // Other transports (NATS, Redis, MQTT, TCP, gRPC): their context arguments, as they are.
      return { args };
  }
}

function decode(value: unknown): unknown {
  return Buffer.isBuffer(value) ? value.toString('utf8') : value;
}

function decodeHeaders(headers: unknown): Record<string, unknown> {
  if (!headers || typeof headers !== 'object') return {};
  return Object.fromEntries(
    Object.entries(headers).map(([name, value]) => [
      name,
      Array.isArray(value) ? value.map(decode) : decode(value),
    ]),
  );
}

/** The amqplib message and channel of a RabbitMQ context, for ack/nack. */
export function rmqHandles(
  context: ExecutionContext,
): { ack(): void; nack(requeue: boolean): void } | undefined {
  const rpcContext = context.switchToRpc().getContext() as {
    constructor?: { name?: string };
    getMessage?: () => unknown;
    getChannelRef?: () => {
      ack(m: unknown): void;
      nack(m: unknown, allUpTo?: boolean, requeue?: boolean): void;
    };
  };
  if (
    rpcContext?.constructor?.name !== 'RmqContext' ||
    !rpcContext.getChannelRef ||
    !rpcContext.getMessage
  )
    return undefined;
  const channel = rpcContext.getChannelRef();
  const message = rpcContext.getMessage();
  return {
    ack: () => channel.ack(message),
    nack: (requeue) => channel.nack(message, false, requeue),
  };
}
