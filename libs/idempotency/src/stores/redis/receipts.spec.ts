import { RECEIPT_CHAINS } from '../../core/receipts';
import type { RedisCommands } from './client';
import { keySlot } from './key-slot';
import { RedisReceipts } from './receipts';

describe('RedisReceipts keys', () => {
  const receipts = new RedisReceipts(undefined as unknown as RedisCommands, 'idempotency:');

  it("keeps a chain's list and head in one Cluster slot, and the chains apart", () => {
    const slots = new Set<number>();
    for (let chain = 0; chain < RECEIPT_CHAINS; chain++) {
      const [list, head] = receipts.keysOf(chain);
      expect(keySlot(list)).toBe(keySlot(head));
      expect(list.startsWith('idempotency:receipts:')).toBe(true);
      slots.add(keySlot(list));
    }
    expect(slots.size).toBeGreaterThan(1);
  });

  it('refuses a chain out of range, saying which range', () => {
    expect(() => receipts.keysOf(RECEIPT_CHAINS)).toThrow(
      `receipts: chain must be a whole number from 0 to ${RECEIPT_CHAINS - 1}`,
    );
  });
});
