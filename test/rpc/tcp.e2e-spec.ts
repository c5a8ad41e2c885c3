import { Transport } from '@nestjs/microservices';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { describeTransportScenarios } from '../support/transport-scenarios';

/** A port free on loopback now (the OS picks it). */
async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, 'close');
  return port;
}

for (const mode of ['standalone', 'hybrid'] as const) {
  describe(`TCP message handlers on loopback (${mode})`, () => {
    let port = 0;
    beforeAll(async () => {
      port = await freePort();
    });
    describeTransportScenarios({
      name: `tcp${mode}`,
      mode,
      server: () => ({ transport: Transport.TCP, options: { host: '127.0.0.1', port } }),
      client: () => ({ transport: Transport.TCP, options: { host: '127.0.0.1', port } }),
    });
  });
}
