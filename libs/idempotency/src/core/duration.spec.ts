import { parseDuration } from './duration';
import { IdempotencyConfigError } from './errors';

function configError(run: () => unknown): IdempotencyConfigError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    return error as IdempotencyConfigError;
  }
  throw new Error('expected an IdempotencyConfigError, nothing was thrown');
}

describe('parseDuration', () => {
  describe('accepts', () => {
    it.each([
      ['PT30S', 30_000],
      ['PT1.5S', 1500],
      ['PT5M', 300_000],
      ['PT1H30M', 5_400_000],
      ['P1D', 86_400_000],
      ['P1W', 604_800_000],
      ['P1DT2H', 93_600_000],
      ['pt30s', 30_000],
      ['250ms', 250],
      ['30s', 30_000],
      ['1.5s', 1500],
      ['5m', 300_000],
      ['24h', 86_400_000],
      ['7d', 604_800_000],
      [' 30s ', 30_000],
      [1500, 1500],
      [1500.4, 1500],
    ])('%p as %p ms', (value, expected) => {
      expect(parseDuration(value, 'lease')).toBe(expected);
    });

    it.each([['PT0S'], ['0ms'], ['0s'], [0]])(
      'zero (%p) where zero is allowed, as for waitTimeout',
      (value) => {
        expect(parseDuration(value, 'waitTimeout')).toBe(0);
      },
    );

    it('a ttl longer than a timer can hold (ttl is never a timer)', () => {
      expect(parseDuration('30d', 'ttl')).toBe(30 * 86_400_000);
    });
  });

  describe('rejects with IdempotencyConfigError naming the option and the value', () => {
    it.each([
      ['abc', '"abc"'],
      ['P1Y', '"P1Y"'],
      ['P1M', '"P1M"'],
      ['P', '"P"'],
      ['PT', '"PT"'],
      ['P1DT', '"P1DT"'],
      ['', '""'],
      ['30', '"30"'],
      ['30 seconds', '"30 seconds"'],
      ['30S', '"30S"'],
      [Number.NaN, 'NaN'],
      [Number.POSITIVE_INFINITY, 'Infinity'],
      [null, 'null'],
      [undefined, 'undefined'],
      [true, 'true'],
    ])('an unparseable %p', (value, shown) => {
      const error = configError(() => parseDuration(value, 'lease'));
      expect(error.message).toContain('option "lease"');
      expect(error.message).toContain(`invalid duration ${shown}`);
    });

    it.each([
      [-1, '-1'],
      [-1500, '-1500'],
      ['-5s', '"-5s"'],
      ['-PT5S', '"-PT5S"'],
    ])('a negative %p, even where zero is allowed', (value, shown) => {
      const error = configError(() => parseDuration(value, 'waitTimeout'));
      expect(error.message).toContain('option "waitTimeout"');
      expect(error.message).toContain('must be zero or more');
      expect(error.message).toContain(shown);
    });

    it.each([[0], ['0ms'], ['PT0S']])('a zero lease (%p)', (value) => {
      const error = configError(() => parseDuration(value, 'lease'));
      expect(error.message).toContain('option "lease" must be greater than zero');
      expect(error.message).toContain(String(typeof value === 'string' ? `"${value}"` : value));
    });

    it('a lease or waitTimeout a Node timer cannot hold', () => {
      const error = configError(() => parseDuration('25d', 'waitTimeout'));
      expect(error.message).toContain('option "waitTimeout" is too long ("25d")');
      expect(parseDuration('24d', 'waitTimeout')).toBe(24 * 86_400_000);
    });

    it('bounds a ttl at 100 years, so every store can hold now + ttl (10^16 ms is refused)', () => {
      const error = configError(() => parseDuration(1e16, 'ttl', 'ttl', 'C.m'));
      expect(error.message).toBe(
        'C.m: option "ttl" is too long (10000000000000000); at most 100 years',
      );
      expect(parseDuration('P36500D', 'ttl')).toBe(36_500 * 86_400_000);
      expect(() => parseDuration('P36501D', 'ttl')).toThrow(IdempotencyConfigError);
    });

    it('applies one rule per kind, whatever the option is called (defaults.ttl: P30D is a ttl)', () => {
      expect(parseDuration('P30D', 'ttl', 'defaults.ttl', 'IdempotencyModule')).toBe(
        30 * 86_400_000,
      );
      const error = configError(() =>
        parseDuration('P30D', 'lease', 'defaults.lease', 'IdempotencyModule'),
      );
      expect(error.message).toBe(
        'IdempotencyModule: option "defaults.lease" is too long ("P30D"); at most 24.8 days (2^31 - 1 ms)',
      );
    });

    it('prefixes the place the option was given', () => {
      const error = configError(() =>
        parseDuration('soon', 'ttl', 'ttl', 'PaymentsController.create'),
      );
      expect(error.message).toMatch(/^PaymentsController\.create: option "ttl" has an invalid/);
    });
  });
});
