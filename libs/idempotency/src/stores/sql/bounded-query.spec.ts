import { describe, expect, it } from 'vitest';
import { Deadline, Deadlines } from './bounded-query';

const noop = () => undefined;

describe('Deadlines', () => {
  it('a deadline that left the queue holds no later one (a caller may keep it for good)', () => {
    const deadlines = new Deadlines(60_000);
    // Kept, as pg keeps the callback of the call that opened a pooled connection.
    const kept = deadlines.add(noop);
    // Calls overlap, as on a busy pool: one is always in flight when the next starts.
    let inFlight = deadlines.add(noop);
    expect(deadlines.settle(kept)).toBe(true);
    const settled: Deadline[] = [];
    for (let i = 0; i < 100; i++) {
      const next = deadlines.add(noop);
      deadlines.settle(inFlight);
      settled.push(inFlight);
      inFlight = next;
    }
    expect(kept.next).toBeUndefined();
    expect(settled.every((deadline) => deadline.next === undefined)).toBe(true);
  });

  it('a deadline settled behind a slower one stays queued until that one settles, then lets go too', () => {
    const deadlines = new Deadlines(60_000);
    const slow = deadlines.add(noop);
    const quick = deadlines.add(noop);
    const third = deadlines.add(noop);
    deadlines.settle(quick);
    // Still queued behind `slow`: the queue runs through it.
    expect(slow.next).toBe(quick);
    expect(quick.next).toBe(third);
    deadlines.settle(slow);
    expect(slow.next).toBeUndefined();
    expect(quick.next).toBeUndefined();
    // `third` is the head now; once settled it leaves, and a new deadline starts a new queue.
    deadlines.settle(third);
    const fresh = deadlines.add(noop);
    expect(third.next).toBeUndefined();
    expect(deadlines.settle(fresh)).toBe(true);
  });

  it('deadlines that expire leave the queue unlinked, and their calls are given up once', async () => {
    const deadlines = new Deadlines(5);
    let expired = 0;
    let bothExpired!: () => void;
    const done = new Promise<void>((resolve) => (bothExpired = resolve));
    const expire = () => {
      expired++;
      if (expired === 2) bothExpired();
    };
    const first = deadlines.add(expire);
    const second = deadlines.add(expire);
    await done;
    expect(first.next).toBeUndefined();
    expect(second.next).toBeUndefined();
    // Settling after the expiry says the call was already given up.
    expect(deadlines.settle(first)).toBe(false);
    expect(deadlines.settle(second)).toBe(false);
    expect(expired).toBe(2);
  });
});
