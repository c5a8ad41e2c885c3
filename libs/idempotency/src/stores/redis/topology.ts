import type { RedisClusterClient } from './redis-client';

/** The least time between two topology refreshes the store asks for. */
const REFRESH_INTERVAL_MS = 1000;

/** A Cluster node as node-redis lists it in `masters`: its client once one was made. */
interface ListedNode {
  client?: { isReady?: boolean; options?: unknown };
}

/** The part of node-redis's slot map (5.x and 6.x) a refresh uses; not in its typings' public API. */
interface SlotMap {
  rediscover(startWith: { options?: unknown }): Promise<void>;
}

/**
 * Asks a Cluster client to read the slot map again after a command routed by
 * key went unanswered (a timeout, a lost connection): that is how the store
 * reaches the replica promoted in place of a dead master.
 *
 * node-redis re-reads the map by itself only on a MOVED or ASK reply, and, in
 * 6.x, five seconds after a node starts reconnecting. A dead master sends no
 * MOVED, so on node-redis 5 its slots were never served again until it came
 * back (fault case 10 on the Nest 11 stack). The refresh goes through the
 * client's slot map (`_slots.rediscover`, the method node-redis itself calls
 * on MOVED), feature-detected: on a client without it nothing happens. It
 * starts from a master whose connection is ready, picked at random, with a
 * copy of its options, at most once a second, and its failures are ignored
 * (the next unanswered command asks again).
 */
export class TopologyRefresh {
  private lastAt = -Infinity;
  private running = false;

  constructor(private readonly client: RedisClusterClient) {}

  request(): void {
    const slots = (this.client as unknown as { _slots?: Partial<SlotMap> })._slots;
    if (typeof slots?.rediscover !== 'function') return;
    const now = Date.now();
    if (this.running || now - this.lastAt < REFRESH_INTERVAL_MS) return;
    // A connected master at random, so that a master that looks connected but is not (a
    // half-open socket) does not answer every refresh.
    const ready = (this.client.masters as ReadonlyArray<ListedNode>).filter(
      (node) => node.client?.isReady && node.client.options !== undefined,
    );
    if (ready.length === 0) return;
    const live = ready[Math.floor(Math.random() * ready.length)].client!;
    this.lastAt = now;
    this.running = true;
    // node-redis rewrites the options it discovers with (its node clients' own socket and
    // command options): it gets a copy, never the live client's own objects.
    const options = live.options as { socket?: object } | undefined;
    slots
      .rediscover({ options: { ...options, socket: { ...options?.socket } } })
      .catch(() => undefined)
      .finally(() => {
        this.running = false;
      });
  }
}
