import { INestApplication } from '@nestjs/common';
import { CommandBus, CommandHandler, CqrsModule, ICommand, ICommandHandler } from '@nestjs/cqrs';
import { Test } from '@nestjs/testing';
import { randomUUID } from 'node:crypto';
import {
  CommandKeySource,
  Idempotent,
  IdempotencyConfigError,
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyKeyError,
  IdempotencyModule,
  IdempotencyOutcomeUnknownError,
  IdempotencyStoreUnavailableError,
} from 'nest-idempotency';
import { DEFAULT_MAX_KEY_LENGTH, InMemoryIdempotencyStore } from 'nest-idempotency/core';
import { CuttableStore, openCuttableStore } from '../support/cuttable-store';
import { Gate } from '../support/gate';
import { describeEachStore, OpenedStore, openStore } from '../support/stores';

/**
 * `@Idempotent` on a CQRS `@CommandHandler`'s `execute(command)`, which Nest
 * does not intercept: the handler's `execute` is bound to its door at bootstrap, so
 * `CommandBus.execute` runs a command once per `command.orderId` and hands
 * every duplicate the stored result.
 */

class PlaceOrder implements ICommand {
  constructor(
    readonly orderId: string | undefined,
    readonly amount: number,
    readonly hold = false,
  ) {}
}

class ReserveStock implements ICommand {
  constructor(
    readonly orderId: string,
    readonly hold = false,
  ) {}
}

interface Placed {
  confirmation: string;
  orderId: string;
  amount: number;
}

const runs = new Map<string, number>();
const held = { entered: new Gate(), release: new Gate() };

function ran(orderId: string | undefined): void {
  runs.set(orderId ?? '', (runs.get(orderId ?? '') ?? 0) + 1);
}

@CommandHandler(PlaceOrder)
class PlaceOrderHandler implements ICommandHandler<PlaceOrder> {
  @Idempotent({ key: 'command.orderId' })
  async execute(command: PlaceOrder): Promise<Placed> {
    ran(command.orderId);
    if (command.hold) {
      held.entered.open();
      await held.release.promise;
    }
    if (command.amount < 0) throw new Error('the provider timed out');
    return { confirmation: randomUUID(), orderId: command.orderId ?? '', amount: command.amount };
  }
}

@CommandHandler(ReserveStock)
@Idempotent({ key: 'stock:{command.orderId}', waitTimeout: 'PT0S' })
class ReserveStockHandler implements ICommandHandler<ReserveStock> {
  async execute(command: ReserveStock): Promise<string> {
    ran(`stock:${command.orderId}`);
    if (command.hold) {
      held.entered.open();
      await held.release.promise;
    }
    return randomUUID();
  }
}

class Refund implements ICommand {
  constructor(
    readonly orderId: string,
    readonly amount: number,
    readonly fail = false,
  ) {}
}

/** Keyed by the order, fingerprinted by the amount: another amount under a used key is refused. */
@CommandHandler(Refund)
class RefundHandler implements ICommandHandler<Refund> {
  @Idempotent({
    key: 'command.orderId',
    fingerprint: (source) =>
      String((source as CommandKeySource & { command: Refund }).command.amount),
    onExpiredLease: 'refuse',
  })
  async execute(command: Refund): Promise<string> {
    ran(`refund:${command.orderId}`);
    // Strict mode: a throw leaves the outcome unknown (the work may have happened).
    if (command.fail) throw new Error('the provider timed out');
    return randomUUID();
  }
}

