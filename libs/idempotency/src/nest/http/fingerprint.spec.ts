import { createHash } from 'node:crypto';
import { canonicalQuery, requestFingerprint } from './fingerprint';

const base = { method: 'PUT', path: '/orders/1', query: '', body: { amount: 100 } };

describe('requestFingerprint', () => {
  it('is sha256 of method, concrete path, canonical query and canonical JSON body, one per line', () => {
    const body = { amount: 10, items: ['a', 'ключ-🔑'], note: null };
    const expected = createHash('sha256')
      .update('POST\n/orders\na=1&b=2\n{"amount":10,"items":["a","ключ-🔑"],"note":null}')
      .digest('hex');
    expect(requestFingerprint({ method: 'post', path: '/orders', query: 'b=2&a=1', body })).toBe(
      expected,
    );
  });

  it('tells apart what the route pattern hid: the concrete path, the query, the method', () => {
    const fp = requestFingerprint(base);
    expect(requestFingerprint({ ...base, path: '/orders/2' })).not.toBe(fp);
    expect(requestFingerprint({ ...base, query: 'amount=100' })).not.toBe(
      requestFingerprint({ ...base, query: 'amount=1000000' }),
    );
    expect(requestFingerprint({ ...base, method: 'DELETE' })).not.toBe(fp);
    expect(requestFingerprint({ ...base, body: { amount: 101 } })).not.toBe(fp);
  });

  it('ignores the order of object keys and of query parameters', () => {
    expect(requestFingerprint({ ...base, body: { x: 1, y: { b: 2, a: 1 } } })).toBe(
      requestFingerprint({ ...base, body: { y: { a: 1, b: 2 }, x: 1 } }),
    );
    expect(canonicalQuery('b=2&a=1&a=0')).toBe('a=0&a=1&b=2');
    expect(canonicalQuery('q=a%20b')).toBe(canonicalQuery('q=a+b'));
  });

  it('hashes bytes and uploaded files by content', () => {
    expect(requestFingerprint({ ...base, body: Buffer.from('a') })).not.toBe(
      requestFingerprint({ ...base, body: Buffer.from('b') }),
    );
    expect(
      requestFingerprint({ ...base, files: { file: { name: 'a.txt', content: 'x' } } }),
    ).not.toBe(requestFingerprint({ ...base, files: { file: { name: 'a.txt', content: 'y' } } }));
  });

  it('treats an absent body as null', () => {
    expect(requestFingerprint({ ...base, body: undefined })).toBe(
      requestFingerprint({ ...base, body: null }),
    );
  });
});
