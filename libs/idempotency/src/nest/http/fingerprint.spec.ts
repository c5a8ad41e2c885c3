import { createHash } from 'node:crypto';
import { requestFingerprint } from './fingerprint';

describe('requestFingerprint', () => {
  it('is sha256 of "route\\nbody as canonical JSON", as fingerprints already stored were computed', () => {
    const route = 'POST /orders';
    const body = { amount: 10, items: ['a', 'ключ-🔑'], note: null };
    const canonical = '{"amount":10,"items":["a","ключ-🔑"],"note":null}';
    const expected = createHash('sha256')
      .update(route)
      .update('\n')
      .update(canonical)
      .digest('hex');
    expect(requestFingerprint(route, body)).toBe(expected);
  });

  it('ignores the order of object keys and tells bodies and routes apart', () => {
    expect(requestFingerprint('POST /a', { x: 1, y: { b: 2, a: 1 } })).toBe(
      requestFingerprint('POST /a', { y: { a: 1, b: 2 }, x: 1 }),
    );
    expect(requestFingerprint('POST /a', { x: 1 })).not.toBe(
      requestFingerprint('POST /a', { x: 2 }),
    );
    expect(requestFingerprint('POST /a', { x: 1 })).not.toBe(
      requestFingerprint('POST /b', { x: 1 }),
    );
  });

  it('treats an absent body as null', () => {
    expect(requestFingerprint('POST /a', undefined)).toBe(requestFingerprint('POST /a', null));
  });
});
