import { microservices } from './microservices';

const RAW = Symbol.for('nest-idempotency.kafka-raw');
const PATCHED = Symbol.for('nest-idempotency.kafka-parser-patched');

/** A Kafka message's key and headers as the broker sent them: bytes. */
export interface RawKafkaBytes {
  key: unknown;
  headers: Record<string, unknown>;
}

/**
 * Nest's `KafkaParser` turns a message's key and headers into text before any
 * handler sees them (UTF-8, keeping only a value that starts with 0x00 as
 * bytes), which is lossy for binary keys: two different keys can become the
 * same text. This keeps the bytes beside the parsed message, unchanged and
 * invisible to anything else (a non-enumerable symbol property), so that keys
 * can be derived from them without loss. Applied once, when the application
 * has message handlers.
 */
export function preserveKafkaBytes(): void {
  const { KafkaParser } = microservices.get();
  const prototype = KafkaParser.prototype as unknown as Record<symbol | string, unknown> & {
    parse(data: unknown): unknown;
  };
  if (prototype[PATCHED]) return;
  const parse = prototype.parse;
  prototype.parse = function (
    this: unknown,
    data: { key?: unknown; headers?: Record<string, unknown> },
  ) {
    const result = parse.call(this, data) as object;
    if (result && typeof result === 'object' && data && typeof data === 'object') {
      const raw: RawKafkaBytes = { key: data.key, headers: { ...(data.headers ?? {}) } };
      Object.defineProperty(result, RAW, { value: raw, enumerable: false });
    }
    return result;
  };
  Object.defineProperty(prototype, PATCHED, { value: true, enumerable: false });
}

/** The bytes `preserveKafkaBytes` kept for a parsed message, if any. */
export function rawKafkaBytes(message: unknown): RawKafkaBytes | undefined {
  return message && typeof message === 'object'
    ? ((message as Record<symbol, unknown>)[RAW] as RawKafkaBytes | undefined)
    : undefined;
}
