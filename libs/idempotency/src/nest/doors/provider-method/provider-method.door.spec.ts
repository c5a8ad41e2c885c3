import { IdempotencyEngine } from '../../../core/engine';
import { IdempotencyInFlightError, IdempotencyKeyError } from '../../../core/errors';
import { InMemoryIdempotencyStore } from '../../../stores/memory/in-memory.store';
import { compileHandlerPlan } from '../../config/handler-plan';
import { compileModuleSettings } from '../../config/module-settings';
import { COMMAND_PORT } from '../commands/command.port';
import { ProviderMethodDoor } from './provider-method.door';

/**
 * The provider-method door on its own, as a door for jobs or ticks would use
 * it: a plain class's method, wrapped on one instance, keyed by the port.
 */
class Orders {
  runs = 0;
  release: Promise<void> = Promise.resolve();

  async place(command: { orderId?: string }): Promise<{ orderId?: string; run: number }> {
    this.runs++;
    const run = this.runs;
    await this.release;
    return { orderId: command.orderId, run };
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
  return { door, plan };
}

describe('ProviderMethodDoor', () => {
  it('runs concurrent calls of one key once, and every caller gets the first value', async () => {
    const { door, plan } = setUp();
    const orders = new Orders();
    door.wrap(orders, 'place', plan, COMMAND_PORT);
    const results = await Promise.all(
      Array.from({ length: 10 }, () => orders.place({ orderId: 'a' })),
    );
    expect(orders.runs).toBe(1);
    for (const result of results) expect(result).toEqual({ orderId: 'a', run: 1 });
    expect(await orders.place({ orderId: 'b' })).toEqual({ orderId: 'b', run: 2 });
  });

  it('wraps only the instance it is given, and only once', async () => {
    const { door, plan } = setUp();
    const wrapped = new Orders();
    door.wrap(wrapped, 'place', plan, COMMAND_PORT);
    const first = wrapped.place;
    door.wrap(wrapped, 'place', plan, COMMAND_PORT);
    expect(wrapped.place).toBe(first);
    const plain = new Orders();
    await plain.place({ orderId: 'a' });
    await plain.place({ orderId: 'a' });
    expect(plain.runs).toBe(2);
  });

  it('rejects an in-flight duplicate past waitTimeout with IdempotencyInFlightError, and a keyless call', async () => {
    const { door, plan } = setUp('PT0S');
    const orders = new Orders();
    let open!: () => void;
    orders.release = new Promise((resolve) => (open = resolve));
    door.wrap(orders, 'place', plan, COMMAND_PORT);
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
