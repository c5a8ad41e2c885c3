import { IdempotencyPayloadError } from './errors';
import type { StoredPayload } from './store';

/**
 * The stored form of a result: bytes, whose first byte says what follows.
 *
 *   u                              the action returned undefined
 *   v<JSON text>                   a JSON value
 *   h<JSON {s,h}>\n<body bytes>    an HTTP response: status, headers, then the body exactly as sent
 *   x<JSON {reason}>               the action ran but its result could not be stored (a duplicate
 *                                  is refused rather than run again)
 *   {…}                            a record written by 0.1 (its jsonb payload as text; see decodeLegacy)
 *
 * Encoded once when the action completes; a replay hands the same bytes back,
 * so an HTTP replay writes the body byte for byte as it was first sent, and
 * every store (bytea, BLOB, Redis string) holds any payload the same way.
 */

const UNDEFINED = 0x75; // u
const VALUE = 0x76; // v
const HTTP = 0x68; // h
const NOT_STORABLE = 0x78; // x
const LEGACY = 0x7b; // {

const EMPTY = Buffer.from('u');

/** Serializes a JSON value for storage, or throws `IdempotencyPayloadError` before anything is written. */
export function encodeValue(value: unknown): StoredPayload {
  if (value === undefined) return EMPTY;
  assertSerializable(value, '$', new Set());
  // JSON.stringify escapes U+0000 and lone surrogates, so the text is always well-formed UTF-8.
  return Buffer.from(`v${JSON.stringify(value)}`, 'utf8');
}

/**
 * What is stored when the action ran but its result cannot be: its record is
 * completed with this marker (never released, which would let a duplicate
 * run the action a second time), and a duplicate is told the result is lost.
 */
export function encodeNotStorable(reason: string): StoredPayload {
  return Buffer.from(`x${JSON.stringify({ reason })}`, 'utf8');
}

/** The reason a marker from `encodeNotStorable` gives, or undefined for a stored result. */
export function notStorableReason(payload: StoredPayload): string | undefined {
  if (payload[0] !== NOT_STORABLE) return undefined;
  return (JSON.parse(payload.toString('utf8', 1)) as { reason: string }).reason;
}

/**
 * The value `encodeValue` stored (JSON: class instances come back as plain
 * objects). Throws `IdempotencyPayloadError` for a result that could not be
 * stored: the action ran once, and its result is not there to replay.
 */
export function decodeValue(payload: StoredPayload): unknown {
  switch (payload[0]) {
    case NOT_STORABLE:
      throw new IdempotencyPayloadError(
        `the action already ran, but its result could not be stored (${notStorableReason(payload)}); it is not run again`,
      );
    case UNDEFINED:
      return undefined;
    case VALUE:
      return JSON.parse(payload.toString('utf8', 1));
    case LEGACY:
      return decodeLegacy(payload).value;
    default:
      throw new IdempotencyPayloadError(`stored payload is not a value (tag ${tagOf(payload)})`);
  }
}

/** An HTTP response as it was written to the socket. */
export interface HttpResponseRecord {
  status: number;
  /** Lower-case names; only the headers the handler's plan replays. */
  headers: Record<string, string | string[]>;
  body: Buffer;
}

export function encodeHttpResponse(response: HttpResponseRecord): StoredPayload {
  // JSON.stringify never emits a raw newline, so the first one ends the head.
  const head = `h${JSON.stringify({ s: response.status, h: response.headers })}\n`;
  const headBytes = Buffer.byteLength(head);
  // One allocation: the head written in place, the body copied after it.
  const payload = Buffer.allocUnsafe(headBytes + response.body.length);
  payload.write(head, 0, 'utf8');
  response.body.copy(payload, headBytes);
  return payload;
}

/**
 * True for a payload holding an HTTP response (as the HTTP door stores one),
 * false for a value (as a resolution or another door stores one).
 */
