import { IdempotencyEngine } from '../../../core/engine';
import { IdempotencyInFlightError, IdempotencyKeyError } from '../../../core/errors';
import { InMemoryIdempotencyStore } from '../../../stores/memory/in-memory.store';
import { compileHandlerPlan } from '../../config/handler-plan';
import { compileModuleSettings } from '../../config/module-settings';
import { NEST_METADATA } from '../../nest-metadata';
import { COMMAND_PORT } from '../commands/command.port';
import { ProviderMethodDoor } from './provider-method.door';
import {
  bindProviderMethod,
  MarkProviderMethod,
  originalOf,
  settleAsPlain,
  wrapProviderMethod,
} from './provider-method.registry';

/**
 * The provider-method door on its own, as the binder uses it for a command
 * handler: a plain class's method, wrapped when declared, bound on one
 * instance, keyed by the port.
 */
class Orders {
  runs = 0;
  release: Promise<void> = Promise.resolve();

  @MarkProviderMethod()
  async place(command: { orderId?: string }): Promise<{ orderId?: string; run: number }> {
    this.runs++;
    const run = this.runs;
    await this.release;
    return { orderId: command.orderId, run };
  }
}

/** A command handler (as `@CommandHandler` marks one): its calls wait for their binding. */
class PlaceOrderHandler extends Orders {
  @MarkProviderMethod()
  execute(command: { orderId?: string }) {
    return this.place(command);
  }
}
Reflect.defineMetadata(NEST_METADATA.cqrsCommandHandler, {}, PlaceOrderHandler);

/** A controller's handler, which the explorer settles as plain. */
class Settled extends Orders {
  @MarkProviderMethod()
  handle(command: { orderId?: string }) {
    return this.place(command);
  }
}

function setUp(waitTimeout = 'PT5S') {
  const store = new InMemoryIdempotencyStore();
  const settings = compileModuleSettings({ store, purge: false });
  const door = new ProviderMethodDoor(new IdempotencyEngine(store), settings);
  const plan = compileHandlerPlan(
    Orders,
    'place',
    'command',
    { key: 'command.orderId', waitTimeout },
    settings,
  );
  const bind = (orders: Orders, name: 'place' | 'execute' | 'handle' = 'place') => {
    const method = (orders as unknown as Record<string, () => unknown>)[name];
    bindProviderMethod(orders, name, door.runner(plan, COMMAND_PORT, orders, originalOf(method)));
  };
  return { bind };
}

describe('ProviderMethodDoor', () => {
  it('runs concurrent calls of one key once, and every caller gets the first value', async () => {
    const { bind } = setUp();
    const orders = new Orders();
    bind(orders);
    const results = await Promise.all(
      Array.from({ length: 10 }, () => orders.place({ orderId: 'a' })),
    );
    expect(orders.runs).toBe(1);
    for (const result of results) expect(result).toEqual({ orderId: 'a', run: 1 });
    expect(await orders.place({ orderId: 'b' })).toEqual({ orderId: 'b', run: 2 });
  });

  it('runs only the instance it is bound for through the door, and wraps a method once', async () => {
    const { bind } = setUp();
    const bound = new Orders();
    bind(bound);
    await bound.place({ orderId: 'a' });
    await bound.place({ orderId: 'a' });
    expect(bound.runs).toBe(1);
    const plain = new Orders();
    await plain.place({ orderId: 'a' });
    await plain.place({ orderId: 'a' });
    expect(plain.runs).toBe(2);
    const place = Orders.prototype.place as (this: unknown, ...args: unknown[]) => unknown;
    expect(wrapProviderMethod(place, 'place')).toBe(place);
  });

  it('holds a command called before its binding until the binding, then runs it through the door', async () => {
    const { bind } = setUp();
    const handler = new PlaceOrderHandler();
    const early = [handler.execute({ orderId: 'a' }), handler.execute({ orderId: 'a' })];
    let settled = false;
    void Promise.all(early).then(() => (settled = true));
    await Promise.resolve();
    expect(handler.runs).toBe(0);
    expect(settled).toBe(false);
    bind(handler, 'execute');
    const results = await Promise.all(early);
    expect(handler.runs).toBe(1);
    for (const result of results) expect(result).toEqual({ orderId: 'a', run: 1 });
  });

  it('calls a wrapper settled as plain straight through, even on a bound instance', async () => {
    const { bind } = setUp();
    const settled = new Settled();
    bind(settled, 'handle');
    settleAsPlain(Settled.prototype.handle);
    await settled.handle({ orderId: 'a' });
    await settled.handle({ orderId: 'a' });
    expect(settled.runs).toBe(2);
  });

  it('rejects an in-flight duplicate past waitTimeout with IdempotencyInFlightError, and a keyless call', async () => {
    const { bind } = setUp('PT0S');
    const orders = new Orders();
    let open!: () => void;
    orders.release = new Promise((resolve) => (open = resolve));
    bind(orders);
    const first = orders.place({ orderId: 'a' });
    await vi.waitFor(() => expect(orders.runs).toBe(1));
    const refused = await orders.place({ orderId: 'a' }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(IdempotencyInFlightError);
    expect((refused as IdempotencyInFlightError).retryAfterMs).toBeGreaterThan(0);
    open();
    await expect(first).resolves.toEqual({ orderId: 'a', run: 1 });
    await expect(orders.place({})).rejects.toBeInstanceOf(IdempotencyKeyError);
    expect(orders.runs).toBe(1);
  });
});
