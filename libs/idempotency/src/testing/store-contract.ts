import { randomUUID } from 'node:crypto';
import { IdempotencyLeaseLostError, IdempotencyPayloadError } from '../core/errors';
import { AcquireRequest, AcquireResult, IdempotencyStore } from '../core/store';

export interface StoreContractHarness {
  store: IdempotencyStore;
  /** Called once after the suite. */
  close?: () => Promise<unknown>;
}

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/* eslint-disable @typescript-eslint/no-explicit-any */
/** The test runner's globals (Jest, or Vitest with `globals: true`). */
interface RunnerGlobals {
  describe: (name: string, fn: () => void) => void;
  it: any;
  beforeAll: (fn: () => unknown) => void;
  afterAll: (fn: () => unknown) => void;
  beforeEach: (fn: () => unknown) => void;
  expect: any;
}
/* eslint-enable @typescript-eslint/no-explicit-any */

/**
 * The behaviour every `IdempotencyStore` must have. Run it against your own store:
 *
 *   describeIdempotencyStoreContract('MyStore', async () => ({ store: new MyStore(), close: ... }));
 *
 * Each test uses its own scope, so one store instance serves the whole suite.
 */
export function describeIdempotencyStoreContract(
  name: string,
  makeStore: () => Promise<StoreContractHarness>,
): void {
  const { describe, it, beforeAll, afterAll, beforeEach, expect } =
    globalThis as unknown as RunnerGlobals;
  describe(`IdempotencyStore contract: ${name}`, () => {
    let harness: StoreContractHarness;
    let store: IdempotencyStore;
    let scope: string;

    beforeAll(async () => {
      harness = await makeStore();
      store = harness.store;
      await store.init?.();
    });
    afterAll(async () => {
      await store?.close?.();
      await harness?.close?.();
    });
    beforeEach(() => {
      scope = `contract-${randomUUID()}`;
    });

    const req = (key: string, overrides: Partial<AcquireRequest> = {}): AcquireRequest => ({
      scope,
      key,
      leaseMs: 10_000,
      waitTimeoutMs: 0,
      ttlMs: 60_000,
      ...overrides,
    });
    const acquire = async (key: string, overrides: Partial<AcquireRequest> = {}) => {
      const result = await store.tryAcquire(req(key, overrides));
      if (result.kind !== 'acquired') throw new Error(`expected acquired, got ${result.kind}`);
      return result.leaseId;
    };

    describe('acquire, complete, replay', () => {
      it('acquires a new key', async () => {
        const result = await store.tryAcquire(req('k'));
        expect(result).toEqual({ kind: 'acquired', leaseId: expect.any(String) });
        await expect(store.find({ scope, key: 'k' })).resolves.toMatchObject({
          state: 'IN_PROGRESS',
          leaseExpired: false,
        });
      });

      it('replays the stored payload of a completed key, deep-equal', async () => {
        const payload = {
          status: 201,
          body: { id: 7, tags: ['a', 'b'], nested: { ok: true, none: null } },
        };
        const leaseId = await acquire('k');
        await store.complete({ scope, key: 'k' }, leaseId, payload, 60_000);
        const result = await store.tryAcquire(req('k'));
        expect(result).toMatchObject({ kind: 'duplicate', payload, completedAt: expect.any(Date) });
        const duplicate = result as Extract<AcquireResult, { kind: 'duplicate' }>;
        expect(duplicate.payload).toEqual(payload);
        // Optional fields, checked when a store reports them.
        if (duplicate.expiresInMs !== undefined) {
          expect(duplicate.expiresInMs).toBeGreaterThan(50_000);
          expect(duplicate.expiresInMs).toBeLessThanOrEqual(60_000);
        }
        if (duplicate.fingerprint !== undefined) expect(duplicate.fingerprint).toBeNull();
      });

      it.each([
        ['undefined', undefined],
        ['null', null],
        ['a string', 'done'],
        ['zero', 0],
        ['an empty array', []],
      ])('round-trips %s as a payload', async (_label: string, payload: unknown) => {
        const leaseId = await acquire('k');
        await store.complete({ scope, key: 'k' }, leaseId, payload, 60_000);
        const result = await store.tryAcquire(req('k'));
        expect(result.kind).toBe('duplicate');
        expect((result as Extract<AcquireResult, { kind: 'duplicate' }>).payload).toEqual(payload);
      });

      it('keeps different keys and scopes independent', async () => {
        const a = await acquire('a');
        await acquire('b');
        await store.complete({ scope, key: 'a' }, a, 'A', 60_000);
        const other = await store.tryAcquire({ ...req('a'), scope: `${scope}-other` });
        expect(other.kind).toBe('acquired');
        await expect(store.tryAcquire(req('b'))).resolves.toMatchObject({ kind: 'in-flight' });
        await expect(store.tryAcquire(req('a'))).resolves.toMatchObject({
          kind: 'duplicate',
          payload: 'A',
        });
      });

      it('stores keys and scopes verbatim: SQL metacharacters, unicode, 10 kB', async () => {
        const keys = [
          `'; DROP TABLE idempotency_records; --`,
          `"quoted" \\ back`,
          'ключ-🔑',
          'x'.repeat(10_240),
        ];
        const longScope = `${scope}-${'s'.repeat(10_240)}`;
        for (const key of keys) {
          const leaseId = await store.tryAcquire({ ...req(key), scope: longScope });
          expect(leaseId.kind).toBe('acquired');
          await store.complete(
            { scope: longScope, key },
            (leaseId as { leaseId: string }).leaseId,
            key.length,
            60_000,
          );
        }
        for (const key of keys) {
          await expect(store.tryAcquire({ ...req(key), scope: longScope })).resolves.toMatchObject({
            kind: 'duplicate',
            payload: key.length,
          });
          await expect(store.find({ scope: longScope, key })).resolves.toMatchObject({
            key,
            scope: longScope,
          });
        }
        await expect(store.find({ scope: longScope, key: keys[3].slice(1) })).resolves.toBeNull();
      });
    });

    describe('release and expiry', () => {
      it('makes a released key acquirable again, as if never used', async () => {
        const leaseId = await acquire('k');
        await store.release({ scope, key: 'k' }, leaseId);
        await expect(store.find({ scope, key: 'k' })).resolves.toBeNull();
        await expect(store.tryAcquire(req('k'))).resolves.toMatchObject({ kind: 'acquired' });
      });

      it('treats a COMPLETE record past its TTL as absent, before any purge', async () => {
        const leaseId = await acquire('k');
        await store.complete({ scope, key: 'k' }, leaseId, 'old', 100);
        await delay(200);
        await expect(store.tryAcquire(req('k'))).resolves.toMatchObject({ kind: 'acquired' });
      });

      it('lets the next caller steal an expired lease', async () => {
        const first = await acquire('k', { leaseMs: 100 });
        await delay(200);
        const second = await acquire('k');
        expect(second).not.toBe(first);
      });

      it('does not let anyone steal a lease that was extended', async () => {
        const leaseId = await acquire('k', { leaseMs: 300 });
        await delay(150);
        await expect(store.extend({ scope, key: 'k' }, leaseId, 1000)).resolves.toBe(true);
        await delay(300); // past the original lease, within the extension
        await expect(store.tryAcquire(req('k'))).resolves.toMatchObject({ kind: 'in-flight' });
      });
    });

    describe('fencing', () => {
      it('refuses the stale owner after a steal, and the new owner result stands', async () => {
        const stale = await acquire('k', { leaseMs: 100 });
        await delay(200);
        const fresh = await acquire('k');
        const id = { scope, key: 'k' };
        await expect(store.extend(id, stale, 10_000)).resolves.toBe(false);
        await expect(store.complete(id, stale, 'stale', 60_000)).rejects.toBeInstanceOf(
          IdempotencyLeaseLostError,
        );
        await expect(store.release(id, stale)).rejects.toBeInstanceOf(IdempotencyLeaseLostError);
        await store.complete(id, fresh, 'fresh', 60_000);
        await expect(store.complete(id, stale, 'stale', 60_000)).rejects.toBeInstanceOf(
          IdempotencyLeaseLostError,
        );
        await expect(store.tryAcquire(req('k'))).resolves.toMatchObject({
          kind: 'duplicate',
          payload: 'fresh',
        });
      });

      it('refuses complete, release and extend once the record is complete or absent', async () => {
        const id = { scope, key: 'k' };
        const leaseId = await acquire('k');
        await store.complete(id, leaseId, 1, 60_000);
        await expect(store.complete(id, leaseId, 2, 60_000)).rejects.toBeInstanceOf(
          IdempotencyLeaseLostError,
        );
        await expect(store.release(id, leaseId)).rejects.toBeInstanceOf(IdempotencyLeaseLostError);
        await expect(store.extend(id, leaseId, 1000)).resolves.toBe(false);
        const absent = { scope, key: 'never' };
        await expect(store.complete(absent, leaseId, 1, 60_000)).rejects.toBeInstanceOf(
          IdempotencyLeaseLostError,
        );
        await expect(store.release(absent, leaseId)).rejects.toBeInstanceOf(
          IdempotencyLeaseLostError,
        );
        await expect(store.extend(absent, leaseId, 1000)).resolves.toBe(false);
        await expect(store.tryAcquire(req('k'))).resolves.toMatchObject({
          kind: 'duplicate',
          payload: 1,
        });
      });
    });

    describe('waiting', () => {
      it('wakes a waiting duplicate within 50 ms of the holder completing', async () => {
        const leaseId = await acquire('k');
        const waiter = store.tryAcquire(req('k', { waitTimeoutMs: 10_000 }));
        let settledAt = 0;
        void waiter.then(() => (settledAt = performance.now()));
        await delay(150); // let the waiter reach its wait
        expect(settledAt).toBe(0);
        const before = performance.now();
        await store.complete({ scope, key: 'k' }, leaseId, 'answer', 60_000);
        await expect(waiter).resolves.toMatchObject({ kind: 'duplicate', payload: 'answer' });
        expect(settledAt - before).toBeLessThan(50);
      });

      it('hands the key to a waiting duplicate when the holder releases', async () => {
        const leaseId = await acquire('k');
        const waiter = store.tryAcquire(req('k', { waitTimeoutMs: 10_000 }));
        await delay(100);
        await store.release({ scope, key: 'k' }, leaseId);
        await expect(waiter).resolves.toMatchObject({ kind: 'acquired' });
      });

      it('hands the key to a waiting duplicate when the holder lease expires', async () => {
        await acquire('k', { leaseMs: 300 });
        await expect(store.tryAcquire(req('k', { waitTimeoutMs: 10_000 }))).resolves.toMatchObject({
          kind: 'acquired',
        });
      });

      it('returns in-flight after the wait, with retryAfterMs = the holder remaining lease', async () => {
        await acquire('k', { leaseMs: 5000 });
        const started = Date.now();
        const result = await store.tryAcquire(req('k', { waitTimeoutMs: 300 }));
        const waited = Date.now() - started;
        expect(result.kind).toBe('in-flight');
        expect(waited).toBeGreaterThanOrEqual(290);
        const retryAfterMs = (result as { retryAfterMs: number }).retryAfterMs;
        expect(retryAfterMs).toBeGreaterThan(5000 - waited - 1000);
        expect(retryAfterMs).toBeLessThanOrEqual(5000 - 290);
      });

      it('looks once and answers at once when waitTimeoutMs is 0', async () => {
        await acquire('k', { leaseMs: 20_000 });
        const started = Date.now();
        const result = await store.tryAcquire(req('k', { waitTimeoutMs: 0 }));
        expect(result.kind).toBe('in-flight');
        expect(Date.now() - started).toBeLessThan(1000);
      });

      it('gives exactly one of 50 concurrent acquirers the key; the rest replay its payload', async () => {
        let completions = 0;
        const results = await Promise.all(
          Array.from({ length: 50 }, () =>
            store.tryAcquire(req('hot', { waitTimeoutMs: 15_000 })).then(async (result) => {
              if (result.kind === 'acquired') {
                completions++;
                await delay(50);
                await store.complete(
                  { scope, key: 'hot' },
                  result.leaseId,
                  { winner: result.leaseId },
                  60_000,
                );
              }
              return result;
            }),
          ),
        );
        const winners = results.filter((r) => r.kind === 'acquired');
        expect(winners).toHaveLength(1);
        expect(completions).toBe(1);
        const winnerLease = (winners[0] as { leaseId: string }).leaseId;
        const duplicates = results.filter((r) => r.kind === 'duplicate');
        expect(duplicates).toHaveLength(49);
        for (const d of duplicates) expect(d).toMatchObject({ payload: { winner: winnerLease } });
      });
    });

    describe('fingerprints', () => {
      it('reports a mismatch for a live record first used with another fingerprint', async () => {
        const leaseId = await acquire('k', { fingerprint: 'f1' });
        await expect(store.tryAcquire(req('k', { fingerprint: 'f2' }))).resolves.toEqual({
          kind: 'fingerprint-mismatch',
        });
        await store.complete({ scope, key: 'k' }, leaseId, 'v', 60_000);
        await expect(store.tryAcquire(req('k', { fingerprint: 'f2' }))).resolves.toEqual({
          kind: 'fingerprint-mismatch',
        });
        await expect(store.tryAcquire(req('k', { fingerprint: 'f1' }))).resolves.toMatchObject({
          kind: 'duplicate',
          payload: 'v',
        });
      });

      it('reports no mismatch unless both sides carry a fingerprint', async () => {
        const a = await acquire('a');
        await store.complete({ scope, key: 'a' }, a, 'A', 60_000);
        await expect(store.tryAcquire(req('a', { fingerprint: 'f' }))).resolves.toMatchObject({
          kind: 'duplicate',
        });
        const b = await acquire('b', { fingerprint: 'f' });
        await store.complete({ scope, key: 'b' }, b, 'B', 60_000);
        await expect(store.tryAcquire(req('b'))).resolves.toMatchObject({ kind: 'duplicate' });
      });
    });

    describe('purge', () => {
      it('purges COMPLETE records past their TTL and keeps live ones', async () => {
        const old = await acquire('old');
        await store.complete({ scope, key: 'old' }, old, 1, 100);
        const fresh = await acquire('fresh');
        await store.complete({ scope, key: 'fresh' }, fresh, 2, 60_000);
        await delay(200);
        expect(await store.purgeExpired()).toBeGreaterThanOrEqual(1);
        await expect(store.find({ scope, key: 'old' })).resolves.toBeNull();
        await expect(store.find({ scope, key: 'fresh' })).resolves.toMatchObject({
          state: 'COMPLETE',
        });
      });

      it('purges an IN_PROGRESS record only when both its TTL and its lease have run out', async () => {
        await acquire('abandoned', { leaseMs: 100, ttlMs: 100 });
        const live = await acquire('long-running', { leaseMs: 100, ttlMs: 100 });
        await acquire('lease-out-ttl-in', { leaseMs: 100, ttlMs: 60_000 });
        await delay(60);
        await store.extend({ scope, key: 'long-running' }, live, 10_000);
        await delay(150);
        await store.purgeExpired();
        await expect(store.find({ scope, key: 'abandoned' })).resolves.toBeNull();
        await expect(store.find({ scope, key: 'long-running' })).resolves.toMatchObject({
          state: 'IN_PROGRESS',
          leaseExpired: false,
        });
        await expect(store.find({ scope, key: 'lease-out-ttl-in' })).resolves.toMatchObject({
          state: 'IN_PROGRESS',
          leaseExpired: true,
        });
      });

      it('respects the purge limit', async () => {
        for (const key of ['a', 'b', 'c']) {
          const leaseId = await acquire(key);
          await store.complete({ scope, key }, leaseId, key, 50);
        }
        await delay(120);
        await store.purgeExpired(); // anything other suites left expired
        for (const key of ['d', 'e', 'f']) {
          const leaseId = await acquire(key);
          await store.complete({ scope, key }, leaseId, key, 50);
        }
        await delay(120);
        expect(await store.purgeExpired({ limit: 2 })).toBe(2);
        expect(await store.purgeExpired({ limit: 2 })).toBe(1);
      });
    });

    describe('reads', () => {
      it('never changes a record: an expired lease stays IN_PROGRESS until a contender steals it', async () => {
        await acquire('k', { leaseMs: 100 });
        await delay(200);
        const first = await store.find({ scope, key: 'k' });
        const listed = await store.list({ scope });
        const second = await store.find({ scope, key: 'k' });
        expect(first).toMatchObject({ state: 'IN_PROGRESS', leaseExpired: true });
        expect(listed).toEqual([first]);
        expect(second).toEqual(first);
        expect(first).not.toHaveProperty('payload');
      });

      it('lists by scope and state, newest first, up to the limit', async () => {
        const a = await acquire('a');
        await store.complete({ scope, key: 'a' }, a, 'A', 60_000);
        await delay(5);
        await acquire('b');
        expect((await store.list({ scope })).map((r) => r.key)).toEqual(['b', 'a']);
        expect(
          (await store.list({ scope, state: 'COMPLETE' })).map((r) => [r.key, r.payload]),
        ).toEqual([['a', 'A']]);
        expect((await store.list({ scope, state: 'IN_PROGRESS' })).map((r) => r.key)).toEqual([
          'b',
        ]);
        expect(await store.list({ scope, limit: 1 })).toHaveLength(1);
        const view = (await store.find({ scope, key: 'a' }))!;
        expect(Object.keys(view).sort()).toEqual(
          [
            'completedAt',
            'createdAt',
            'expiresAt',
            'fingerprint',
            'key',
            'leaseExpired',
            'leaseExpiresAt',
            'payload',
            'scope',
            'state',
          ].sort(),
        );
      });
    });

    describe('bad payloads', () => {
      const circular: Record<string, unknown> = { a: 1 };
      circular.self = circular;
      it.each([
        ['a circular structure', circular],
        ['a BigInt', { amount: BigInt(10) }],
        ['a function', { run: () => 1 }],
        ['a Map', new Map([['a', 1]])],
        ['more than the maximum size', { blob: 'x'.repeat(1024 * 1024 + 1) }],
      ])('refuses %s before writing anything', async (_label: string, payload: unknown) => {
        const id = { scope, key: 'k' };
        const leaseId = await acquire('k');
        await expect(store.complete(id, leaseId, payload, 60_000)).rejects.toBeInstanceOf(
          IdempotencyPayloadError,
        );
        await expect(store.find(id)).resolves.toMatchObject({ state: 'IN_PROGRESS' });
        await store.release(id, leaseId);
        await expect(store.find(id)).resolves.toBeNull();
      });
    });
  });
}
