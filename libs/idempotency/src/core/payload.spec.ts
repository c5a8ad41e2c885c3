import { IdempotencyPayloadError } from './errors';
import { decodePayload, DEFAULT_MAX_PAYLOAD_BYTES, encodePayload } from './payload';

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
  ])('round-trips %s, through a string and through parsed jsonb', (_label, value) => {
    const encoded = encodePayload(value);
    expect(typeof encoded).toBe('string');
    expect(decodePayload(encoded)).toEqual(value);
    expect(decodePayload(JSON.parse(encoded))).toEqual(value);
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

  it('refuses a result larger than the maximum, 1 MiB by default', () => {
    expect(DEFAULT_MAX_PAYLOAD_BYTES).toBe(1024 * 1024);
    const fits = 'x'.repeat(DEFAULT_MAX_PAYLOAD_BYTES - '{"v":""}'.length);
    expect(() => encodePayload(fits)).not.toThrow();
    expect(payloadError(() => encodePayload(`${fits}x`)).message).toBe(
      `result is ${DEFAULT_MAX_PAYLOAD_BYTES + 1} bytes serialized; the store accepts at most ${DEFAULT_MAX_PAYLOAD_BYTES}`,
    );
    expect(() => encodePayload('x'.repeat(100), 50)).toThrow(IdempotencyPayloadError);
  });

  it('counts bytes, not characters', () => {
    // 'é' is 2 bytes in UTF-8: 10 of them plus the wrapper is 28 bytes.
    expect(() => encodePayload('é'.repeat(10), 28)).not.toThrow();
    expect(() => encodePayload('é'.repeat(10), 27)).toThrow(IdempotencyPayloadError);
  });
});
