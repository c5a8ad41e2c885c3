/**
 * A private MariaDB for a fault case: a data folder made with
 * `mariadb-install-db` in a temp dir, and `mariadbd` on a free loopback port
 * and a socket of its own, which the case may SIGKILL and start again on the
 * same data and port. Never the machine's server. `remove()` kills it and
 * deletes the folder.
 */
import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { createConnection } from 'mysql2/promise';
import { freePort } from '../../support/redis-server';

/** The first of `names` that runs (`--version`), on PATH or in the sbin folders. */
function findBinary(names: string[]): string | undefined {
  for (const name of names) {
    for (const candidate of [name, `/usr/sbin/${name}`, `/usr/local/sbin/${name}`]) {
      const found = spawnSync(candidate, ['--version'], { encoding: 'utf8' });
      if (!found.error && found.status === 0) return candidate;
    }
  }
  return undefined;
}

export interface MariadbBinaries {
  server: string;
  install: string;
}

export function mariadbBinaries():
  { available: true; binaries: MariadbBinaries } | { available: false; reason: string } {
  const server = findBinary(['mariadbd', 'mysqld']);
  const install = findBinary(['mariadb-install-db', 'mysql_install_db']);
  if (server && install) return { available: true, binaries: { server, install } };
  return {
    available: false,
    reason:
      `${server ? '' : '`mariadbd` '}${install ? '' : '`mariadb-install-db` '}not found (install MariaDB: apt-get install mariadb-server)`.trim(),
  };
}

/** Options every start gets: durable InnoDB (the defaults, spelled out), small, quiet, private. */
function serverArgs(dir: string, port: number): string[] {
  return [
    '--no-defaults',
    `--datadir=${path.join(dir, 'data')}`,
    `--port=${port}`,
    `--socket=${path.join(dir, 'mysqld.sock')}`,
    `--pid-file=${path.join(dir, 'mysqld.pid')}`,
    `--log-error=${path.join(dir, 'error.log')}`,
    '--bind-address=127.0.0.1',
    '--skip-name-resolve',
    '--skip-log-bin',
    '--innodb-buffer-pool-size=32M',
    '--innodb-flush-log-at-trx-commit=1',
    '--innodb-doublewrite=1',
    ...(process.getuid?.() === 0 ? ['--user=root'] : []),
  ];
}

export class PrivateMariadb {
  private child?: ChildProcess;
  private exited?: Promise<unknown>;

  private constructor(
    readonly binaries: MariadbBinaries,
    readonly dir: string,
    readonly port: number,
  ) {}

  /** `mysql://root@127.0.0.1:<port>/test` */
  get url(): string {
    return `mysql://root@127.0.0.1:${this.port}/test`;
  }

  /** Installs a data folder, starts the server and creates the database `test`. */
  static async create(binaries: MariadbBinaries): Promise<PrivateMariadb> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nest-idempotency-mariadb-'));
    const server = new PrivateMariadb(binaries, dir, await freePort());
    try {
      const installed = spawnSync(
        binaries.install,
        [
          '--no-defaults',
          `--datadir=${path.join(dir, 'data')}`,
          '--auth-root-authentication-method=normal',
          '--skip-test-db',
          ...(process.getuid?.() === 0 ? ['--user=root'] : []),
        ],
        { encoding: 'utf8', timeout: 60_000 },
      );
      if (installed.status !== 0) {
        throw new Error(
          `${binaries.install} failed: ${installed.stdout}${installed.stderr}${installed.error ?? ''}`,
        );
      }
      await server.start();
      await server.query('CREATE DATABASE IF NOT EXISTS test');
      return server;
    } catch (error) {
      await server.remove();
      throw error;
    }
  }

  get running(): boolean {
    return !!this.child && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Starts `mariadbd` on the data folder and port, and resolves once it answers a query. */
  async start(): Promise<void> {
    if (this.running) return;
    const child = spawn(this.binaries.server, serverArgs(this.dir, this.port), {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr?.on('data', (chunk) => (stderr += String(chunk)));
    this.child = child;
    this.exited = once(child, 'exit');
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (!this.running) throw new Error(`mariadbd exited on start: ${stderr}${this.errorLog()}`);
      if (await this.answers()) return;
      if (Date.now() > deadline) throw new Error(`mariadbd did not answer within 30 s`);
      // No event says the server is ready: poll it, bounded.
      await delay(25);
    }
  }

  /** SIGKILL: a crash, no shutdown. InnoDB recovers from its redo log at the next start. */
  async kill(): Promise<void> {
    if (!this.running) return;
    this.child!.kill('SIGKILL');
    await this.exited;
  }

  async remove(): Promise<void> {
    await this.kill();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }

  /** The server's error log (start-up and recovery messages). */
  errorLog(): string {
    const file = path.join(this.dir, 'error.log');
    return fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
  }

  /** One statement on a connection of its own; throws if it fails. */
  async query(sql: string): Promise<unknown> {
    const connection = await createConnection({
      host: '127.0.0.1',
      port: this.port,
      user: 'root',
      connectTimeout: 2000,
    });
    try {
      const [rows] = await connection.query(sql);
      return rows;
    } finally {
      connection.destroy();
    }
  }

  private async answers(): Promise<boolean> {
    try {
      await this.query('SELECT 1');
      return true;
    } catch {
      return false;
    }
  }
}
