import { once } from 'node:events';
import { createServer } from 'node:net';

/** A port free on loopback now (the OS picks it), for a server a test starts on it. */
export async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, 'close');
  return port;
}
