import { randomBytes } from 'node:crypto';
import { IdempotencyStoreUnavailableError } from '../core/errors';
import { isErrorReply, isUnavailable, RedisCommands } from '../stores/redis/client';
import { RedisIdempotencyStore } from '../stores/redis/redis.store';
import type { ContractHarness } from '../testing/harness';
import {
  Backend,
  commonCliError,
  describeError,
  describeWhere,
  quietLogger,
  RedisConnection,
  StoreHandle,
  VerifyRun,
} from './backend';
import { CliError, ExitCode } from './exit-codes';
import { median, roundMs } from './format';
import { findByDigestOnRedis } from './redis-digest-search';

/**
 * The Redis store, standalone or on a Cluster (`--redis-cluster`, the URLs
 * its seed nodes), on a client of the CLI's own (`RedisIdempotencyStore.fromUrl`:
 * `redis` is loaded only here). One connection attempt, bounded by `--timeout`;
 * no reconnection: a CLI run is short.
 */
export function redisBackend(connection: RedisConnection): Backend {
  /** verify's scratch stores get at least 5 s a call, whatever --timeout says. */
  const open = (keyPrefix: string, scratch?: { pollIntervalMs?: number }) =>
    RedisIdempotencyStore.fromUrl(connection.urls, {
      cluster: connection.cluster,
      keyPrefix,
      operationTimeoutMs: scratch ? Math.max(connection.timeoutMs, 5000) : connection.timeoutMs,
      pollIntervalMs: scratch?.pollIntervalMs,
      // The CLI's reads write nothing, not even init()'s byte probe (verify's scratch stores do).
      byteProbe: scratch !== undefined,
      connectTimeoutMs: connection.timeoutMs,
      logger: quietLogger,
      clientOptions: {
        socket: { connectTimeout: connection.timeoutMs, reconnectStrategy: false },
      },
    });
  const commandsOf = (store: RedisIdempotencyStore) =>
    new RedisCommands(store.client, Math.max(connection.timeoutMs, 5000));

  return {
    async withStore<T>(use: (handle: StoreHandle) => Promise<T>): Promise<T> {
      const store = open(connection.keyPrefix);
      try {
        await store.init();
        const commands = commandsOf(store);
        return await use({
          store,
          where: describeWhere(connection),
          serverNow: () => serverNow(commands),
          // Redis expires records itself: there is never anything to count.
          findByDigest: (scope, hex, onRead) =>
            findByDigestOnRedis(commands, store, scope, hex, onRead),
        });
      } finally {
        await store.close().catch(() => undefined);
      }
    },

    async verify(use, onCreated) {
      const prefix = `nest-idempotency-verify:${randomBytes(6).toString('hex')}:`;
      const scratch: VerifyRun['scratch'] = { kind: 'prefix', name: prefix };
      const store = open(prefix, {});
      const other = open(prefix, { pollIntervalMs: 60_000 });
      let removeError: string | undefined;
      let opened = false;
      let value: Awaited<ReturnType<typeof use>>;
      try {
        await store.init();
        opened = true;
        const commands = commandsOf(store);
        const [master] = await commands.masters('INFO');
        const info = String(await commands.sendTo(master, 'INFO', ['INFO', 'server']));
        const serverVersion = /redis_version:([^\r\n]+)/.exec(info)?.[1] ?? '?';
        const samples: number[] = [];
        for (let i = 0; i < 5; i++) {
          const started = performance.now();
          await commands.sendTo(master, 'PING', ['PING']);
          samples.push(performance.now() - started);
        }
        // Nothing to create: the keys appear under the prefix as the scenarios write them.
        onCreated(scratch);
        const harness: ContractHarness = {
          store,
          other,
          clock: 'store',
          expiry: 'backend',
          snapshot: (scope) => snapshot(commands, store, scope),
        };
        value = await use({
          harness,
          serverVersion,
          roundTripMs: roundMs(median(samples)),
          scratch,
        });
      } finally {
        await other.close().catch(() => undefined);
        if (opened) {
          try {
            await deletePrefix(commandsOf(store), prefix);
          } catch (error) {
            removeError = describeError(error);
          }
        }
        await store.close().catch(() => undefined);
      }
      return {
        value,
        removeError,
        cleanupHint: `redis-cli --scan --pattern '${globLiteral(prefix)}*' | xargs redis-cli unlink (on every master)`,
      };
    },

    toCliError(error) {
      return commonCliError(error, connection, (message) => {
        if (error instanceof IdempotencyStoreUnavailableError && message.startsWith('cannot ')) {
          // fromUrl's own: "cannot connect to Redis at host:port: …".
          return new CliError(message, ExitCode.UNREACHABLE);
        }
        if (isUnavailable(error) || error instanceof IdempotencyStoreUnavailableError) {
          return new CliError(
            `cannot reach ${connection.label} at ${connection.target}: ${message}`,
            ExitCode.UNREACHABLE,
          );
        }
        if (isErrorReply(error) && /^(WRONGPASS|NOAUTH)\b/.test(message)) {
          return new CliError(
            `cannot connect to ${connection.label} at ${connection.target}: ${message}`,
            ExitCode.UNREACHABLE,
          );
        }
        return undefined;
      });
    },
  };
}

