import { expect } from 'vitest';
import { IdempotencyEngine, type IdempotencyEvent, type IdempotencyStore } from 'nest-idempotency';
import {
  GENESIS_HASH,
  RECEIPT_CHAINS,
  receiptHash,
  resultDigestOf,
  scopeDigestOf,
  type StoredReceipt,
} from '../../libs/idempotency/src/core/receipts';
import { chainOfRecord } from '../../libs/idempotency/src/core/receipt-writer';
import { encodeValue } from '../../libs/idempotency/src/core/payload';
import { keyHash } from '../../libs/idempotency/src/core/key';

const quiet = { warn: () => undefined, error: () => undefined };

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** A store with receipts, how to run `receipts verify` on it, and how to tamper with its receipts behind its back. */
export interface ReceiptsTarget {
  store: IdempotencyStore;
  verify(): Promise<CliRun>;
  /** Changes the outcome and result digest of receipt `seq` of `chain`, nothing else. */
  alter(chain: number, seq: number): Promise<void>;
  remove(chain: number, seq: number): Promise<void>;
  /** Puts receipt `a` where `b` was and `b` where `a` was. */
  swap(chain: number, a: number, b: number): Promise<void>;
}

const SCOPE = 'receipts.charge';
const EXECUTIONS = 160;

/**
 * Many concurrent first executions through the engine with receipts on,
 * some failing: every chain verifies clean (no fork: seqs 1..n, each linked
 * to the one before); then one receipt altered, one removed and two
 * swapped, each on a chain of its own: verify names each chain and place.
 */
export async function expectReceiptsChains(target: ReceiptsTarget): Promise<void> {
  const engine = new IdempotencyEngine(target.store, { receipts: true, logger: quiet });
  const events: IdempotencyEvent[] = [];
  engine.onEvent((event) => events.push(event));
  const policy = engine.policy({ scope: SCOPE, ttl: 'PT1H' });
  const run = `${process.pid}-${Date.now()}`;
  const before = await readAll(target.store);
  const outcomes = await Promise.allSettled(
    Array.from({ length: EXECUTIONS }, (_, i) =>
      engine.run(policy, { key: `${run}-${i}` }, async () => {
        if (i % 5 === 0) throw new Error('declined');
        return { charged: i };
      }),
    ),
  );
  expect(outcomes.filter((o) => o.status === 'rejected')).toHaveLength(EXECUTIONS / 5);
  const appended = events.filter((e) => e.type === 'receipt-appended');
  expect(events.filter((e) => e.type === 'receipt-failed')).toEqual([]);
  expect(appended).toHaveLength(EXECUTIONS);

  // What the receipts say, digest by digest, is what happened.
  const after = await readAll(target.store);
  const fresh = after.filter((r) => !before.some((b) => b.chain === r.chain && b.seq === r.seq));
  expect(fresh).toHaveLength(EXECUTIONS);
  const i = 7;
  const mine = fresh.find((r) => r.keyDigest === keyHash(`${run}-${i}`).slice(0, 12))!;
  expect(mine).toMatchObject({
    chain: chainOfRecord(SCOPE, `${run}-${i}`),
    scopeDigest: scopeDigestOf(SCOPE),
    outcome: 'completed',
    resultDigest: resultDigestOf(encodeValue({ charged: i })),
  });
  const failed = fresh.find((r) => r.keyDigest === keyHash(`${run}-0`).slice(0, 12))!;
  expect(failed).toMatchObject({ outcome: 'released', resultDigest: null });
  for (let chain = 0; chain < RECEIPT_CHAINS; chain++) {
    const rows = after.filter((r) => r.chain === chain);
    rows.forEach((row, index) => {
      expect(row.seq).toBe(index + 1);
      expect(row.prevHash).toBe(index === 0 ? GENESIS_HASH : rows[index - 1].hash);
      expect(receiptHash(row)).toBe(row.hash);
    });
  }

  const clean = await target.verify();
  expect(clean.stderr).toBe('');
  expect(clean.stdout).toContain(`${after.length} receipts in ${RECEIPT_CHAINS} chains verified`);
  expect(clean.code).toBe(0);

  // Three chains with at least four receipts each: one tampering each.
  const long = [...Array(RECEIPT_CHAINS).keys()].filter(
    (chain) => after.filter((r) => r.chain === chain).length >= 4,
  );
  expect(long.length).toBeGreaterThanOrEqual(3);
  const [altered, removed, swapped] = long;
  await target.alter(altered, 2);
  await target.remove(removed, 3);
  await target.swap(swapped, 2, 3);
  const tampered = await readAll(target.store);
  const broken = await target.verify();
  expect(broken.code).toBe(1);
  const lines = broken.stdout.split('\n');
  expect(lines).toContain(`chain ${altered} position 2: altered`);
  expect(lines).toContain(`chain ${removed} position 3: removed`);
  expect(lines).toContain(`chain ${swapped} position 2: reordered`);
  expect(lines.filter((line) => line.startsWith('chain '))).toHaveLength(3);
  // Verify wrote nothing: the receipts are as the tampering left them.
  expect(await readAll(target.store)).toEqual(tampered);
}

async function readAll(store: IdempotencyStore): Promise<StoredReceipt[]> {
  const all: StoredReceipt[] = [];
  for (let chain = 0; chain < RECEIPT_CHAINS; chain++) {
    all.push(...(await store.receipts!.read(chain, 0, 100_000)));
  }
  return all;
}
