import { Client } from 'pg';

/**
 * Round trips, counted in the driver, attributed to a name, so the benchmark
 * can tell the store's pool, a second instance and the raw-SQL floor apart:
 *
 * - `pg`: every `Client.query` call, by the connection's `application_name`;
 * - `mysql2`: every command a connection starts (a packet written with
 *   sequence id 0: a query, a prepare, an execute; the server answers each
 *   before the next), by the connection's `connectAttributes.program_name`;
 * - node-redis: every `sendCommand` of a client wrapped by `countRedis`.
 */
const counts = new Map<string, number>();
let installed = false;
let mysqlInstalled = false;

const add = (app: string) => counts.set(app, (counts.get(app) ?? 0) + 1);

type CountedClient = Client & { connectionParameters?: { application_name?: string } };

export function installDriverCounter(): void {
  if (installed) return;
  installed = true;
  const prototype = Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = prototype.query;
  prototype.query = function (this: CountedClient, ...args: unknown[]) {
    add(this.connectionParameters?.application_name ?? '?');
    return original.apply(this, args);
  };
}

interface MysqlConnection {
  sequenceId: number;
  config?: { connectAttributes?: Record<string, string> };
}

/**
 * Counts the commands every mysql2 connection of this process starts; name a
 * pool's connections with `extra: { connectAttributes: { program_name } }`
 * (mysqlAttributes). Loads mysql2 only when called.
 */
export function installMysqlCounter(): void {
  if (mysqlInstalled) return;
  mysqlInstalled = true;
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- an optional driver, loaded on use
  const { Connection } = require('mysql2') as { Connection: { prototype: object } };
  let proto: Record<string, unknown> | null = Connection.prototype as Record<string, unknown>;
  while (proto && !Object.prototype.hasOwnProperty.call(proto, 'writePacket'))
    proto = Object.getPrototypeOf(proto) as Record<string, unknown> | null;
  if (!proto) throw new Error('mysql2 connections have no writePacket');
  const target = proto as { writePacket: (packet: unknown) => unknown };
  const original = target.writePacket;
  target.writePacket = function (this: MysqlConnection, packet: unknown) {
    if (this.sequenceId === 0) add(this.config?.connectAttributes?.program_name ?? '?');
    return original.call(this, packet);
  };
}

/** The mysql2 pool options that name its connections `app` for installMysqlCounter. */
export const mysqlAttributes = (app: string) => ({ connectAttributes: { program_name: app } });

/** Counts every `sendCommand` of this node-redis client (what the Redis store sends) under `app`. */
export function countRedis<C extends { sendCommand: (...args: never[]) => unknown }>(
  client: C,
  app: string,
): C {
  const original = client.sendCommand.bind(client) as (...args: unknown[]) => unknown;
  (client as { sendCommand: unknown }).sendCommand = (...args: unknown[]) => {
    add(app);
    return original(...args);
  };
  return client;
}

/** Round trips counted so far under `app`. */
export function queriesOf(app: string): number {
  return counts.get(app) ?? 0;
}

/** Round trips counted so far under every name. */
export function allQueries(): number {
  let n = 0;
  for (const c of counts.values()) n += c;
  return n;
}
