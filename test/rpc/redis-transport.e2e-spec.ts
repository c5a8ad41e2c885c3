import { Transport } from '@nestjs/microservices';
import { describeIfRedis, probeRedisSync, redisUrl } from '../support/redis';
import { describeTransportScenarios } from '../support/transport-scenarios';

const { hostname, port } = new URL(redisUrl());
const options = { host: hostname, port: Number(port || 6379) };

describeIfRedis(probeRedisSync(), `Redis at ${redisUrl()}`)(
  'Redis transport message handlers against the real server',
  () => {
    describeTransportScenarios({
      name: 'redis',
      server: () => ({ transport: Transport.REDIS, options }),
      client: () => ({ transport: Transport.REDIS, options }),
    });
  },
);
