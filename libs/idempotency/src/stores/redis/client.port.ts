import type {
  RedisArgument,
  RedisClusterSubscriber,
  RedisStandaloneSubscriber,
} from './redis-client';

/** The Redis client libraries the store speaks to. */
export type RedisClientLibrary = 'node-redis' | 'ioredis';

/** One master's connection (the client itself when standalone), for what must visit every shard. */
export interface RedisNode {
  /** One command on this node; bulk strings come back as Buffers. */
  send(args: ReadonlyArray<RedisArgument>, timeoutMs: number): Promise<unknown>;
}

/**
 * The one boundary between the store (with its scripts and wake-ups) and a
 * Redis client library: ./node-redis.adapter.ts and ./ioredis.adapter.ts
 * each implement it over the application's client, loading nothing from the
 * library itself. Every reply hands bulk strings back as Buffers (a stored
 * payload byte for byte); integers as numbers; arrays as arrays.
 */
export interface RedisClientPort {
  readonly library: RedisClientLibrary;
  readonly cluster: boolean;
  /** False once the client was closed (or, node-redis, before it was connected). */
  readonly isOpen: boolean;
  /** Connected now; false while it reconnects. Undefined when the client cannot tell. */
  readonly isReady: boolean | undefined;
  /** One command, routed on a Cluster to the master of `key`'s slot (EVALSHA, EVAL, WAIT…). */
  send(
    key: string | undefined,
    args: ReadonlyArray<RedisArgument>,
    timeoutMs: number,
  ): Promise<unknown>;
  /** Every master (SCAN, SCRIPT LOAD, INFO, PING); standalone: the client. */
  masters(): Promise<RedisNode[]>;
  /** A command routed by key went unanswered: a Cluster may look at its slot map again. */
  unanswered(): void;
  /** A new connection of the store's own (a duplicate) for plain pub/sub; not yet connected. */
  subscriber(): RedisStandaloneSubscriber;
  /** A Cluster client of the store's own for sharded pub/sub (SSUBSCRIBE); not yet connected. */
  shardedSubscriber(): RedisClusterSubscriber;
  /** Undefined when stored bytes come back as they went in; else why they would not. */
  bytesProblem(): string | undefined;
  /** The package (and version) that made the client, for messages, when it can be told. */
  describe(): string | undefined;
}
