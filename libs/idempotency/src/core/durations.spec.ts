import { MIN_RETRY_AFTER_MS, ScopeDurations } from './durations';

describe('ScopeDurations', () => {
  it('advises the lease left until a scope has three completions', () => {
    const durations = new ScopeDurations();
    expect(durations.retryAfterMs('a', 9000)).toBe(9000);
    durations.record('a', 400);
    durations.record('a', 400);
    expect(durations.retryAfterMs('a', 9000)).toBe(9000);
    durations.record('a', 400);
    expect(durations.retryAfterMs('a', 9000)).toBe(400);
  });

  it('follows recent completions, weighting the newest', () => {
    const durations = new ScopeDurations();
    for (let i = 0; i < 3; i++) durations.record('a', 1000);
    durations.record('a', 2000);
    const advice = durations.retryAfterMs('a', 60_000);
    expect(advice).toBeGreaterThan(1000);
    expect(advice).toBeLessThan(2000);
  });

  it('never advises less than the minimum nor more than the lease left', () => {
    const durations = new ScopeDurations();
    for (let i = 0; i < 3; i++) durations.record('fast', 2);
    for (let i = 0; i < 3; i++) durations.record('slow', 5000);
    expect(durations.retryAfterMs('fast', 9000)).toBe(MIN_RETRY_AFTER_MS);
    expect(durations.retryAfterMs('slow', 1200)).toBe(1200);
    expect(durations.retryAfterMs('slow', 20)).toBe(MIN_RETRY_AFTER_MS);
  });

  it('keeps each scope apart and ignores impossible times', () => {
    const durations = new ScopeDurations();
    for (let i = 0; i < 3; i++) durations.record('a', 300);
    durations.record('b', Number.NaN);
    durations.record('b', -5);
    expect(durations.retryAfterMs('a', 9000)).toBe(300);
    expect(durations.retryAfterMs('b', 9000)).toBe(9000);
  });
});