describeEachStore(
  'CQRS commands',
  (storeName) => {
    let opened: OpenedStore;
    let app: INestApplication;
    let bus: CommandBus;

    beforeAll(async () => {
      opened = await openStore(storeName, 'cqrs');
      const moduleRef = await Test.createTestingModule({
        imports: [
          CqrsModule.forRoot(),
          IdempotencyModule.forRoot({
            store: opened.store,
            defaults: { waitTimeout: 'PT10S' },
            purge: false,
          }),
        ],
        providers: [PlaceOrderHandler, ReserveStockHandler, RefundHandler],
      }).compile();
      app = moduleRef.createNestApplication({ logger: false });
      await app.init();
      bus = app.get(CommandBus);
    });

    afterAll(async () => {
      await app?.close();
      await opened?.cleanup();
    });

    beforeEach(() => {
      held.entered = new Gate();
      held.release = new Gate();
    });

    it('runs 20 concurrent executions of one command once, and all get its result', async () => {
      const orderId = randomUUID();
      const results = await Promise.all(
        Array.from({ length: 20 }, () => bus.execute(new PlaceOrder(orderId, 250))),
      );
      expect(runs.get(orderId)).toBe(1);
      expect(results[0]).toMatchObject({ orderId, amount: 250 });
      for (const result of results) expect(result).toEqual(results[0]);
    });

    it('replays the stored result to a duplicate after completion', async () => {
      const orderId = randomUUID();
      const first = await bus.execute<PlaceOrder, Placed>(new PlaceOrder(orderId, 10));
      const again = await bus.execute<PlaceOrder, Placed>(new PlaceOrder(orderId, 10));
      expect(again).toEqual(first);
      expect(runs.get(orderId)).toBe(1);
    });

    it('runs different keys separately', async () => {
      const ids = [randomUUID(), randomUUID(), randomUUID()];
      const results = await Promise.all(
        ids.map((orderId) => bus.execute<PlaceOrder, Placed>(new PlaceOrder(orderId, 1))),
      );
      expect(new Set(results.map((result) => result.confirmation)).size).toBe(3);
      for (const orderId of ids) expect(runs.get(orderId)).toBe(1);
    });

    it('throws IdempotencyInFlightError with retryAfterMs for a duplicate in flight past waitTimeout', async () => {
      const orderId = randomUUID();
      const first = bus.execute<ReserveStock, string>(new ReserveStock(orderId, true));
      await held.entered.promise;
      const refusals = await Promise.allSettled(
        Array.from({ length: 5 }, () => bus.execute(new ReserveStock(orderId))),
      );
      for (const refusal of refusals) {
        expect(refusal.status).toBe('rejected');
        const error = (refusal as PromiseRejectedResult).reason as IdempotencyInFlightError;
        expect(error).toBeInstanceOf(IdempotencyInFlightError);
        expect(error.retryAfterMs).toBeGreaterThan(0);
        expect(error.scope).toBe('ReserveStockHandler.execute');
        expect(error.message).not.toContain(orderId);
      }
      held.release.open();
      const result = await first;
      expect(await bus.execute(new ReserveStock(orderId))).toBe(result);
      expect(runs.get(`stock:${orderId}`)).toBe(1);
    });

    it('refuses a command without a key with IdempotencyKeyError, without running it', async () => {
      const before = runs.get('') ?? 0;
      await expect(bus.execute(new PlaceOrder(undefined, 5))).rejects.toBeInstanceOf(
        IdempotencyKeyError,
      );
      expect(runs.get('') ?? 0).toBe(before);
    });

    it('refuses a key longer than the limit with IdempotencyKeyError, without running it', async () => {
      const orderId = 'k'.repeat(DEFAULT_MAX_KEY_LENGTH + 1);
      await expect(bus.execute(new PlaceOrder(orderId, 5))).rejects.toBeInstanceOf(
        IdempotencyKeyError,
      );
      expect(runs.get(orderId)).toBeUndefined();
    });

    it("rejects with the handler's own error and frees the key: the retry runs", async () => {
      const orderId = randomUUID();
      for (let i = 0; i < 2; i++) {
        await expect(bus.execute(new PlaceOrder(orderId, -1))).rejects.toThrow(
          'the provider timed out',
        );
      }
      expect(runs.get(orderId)).toBe(2);
    });

    it('refuses the same key with another command (a fingerprint function) with IdempotencyFingerprintMismatchError', async () => {
      const orderId = randomUUID();
      const first = await bus.execute<Refund, string>(new Refund(orderId, 10));
      const other = bus.execute(new Refund(orderId, 99));
      await expect(other).rejects.toBeInstanceOf(IdempotencyFingerprintMismatchError);
      await expect(other).rejects.not.toThrow(orderId);
      expect(await bus.execute(new Refund(orderId, 10))).toBe(first);
      expect(runs.get(`refund:${orderId}`)).toBe(1);
    });

    it('in strict mode, refuses a command whose earlier outcome is unknown with IdempotencyOutcomeUnknownError, every time', async () => {
      const orderId = randomUUID();
      await expect(bus.execute(new Refund(orderId, 5, true))).rejects.toThrow(
        'the provider timed out',
      );
      for (let i = 0; i < 2; i++) {
        const retry = bus.execute(new Refund(orderId, 5));
        await expect(retry).rejects.toBeInstanceOf(IdempotencyOutcomeUnknownError);
        await expect(retry).rejects.toMatchObject({ scope: 'RefundHandler.execute' });
      }
      expect(runs.get(`refund:${orderId}`)).toBe(1);
    });
  },
  ['postgres', 'redis'],
);

