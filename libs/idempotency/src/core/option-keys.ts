import { IdempotencyConfigError } from './errors';

/**
 * Unknown options: a typo (`htpp`, `waitTimout`) in an object TypeScript did
 * not check (a `forRootAsync` factory's result, configuration read from JSON
 * or the environment) would otherwise start the application with the option
 * silently ignored. Each options type lists its keys next to its declaration
 * with `optionKeys<T>()`, which fails `tsc` when the list and `keyof T`
 * disagree, and the code that reads the options refuses any other key.
 */

/**
 * The keys of `T`, as a runtime list checked against the type: a key `T`
 * does not have is a type error, and so is a key of `T` left out (the error
 * names it as `missing`). `optionKeys<IdempotencyPurgeOptions>()(['interval', 'batchSize'])`.
 */
export function optionKeys<T extends object>() {
  return <const K extends readonly (keyof T & string)[]>(
    keys: K &
      ([Exclude<keyof T, K[number]>] extends [never]
        ? unknown
        : { missing: Exclude<keyof T, K[number]> }),
  ): readonly string[] => keys;
}

/**
 * Throws `IdempotencyConfigError` for the first own key of `given` that
 * `known` does not list: `${where}: unknown option "${prefix}${key}"`, with the
 * closest known option as a suggestion, or the list of known ones. Anything
 * that is not a plain options object (undefined, `false`, a function, an
 * array) is left to the checks of its value.
 */
export function refuseUnknownOptions(
  given: unknown,
  known: readonly string[],
  where: string,
  prefix = '',
): void {
  if (!given || typeof given !== 'object' || Array.isArray(given)) return;
  for (const key of Object.keys(given)) {
    if (known.includes(key)) continue;
    const near = closestOption(key, known);
    const hint =
      near !== undefined
        ? ` (did you mean "${prefix}${near}"?)`
        : `; the options here are ${known.map((k) => `"${prefix}${k}"`).join(', ')}`;
    throw new IdempotencyConfigError(
      `${where}: unknown option "${prefix}${printable(key)}"${hint}`,
    );
  }
}

/** The known name nearest to `name` (case aside), if it is near enough to be a typo of it. */
export function closestOption(name: string, known: readonly string[]): string | undefined {
  const lower = name.toLowerCase();
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of known) {
    const distance = editDistance(lower, candidate.toLowerCase());
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  // One edit in a short name, up to a third of a longer one.
  const allowed = Math.max(1, Math.floor(Math.max(name.length, best?.length ?? 0) / 3));
  return bestDistance <= allowed ? best : undefined;
}

/** Levenshtein distance with adjacent transpositions (optimal string alignment). */
export function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const d: number[][] = Array.from({ length: rows }, (_, i) =>
    Array.from({ length: cols }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[rows - 1][cols - 1];
}

/** A key as it can be printed: a name, or its JSON text when it holds anything else. */
export function printable(key: string): string {
  return /^[\w$.-]{1,64}$/.test(key) ? key : JSON.stringify(key.slice(0, 64)).slice(1, -1);
}
