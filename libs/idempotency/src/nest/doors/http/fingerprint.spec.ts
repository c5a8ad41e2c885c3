import { createHash } from 'node:crypto';
import { canonicalQuery, FingerprintParts, requestFingerprint } from './fingerprint';

const base = { method: 'PUT', path: '/orders/1', query: '', body: { amount: 100 } };
const sha256 = (bytes: Buffer | string) => createHash('sha256').update(bytes).digest('hex');
/** How a client's JSON body could spell a serialized Buffer. */
const bufferShaped = (text: string) => ({ type: 'Buffer', data: [...Buffer.from(text)] });
const fp = (body: unknown, extra: Partial<FingerprintParts> = {}) =>
  requestFingerprint({ ...base, body, ...extra });

describe('requestFingerprint', () => {
  it('is sha256 of method, concrete path, canonical query and canonical JSON body, one per line', () => {
    const body = { amount: 10, items: ['a', 'ключ-🔑'], note: null };
    const expected = sha256(
      'POST\n/orders\na=1&b=2\n{"amount":10,"items":["a","ключ-🔑"],"note":null}',
    );
    expect(requestFingerprint({ method: 'post', path: '/orders', query: 'b=2&a=1', body })).toBe(
      expected,
    );
  });

  it('tells apart what the route pattern hid: the concrete path, the query, the method', () => {
    const first = requestFingerprint(base);
    expect(requestFingerprint({ ...base, path: '/orders/2' })).not.toBe(first);
    expect(requestFingerprint({ ...base, query: 'amount=100' })).not.toBe(
      requestFingerprint({ ...base, query: 'amount=1000000' }),
    );
    expect(requestFingerprint({ ...base, method: 'DELETE' })).not.toBe(first);
    expect(requestFingerprint({ ...base, body: { amount: 101 } })).not.toBe(first);
  });

  it('ignores the order of object keys and of query parameter names', () => {
    expect(fp({ x: 1, y: { b: 2, a: 1 } })).toBe(fp({ y: { a: 1, b: 2 }, x: 1 }));
    expect(canonicalQuery('b=2&a=1')).toBe('a=1&b=2');
    expect(canonicalQuery('q=a%20b')).toBe(canonicalQuery('q=a+b'));
  });

  it('keeps the order of a repeated query parameter: the handler gets its values in that order', () => {
    expect(canonicalQuery('b=2&a=1&a=0')).toBe('a=1&a=0&b=2');
    expect(fp({}, { query: 'tag=b&tag=a' })).not.toBe(fp({}, { query: 'tag=a&tag=b' }));
    // Interleaved with other names, the values of one name still come in the same order.
    expect(fp({}, { query: 'tag=a&x=1&tag=b' })).toBe(fp({}, { query: 'x=1&tag=a&tag=b' }));
  });

  it('hashes bytes and uploaded files by content', () => {
    expect(fp(Buffer.from('a'))).not.toBe(fp(Buffer.from('b')));
    expect(fp(base.body, { files: { file: { name: 'a.txt', content: 'x' } } })).not.toBe(
      fp(base.body, { files: { file: { name: 'a.txt', content: 'y' } } }),
    );
  });

  it('treats an absent body as null', () => {
    expect(fp(undefined)).toBe(fp(null));
  });
});

