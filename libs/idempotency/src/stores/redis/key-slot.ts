/**
 * The Cluster hash slot of a key (CRC16/XMODEM of its hash tag, or of the
 * whole key when it has none, modulo 16384), as the Redis Cluster
 * specification defines it: for sending a keyless command (WAIT) to the
 * master that holds a key.
 */
export function keySlot(key: string): number {
  let tagged = Buffer.from(key);
  const open = tagged.indexOf(0x7b); // {
  if (open !== -1) {
    const close = tagged.indexOf(0x7d, open + 1); // }
    if (close > open + 1) tagged = tagged.subarray(open + 1, close);
  }
  let crc = 0;
  for (const byte of tagged) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) {
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
  }
  return crc % 16384;
}
