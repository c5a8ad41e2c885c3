import { InvalidArgumentError } from 'commander';

/** A commander parser for a whole number in [min, max]. */
export function wholeNumber(min: number, max: number): (value: string) => number {
  return (value) => {
    const n = /^\d+$/.test(value) ? Number(value) : NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`expected a whole number from ${min} to ${max}.`);
    }
    return n;
  };
}

/** `--state` values and the record states they stand for. */
export const STATE_ARGUMENTS = {
  'in-progress': 'IN_PROGRESS',
  complete: 'COMPLETE',
  ambiguous: 'AMBIGUOUS',
} as const;
export type StateArgument = keyof typeof STATE_ARGUMENTS;
