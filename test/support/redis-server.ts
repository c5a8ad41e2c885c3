import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from 'redis';

/**
 * Real Redis servers started by a suite, from the `redis-server` binary, on
 * free loopback ports, each in a temporary directory, without persistence
 * (`--save '' --appendonly no`). `stop()` kills them and removes the
 * directories; suites call it in afterAll so no server outlives the run.
 */

export function hasRedisBinaries(): { available: true } | { available: false; reason: string } {
  for (const binary of ['redis-server', 'redis-cli']) {
    const found = spawnSync(binary, ['--version'], { encoding: 'utf8' });
    if (found.error || found.status !== 0) {
      return {
        available: false,
        reason: `\`${binary}\` is not on PATH (install Redis 7: apt-get install redis-server)`,
      };
    }
  }
  return { available: true };
}

/** A loopback port nobody listens on (and, for a Cluster node, its bus port + 10000 too). */
export async function freePort(withBus = false): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = await new Promise<number>((resolve, reject) => {
      const server = createServer();
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        const address = server.address();
        server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
      });
    });
    if (!withBus) return port;
    if (port + 10000 < 65536 && (await isFree(port + 10000))) return port;
  }
  throw new Error('no free port pair for a Cluster node');
}

function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

export interface RedisServer {
  port: number;
  url: string;
  process: ChildProcess;
  /** Kills the server (SIGKILL: no shutdown save) and waits for it to exit. */
  kill(): Promise<void>;
}

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Starts `redis-server` in the foreground on `port` with `args`, and waits until it answers PING. */
export async function startRedisServer(
  dir: string,
  port: number,
  args: string[] = [],
): Promise<RedisServer> {
  const child = spawn(
    'redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--daemonize',
      'no',
      '--dir',
      dir,
      ...args,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr?.on('data', (chunk) => (stderr += String(chunk)));
  const url = `redis://127.0.0.1:${port}`;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server on ${port} exited: ${stderr}`);
    const client = createClient({ url, socket: { reconnectStrategy: false, connectTimeout: 500 } });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.ping();
      client.destroy();
      break;
    } catch {
      if (client.isOpen) client.destroy();
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`redis-server on ${port} did not answer within 10 s: ${stderr}`);
      }
      await delay(50);
    }
  }
  return {
    port,
    url,
    process: child,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await exited;
      }
    },
  };
}

export interface RedisServers {
  servers: RedisServer[];
  ports: number[];
  dir: string;
  stop(): Promise<void>;
  /**
   * Cluster only: starts the node on `port` again with its own arguments and
   * nodes file (killing it first if it still runs), as an operator would bring
   * a failed node back; a failed-over master rejoins as a replica.
   */
  restart?(port: number): Promise<RedisServer>;
}

/** Standalone servers (a master and, with `replicas`, servers replicating from it). */
export async function startStandalone(replicas = 0): Promise<RedisServers> {
  const dir = mkdtempSync(join(tmpdir(), 'idem-redis-'));
  const servers: RedisServer[] = [];
  const stop = async () => {
    await Promise.all(servers.map((s) => s.kill()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const masterPort = await freePort();
    servers.push(await startRedisServer(dir, masterPort, ['--dbfilename', `m-${masterPort}.rdb`]));
    for (let i = 0; i < replicas; i++) {
      const port = await freePort();
      servers.push(
        await startRedisServer(dir, port, [
          '--dbfilename',
          `r-${port}.rdb`,
          '--replicaof',
          '127.0.0.1',
          String(masterPort),
          // diskless, so the first sync needs no disk and no fork of an RDB file
          '--repl-diskless-load',
          'on-empty-db',
        ]),
      );
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return { servers, ports: servers.map((s) => s.port), dir, stop };
}

export interface ClusterOptions {
  /** Replicas per master (default 0). Which node serves which: `clusterNodes`. */
  replicas?: number;
  /** `cluster-node-timeout` (Redis's default 15000 ms): how soon a dead master is failed over. */
  nodeTimeoutMs?: number;
  /** More `redis-server` arguments for every node (persistence, for instance). */
  args?: string[];
}

/**
 * A Redis Cluster of three masters (no replicas unless `options.replicas`) on
 * free loopback ports: `redis-server --cluster-enabled yes` per node in a temp
 * dir, then `redis-cli --cluster create … --cluster-replicas <n> --cluster-yes`,
 * then waits for `cluster_state:ok` on every node and, with replicas, for
 * every replica's link to its master to be up.
 */
export async function startCluster(options: ClusterOptions = {}): Promise<RedisServers> {
  const replicas = options.replicas ?? 0;
  const dir = mkdtempSync(join(tmpdir(), 'idem-redis-cluster-'));
  const servers: RedisServer[] = [];
  const stop = async () => {
    await Promise.all(servers.map((s) => s.kill()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const ports: number[] = [];
    for (let i = 0; i < 3 * (1 + replicas); i++) {
      let port = await freePort(true);
      while (ports.includes(port)) port = await freePort(true);
      ports.push(port);
    }
    const nodeArgs = (port: number) => [
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      join(dir, `nodes-${port}.conf`),
      '--dbfilename',
      `dump-${port}.rdb`,
      ...(options.nodeTimeoutMs ? ['--cluster-node-timeout', String(options.nodeTimeoutMs)] : []),
      ...(options.args ?? []),
    ];
    for (const port of ports) servers.push(await startRedisServer(dir, port, nodeArgs(port)));
    const restart = async (port: number) => {
      const at = servers.findIndex((s) => s.port === port);
      if (at < 0) throw new Error(`no node on ${port}`);
      await servers[at].kill();
      servers[at] = await startRedisServer(dir, port, nodeArgs(port));
      return servers[at];
    };
    const created = spawnSync(
      'redis-cli',
      [
        '--cluster',
        'create',
        ...ports.map((p) => `127.0.0.1:${p}`),
        '--cluster-replicas',
        String(replicas),
        '--cluster-yes',
      ],
      { encoding: 'utf8', timeout: 30_000 },
    );
    if (created.status !== 0) {
      throw new Error(`redis-cli --cluster create failed: ${created.stdout}${created.stderr}`);
    }
    const deadline = Date.now() + 20_000;
    for (const port of ports) {
      for (;;) {
        const info = spawnSync('redis-cli', ['-p', String(port), 'cluster', 'info'], {
          encoding: 'utf8',
        });
        if (info.stdout.includes('cluster_state:ok')) break;
        if (Date.now() > deadline)
          throw new Error(`cluster_state is not ok on ${port}: ${info.stdout}`);
        await delay(100);
      }
    }
    if (replicas > 0) await replicasInSync(ports, deadline);
    return { servers, ports, dir, stop, restart };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** `CLUSTER NODES` of the node on `port`, one entry per node, as that node sees the cluster. */
export interface ClusterNode {
  id: string;
  port: number;
  /** `master` or `slave` (without `myself`/`fail` flags; see `flags`). */
  role: 'master' | 'slave';
  flags: string[];
  /** The master's id, for a replica. */
  masterId: string | null;
  /** Slot ranges, for a master. */
  slots: string[];
}

export function clusterNodes(port: number): ClusterNode[] {
  const reply = spawnSync('redis-cli', ['-p', String(port), 'cluster', 'nodes'], {
    encoding: 'utf8',
    timeout: 5000,
  });
  if (reply.status !== 0) throw new Error(`CLUSTER NODES on ${port} failed: ${reply.stderr}`);
  return reply.stdout
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [id, address, flagText, master, , , , , ...slots] = line.trim().split(' ');
      const flags = flagText.split(',');
      return {
        id,
        port: Number(/:(\d+)@/.exec(address)?.[1] ?? 0),
        role: flags.includes('master') ? 'master' : 'slave',
        flags,
        masterId: master === '-' ? null : master,
        slots,
      };
    });
}

/**
 * `clusterNodes` once the node at `port` knows the whole cluster: every
 * master that serves slots has as many replicas as asked, each with its
 * port (gossip reaches a node a little after the cluster formed).
 */
export async function settledClusterNodes(port: number, replicas: number): Promise<ClusterNode[]> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const nodes = clusterNodes(port);
    const masters = nodes.filter((n) => n.role === 'master' && n.slots.length > 0);
    const known = (master: ClusterNode) =>
      nodes.filter((n) => n.masterId === master.id && n.port > 0).length >= replicas;
    if (masters.length > 0 && masters.every(known) && nodes.every((n) => n.port > 0)) return nodes;
    if (Date.now() > deadline) {
      throw new Error(`the node on ${port} did not learn every replica within 20 s`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Waits until every replica in the cluster reports `master_link_status:up`. */
export async function replicasInSync(ports: number[], deadline: number): Promise<void> {
  for (;;) {
    const lagging = ports.filter((port) => {
      const info = spawnSync('redis-cli', ['-p', String(port), 'info', 'replication'], {
        encoding: 'utf8',
      }).stdout;
      return info.includes('role:slave') && !info.includes('master_link_status:up');
    });
    if (lagging.length === 0) return;
    if (Date.now() > deadline) throw new Error(`replicas not in sync: ${lagging.join(', ')}`);
    await delay(100);
  }
}
