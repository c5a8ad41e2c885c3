import { checkReceipt } from '../../core/receipt-input';
import {
  GENESIS_HASH,
  RECEIPT_CHAINS,
  receiptHash,
  type ReceiptChainHead,
  type ReceiptInput,
  type ReceiptSupport,
  type StoredReceipt,
} from '../../core/receipts';
import type { RedisCommands } from './client';

/**
 * KEYS[1] the chain's list, KEYS[2] its head. The head (`s` seq, `h` hash)
 * and the server's time (ms).
 */
const HEAD = `local head = redis.call('HMGET', KEYS[2], 's', 'h')
local t = redis.call('TIME')
return { head[1] or '0', head[2] or ARGV[1], tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) }`;

/**
 * KEYS[1] list, KEYS[2] head. ARGV: the seq and hash the head had when read,
 * the receipt (JSON), its seq and hash. Appends it and moves the head, in
 * one step, only if the head is still where it was read (0 otherwise: the
 * caller reads again).
 */
const APPEND = `local head = redis.call('HMGET', KEYS[2], 's', 'h')
if (head[1] or '0') ~= ARGV[1] or (head[2] or ARGV[6]) ~= ARGV[2] then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[2], 's', ARGV[4], 'h', ARGV[5])
return 1`;

/** Rounds lost to concurrent appends on one chain before an append gives up. */
const MAX_ROUNDS = 50;

/**
 * Receipts on Redis: per chain a list of receipts (JSON, appended with
 * RPUSH) and a head hash, both under the hash tag `{<prefix>receipts:<chain>}`
 * so that on a Cluster one script reaches both. Redis's Lua has no SHA-256,
 * so an append reads the head and the server's `TIME`, computes the hash here
 * (`receiptHash`), and appends with a script that moves the head only if it
 * is still where it was read (a compare-and-set: a concurrent append on the
 * same chain makes it read again). Appends to other chains touch other keys.
 */
export class RedisReceipts implements ReceiptSupport {
  constructor(
    private readonly commands: RedisCommands,
    private readonly prefix: string,
  ) {}

  /** Nothing to create: the keys appear with the first receipt. */
  async check(): Promise<void> {}

  async append(receipt: ReceiptInput): Promise<StoredReceipt> {
    checkReceipt(receipt, 'receipts.append');
    const [list, head] = this.keysOf(receipt.chain);
    for (let round = 0; round < MAX_ROUNDS; round++) {
      const [seq, prevHash, now] = (await this.eval('receipt', HEAD, list, head, [
        GENESIS_HASH,
      ])) as Array<Buffer | string>;
      const linked = {
        ...receipt,
        seq: Number(String(seq)) + 1,
        atMs: Number(String(now)),
        prevHash: String(prevHash),
      };
      const stored: StoredReceipt = { ...linked, hash: receiptHash(linked) };
      const appended = await this.eval('receipt', APPEND, list, head, [
        String(seq),
        stored.prevHash,
        JSON.stringify(stored),
        String(stored.seq),
        stored.hash,
        GENESIS_HASH,
      ]);
      if (Number(appended) === 1) return stored;
    }
    throw new Error(
      `receipt chain ${receipt.chain} changed under ${MAX_ROUNDS} appends in a row; the receipt was not appended`,
    );
  }

  async read(chain: number, offset: number, limit: number): Promise<StoredReceipt[]> {
    const [list] = this.keysOf(chain);
    const entries = (await this.commands.send('receipts read', list, [
      'LRANGE',
      list,
      String(offset),
      String(offset + limit - 1),
    ])) as Array<Buffer | string>;
    return entries.map((entry) => parseEntry(String(entry), chain));
  }

  async head(chain: number): Promise<ReceiptChainHead> {
    const [, head] = this.keysOf(chain);
    const [seq, hash] = (await this.commands.send('receipts head', head, [
      'HMGET',
      head,
      's',
      'h',
    ])) as Array<Buffer | string | null>;
    return {
      seq: seq === null ? 0 : Number(String(seq)),
      hash: hash === null ? GENESIS_HASH : String(hash),
    };
  }

  /** The chain's list and head, in one slot. */
  keysOf(chain: number): [string, string] {
    if (!Number.isInteger(chain) || chain < 0 || chain >= RECEIPT_CHAINS) {
      throw new TypeError(`receipts: chain must be a whole number from 0 to ${RECEIPT_CHAINS - 1}`);
    }
    const tag = `{${this.prefix}receipts:${chain}}`;
    return [`${this.prefix}receipts:${tag}:list`, `${this.prefix}receipts:${tag}:head`];
  }

  private eval(
    operation: string,
    source: string,
    list: string,
    head: string,
    args: string[],
  ): Promise<unknown> {
    return this.commands.send(operation, list, ['EVAL', source, '2', list, head, ...args]);
  }
}

/**
 * A list entry as stored. An entry that is not a receipt (an operator wrote
 * something else) comes back with empty fields, which verify reports as altered.
 */
function parseEntry(text: string, chain: number): StoredReceipt {
  try {
    const value = JSON.parse(text) as StoredReceipt;
    if (value && typeof value === 'object') return value;
  } catch {
    // below
  }
  return {
    chain,
    seq: 0,
    scopeDigest: '',
    keyDigest: '',
    outcome: 'completed',
    resultDigest: null,
    atMs: 0,
    prevHash: '',
    hash: '',
  };
}
