/**
 * The machine's Redis and MariaDB servers, for the sections that bench the
 * Redis and MySQL/MariaDB stores: where they are, whether they answer, how to
 * start them when they do not, and which process to read their CPU from.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { createClient } from 'redis';
import { DataSource } from 'typeorm';
import { mysqlAttributes } from './driver-count';

export const REDIS_URL = process.env.IDEMPOTENCY_BENCH_REDIS_URL || 'redis://127.0.0.1:6379';
export const MYSQL_URL =
  process.env.IDEMPOTENCY_BENCH_MYSQL_URL || 'mysql://root@127.0.0.1:3306/test';

export const START_REDIS = "start it with `redis-server --daemonize yes --port 6379 --save ''`";
export const START_MARIADB =
  'start it with `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd` (a database `test` that root reaches without a password)';

/** A URL as shown in the report: host, port and database, never a password. */
export const shown = (url: string) => url.replace(/\/\/[^@/]*@/, '//');

const newRedisClient = (url: string) =>
  createClient({ url, socket: { connectTimeout: 2000, reconnectStrategy: false } });
export type RedisClient = ReturnType<typeof newRedisClient>;

/** A connected node-redis client (RESP3, node-redis 6's default); fails within 2 s when nobody answers. */
export async function connectRedis(url = REDIS_URL): Promise<RedisClient> {
  const client = newRedisClient(url);
  client.on('error', () => undefined);
  try {
    await client.connect();
    return client;
  } catch (error) {
    if (client.isOpen) client.destroy();
    throw error;
  }
}

/** A key prefix of this run's own; `deleteRedisPrefix` removes every key under it. */
export const scratchPrefix = (name: string) =>
  `idem-bench:${name.toLowerCase().replace(/[^a-z0-9]+/g, '-')}:${randomBytes(4).toString('hex')}:`;

export async function deleteRedisPrefix(client: RedisClient, prefix: string): Promise<number> {
  const pattern = `${prefix.replace(/[*?[\]\\]/g, (c) => `\\${c}`)}*`;
  let deleted = 0;
  let cursor = '0';
  do {
    const reply = await client.scan(cursor, { MATCH: pattern, COUNT: 1000 });
    cursor = String(reply.cursor);
    if (reply.keys.length > 0) deleted += await client.unlink(reply.keys);
  } while (cursor !== '0');
  return deleted;
}

/** The Redis server's version and process id (INFO server), for the report and its CPU. */
export async function redisServerInfo(client: RedisClient) {
  const info = await client.info('server');
  const field = (name: string) => new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();
  return { version: field('redis_version') ?? '?', pid: Number(field('process_id')) || undefined };
}

/** A `mariadb` DataSource whose connections the mysql2 counter attributes to `app`. */
export function openMysqlDataSource(app: string, poolSize: number, url = MYSQL_URL) {
  return new DataSource({
    type: 'mariadb',
    url,
    poolSize,
    connectTimeout: 2000,
    extra: { ...mysqlAttributes(app), maxIdle: poolSize, idleTimeout: 3_600_000 },
  }).initialize();
}

/** The server's version and the pid of its process (the pid file, if readable; else /proc). */
export async function mysqlServerInfo(query: (sql: string) => Promise<unknown>) {
  const [row] = (await query('SELECT VERSION() AS version, @@pid_file AS pid_file')) as {
    version: string;
    pid_file: string;
  }[];
  let pid: number | undefined;
  try {
    pid = Number(fs.readFileSync(row.pid_file, 'utf8').trim()) || undefined;
  } catch {
    pid = findProcess(/^(mariadbd|mysqld)$/);
  }
  return { version: row.version, pid };
}

/** The first process whose command name matches. */
function findProcess(name: RegExp): number | undefined {
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (name.test(fs.readFileSync(`/proc/${entry}/comm`, 'utf8').trim())) return Number(entry);
    } catch {
      // gone
    }
  }
  return undefined;
}

/** The error's message without a URL's password (mysql2 and node-redis messages carry none, but be sure). */
export const reasonOf = (error: unknown) =>
  shown(error instanceof Error ? error.message || error.constructor.name : String(error));
