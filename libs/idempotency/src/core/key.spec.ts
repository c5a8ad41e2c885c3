import { createHash } from 'node:crypto';
import { IdempotencyKeyError } from './errors';
import { assertValidKey, assertValidScope, DEFAULT_MAX_KEY_LENGTH, keyDigest } from './key';

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

describe('assertValidScope', () => {
  it('accepts a non-empty scope', () => {
    expect(() => assertValidScope('PaymentsController.create')).not.toThrow();
  });

  it.each([[''], [undefined], [42], ['a\nb']])('rejects %p', (scope) => {
    keyError(() => assertValidScope(scope));
  });
});
