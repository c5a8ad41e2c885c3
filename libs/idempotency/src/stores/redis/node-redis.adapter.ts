import * as fs from 'node:fs';
import * as path from 'node:path';
import type { RedisClientPort, RedisNode } from './client.port';
import type {
  RedisArgument,
  RedisClusterClient,
  RedisClusterSubscriber,
  RedisCommandOptions,
  RedisStandaloneClient,
  RedisStandaloneSubscriber,
} from './redis-client';
import { TopologyRefresh } from './topology';

/** RESP3's (and node-redis's) type byte for a bulk string: `$`. */
const BLOB_STRING = 36;
/**
 * The type mapping of every command the store sends, whatever the
 * application configured on its client: bulk strings as Buffers (the payload
 * byte for byte; the store decodes the rest), every other type as node-redis
 * decodes it by default.
 */
const AS_BUFFERS: RedisCommandOptions['typeMapping'] = { [BLOB_STRING]: Buffer };

/**
 * A command on a ready standalone client. `timeout: 0` overrides the client's
 * own default (node-redis 6 gives every command 5 s unless told otherwise; an
 * application's `commandOptions.timeout` too), and node-redis then makes no
 * abort signal for it.
 */
const READY_OPTIONS: RedisCommandOptions = { timeout: 0, typeMapping: AS_BUFFERS };

/** The node-redis majors the store works with (the `redis` peer range). */
export const SUPPORTED_NODE_REDIS = 'node-redis 5 or 6 (the redis package ^5 || ^6)';

export function isNodeRedisCluster(client: object): client is RedisClusterClient {
  return typeof (client as RedisClusterClient).nodeClient === 'function';
}

/** A node-redis client: `sendCommand` and no ioredis `callBuffer`. */
export function isNodeRedis(client: object): client is RedisStandaloneClient | RedisClusterClient {
  return (
    typeof (client as { sendCommand?: unknown }).sendCommand === 'function' &&
    typeof (client as { callBuffer?: unknown }).callBuffer !== 'function'
  );
}

/**
 * node-redis (the `redis` package, 5 and 6) behind the store's client port.
 * node-redis drops a command still queued when its `timeout` passes (a client
 * reconnecting queues commands); one already written may still run.
 */
export class NodeRedisAdapter implements RedisClientPort {
  readonly library = 'node-redis' as const;
  readonly cluster: boolean;
  private readonly topology?: TopologyRefresh;

  constructor(private readonly client: RedisStandaloneClient | RedisClusterClient) {
    this.cluster = isNodeRedisCluster(client);
    if (isNodeRedisCluster(client)) this.topology = new TopologyRefresh(client);
  }

  get isOpen(): boolean {
    return this.client.isOpen;
  }

  get isReady(): boolean | undefined {
    return this.client.isReady;
  }

  send(
    key: string | undefined,
    args: ReadonlyArray<RedisArgument>,
    timeoutMs: number,
  ): Promise<unknown> {
    const client = this.client;
    if (isNodeRedisCluster(client)) {
      return client.sendCommand(key, false, args, { timeout: timeoutMs, typeMapping: AS_BUFFERS });
    }
    // A ready client normally writes the command before the event loop's next
    // turn, so the store's own timer alone bounds it; one that is reconnecting
    // queues it, and node-redis's timeout then drops it from the queue when the
    // store gives up. Given a timeout, node-redis makes an AbortSignal.timeout
    // per command, about 20 µs on the hot path.
    return client.sendCommand(
      args,
      client.isReady ? READY_OPTIONS : { timeout: timeoutMs, typeMapping: AS_BUFFERS },
    );
  }

  async masters(): Promise<RedisNode[]> {
    const client = this.client;
    const nodes = isNodeRedisCluster(client)
      ? await Promise.all(client.masters.map((master) => client.nodeClient(master as never)))
      : [client];
    return nodes.map((node) => ({
      send: (args, timeoutMs) =>
        node.sendCommand(args, { timeout: timeoutMs, typeMapping: AS_BUFFERS }),
    }));
  }

  unanswered(): void {
    this.topology?.request();
  }

  subscriber(): RedisStandaloneSubscriber {
    return (this.client as RedisStandaloneClient).duplicate();
  }

  /** One connection per shard it has subscriptions on, moved by node-redis when a slot moves. */
  shardedSubscriber(): RedisClusterSubscriber {
    return (this.client as RedisClusterClient).duplicate({ minimizeConnections: true });
  }

  /**
   * node-redis 5 and 6 take `typeMapping` per command (and have
   * `withTypeMapping`); 4 and older ignore it and decode every reply as UTF-8
   * text, which no stored payload survives.
   */
  bytesProblem(): string | undefined {
    if (typeof (this.client as { withTypeMapping?: unknown }).withTypeMapping === 'function') {
      return undefined;
    }
    const found = this.describe();
    return `the Redis client is ${found ? `from ${found}` : 'node-redis 4 or older'}, which decodes every reply as text (stored results would not come back byte for byte); supported: ${SUPPORTED_NODE_REDIS} or ioredis 5`;
  }

  describe(): string | undefined {
    return clientPackageOf(this.client);
  }
}

/**
 * The package (and version) that made the client, for messages: found by its
 * class among the CommonJS modules loaded so far, then that module's nearest
 * package.json (node-redis 4's client is `@redis/client` 1.x, 5's and 6's their
 * own major). Undefined when it cannot be told (an ES-module build, a bundle).
 */
export function clientPackageOf(client: object): string | undefined {
  try {
    const classes = new Set<unknown>();
    for (
      let p = Object.getPrototypeOf(client);
      p && p !== Object.prototype;
      p = Object.getPrototypeOf(p)
    ) {
      classes.add(p.constructor);
    }
    const cache = typeof require === 'function' ? require.cache : undefined;
    for (const loaded of Object.values(cache ?? {})) {
      const exports = loaded?.exports as Record<string, unknown> | undefined;
      if (!exports || (typeof exports !== 'object' && typeof exports !== 'function')) continue;
      const defines =
        classes.has(exports) || Object.values(exports).some((value) => classes.has(value));
      if (!defines) continue;
      for (
        let dir = path.dirname(loaded!.filename);
        dir !== path.dirname(dir);
        dir = path.dirname(dir)
      ) {
        const manifest = path.join(dir, 'package.json');
        if (!fs.existsSync(manifest)) continue;
        const { name, version } = JSON.parse(fs.readFileSync(manifest, 'utf8')) as {
          name?: string;
          version?: string;
        };
        if (name && version) {
          // node-redis 4 is `redis` 4.x around `@redis/client` 1.x.
          const four = name === '@redis/client' && /^1\./.test(version) ? ' (node-redis 4)' : '';
          return `${name} ${version}${four}`;
        }
      }
    }
  } catch {
    // Only for a message: nothing to say, then.
  }
  return undefined;
}
