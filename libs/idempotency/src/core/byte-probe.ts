/**
 * What every built-in store writes once at `init()` and reads back, to prove
 * that stored payloads come back byte for byte through this backend, this
 * driver and this client: NUL and 0xff, every byte value, and sequences that
 * are not UTF-8 (a lone continuation byte, a truncated sequence, an encoded
 * surrogate, an overlong NUL), which anything that decodes the bytes as text
 * on the way would change. A store that fails it refuses to start rather than
 * corrupt every result it stores.
 */
export const PROBE_BYTES: Buffer = Buffer.concat([
  Buffer.from([0x00, 0xff, 0x80, 0xc3, 0x28, 0xe2, 0x82, 0xed, 0xa0, 0x80, 0xc0, 0x80, 0xf8]),
  Buffer.from(Array.from({ length: 256 }, (_, i) => 255 - i)),
  Buffer.from([0x00]),
]);

/** The scope of the probe's short-lived record (its key is random). */
export const PROBE_SCOPE = 'nest-idempotency:byte-probe';

/** How long the probe's record lives if its removal never runs (the backend's clock). */
export const PROBE_TTL_MS = 60_000;

/** Why `received` is not `PROBE_BYTES`, or undefined when it is. */
export function probeMismatch(received: unknown): string | undefined {
  if (typeof received === 'string') {
    return `they came back as a string of ${received.length} characters, not bytes`;
  }
  if (received === null || received === undefined) return 'nothing came back';
  if (!Buffer.isBuffer(received)) return 'they came back as something other than a Buffer';
  if (received.equals(PROBE_BYTES)) return undefined;
  let at = 0;
  while (at < received.length && received[at] === PROBE_BYTES[at]) at++;
  const hex = (value: number | undefined) =>
    value === undefined ? 'nothing' : `0x${value.toString(16).padStart(2, '0')}`;
  return `${PROBE_BYTES.length} bytes went in and ${received.length} came back, differing from byte ${at} on (${hex(PROBE_BYTES[at])} written, ${hex(received[at])} read)`;
}