/** The server's clock (TIME), which the store's scripts decide by. */
async function serverNow(commands: RedisCommands): Promise<Date> {
  const [master] = await commands.masters('TIME');
  const [seconds, micros] = (await commands.sendTo(master, 'TIME', ['TIME'])) as Buffer[];
  return new Date(Number(String(seconds)) * 1000 + Math.floor(Number(String(micros)) / 1000));
}

/** Every key matching `pattern` on every master (SCAN, COUNT 1000 a step). */
async function scan(commands: RedisCommands, pattern: string): Promise<string[]> {
  const keys = new Set<string>();
  for (const node of await commands.masters('SCAN')) {
    let cursor = '0';
    do {
      const [next, found] = (await commands.sendTo(node, 'SCAN', [
        'SCAN',
        cursor,
        'MATCH',
        pattern,
        'COUNT',
        '1000',
      ])) as [Buffer, Buffer[]];
      cursor = String(next);
      for (const key of found) keys.add(String(key));
    } while (cursor !== '0');
  }
  return [...keys].sort();
}

/**
 * Every field of each of a scope's hashes (the payload in hex) and the key's
 * absolute expiry (PEXPIRETIME, Redis 7; it does not move with time as PTTL
 * does): equal snapshots mean nothing was written.
 */
async function snapshot(
  commands: RedisCommands,
  store: RedisIdempotencyStore,
  scope: string,
): Promise<string> {
  const records = [];
  for (const key of await scan(commands, store.keys.pattern(scope))) {
    const flat = flatten(await commands.send('snapshot', key, ['HGETALL', key]));
    const fields: Array<[string, string]> = [];
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const name = String(flat[i]);
      fields.push([name, name === 'p' ? flat[i + 1].toString('hex') : String(flat[i + 1])]);
    }
    fields.sort(([a], [b]) => a.localeCompare(b));
    let expireAt = '';
    try {
      expireAt = String(await commands.send('snapshot', key, ['PEXPIRETIME', key]));
    } catch (error) {
      // Redis 6.2 has no PEXPIRETIME: the fields alone must then be unchanged.
      if (!isErrorReply(error)) throw error;
    }
    records.push({ key, fields, expireAt });
  }
  return JSON.stringify(records);
}

/** HGETALL's reply as a flat [field, value, …] list, whether RESP2 (array) or RESP3 (map). */
function flatten(reply: unknown): Buffer[] {
  if (Array.isArray(reply)) return reply as Buffer[];
  if (reply instanceof Map) return [...reply].flat() as Buffer[];
  return Object.entries(reply as Record<string, Buffer>).flatMap(([k, v]) => [Buffer.from(k), v]);
}

/** Deletes every key under `prefix` (UNLINK one key at a time: a Cluster's keys live in many slots). */
async function deletePrefix(commands: RedisCommands, prefix: string): Promise<number> {
  const keys = await scan(commands, `${globLiteral(prefix)}*`);
  for (const key of keys) await commands.send('UNLINK', key, ['UNLINK', key]);
  return keys.length;
}

function globLiteral(text: string): string {
  return text.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}
