import { Transport } from '@nestjs/microservices';
import { freePort } from '../support/free-port';
import { describeTransportScenarios } from '../support/transport-scenarios';

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
