import { INestApplicationContext, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, Interval, ScheduleModule, Timeout } from '@nestjs/schedule';
import { randomBytes } from 'node:crypto';
import { IdempotencyConfigError, IdempotencyModule, Idempotent } from 'nest-idempotency';
import { Gate } from '../support/gate';
import { describeIfRedis, probeRedisSync, redisUrl } from '../support/redis';
import { openStore, OpenedStore, storeFromEnv } from '../support/stores';

/**
 * `@Idempotent()` on a `@Cron` method: three application instances on one
 * store run each tick once between them. IdempotencyModule is imported after
 * ScheduleModule, so @nestjs/schedule's explorer reads the method first: the
 * wrapper put there by the decorator is what it binds.
 */

type Run = { instance: number; tick: number; finished: boolean };

/** Every execution of every instance, in the order they started. */
let runs: Run[] = [];
/** Set by the takeover test: the first run of a tick never finishes, and its instance "dies". */
let dieOnFirstRun: ((instance: number) => Promise<void>) | undefined;
const jobName = `ticks-${randomBytes(4).toString('hex')}`;

async function record(instance: number): Promise<void> {
  // The tick this run belongs to: the whole second its timer fired in (ticks are 1 s apart at least).
  const run: Run = { instance, tick: Math.floor(Date.now() / 1000), finished: false };
  runs.push(run);
  const first = runs.filter((r) => r.tick === run.tick).length === 1;
  if (first && dieOnFirstRun) return dieOnFirstRun(instance);
  run.finished = true;
}

function appModule(instance: number, store: () => Promise<OpenedStoreLike>, cron: string) {
  @Injectable()
  class Reports {
    @Cron(cron, { name: jobName })
    @Idempotent({ lease: '2s' })
    async tick(): Promise<void> {
      await record(instance);
    }
  }

  @Module({
    imports: [
      ScheduleModule.forRoot(),
      IdempotencyModule.forRootAsync({
        useFactory: async () => ({ store: (await store()).store }),
      }),
    ],
    providers: [Reports],
  })
  class AppModule {}
  return AppModule;
}

type OpenedStoreLike = Pick<OpenedStore, 'store'>;

async function startInstances(
  opened: OpenedStore,
  cron: string,
  count = 3,
): Promise<{ apps: INestApplicationContext[]; closers: (() => Promise<void>)[] }> {
  const apps: INestApplicationContext[] = [];
  const closers: (() => Promise<void>)[] = [];
  for (let instance = 0; instance < count; instance++) {
    // Each instance has its own connections to the one store, as separate processes would.
    const own = await storeFromEnv(opened.env);
    closers.push(own.close);
    apps.push(
      await NestFactory.createApplicationContext(
        appModule(instance, async () => own, cron),
        { logger: false },
      ),
    );
  }
  return { apps, closers };
}

async function stopAll(started: {
  apps: INestApplicationContext[];
  closers: (() => Promise<void>)[];
}) {
  for (const app of started.apps) await app.close();
  for (const close of started.closers) await close().catch(() => undefined);
}

function waitFor(condition: () => boolean, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const check = () => {
      if (condition()) return resolve();
      if (Date.now() - started > timeoutMs) return reject(new Error('timed out'));
      setImmediate(check);
    };
    check();
  });
}

describe('@Cron ticks with @Idempotent across three instances on PostgreSQL', () => {
  let opened: OpenedStore;
  beforeAll(async () => {
    opened = await openStore('postgres', 'ticks');
  });
  afterAll(async () => {
    await opened?.cleanup();
  });
  beforeEach(() => {
    runs = [];
    dieOnFirstRun = undefined;
  });

  it('runs each tick of an every-second cron on exactly one instance', async () => {
    const started = await startInstances(opened, '* * * * * *');
    try {
      // Every instance's timer fires every second; wait for five ticks to have run somewhere.
      await waitFor(() => new Set(runs.map((r) => r.tick)).size >= 5, 15_000);
    } finally {
      await stopAll(started);
    }
    const perTick = new Map<number, number>();
    for (const run of runs) perTick.set(run.tick, (perTick.get(run.tick) ?? 0) + 1);
    expect([...perTick.values()].every((count) => count === 1)).toBe(true);
    expect(runs.every((run) => run.finished)).toBe(true);
  });
});

describeIfRedis(probeRedisSync(), `Redis at ${redisUrl()}`)('@Cron tick takeover on Redis', () => {
  let opened: OpenedStore;
  beforeAll(async () => {
    opened = await openStore('redis', 'ticks');
  });
  afterAll(async () => {
    await opened?.cleanup();
  });

  it('a tick whose instance died mid-run is taken over when its lease runs out, before the next tick', async () => {
    runs = [];
    const hung = new Gate();
    const instances: { closers: (() => Promise<void>)[] } = { closers: [] };
    let died: number | undefined;
    dieOnFirstRun = async (instance) => {
      // The instance's connections to the store go away (its heartbeat stops) and the run never returns.
      died ??= instance;
      dieOnFirstRun = undefined;
      await instances.closers[instance]();
      await hung.promise;
    };
    // A tick every 5 s, a 2 s lease: the takeover must come inside the tick's own window.
    const started = await startInstances(opened, '*/5 * * * * *');
    instances.closers = started.closers;
    try {
      await waitFor(() => runs.some((run) => run.finished), 20_000);
    } finally {
      hung.open();
      await stopAll(started);
    }
    const [first, takeover] = runs;
    expect(first.instance).toBe(died);
    expect(first.finished).toBe(false);
    expect(takeover.tick - first.tick).toBeGreaterThanOrEqual(2); // after the 2 s lease
    expect(takeover.tick - first.tick).toBeLessThan(5); // before the next tick
    expect(takeover.instance).not.toBe(died);
    expect(takeover.finished).toBe(true);
  });
});

describe('@Idempotent on timers without a shared schedule', () => {
  const store = async () => (await import('nest-idempotency')).InMemoryIdempotencyStore;

  async function bootstrap(provider: new () => object): Promise<unknown> {
    const InMemory = await store();
    @Module({
      imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ store: new InMemory() })],
      providers: [provider],
    })
    class AppModule {}
    try {
      const app = await NestFactory.createApplicationContext(AppModule, {
        logger: false,
        abortOnError: false,
      });
      await app.close();
      return undefined;
    } catch (error) {
      return error;
    }
  }

  it('refuses @Interval, naming the method and the reason', async () => {
    @Injectable()
    class Poller {
      @Interval(1000)
      @Idempotent()
      poll() {}
    }
    const error = await bootstrap(Poller);
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toMatch(/^Poller\.poll: .*@Interval.*share no schedule/);
  });

  it('refuses @Timeout, and a class-level @Idempotent over one', async () => {
    @Injectable()
    @Idempotent()
    class Warmup {
      @Timeout(1000)
      warm() {}
    }
    const error = await bootstrap(Warmup);
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toMatch(/^Warmup\.warm: .*@Timeout/);
  });

  it('refuses a key option on a @Cron method: the tick is the key', async () => {
    @Injectable()
    class Keyed {
      @Cron('0 * * * * *')
      @Idempotent({ key: 'data.id' })
      run() {}
    }
    const error = await bootstrap(Keyed);
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toMatch(/^Keyed\.run: option "key" does not apply/);
  });
});
