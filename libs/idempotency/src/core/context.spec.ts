import { randomBytes } from 'node:crypto';
import { inspect } from 'node:util';
import { InMemoryIdempotencyStore } from '../stores/memory/in-memory.store';
import { IdempotencyContext } from './context';
import { currentIdempotencyContext } from './current-context';
import { IdempotencyEngine, type IdempotencyEngineOptions } from './engine';
import { IdempotencyConfigError, IdempotencyError } from './errors';
import { keyDigest } from './key';
import type { CallRequest } from './lifecycle';
import { encodeValue } from './payload';

const quiet = { warn: () => undefined, error: () => undefined };
const SECRET = 'a derived-key secret of well over thirty-two bytes';
const KEY = 'order-7f3a9c1e-raw-key';
const TENANT = 'tenant-acme-corp';

function engineOn(
  store = new InMemoryIdempotencyStore(),
  derivedKeys: IdempotencyEngineOptions['derivedKeys'] = { secret: SECRET },
) {
  return new IdempotencyEngine(store, { logger: quiet, derivedKeys });
}

/** A call with `key` as the lifecycle takes it from a door. */
function keyed(key: string): CallRequest {
  return { identity: { kind: 'key', key, fingerprint: null }, required: true };
}

/** The context a first execution of `key` is handed (the action returns at once). */
async function contextOf(
  engine: IdempotencyEngine,
  key: string,
  scope = 'charges',
  tenant?: string,
): Promise<IdempotencyContext> {
  let seen: IdempotencyContext | undefined;
  await engine.run(engine.policy({ scope, ttl: '1h' }), { key, tenant }, async (_signal, ctx) => {
    seen = ctx;
  });
  return seen!;
}

describe('IdempotencyContext', () => {
  it('is handed to the action and names the record by digest', async () => {
    const engine = engineOn();
    const outcome = await engine.run(
      engine.policy({ scope: 'charges', ttl: '1h' }),
      { key: KEY, tenant: TENANT },
      async (_signal, ctx) => {
        expect(ctx).toBeInstanceOf(IdempotencyContext);
        expect(ctx.scope).toBe('charges');
        expect(ctx.keyDigest).toBe(keyDigest('charges', KEY, TENANT));
        expect(ctx.attempt).toBe('first');
        return ctx.deriveKey('charge');
      },
    );
    expect(outcome.kind).toBe('executed');
  });

  it('is current while work that reads it runs, and only then', async () => {
    const engine = engineOn();
    const policy = engine.policy({ scope: 'charges', ttl: '1h' });
    const seen: Record<string, unknown> = {};
    const performWith = (key: string, readsContext: boolean) =>
      engine.perform(policy, keyed(key), {
        readsContext,
        invoke: async ({ context }) => {
          await Promise.resolve();
          seen[key] = { given: context, current: currentIdempotencyContext() };
          return null;
        },
        capture: () => ({ kind: 'stored', payload: encodeValue(null) }),
      });
    expect((await performWith(`${KEY}-reads`, true)).kind).toBe('executed');
    expect((await performWith(`${KEY}-not`, false)).kind).toBe('executed');
    const reads = seen[`${KEY}-reads`] as { given: unknown; current: unknown };
    expect(reads.given).toBeInstanceOf(IdempotencyContext);
    expect(reads.current).toBe(reads.given);
    // engine.run hands the action its context as an argument: nothing is made current.
    await engine.run(policy, { key: `${KEY}-run` }, async () => {
      seen.run = currentIdempotencyContext();
    });
    expect(seen[`${KEY}-not`]).toEqual({
      given: expect.any(IdempotencyContext),
      current: undefined,
    });
    expect(seen.run).toBeUndefined();
    expect(currentIdempotencyContext()).toBeUndefined();
  });

  it('shows neither the raw key nor the tenant when printed or serialized', async () => {
    const ctx = await contextOf(engineOn(), KEY, 'charges', TENANT);
    for (const text of [inspect(ctx, { showHidden: true, depth: 5 }), JSON.stringify(ctx)]) {
      expect(text).not.toContain(KEY);
      expect(text).not.toContain(TENANT);
    }
    expect(JSON.parse(JSON.stringify(ctx))).toEqual({
      scope: 'charges',
      keyDigest: keyDigest('charges', KEY, TENANT),
      attempt: 'first',
    });
  });

  it('keeps each call its own context when many run at once', async () => {
    const engine = engineOn();
    const policy = engine.policy({ scope: 'charges', ttl: '1h' });
    const keys = Array.from({ length: 50 }, (_, i) => `${KEY}-${i}`);
    const seen = await Promise.all(
      keys.map((key) =>
        engine.perform(policy, keyed(key), {
          readsContext: true,
          invoke: async () => {
            await new Promise((resolve) => setImmediate(resolve));
            return currentIdempotencyContext()?.keyDigest;
          },
          capture: (value) => ({ kind: 'stored', payload: encodeValue(value) }),
        }),
      ),
    );
    expect(seen.map((o) => (o.kind === 'executed' ? o.value : o.kind))).toEqual(
      keys.map((key) => keyDigest('charges', key)),
    );
  });
});

