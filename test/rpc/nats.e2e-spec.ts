import { NatsRecordBuilder, Transport } from '@nestjs/microservices';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describeIfBroker, NATS } from '../support/brokers';
import { describeTransportScenarios } from '../support/transport-scenarios';

// Nest 12's NATS transport runs on @nats-io/transport-node (nats.js 3), Nest 11's on nats (2).
const modules = join(process.cwd(), 'node_modules');
const nestMajor = Number(
  (
    JSON.parse(readFileSync(join(modules, '@nestjs/microservices/package.json'), 'utf8')) as {
      version: string;
    }
  ).version.split('.')[0],
);
const natsPackage = nestMajor >= 12 ? '@nats-io/transport-node' : 'nats';
const installed = existsSync(join(modules, natsPackage, 'package.json'));

type NatsHeaders = { set(name: string, value: string): void };
let headers: () => NatsHeaders;

describeIfBroker(NATS, installed ? undefined : natsPackage)(
  'NATS message handlers against the real server',
  () => {
    beforeAll(async () => {
      ({ headers } = (await import(natsPackage)) as { headers: () => NatsHeaders });
    });
    describeTransportScenarios({
      name: 'nats',
      server: () => ({ transport: Transport.NATS, options: { servers: [NATS.url] } }),
      client: () => ({ transport: Transport.NATS, options: { servers: [NATS.url] } }),
      metadataKey: {
        // JetStream's de-duplication header, as a publisher sets it.
        expression: 'message.headers["Nats-Msg-Id"]',
        send: (data, key) => {
          const natsHeaders = headers();
          natsHeaders.set('Nats-Msg-Id', key);
          return new NatsRecordBuilder(data).setHeaders(natsHeaders).build();
        },
      },
    });
  },
);
