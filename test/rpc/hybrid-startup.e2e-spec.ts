import { CanActivate, Controller, INestApplication, Injectable, UseGuards } from '@nestjs/common';
import {
  ClientProxy,
  ClientProxyFactory,
  MessagePattern,
  Payload,
  Transport,
} from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { randomUUID } from 'node:crypto';
import { lastValueFrom } from 'rxjs';
import { Idempotent, IdempotencyModule } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { freePort } from '../support/free-port';
import { Gate } from '../support/gate';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * A hybrid application starts its microservices' listeners in
 * `startAllMicroservices()`, and its modules' init hooks (where the
 * library compiles its plans and prepares the store) only in `app.init()` or
 * `app.listen()`. A message that arrives in between (a broker's backlog, a
 * client's retry) waits for the plans instead of running unprotected.
 */
const arrivals: string[] = [];
let arrived = new Gate();
let runs = 0;

/** Runs before the interceptor: tells the test that a message reached the handler's pipeline. */
@Injectable()
class Arrival implements CanActivate {
  canActivate(): boolean {
    arrivals.push('message');
    if (arrivals.length === 2) arrived.open();
    return true;
  }
}

@Controller()
class EarlyConsumer {
  @MessagePattern('hybrid-startup.charge')
  @UseGuards(Arrival)
  @Idempotent({ key: 'data.chargeId', waitTimeout: 'PT15S' })
  async charge(@Payload() data: { chargeId: string }): Promise<{ token: string }> {
    runs++;
    return { token: `${data.chargeId}:${randomUUID()}` };
  }
}

describe('a hybrid application: a message before app.init()', () => {
  const schema = scratchSchema('hybrid_startup');
  let dataSource: DataSource;
  let app: INestApplication;
  let client: ClientProxy;

  beforeAll(async () => {
    dataSource = await openDataSource();
  });

  afterAll(async () => {
    await client?.close();
    await app?.close();
    if (dataSource) {
      await dropSchema(dataSource, schema);
      await dataSource.destroy();
    }
  });

  it('waits for the plans, then runs once; its duplicate replays', async () => {
    const port = await freePort();
    const store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store })],
      controllers: [EarlyConsumer],
      providers: [Arrival],
    }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    app.connectMicroservice({ transport: Transport.TCP, options: { host: '127.0.0.1', port } });
    await app.startAllMicroservices(); // listening; app.init() has not run

    client = ClientProxyFactory.create({
      transport: Transport.TCP,
      options: { host: '127.0.0.1', port },
    });
    await client.connect();
    arrived = new Gate();
    arrivals.length = 0;
    const chargeId = randomUUID();
    const replies = Promise.all(
      [1, 2].map(() =>
        lastValueFrom(client.send<{ token: string }>('hybrid-startup.charge', { chargeId })),
      ),
    );
    await arrived.promise; // both messages are in the pipeline, before the init hooks
    expect(runs).toBe(0);

    await app.init();
    const [first, second] = await replies;
    expect(runs).toBe(1);
    expect(second).toEqual(first);
    expect(first.token.startsWith(`${chargeId}:`)).toBe(true);
  });
});