describe('deriveKey', () => {
  it('is printable ASCII of at most 64 characters, without the raw key or the tenant', async () => {
    const ctx = await contextOf(engineOn(), KEY, 'charges', TENANT);
    for (const name of ['charge', 'e-mail', 'a'.repeat(200), 'überweisung']) {
      const derived = ctx.deriveKey(name);
      expect(derived).toMatch(/^[\x21-\x7e]{1,64}$/);
      expect(derived).not.toContain(KEY);
      expect(derived).not.toContain(TENANT);
    }
  });

  it('is the same for one record and name, and differs for another name, key, scope or tenant', async () => {
    const engine = engineOn();
    const ctx = await contextOf(engine, KEY);
    expect(ctx.deriveKey('charge')).toBe(ctx.deriveKey('charge'));
    expect(ctx.deriveKey('charge')).not.toBe(ctx.deriveKey('refund'));
    // A fresh engine over another store: nothing but the record and the name decides.
    expect((await contextOf(engineOn(), KEY)).deriveKey('charge')).toBe(ctx.deriveKey('charge'));
    const others = [
      await contextOf(engine, `${KEY}-2`),
      await contextOf(engine, KEY, 'refunds'),
      await contextOf(engine, KEY, 'charges', TENANT),
      await contextOf(engine, KEY, 'charges', 'another-tenant'),
    ];
    const values = new Set([ctx, ...others].map((c) => c.deriveKey('charge')));
    expect(values.size).toBe(5);
  });

  it('does not run two fields into one (scope and name boundaries)', async () => {
    const engine = engineOn();
    const a = await contextOf(engine, KEY, 'a');
    const ab = await contextOf(engine, KEY, 'ab');
    expect(a.deriveKey('bc')).not.toBe(ab.deriveKey('c'));
  });

  it('changes with the secret, and is a plain digest without one', async () => {
    const withSecret = (await contextOf(engineOn(), KEY)).deriveKey('charge');
    const otherSecret = (
      await contextOf(engineOn(undefined, { secret: randomBytes(32) }), KEY)
    ).deriveKey('charge');
    const bare = new IdempotencyEngine(new InMemoryIdempotencyStore(), { logger: quiet });
    const none = (await contextOf(bare, KEY)).deriveKey('charge');
    const noneAgain = (await contextOf(engineOn(undefined, {}), KEY)).deriveKey('charge');
    expect(new Set([withSecret, otherSecret, none]).size).toBe(3);
    expect(noneAgain).toBe(none);
  });

  it('is the same after a retry of a failed action', async () => {
    const engine = engineOn();
    const policy = engine.policy({ scope: 'charges', ttl: '1h' });
    let first: string | undefined;
    await expect(
      engine.run(policy, { key: KEY }, async (_signal, ctx) => {
        first = ctx.deriveKey('charge');
        throw new Error('the provider timed out');
      }),
    ).rejects.toThrow('the provider timed out');
    const retry = await engine.run(policy, { key: KEY }, async (_signal, ctx) => ({
      attempt: ctx.attempt,
      derived: ctx.deriveKey('charge'),
    }));
    expect(retry.value).toEqual({ attempt: 'first', derived: first });
  });

  it('refuses a name that is empty, too long, not a string or holds control characters', async () => {
    const ctx = await contextOf(engineOn(), KEY);
    for (const name of ['', 'x'.repeat(201), 'line\nbreak', 42, undefined, '\ud800']) {
      expect(() => ctx.deriveKey(name as string)).toThrow(IdempotencyError);
    }
    expect(() => ctx.deriveKey('')).toThrow(/charges\/#[0-9a-f]{12}: deriveKey\(name\)/);
  });
});

describe('derivedKeys option', () => {
  const store = new InMemoryIdempotencyStore();
  const make = (derivedKeys: unknown) =>
    new IdempotencyEngine(store, {
      logger: quiet,
      derivedKeys: derivedKeys as IdempotencyEngineOptions['derivedKeys'],
    });

  it('refuses a secret shorter than 32 bytes without echoing it', () => {
    expect(() => make({ secret: 'short-secret-31-bytes-long-xxxxx'.slice(0, 31) })).toThrow(
      /IdempotencyEngine: option "derivedKeys.secret" must be at least 32 bytes, got 31/,
    );
    expect(() => make({ secret: 'hunter2' })).toThrow(IdempotencyConfigError);
    try {
      make({ secret: 'hunter2' });
    } catch (error) {
      expect((error as Error).message).not.toContain('hunter2');
    }
    expect(() => make({ secret: randomBytes(31) })).toThrow(IdempotencyConfigError);
  });

  it('refuses a secret of another type, a derivedKeys that is no object, and unknown keys', () => {
    expect(() => make({ secret: 12345 })).toThrow(
      /"derivedKeys.secret" must be a string or a Buffer/,
    );
    expect(() => make('secret')).toThrow(/option "derivedKeys" must be an object/);
    expect(() => make({ secert: SECRET })).toThrow(
      /unknown option "derivedKeys.secert" \(did you mean "derivedKeys.secret"\?\)/,
    );
  });

  it('takes a string or bytes of 32 bytes and more', () => {
    expect(() => make({ secret: randomBytes(32) })).not.toThrow();
    expect(() => make({ secret: new Uint8Array(64) })).not.toThrow();
    expect(() => make({ secret: 'é'.repeat(16) })).not.toThrow();
  });
});