describe('CQRS commands when the store is down', () => {
  let cuttable: CuttableStore;
  let app: INestApplication;
  let bus: CommandBus;

  beforeAll(async () => {
    cuttable = await openCuttableStore('cqrs_down');
    const moduleRef = await Test.createTestingModule({
      imports: [
        CqrsModule.forRoot(),
        IdempotencyModule.forRoot({ store: cuttable.store, purge: false }),
      ],
      providers: [PlaceOrderHandler],
    }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    bus = app.get(CommandBus);
  });
  afterAll(async () => {
    await app?.close();
    await cuttable?.close();
  });

  it('rejects with IdempotencyStoreUnavailableError and retryAfterMs, running nothing, and runs once the store is back', async () => {
    const orderId = randomUUID();
    await cuttable.cut();
    try {
      const refused = bus.execute(new PlaceOrder(orderId, 3));
      await expect(refused).rejects.toBeInstanceOf(IdempotencyStoreUnavailableError);
      const error = (await refused.catch((e: unknown) => e)) as IdempotencyStoreUnavailableError;
      expect(error.retryAfterMs).toBeGreaterThan(0);
      expect(error.message).not.toContain(orderId);
      expect(runs.get(orderId)).toBeUndefined();
    } finally {
      await cuttable.restore();
    }
    await expect(bus.execute(new PlaceOrder(orderId, 3))).resolves.toMatchObject({ orderId });
    expect(runs.get(orderId)).toBe(1);
  });
});

describe('CQRS commands at bootstrap', () => {
  class Ping implements ICommand {
    constructor(readonly id: string) {}
  }

  async function bootstrap(handler: new () => object): Promise<unknown> {
    const moduleRef = await Test.createTestingModule({
      imports: [
        CqrsModule.forRoot(),
        IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore(), purge: false }),
      ],
      providers: [handler],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    try {
      await app.init();
      return undefined;
    } catch (error) {
      return error;
    } finally {
      await app.close();
    }
  }

  it('refuses a command handler without a key option, naming Class.execute', async () => {
    @CommandHandler(Ping)
    class KeylessHandler implements ICommandHandler<Ping> {
      @Idempotent()
      async execute(): Promise<string> {
        return 'pong';
      }
    }
    const error = await bootstrap(KeylessHandler);
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toContain('KeylessHandler.execute: option "key" is required');
  });

  it('refuses @Idempotent on a command handler method other than execute', async () => {
    @CommandHandler(Ping)
    class HelperHandler implements ICommandHandler<Ping> {
      async execute(): Promise<string> {
        return 'pong';
      }

      @Idempotent({ key: 'command.id' })
      helper(): string {
        return 'x';
      }
    }
    const error = await bootstrap(HelperHandler);
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toContain('HelperHandler.helper');
  });

  it('refuses a key expression over a root commands do not have', async () => {
    @CommandHandler(Ping)
    class DataHandler implements ICommandHandler<Ping> {
      @Idempotent({ key: 'data.id' })
      async execute(): Promise<string> {
        return 'pong';
      }
    }
    const error = await bootstrap(DataHandler);
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toContain('DataHandler.execute');
  });
});
