import { keySlot } from './key-slot';

describe('keySlot (Redis Cluster hash slot)', () => {
  it('is CRC16/XMODEM of the key modulo 16384', () => {
    // The specification's check value: CRC16("123456789") = 0x31C3.
    expect(keySlot('123456789')).toBe(0x31c3 % 16384);
    expect(keySlot('foo')).toBe(12182);
    expect(keySlot('')).toBe(0);
  });

  it('hashes only the first non-empty hash tag', () => {
    expect(keySlot('{user1000}.following')).toBe(keySlot('user1000'));
    expect(keySlot('idem:{abc}:w')).toBe(keySlot('abc'));
    expect(keySlot('foo{}{bar}')).not.toBe(keySlot('bar'));
    expect(keySlot('foo{{bar}}zap')).toBe(keySlot('{bar'));
  });
});