describe('requestFingerprint: what a client sends is never taken for bytes', () => {
  it('counts every field beside "type": "Buffer" and "data" in a JSON body', () => {
    const payment = (owner: string, amount: number) => ({
      ...bufferShaped('invoice'),
      owner,
      amount,
    });
    expect(fp(payment('alice', 100))).not.toBe(fp(payment('bob', 100)));
    expect(fp(payment('alice', 100))).not.toBe(fp(payment('alice', 1000000)));
    // One level down, and beside such an object.
    expect(fp({ document: { ...bufferShaped('x'), owner: 'alice' } })).not.toBe(
      fp({ document: { ...bufferShaped('x'), owner: 'bob' } }),
    );
    expect(fp({ document: bufferShaped('x'), owner: 'alice' })).not.toBe(
      fp({ document: bufferShaped('x'), owner: 'bob' }),
    );
  });

  it('tells a Buffer-shaped object from the "bytes:<sha-256>" string that 0.2 made of it', () => {
    const tag = `bytes:${sha256(Buffer.from('invoice'))}`;
    expect(fp({ document: bufferShaped('invoice') })).not.toBe(fp({ document: tag }));
    expect(fp([bufferShaped('a'), bufferShaped('b')])).not.toBe(
      fp([`bytes:${sha256('a')}`, `bytes:${sha256('b')}`]),
    );
    // A body that is itself Buffer-shaped, beside a text body and a JSON string body.
    expect(fp(bufferShaped('invoice'))).not.toBe(fp(tag));
    expect(fp(bufferShaped('invoice'))).not.toBe(fp(Buffer.from('invoice')));
    expect(fp(tag)).not.toBe(fp(Buffer.from('invoice')));
  });

  it('tells real bytes inside a body from any string, the escaped forms included', () => {
    const bytes = Buffer.from('invoice');
    const tag = `bytes:${sha256(bytes)}`;
    const forms = [
      { document: bytes },
      { document: new Uint8Array(bytes) },
      { document: tag },
      { document: `~${tag}` },
      { document: `~~${tag}` },
      { document: bufferShaped('invoice') },
    ].map((body) => fp(body));
    // A Buffer and a Uint8Array of the same bytes are the same bytes; everything else differs.
    expect(forms[0]).toBe(forms[1]);
    expect(new Set(forms.slice(1)).size).toBe(5);
  });

  it("tells ±Infinity (JSON.parse('1e400')) from null and from the strings that name them", () => {
    const bodies = [
      JSON.parse('{"amount":1e400}') as unknown,
      JSON.parse('{"amount":-1e400}') as unknown,
      { amount: null },
      { amount: 'number:Infinity' },
      { amount: '~number:Infinity' },
      { amount: Number.NaN },
      { amount: 'number:NaN' },
    ];
    expect(new Set(bodies.map((body) => fp(body))).size).toBe(bodies.length);
  });

  it('compares a Buffer-shaped object in the query string as the query text it is', () => {
    const query = (owner: string) => `doc[type]=Buffer&doc[data][0]=1&owner=${owner}`;
    expect(fp({}, { query: query('alice') })).not.toBe(fp({}, { query: query('bob') }));
  });

  it('keeps uploaded files apart from body fields of the same names', () => {
    const descriptor = { field: 'file', name: 'a.txt', type: 'text/plain', size: 1, content: 'x' };
    const uploaded = fp({}, { files: { file: descriptor, files: null } });
    expect(fp({ file: descriptor, files: null })).not.toBe(uploaded);
    expect(fp({ file: descriptor }, { files: { file: null, files: null } })).not.toBe(uploaded);
    expect(fp({}, { files: { file: null, files: [descriptor] } })).not.toBe(uploaded);
  });

  it('hashes the same text as 0.2 for every request 0.2 could tell apart (records written before the upgrade still match)', () => {
    // Computed with the 0.2 code (git show c1f0c5a:libs/idempotency/src/nest/http/fingerprint.ts).
    const files = {
      file: { field: 'file', name: 'a.txt', type: 'text/plain', size: 5, content: 'a'.repeat(64) },
      files: null,
    };
    const corpus: [FingerprintParts, string][] = [
      [
        {
          method: 'post',
          path: '/orders',
          query: 'b=2&a=1',
          body: {
            amount: 10,
            items: ['a', 'ключ-🔑'],
            note: null,
            nested: { z: [1, 2.5, true], a: '' },
          },
        },
        '5197331a94965142c04908f99999ade16fb5cd9e7d8348b9e1e525e721d509cb',
      ],
      [
        { method: 'GET', path: '/orders/1', query: '', body: undefined },
        'b75bec8e029571567acd6d84d780c2b59eee578c9c90e7c6e59ffd74e2b6e8fc',
      ],
      [
        { method: 'POST', path: '/notes', query: 'x=%20y', body: 'plain text\nwith a newline' },
        '1e485fe946af7f051601216cc77183e9577ed6548b633e7e8e99d475158907d0',
      ],
      [
        { method: 'PUT', path: '/blobs/7', query: '', body: Buffer.from([0, 1, 2, 250]) },
        '7724434b35382392b23e1b087cd4873dbf08501a0c7bbb92cd2ba735d29d1ab8',
      ],
      [
        { method: 'POST', path: '/raw', query: '', body: { raw: Buffer.from('hi'), name: 'x' } },
        '5c7dd8b99c5800186e05aff5b21f6621baf9262a9d574a5e7d81d26e9a34cb8f',
      ],
      [
        { method: 'POST', path: '/batch', query: 'tag=a&tag=b', body: [{ id: 1 }, { id: 2 }] },
        'a97ec66fe9931de8d0579e321a778e571ac2191cd584cbf06122f1d170d4f3b2',
      ],
      [
        { method: 'POST', path: '/uploads', query: '', body: { title: 'hello' }, files },
        '71968b8ea587ccf1170ca25a2c1511dff698b7782444b7131aa5ba7ffbcc80cd',
      ],
      [
        {
          method: 'POST',
          path: '/orders',
          query: '',
          body: { note: 'bytes:nothing-like-a-digest' },
        },
        'b0ca6eafaca440bc0b68d22b526167f32c6dd02e956336a3a0e0893e39584fe2',
      ],
    ];
    for (const [parts, legacy] of corpus) expect(requestFingerprint(parts)).toBe(legacy);
  });

  it('throws on a cyclic body (no parser makes one) rather than hashing a placeholder', () => {
    const body: Record<string, unknown> = { a: 1 };
    body.self = body;
    expect(() => fp(body)).toThrow(TypeError);
  });
});

describe("requestFingerprint's shared-scope form", () => {
  const shared = (parts: Partial<FingerprintParts>) =>
    requestFingerprint({ ...base, params: { id: '1' }, ...parts }, 'shared-scope');

  it('leaves out the method and the path, which differ between routes sharing a scope', () => {
    expect(shared({ method: 'POST', path: '/orders/1/wait' })).toBe(shared({}));
    expect(shared({})).not.toBe(requestFingerprint(base));
  });

  it('compares the route parameters by name, the query, the body and the files', () => {
    expect(shared({ params: { id: '2' } })).not.toBe(shared({}));
    expect(shared({ params: { orderId: '1' } })).not.toBe(shared({}));
    expect(shared({ query: 'notify=1' })).not.toBe(shared({}));
    expect(shared({ body: { amount: 101 } })).not.toBe(shared({}));
    expect(shared({ files: { file: null, files: [] } })).not.toBe(shared({}));
  });
});
