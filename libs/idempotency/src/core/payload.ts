import { IdempotencyPayloadError } from './errors';

export const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;

/**
 * Stored form of a payload. The wrapper lets `undefined` (a handler that
 * returns nothing) survive a round trip through JSON, distinct from `null`.
 */
export type EncodedPayload = { v?: unknown };

/**
 * Serializes `value` for storage, or throws `IdempotencyPayloadError` before
 * anything is written. Rejects what JSON would silently mangle: functions,
 * symbols, BigInt, circular references, Map and Set.
 */
export function encodePayload(value: unknown, maxBytes = DEFAULT_MAX_PAYLOAD_BYTES): string {
  assertSerializable(value, '$', new Set());
  const json = JSON.stringify(value === undefined ? {} : { v: value });
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes > maxBytes) {
    throw new IdempotencyPayloadError(
      `result is ${bytes} bytes serialized; the store accepts at most ${maxBytes}`,
    );
  }
  return json;
}

export function decodePayload(stored: unknown): unknown {
  const wrapper = (
    typeof stored === 'string' ? JSON.parse(stored) : stored
  ) as EncodedPayload | null;
  return wrapper && 'v' in wrapper ? wrapper.v : undefined;
}

function assertSerializable(value: unknown, path: string, seen: Set<object>): void {
  switch (typeof value) {
    case 'bigint':
      throw new IdempotencyPayloadError(`result is not JSON-serializable: BigInt at ${path}`);
    case 'function':
    case 'symbol':
      throw new IdempotencyPayloadError(
        `result is not JSON-serializable: ${typeof value} at ${path}`,
      );
    case 'object': {
      if (value === null) return;
      if (seen.has(value)) {
        throw new IdempotencyPayloadError(
          `result is not JSON-serializable: circular reference at ${path}`,
        );
      }
      if (value instanceof Map || value instanceof Set) {
        throw new IdempotencyPayloadError(
          `result is not JSON-serializable: ${value.constructor.name} at ${path}`,
        );
      }
      if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return;
      seen.add(value);
      if (Array.isArray(value)) {
        value.forEach((item, i) => assertSerializable(item, `${path}[${i}]`, seen));
      } else {
        for (const [k, v] of Object.entries(value)) {
          if (v !== undefined) assertSerializable(v, `${path}.${k}`, seen);
        }
      }
      seen.delete(value);
      return;
    }
    default:
      return;
  }
}
