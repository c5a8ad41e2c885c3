import { IdempotencyConfigError } from '../../core/errors';
import { keyFromBytes } from '../../core/key';

/**
 * Key expressions: a path such as `data.orderId`, `message.headers["x-id"]`,
 * `body.items[0].sku`, or a template with `{path}` parts such as
 * `order:{body.customerId}:{body.orderId}`. Parsed once at bootstrap; evaluated
 * by walking own properties only (no eval, no prototype access).
 *
 * A template's values are escaped so that different values never make the
 * same key: `%` and the characters of the template's separators and suffix
 * are percent-encoded in each value (customer `1:2` with order `3` gives
 * `order:1%3A2:3`, customer `1` with order `2:3` gives `order:1:2%3A3`).
 * A template with two values side by side, or with text after a value that
 * starts with `%`, is refused at bootstrap (see refuseAmbiguousTemplate).
 * A single path is used as it is.
 */
export type PathSegment = string | number;

export interface CompiledKeyExpression {
  source: string;
  roots: string[];
  evaluate(root: Record<string, unknown>): string | undefined | { invalid: string };
}

const IDENT = /^[A-Za-z_$][\w$-]*/;

export function parsePath(text: string): PathSegment[] {
  const segments: PathSegment[] = [];
  let rest = text.trim();
  const first = IDENT.exec(rest);
  if (!first) throw new Error(`expected a root name at "${rest}"`);
  segments.push(first[0]);
  rest = rest.slice(first[0].length);
  while (rest.length > 0) {
    if (rest.startsWith('.')) {
      const ident = IDENT.exec(rest.slice(1));
      if (!ident) throw new Error(`expected a property name after "." at "${rest}"`);
      segments.push(ident[0]);
      rest = rest.slice(1 + ident[0].length);
      continue;
    }
    const index = /^\[(\d+)\]/.exec(rest);
    if (index) {
      segments.push(Number(index[1]));
      rest = rest.slice(index[0].length);
      continue;
    }
    const quoted = /^\[(["'])((?:(?!\1)[^\\]|\\.)*)\1\]/.exec(rest);
    if (quoted) {
      segments.push(quoted[2].replace(/\\(.)/g, '$1'));
      rest = rest.slice(quoted[0].length);
      continue;
    }
    throw new Error(`unexpected "${rest}"`);
  }
  return segments;
}

/** Compiles `source`, or throws `IdempotencyConfigError` naming `where` and the problem. */
export function compileKeyExpression(
  source: string,
  allowedRoots: readonly string[],
  where: string,
): CompiledKeyExpression {
  const parts: (string | PathSegment[])[] = [];
  try {
    if (!source.includes('{') && !source.includes('}')) {
      parts.push(parsePath(source));
    } else {
      const pattern = /\{([^{}]*)\}/g;
      let last = 0;
      for (let match = pattern.exec(source); match; match = pattern.exec(source)) {
        if (match.index > last) parts.push(source.slice(last, match.index));
        parts.push(parsePath(match[1]));
        last = match.index + match[0].length;
      }
      if (last < source.length) parts.push(source.slice(last));
      if (parts.some((p) => typeof p === 'string' && /[{}]/.test(p)))
        throw new Error('unbalanced braces');
      if (!parts.some((p) => typeof p !== 'string'))
        throw new Error('a template needs at least one {path}');
      refuseAmbiguousTemplate(parts);
    }
  } catch (error) {
    throw new IdempotencyConfigError(
      `${where}: option "key" has an invalid expression "${source}": ${(error as Error).message}`,
    );
  }
  const paths = parts.filter((p): p is PathSegment[] => typeof p !== 'string');
  for (const path of paths) {
    if (!allowedRoots.includes(String(path[0]))) {
      throw new IdempotencyConfigError(
        `${where}: option "key" uses unknown root "${path[0]}" in "${source}"; available here: ${allowedRoots.join(', ')}`,
      );
    }
  }
  const single = parts.length === 1 && typeof parts[0] !== 'string';
  const escape = single ? (value: string) => value : valueEscaper(parts);
  return {
    source,
    roots: paths.map((p) => String(p[0])),
    evaluate(root) {
      let out = '';
      for (const part of parts) {
        if (typeof part === 'string') {
          out += part;
          continue;
        }
        const value = walk(root, part);
        if (value === undefined || value === null) return undefined;
        if (typeof value === 'string' || typeof value === 'number' || typeof value === 'bigint') {
          out += escape(String(value));
        } else if (value instanceof Uint8Array) {
          out += escape(keyFromBytes(value));
        } else {
          return {
            invalid: `"${part.join('.')}" is ${Array.isArray(value) ? 'an array' : typeof value}, not a string or number`,
          };
        }
      }
      if (single && out === '') return { invalid: `"${source}" is an empty string` };
      return out;
    },
  };
}

/**
 * Escaping makes a template injective only where each value is followed by
 * text that cannot start inside an escaped value: two values with nothing
 * between them (`{body.a}{body.b}`: "ab"+"c" and "a"+"bc") or with text that
 * starts with `%` (which starts every escape) could make one key of two sets
 * of values. Such templates are refused rather than given other keys, so the
 * keys of every template that is accepted stay what they were.
 */
function refuseAmbiguousTemplate(parts: (string | PathSegment[])[]): void {
  parts.forEach((part, i) => {
    if (typeof part === 'string' || i + 1 >= parts.length) return;
    const next = parts[i + 1];
    const value = `{${sourceOf(part)}}`;
    if (typeof next !== 'string') {
      throw new Error(
        `${value} and {${sourceOf(next)}} have nothing between them, so two different pairs of values could make one key ("ab" and "c", "a" and "bc"); put a separator between them, e.g. ${value}:{${sourceOf(next)}}`,
      );
    }
    if (next.startsWith('%') && i + 2 < parts.length) {
      throw new Error(
        `the text after ${value} starts with "%", which starts every escaped character, so two different sets of values could make one key; start it with another character`,
      );
    }
  });
}

/** A parsed path written back as a key expression names it. */
function sourceOf(path: PathSegment[]): string {
  return path
    .map((segment, i) =>
      typeof segment === 'number'
        ? `[${segment}]`
        : i === 0 || /^[A-Za-z_$][\w$-]*$/.test(segment)
          ? `${i === 0 ? '' : '.'}${segment}`
          : `[${JSON.stringify(segment)}]`,
    )
    .join('');
}

/**
 * Percent-encodes, in a value, `%` and every character of the template's text
 * that follows its first value (the separators and the suffix): those are what
 * could make two sets of values read the same. A fixed prefix needs nothing.
 */
function valueEscaper(parts: (string | PathSegment[])[]): (value: string) => string {
  const special = new Set(['%']);
  const first = parts.findIndex((part) => typeof part !== 'string');
  parts.forEach((part, i) => {
    if (i > first && typeof part === 'string') for (const ch of part) special.add(ch);
  });
  return (value) => {
    let out = '';
    for (const ch of value) {
      out += special.has(ch) ? percent(ch) : ch;
    }
    return out;
  };
}

function percent(ch: string): string {
  return [...Buffer.from(ch, 'utf8')]
    .map((b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`)
    .join('');
}

function walk(root: unknown, path: PathSegment[]): unknown {
  let current: unknown = root;
  for (const segment of path) {
    if (current === null || current === undefined) return undefined;
    if (typeof current !== 'object' && typeof current !== 'function') return undefined;
    const key = typeof segment === 'number' ? String(segment) : segment;
    if (!Object.prototype.hasOwnProperty.call(current, key)) {
      // Headers objects of some transports are Maps.
      if (current instanceof Map) {
        current = current.get(key);
        continue;
      }
      return undefined;
    }
    current = (current as Record<string, unknown>)[key];
  }
  return current;
}
