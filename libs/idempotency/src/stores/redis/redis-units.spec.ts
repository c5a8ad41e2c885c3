import { ClientClosedError, ErrorReply, SocketClosedUnexpectedlyError, TimeoutError } from 'redis';
import { IdempotencyConfigError } from '../../core/errors';
import { recordLocator } from '../../core/key';
import { isNoScript, isUnavailable } from './client';
import { RedisKeys } from './keys';
import { RedisIdempotencyStore } from './redis.store';

/** The parts of the Redis store that need no server: names, error classes, options. */
describe('RedisKeys', () => {
  it('gives every name of a record one hash tag, the record id', () => {
    const keys = new RedisKeys('app:');
    const names = keys.record('Orders.create', 'k-1');
    expect(names.id).toMatch(/^[0-9a-f]{64}$/);
    for (const name of [names.key, names.channel]) {
      expect(name.match(/\{[^}]*\}/g)).toEqual([`{${names.id}}`]);
    }
    expect(names.key.startsWith('app:r:')).toBe(true);
    expect(keys.record('Orders.create', 'k-2').id).not.toBe(names.id);
    // The boundary between scope and key is unambiguous.
    expect(keys.record('a', 'bc').id).not.toBe(keys.record('ab', 'c').id);
  });

  it('matches one scope, and escapes glob characters of the prefix', () => {
    const keys = new RedisKeys('we*ird?[x]\\:');
    const pattern = keys.pattern('S');
    expect(pattern.startsWith('we\\*ird\\?\\[x\\]\\\\:r:')).toBe(true);
    expect(keys.record('S', 'k').key.startsWith(pattern.slice(0, -1).replace(/\\(.)/g, '$1'))).toBe(
      true,
    );
    expect(keys.pattern()).toBe('we\\*ird\\?\\[x\\]\\\\:r:*');
  });

  it('finds a record by its locator under the same names as by its key, and refuses what is not one', () => {
    const keys = new RedisKeys('app:');
    const names = keys.record('Orders.create#tenant:t', 'k-1');
    expect(
      keys.recordAt('Orders.create#tenant:t', recordLocator('Orders.create#tenant:t', 'k-1')),
    ).toEqual(names);
    expect(keys.recordAt('Other.scope', names.id).key).not.toBe(names.key);
    for (const locator of ['', names.id.toUpperCase(), `${names.id.slice(1)}}`, `${names.id}0`]) {
      expect(() => keys.recordAt('Orders.create', locator)).toThrow(TypeError);
    }
  });

  it('refuses a prefix with braces (it would be the hash tag) or an empty one', () => {
    expect(() => new RedisKeys('a{b}:')).toThrow(IdempotencyConfigError);
    expect(() => new RedisKeys('')).toThrow(IdempotencyConfigError);
  });
});

describe('Redis error classes', () => {
  it("treats the client's connection errors and the server's not-now replies as unavailable", () => {
    expect(isUnavailable(new ClientClosedError())).toBe(true);
    expect(isUnavailable(new SocketClosedUnexpectedlyError())).toBe(true);
    expect(isUnavailable(new TimeoutError('timed out'))).toBe(true);
    expect(isUnavailable(Object.assign(new Error('connect'), { code: 'ECONNREFUSED' }))).toBe(true);
    for (const reply of [
      'LOADING Redis is loading',
      'CLUSTERDOWN The cluster is down',
      'READONLY x',
      'OOM command not allowed',
      'BUSY script',
      'MOVED 3999 127.0.0.1:6381',
      'ASK 3999 127.0.0.1:6381',
    ]) {
      expect(isUnavailable(new ErrorReply(reply)), reply).toBe(true);
    }
  });

  it('reports other replies and plain errors as they are', () => {
    expect(isUnavailable(new ErrorReply('WRONGTYPE Operation against a key'))).toBe(false);
    expect(isUnavailable(new ErrorReply('ERR Error running script'))).toBe(false);
    expect(isUnavailable(new TypeError('bug'))).toBe(false);
    expect(isNoScript(new ErrorReply('NOSCRIPT No matching script'))).toBe(true);
    expect(isNoScript(new Error('NOSCRIPT'))).toBe(false);
  });
});

describe('RedisIdempotencyStore options', () => {
  const client = {
    sendCommand: async () => null,
    isOpen: true,
    isReady: true,
    duplicate: () => ({}),
    on: () => undefined,
  };

  it('refuses what is not a node-redis client, and bad numbers', () => {
    expect(() => new RedisIdempotencyStore({} as never)).toThrow(
      /needs a Redis client: createClient\(\) or createCluster\(\) of the redis package/,
    );
    expect(() => new RedisIdempotencyStore(client as never, { operationTimeoutMs: 0 })).toThrow(
      IdempotencyConfigError,
    );
    expect(
      () =>
        new RedisIdempotencyStore(client as never, {
          waitForReplicas: { replicas: 1.5, timeoutMs: 10 },
        }),
    ).toThrow(/whole number/);
    expect(
      () =>
        new RedisIdempotencyStore(client as never, {
          waitForReplicas: { replicas: 1, timeoutMs: 0 },
        }),
    ).toThrow(IdempotencyConfigError);
  });
  it('refuses bad continuation inputs with a TypeError naming the call and the argument', async () => {
    const store = new RedisIdempotencyStore(client as never);
    const request = {
      scope: 'Orders.create',
      locator: recordLocator('Orders.create', 'k'),
      continuation: 'c-1',
      leaseMs: 1000,
      ttlMs: 1000,
    };
    await expect(store.continuations.resume({ ...request, locator: 'a}b' })).rejects.toThrow(
      /continuations\.resume: "locator" must be a record locator/,
    );
    await expect(
      store.continuations.resume({ ...request, continuation: 'x'.repeat(65) }),
    ).rejects.toThrow(/continuations\.resume: "continuation" must be a continuation id/);
    await expect(store.continuations.resume({ ...request, ttlMs: 0 })).rejects.toThrow(
      /"ttlMs" must be a positive finite number/,
    );
    const lease = { leaseId: 'l', leaseMs: 1000, ttlMs: 1000 };
    const suspension = {
      continuation: 'c-1',
      answer: Buffer.from('a'),
      state: Buffer.from('s'),
      holdMs: 1000,
    };
    await expect(
      store.continuations.suspend(lease, { ...suspension, state: 'text' as never }),
    ).rejects.toThrow(/continuations\.suspend: "state" must be a Buffer/);
    await expect(
      store.continuations.suspend(lease, { ...suspension, holdMs: NaN }),
    ).rejects.toThrow(/"holdMs" must be a positive finite number, got NaN/);
  });
});
