import { parseItem } from 'structured-headers';

const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;

export type HeaderKey =
  { kind: 'absent' } | { kind: 'key'; key: string } | { kind: 'invalid'; reason: string };

/**
 * Reads the key header from the raw header list, so a header sent twice is
 * caught (Node would otherwise join the values with ", "). Accepts the value
 * bare or as a structured-field string (`"abc"`, as the IETF draft writes it).
 */
export function readKeyHeader(
  rawHeaders: string[] | undefined,
  headers: Record<string, unknown>,
  name: string,
): HeaderKey {
  const lower = name.toLowerCase();
  let values: string[];
  if (rawHeaders) {
    values = [];
    for (let i = 0; i < rawHeaders.length; i += 2)
      if (rawHeaders[i].toLowerCase() === lower) values.push(rawHeaders[i + 1]);
  } else {
    const value = headers[lower];
    values = value === undefined ? [] : ([] as unknown[]).concat(value).map(String);
  }
  if (values.length === 0) return { kind: 'absent' };
  if (values.length > 1)
    return { kind: 'invalid', reason: `header ${name} was sent ${values.length} times` };
  const value = values[0].trim();
  // Node hands header bytes over as latin1; anything outside printable ASCII is
  // not a key the draft allows (and UTF-8 sent anyway would arrive as mojibake).
  if (!PRINTABLE_ASCII.test(value)) {
    return {
      kind: 'invalid',
      reason: `header ${name} must be printable ASCII (a structured-field string, RFC 8941); encode other characters before sending`,
    };
  }
  if (!value.startsWith('"')) return { kind: 'key', key: value };
  try {
    const [item] = parseItem(value);
    if (typeof item !== 'string')
      return { kind: 'invalid', reason: `header ${name} is not a structured-field string` };
    return { kind: 'key', key: item };
  } catch {
    return { kind: 'invalid', reason: `header ${name} is a malformed structured-field string` };
  }
}
