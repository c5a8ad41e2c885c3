import { IdempotencyConfigError } from './errors';
import { closestOption, editDistance, optionKeys, refuseUnknownOptions } from './option-keys';

describe('option keys', () => {
  interface Options {
    waitTimeout?: number;
    keyHeader?: string;
  }
  const KEYS = optionKeys<Options>()(['waitTimeout', 'keyHeader']);

  it('fails tsc when the list and the type disagree', () => {
    // @ts-expect-error a key of the type is missing from the list
    expect(optionKeys<Options>()(['waitTimeout'])).toEqual(['waitTimeout']);
    // @ts-expect-error the list names a key the type does not have
    expect(optionKeys<Options>()(['waitTimeout', 'keyHeader', 'colour'])).toHaveLength(3);
  });

  it('measures edits, a transposition counting as one', () => {
    expect(editDistance('htpp', 'http')).toBe(1);
    expect(editDistance('waitTimout', 'waitTimeout')).toBe(1);
    expect(editDistance('ab', 'ba')).toBe(1);
    expect(editDistance('', 'abc')).toBe(3);
  });

  it('suggests the nearest option, case aside, and nothing far from every one', () => {
    expect(closestOption('keyheader', KEYS)).toBe('keyHeader');
    expect(closestOption('waitTimout', KEYS)).toBe('waitTimeout');
    expect(closestOption('colour', KEYS)).toBeUndefined();
  });

  it('refuses an unknown key with its path, and accepts known ones', () => {
    expect(() => refuseUnknownOptions({ waitTimeout: 1 }, KEYS, 'X')).not.toThrow();
    expect(() => refuseUnknownOptions(undefined, KEYS, 'X')).not.toThrow();
    expect(() => refuseUnknownOptions({ waitTimout: 1 }, KEYS, 'X', 'defaults.')).toThrow(
      new IdempotencyConfigError(
        'X: unknown option "defaults.waitTimout" (did you mean "defaults.waitTimeout"?)',
      ),
    );
    expect(() => refuseUnknownOptions({ colour: 1 }, KEYS, 'X')).toThrow(
      'X: unknown option "colour"; the options here are "waitTimeout", "keyHeader"',
    );
  });
});
