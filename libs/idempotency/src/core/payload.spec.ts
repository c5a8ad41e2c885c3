import { IdempotencyPayloadError } from './errors';
import {
  assertPayloadSize,
  decodeHttpResponse,
  decodeValue,
  DEFAULT_MAX_PAYLOAD_BYTES,
  describePayload,
  encodeHttpResponse,
  encodeValue,
} from './payload';

const encodePayload = encodeValue;
const decodePayload = decodeValue;

function payloadError(run: () => unknown): IdempotencyPayloadError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(IdempotencyPayloadError);
    return error as IdempotencyPayloadError;
  }
  throw new Error('expected an IdempotencyPayloadError, nothing was thrown');
}

describe('encodePayload / decodePayload', () => {
  it.each([
    ['undefined', undefined],
    ['null', null],
    ['zero', 0],
    ['false', false],
    ['an empty string', ''],
    ['an empty array', []],
    ['an empty object', {}],
    ['a nested object', { status: 201, body: { id: 7, tags: ['a'], none: null } }],
    ['unicode', { name: 'ключ-🔑' }],
  ])('round-trips %s', (_label, value) => {
    const encoded = encodePayload(value);
    expect(Buffer.isBuffer(encoded)).toBe(true);
    expect(decodePayload(encoded)).toEqual(value);
  });

  it('stores U+0000 and lone surrogates as JSON escapes, well-formed UTF-8 that every store holds', () => {
    const value = { nul: 'a\u0000b', lone: 'x\ud800y' };
    const encoded = encodePayload(value);
    expect(encoded.toString('utf8')).toBe('v{"nul":"a\\u0000b","lone":"x\\ud800y"}');
    expect(encoded.includes(0)).toBe(false);
    expect(decodePayload(encoded)).toEqual(value);
  });

  it('keeps object key order as the value had it', () => {
    expect(encodePayload({ b: 1, a: 2 }).toString('utf8')).toBe('v{"b":1,"a":2}');
  });

  it('keeps undefined distinct from null', () => {
    expect(decodePayload(encodePayload(undefined))).toBeUndefined();
    expect(decodePayload(encodePayload(null))).toBeNull();
  });

  it('stores what JSON.stringify would: toJSON results, no undefined properties', () => {
    const at = new Date('2025-01-02T03:04:05.000Z');
    expect(decodePayload(encodePayload({ at, gone: undefined, kept: 1 }))).toEqual({
      at: '2025-01-02T03:04:05.000Z',
      kept: 1,
    });
  });

  it('accepts the same object referenced twice when there is no cycle', () => {
    const shared = { n: 1 };
    expect(decodePayload(encodePayload({ a: shared, b: [shared, shared] }))).toEqual({
      a: { n: 1 },
      b: [{ n: 1 }, { n: 1 }],
    });
  });

  describe('refuses what JSON would mangle, naming where', () => {
    it('a circular reference', () => {
      const node: Record<string, unknown> = { id: 1 };
      node.children = [{ parent: node }];
      expect(payloadError(() => encodePayload(node)).message).toBe(
        'result is not JSON-serializable: circular reference at $.children[0].parent',
      );
    });

    it('a BigInt', () => {
      expect(payloadError(() => encodePayload({ amount: BigInt(10) })).message).toBe(
        'result is not JSON-serializable: BigInt at $.amount',
      );
      payloadError(() => encodePayload(BigInt(1)));
    });

    it.each([
      ['a function', { run: () => 1 }, 'function at $.run'],
      ['a symbol', [Symbol('s')], 'symbol at $[0]'],
      ['a Map', { m: new Map([['a', 1]]) }, 'Map at $.m'],
      ['a Set', new Set([1]), 'Set at $'],
    ])('%s', (_label, value, where) => {
      expect(payloadError(() => encodePayload(value)).message).toBe(
        `result is not JSON-serializable: ${where}`,
      );
    });
  });

  it('refuses a stored payload larger than a maximum, naming both sizes (1 MiB by default)', () => {
    expect(DEFAULT_MAX_PAYLOAD_BYTES).toBe(1024 * 1024);
    expect(() => assertPayloadSize(Buffer.alloc(10), 10)).not.toThrow();
    expect(payloadError(() => assertPayloadSize(Buffer.alloc(11), 10)).message).toBe(
      'result is 11 bytes stored; the store accepts at most 10',
    );
  });
});

describe('HTTP responses', () => {
  it('round-trip status, headers and the body bytes exactly', () => {
    const response = {
      status: 201,
      headers: { 'content-type': 'application/octet-stream', etag: 'W/"1"' },
      body: Buffer.from([0, 10, 13, 255, 104, 10]),
    };
    const decoded = decodeHttpResponse(encodeHttpResponse(response));
    expect(decoded.status).toBe(201);
    expect(decoded.headers).toEqual(response.headers);
    expect(decoded.body.equals(response.body)).toBe(true);
  });

  it('reads a record 0.1 stored (its jsonb payload as text), as the migration leaves it', () => {
    const legacy = Buffer.from(
      JSON.stringify({
        v: {
          kind: 'http',
          status: 201,
          headers: { 'content-type': 'application/json; charset=utf-8' },
          bodyJson: '{"v":{"z":1,"a":2}}',
        },
      }),
    );
    const decoded = decodeHttpResponse(legacy);
    expect(decoded.status).toBe(201);
    expect(decoded.body.toString()).toBe('{"z":1,"a":2}');
    expect(decodeValue(Buffer.from('{"v": {"kind": "rpc", "value": {"ok": true}}}'))).toEqual({
      ok: true,
    });
    expect(decodeValue(Buffer.from('{}'))).toBeUndefined();
  });

  it('describes payloads for operators: a value, or an HTTP response with a text or base64 body', () => {
    expect(describePayload(encodeValue({ a: 1 }))).toEqual({ kind: 'value', value: { a: 1 } });
    expect(
      describePayload(
        encodeHttpResponse({ status: 200, headers: {}, body: Buffer.from('{"a":1}') }),
      ),
    ).toMatchObject({ kind: 'http', status: 200, body: '{"a":1}', bodyEncoding: 'utf8' });
    expect(
      describePayload(encodeHttpResponse({ status: 200, headers: {}, body: Buffer.from([0xff]) })),
    ).toMatchObject({ body: '/w==', bodyEncoding: 'base64' });
  });
});