export function isHttpResponse(payload: StoredPayload): boolean {
  return payload[0] === HTTP || (payload[0] === LEGACY && decodeLegacy(payload).http !== undefined);
}

export function decodeHttpResponse(payload: StoredPayload): HttpResponseRecord {
  if (payload[0] === LEGACY) {
    const legacy = decodeLegacy(payload);
    if (legacy.http) return legacy.http;
  }
  if (payload[0] !== HTTP) {
    throw new IdempotencyPayloadError(
      `stored payload is not an HTTP response (tag ${tagOf(payload)})`,
    );
  }
  const end = payload.indexOf(0x0a);
  const head = JSON.parse(payload.toString('utf8', 1, end)) as {
    s: number;
    h: Record<string, string | string[]>;
  };
  return { status: head.s, headers: head.h, body: payload.subarray(end + 1) };
}

/** What a stored payload holds, for operators' tools (the CLI's inspect and list). */
export type PayloadDescription =
  | { kind: 'value'; value: unknown }
  | { kind: 'not-storable'; reason: string }
  | {
      kind: 'http';
      status: number;
      headers: Record<string, string | string[]>;
      body: string;
      bodyEncoding: 'utf8' | 'base64';
    };

export function describePayload(payload: StoredPayload): PayloadDescription {
  const reason = notStorableReason(payload);
  if (reason !== undefined) return { kind: 'not-storable', reason };
  if (payload[0] === HTTP || (payload[0] === LEGACY && decodeLegacy(payload).http)) {
    const { status, headers, body } = decodeHttpResponse(payload);
    const text = body.toString('utf8');
    const isText = Buffer.from(text, 'utf8').equals(body);
    return {
      kind: 'http',
      status,
      headers,
      body: isText ? text : body.toString('base64'),
      bodyEncoding: isText ? 'utf8' : 'base64',
    };
  }
  return { kind: 'value', value: decodeValue(payload) };
}

/**
 * 0.1 stored `{"v": result}` in a jsonb column, where the Nest adapter's
 * result was `{kind: 'rpc', value}` or `{kind: 'http', status, headers,
 * bodyJson}` (bodyJson: the body's own `{"v": …}` as JSON text). The
 * 0.2 migration copies that jsonb as text; this reads it.
 */
function decodeLegacy(payload: StoredPayload): { value: unknown; http?: HttpResponseRecord } {
  const wrapper = JSON.parse(payload.toString('utf8')) as { v?: unknown };
  const value = 'v' in wrapper ? wrapper.v : undefined;
  const result = value as {
    kind?: string;
    value?: unknown;
    status?: number;
    headers?: Record<string, string | string[]>;
    bodyJson?: string;
  } | null;
  if (result?.kind === 'rpc') return { value: result.value };
  if (result?.kind === 'http' && typeof result.bodyJson === 'string') {
    const inner = JSON.parse(result.bodyJson) as { v?: unknown };
    const body = 'v' in inner ? inner.v : undefined;
    return {
      value,
      http: {
        status: result.status ?? 200,
        headers: result.headers ?? {},
        // What both adapters sent for a JSON body: JSON.stringify of it (nothing for none).
        body:
          body === undefined
            ? Buffer.alloc(0)
            : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body), 'utf8'),
      },
    };
  }
  return { value };
}

function tagOf(payload: StoredPayload): string {
  return payload.length === 0 ? 'none' : JSON.stringify(String.fromCharCode(payload[0]));
}

/**
 * Rejects what JSON would silently mangle or drop: functions, symbols, BigInt,
 * circular references, Map and Set (objects with `toJSON`, such as Date, are fine).
 */
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

/** Refuses a payload larger than a store accepts, naming both sizes. */
export function assertPayloadSize(payload: StoredPayload, maxBytes: number): void {
  if (payload.length > maxBytes) {
    throw new IdempotencyPayloadError(
      `result is ${payload.length} bytes stored; the store accepts at most ${maxBytes}`,
    );
  }
}

export const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;
