import { InMemoryIdempotencyStore } from '../stores/memory/in-memory.store';
import { IdempotencyEngine } from './engine';
import { IdempotencyConfigError } from './errors';
import type { IdempotencyEvent } from './events';
import { keyDigest, keyHash } from './key';
import { encodeValue } from './payload';
import { chainOfRecord } from './receipt-writer';
import {
  GENESIS_HASH,
  RECEIPT_CHAINS,
  receiptHash,
  resultDigestOf,
  scopeDigestOf,
  verifyChain,
  type ReceiptSupport,
  type StoredReceipt,
} from './receipts';
import type { IdempotencyStore } from './store';

const SCOPE = 'PaymentsController.charge';

function setup(options: { receipts?: boolean } = { receipts: true }) {
  const clock = { now: 1_700_000_000_000 };
  const store = new InMemoryIdempotencyStore({ now: () => clock.now });
  const logged: string[] = [];
  const logger = { warn: (m: string) => logged.push(m), error: (m: string) => logged.push(m) };
  const engine = new IdempotencyEngine(store, { logger, ...options });
  const events: IdempotencyEvent[] = [];
  engine.onEvent((event) => events.push(event));
  return { clock, store, engine, events, logged };
}

async function chainOf(receipts: ReceiptSupport, chain: number): Promise<StoredReceipt[]> {
  return receipts.read(chain, 0, 10_000);
}

/** The receipts of one chain as an operator left them, behind the store's back. */
function asStored(rows: StoredReceipt[], head: { seq: number; hash: string }): ReceiptSupport {
  return {
    check: async () => undefined,
    append: () => Promise.reject(new Error('read only')),
    read: async (_chain, offset, limit) => rows.slice(offset, offset + limit),
    head: async () => head,
  };
}

