import { createHash } from 'node:crypto';
import { IdempotencyKeyError } from './errors';
import {
  assertValidKey,
  DEFAULT_MAX_KEY_LENGTH,
  keyDigest,
  keyFromBytes,
  scopeProblem,
  storedKeyDigest,
  storedScope,
} from './key';

function keyError(run: () => unknown): IdempotencyKeyError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(IdempotencyKeyError);
    return error as IdempotencyKeyError;
  }
  throw new Error('expected an IdempotencyKeyError, nothing was thrown');
}

describe('keyDigest', () => {
  it('is scope/# followed by the first 12 hex characters of sha256(key)', () => {
    const key = 'order-8f14e45f-ceea-467a';
    const sha = createHash('sha256').update(key).digest('hex');
    expect(keyDigest('payments', key)).toBe(`payments/#${sha.slice(0, 12)}`);
    expect(keyDigest('payments', key)).toMatch(/^payments\/#[0-9a-f]{12}$/);
  });

  it('is stable, differs between keys, and never contains the key', () => {
    const key = 'secret-customer-token-123';
    expect(keyDigest('s', key)).toBe(keyDigest('s', key));
    expect(keyDigest('s', key)).not.toBe(keyDigest('s', `${key}x`));
    expect(keyDigest('s', key)).not.toContain(key);
    expect(keyDigest('s', 'ключ-🔑')).toMatch(/^s\/#[0-9a-f]{12}$/);
  });
});

describe('assertValidKey', () => {
  const scope = 'payments';

  it('accepts ordinary keys up to the default maximum of 255 characters', () => {
    expect(DEFAULT_MAX_KEY_LENGTH).toBe(255);
    for (const key of [
      'a',
      'x'.repeat(255),
      '8f14e45f-ceea-467a-9a36-dedd4bea2543',
      'ключ-🔑 ok',
    ]) {
      expect(() => assertValidKey(scope, key)).not.toThrow();
    }
  });

  it('rejects an empty key', () => {
    expect(keyError(() => assertValidKey(scope, '')).message).toBe(
      'payments: idempotency key is empty',
    );
  });

  it('rejects a key of 256 characters without echoing it, naming its digest and the maximum', () => {
    const key = `secret-${'k'.repeat(249)}`;
    expect(key).toHaveLength(256);
    const error = keyError(() => assertValidKey(scope, key));
    expect(error.message).not.toContain('secret-');
    expect(error.message).not.toContain('kkkkkkkk');
    expect(error.message).toContain(keyDigest(scope, key));
    expect(error.message).toContain('256 characters; the maximum is 255');
  });

  it('honours a configured maximum length', () => {
    expect(() => assertValidKey(scope, 'x'.repeat(10), 10)).not.toThrow();
    expect(keyError(() => assertValidKey(scope, 'x'.repeat(11), 10)).message).toContain(
      'the maximum is 10',
    );
    expect(() => assertValidKey(scope, 'x'.repeat(1000), 1000)).not.toThrow();
  });

  it.each([
    ['a number', 12345, 'number'],
    ['null', null, 'null'],
    ['undefined', undefined, 'undefined'],
    ['an object', { key: 'secret-value' }, 'object'],
    ['an array', ['secret-value'], 'object'],
  ])('rejects %s, saying only its type', (_label, key, type) => {
    const error = keyError(() => assertValidKey(scope, key));
    expect(error.message).toBe(`payments: idempotency key must be a string, got ${type}`);
    expect(error.message).not.toContain('secret-value');
    expect(error.message).not.toContain('12345');
  });

  it.each([
    ['NUL', 'secret\u0000key'],
    ['newline', 'secret\nkey'],
    ['carriage return', 'secret\rkey'],
    ['tab', 'secret\tkey'],
    ['escape', 'secret\u001bkey'],
    ['DEL', 'secret\u007fkey'],
  ])('rejects a key containing a control character (%s) without echoing it', (_label, key) => {
    const error = keyError(() => assertValidKey(scope, key));
    expect(error.message).toBe(
      `payments: idempotency key ${keyDigest(scope, key)} contains control characters`,
    );
    expect(error.message).not.toContain('secret');
  });
});

describe('scopeProblem', () => {
  it('accepts a non-empty scope', () => {
    expect(scopeProblem('PaymentsController.create')).toBeUndefined();
  });

  it.each([
    ['', 'must be a non-empty string'],
    [undefined, 'must be a non-empty string'],
    [42, 'must be a non-empty string'],
    ['a\nb', 'must not contain control characters'],
    ['a#tenant:b', 'must not contain "#tenant:" (it marks a tenant)'],
    ['a\ud800', 'must be well-formed Unicode'],
  ])('refuses %p', (scope, problem) => {
    expect(scopeProblem(scope)).toBe(problem);
  });
});

describe('keys are code points, well-formed, and counted as characters', () => {
  it('counts characters, not UTF-16 units or bytes: 255 emoji are 255 characters', () => {
    const key = '🔑'.repeat(255);
    expect(key.length).toBe(510);
    expect(Buffer.byteLength(key)).toBe(1020);
    expect(() => assertValidKey('s', key)).not.toThrow();
    expect(keyError(() => assertValidKey('s', `${key}x`)).message).toContain('256 characters');
    expect(() => assertValidKey('s', 'заказ-'.repeat(42))).not.toThrow();
  });

  it('refuses a lone surrogate, which UTF-8 would turn into U+FFFD (and two keys into one)', () => {
    const error = keyError(() => assertValidKey('s', 'secret\ud800'));
    expect(error.message).toContain('is not well-formed Unicode');
    expect(error.message).not.toContain('secret');
  });
});

describe('tenants', () => {
  it('is stored as part of the scope, and its digest covers tenant and key without showing either', () => {
    expect(storedScope('C.p', undefined)).toBe('C.p');
    expect(storedScope('C.p', 'ann.smith@example.com')).toBe('C.p#tenant:ann.smith@example.com');
    const digest = keyDigest('C.p', 'k-1', 'ann.smith@example.com');
    expect(digest).toMatch(/^C\.p\/#[0-9a-f]{12}$/);
    expect(digest).not.toBe(keyDigest('C.p', 'k-1'));
    expect(digest).not.toBe(keyDigest('C.p', 'k-1', 'bob@example.com'));
    expect(storedKeyDigest('C.p#tenant:ann.smith@example.com', 'k-1')).toBe(digest);
    expect(storedKeyDigest('C.p', 'k-1')).toBe(keyDigest('C.p', 'k-1'));
  });
});

describe('keyFromBytes', () => {
  it('keeps UTF-8 text as it is', () => {
    expect(keyFromBytes(Buffer.from('order-42'))).toBe('order-42');
    expect(keyFromBytes(Buffer.from('заказ-42'))).toBe('заказ-42');
  });

  it('gives different binary keys different strings (no U+FFFD collisions)', () => {
    const a = keyFromBytes(Buffer.from('9fa1', 'hex'));
    const b = keyFromBytes(Buffer.from('8ea1', 'hex'));
    expect(a).toBe('hex:9fa1');
    expect(b).toBe('hex:8ea1');
    expect(Buffer.from('9fa1', 'hex').toString('utf8')).toBe(
      Buffer.from('8ea1', 'hex').toString('utf8'),
    );
  });

  it('hex-encodes bytes with control characters (schema-registry framing starts with 0x00)', () => {
    const framed = Buffer.concat([Buffer.from([0, 0, 0, 0, 7]), Buffer.from('order-1')]);
    expect(keyFromBytes(framed)).toBe(`hex:${framed.toString('hex')}`);
    expect(() => assertValidKey('s', keyFromBytes(framed))).not.toThrow();
  });

  it('hex-encodes text that itself starts with hex:, so the mapping stays one to one', () => {
    const text = Buffer.from('hex:9fa1');
    expect(keyFromBytes(text)).toBe(`hex:${text.toString('hex')}`);
    expect(keyFromBytes(text)).not.toBe(keyFromBytes(Buffer.from('9fa1', 'hex')));
  });
});