describe('receipts', () => {
  it('a completion, a failure and a resolution each append a receipt, linked in its chain, named by digests', async () => {
    const { engine, store, events, clock } = setup();
    await engine.execute({ scope: SCOPE, key: 'k-done' }, async () => ({ ok: 1 }));
    await expect(
      engine.execute({ scope: SCOPE, key: 'k-failed' }, async () => {
        throw new Error('declined');
      }),
    ).rejects.toThrow('declined');
    // Strict mode: the lease runs out, and the reconcile hook resolves the record.
    const strict = engine.policy({
      scope: SCOPE,
      lease: 'PT1S',
      waitTimeout: 0,
      onExpiredLease: 'refuse',
      reconcile: async () => ({ outcome: 'completed', value: { ok: 2 } }),
    });
    const begun = await engine.begin(strict, { key: 'k-resolved' });
    if (begun.kind !== 'acquired') throw new Error(begun.kind);
    clock.now += 5000;
    await expect(engine.run(strict, { key: 'k-resolved' }, async () => 'never')).resolves.toEqual(
      expect.objectContaining({ kind: 'replayed' }),
    );
    await begun.execution.release();

    const expected = [
      ['k-done', 'completed', resultDigestOf(encodeValue({ ok: 1 }))],
      ['k-failed', 'released', null],
      ['k-resolved', 'resolved-completed', resultDigestOf(encodeValue({ ok: 2 }))],
    ] as const;
    for (const [key, outcome, resultDigest] of expected) {
      const chain = chainOfRecord(SCOPE, key);
      const rows = await chainOf(store.receipts, chain);
      const row = rows.find((r) => r.keyDigest === keyHash(key).slice(0, 12));
      expect(row).toMatchObject({
        chain,
        scopeDigest: scopeDigestOf(SCOPE),
        outcome,
        resultDigest,
      });
      expect(row!.hash).toBe(receiptHash(row!));
      expect(events).toContainEqual({
        type: 'receipt-appended',
        scope: SCOPE,
        keyDigest: keyDigest(SCOPE, key),
        outcome,
        chain,
      });
    }
    // A release that only gave back a lease (the holder of a resolved record) appends nothing.
    expect(events.filter((e) => e.type === 'receipt-appended')).toHaveLength(3);
    for (let chain = 0; chain < RECEIPT_CHAINS; chain++) {
      expect((await verifyChain(store.receipts, chain)).finding).toBeUndefined();
    }
  });

  it('off by default: nothing is appended', async () => {
    const { engine, store, events } = setup({});
    await engine.execute({ scope: SCOPE, key: 'k' }, async () => 1);
    expect(await chainOf(store.receipts, chainOfRecord(SCOPE, 'k'))).toEqual([]);
    expect(events.some((e) => e.type === 'receipt-appended')).toBe(false);
  });

  it('a store without receipts refuses receipts: true at construction', () => {
    const store = new InMemoryIdempotencyStore();
    const bare: IdempotencyStore = Object.assign(Object.create(store) as IdempotencyStore, {
      receipts: undefined,
    });
    expect(() => new IdempotencyEngine(bare, { receipts: true })).toThrow(IdempotencyConfigError);
    expect(() => new IdempotencyEngine(bare, { receipts: true })).toThrow(
      /receipts: true needs a store that keeps receipts/,
    );
    expect(() => new IdempotencyEngine(store, { receipts: 'yes' as unknown as boolean })).toThrow(
      /receipts must be true or false/,
    );
  });

  it('an append that fails is logged by digest and reported; the request succeeds', async () => {
    const { engine, store, events, logged } = setup();
    store.receipts.append = () => Promise.reject(new Error('disk full'));
    const outcome = await engine.execute({ scope: SCOPE, key: 'raw-secret-key' }, async () => 7);
    expect(outcome).toEqual({ kind: 'executed', value: 7 });
    expect(events).toContainEqual({
      type: 'receipt-failed',
      scope: SCOPE,
      keyDigest: keyDigest(SCOPE, 'raw-secret-key'),
      outcome: 'completed',
      error: expect.stringContaining('disk full'),
    });
    expect(logged.join('\n')).toContain(keyDigest(SCOPE, 'raw-secret-key'));
    expect(logged.join('\n')).not.toContain('raw-secret-key');
  });

  describe('verifyChain names the first bad receipt', () => {
    async function chainOfFive() {
      const { engine, store } = setup();
      const chain = chainOfRecord(SCOPE, 'k-0');
      // Keys of one chain, until it has five receipts.
      for (let i = 0; (await chainOf(store.receipts, chain)).length < 5; i++) {
        const key = `k-${i}`;
        if (chainOfRecord(SCOPE, key) === chain)
          await engine.execute({ scope: SCOPE, key }, async () => i);
      }
      const rows = await chainOf(store.receipts, chain);
      return { chain, rows, head: await store.receipts.head(chain) };
    }

    it('clean', async () => {
      const { chain, rows, head } = await chainOfFive();
      expect(rows[0].prevHash).toBe(GENESIS_HASH);
      expect(await verifyChain(asStored(rows, head), chain, 2)).toEqual({ chain, receipts: 5 });
    });

    it('altered: a field changed, the hash left as it was', async () => {
      const { chain, rows, head } = await chainOfFive();
      rows[2] = { ...rows[2], outcome: 'released' };
      expect((await verifyChain(asStored(rows, head), chain)).finding).toEqual({
        chain,
        position: 3,
        problem: 'altered',
      });
    });

    it('removed: in the middle, and at the end (the head counts it)', async () => {
      const { chain, rows, head } = await chainOfFive();
      const middle = rows.filter((_, i) => i !== 1);
      expect((await verifyChain(asStored(middle, head), chain)).finding).toEqual({
        chain,
        position: 2,
        problem: 'removed',
      });
      expect((await verifyChain(asStored(rows.slice(0, 4), head), chain)).finding).toEqual({
        chain,
        position: 5,
        problem: 'removed',
      });
    });

    it('reordered: two receipts swapped, adjacent or not', async () => {
      const { chain, rows, head } = await chainOfFive();
      const swap = (a: number, b: number) => {
        const copy = [...rows];
        [copy[a], copy[b]] = [copy[b], copy[a]];
        return copy;
      };
      expect((await verifyChain(asStored(swap(1, 2), head), chain)).finding).toEqual({
        chain,
        position: 2,
        problem: 'reordered',
      });
      expect((await verifyChain(asStored(swap(0, 3), head), chain)).finding).toEqual({
        chain,
        position: 1,
        problem: 'reordered',
      });
    });
  });
});
