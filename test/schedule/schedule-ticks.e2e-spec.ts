import { INestApplicationContext, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, Interval, ScheduleModule, Timeout } from '@nestjs/schedule';
import { randomBytes } from 'node:crypto';
import {
  IdempotencyConfigError,
  IdempotencyLogger,
  IdempotencyModule,
  Idempotent,
  IdempotentOptions,
} from 'nest-idempotency';
import { CuttableStore, openCuttableStore } from '../support/cuttable-store';
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

/**
 * What the other instances do when a tick's run throws, and what an instance
 * does when its store refuses: every-second ticks, each instance with its own
 * logger (the door's warnings are how a refused tick shows).
 */
describe('@Cron ticks that throw or are refused, on PostgreSQL', () => {
  type Attempt = { instance: number; tick: number; threw: boolean };
  let attempts: Attempt[] = [];
  let warnings: { instance: number; message: string }[] = [];
  /** Set by a test: the first run of the first tick throws. */
  let throwFirst = false;
  const job = `refused-${randomBytes(4).toString('hex')}`;

  function module(
    instance: number,
    store: () => Promise<OpenedStoreLike>,
    options: IdempotentOptions,
  ) {
    const logger: IdempotencyLogger = {
      warn: (message) => warnings.push({ instance, message }),
      error: (message) => warnings.push({ instance, message }),
    };
    @Injectable()
    class Reports {
      @Cron('* * * * * *', { name: job })
      @Idempotent(options)
      tick(): void {
        const attempt = { instance, tick: Math.floor(Date.now() / 1000), threw: false };
        attempts.push(attempt);
        if (throwFirst && attempts.length === 1) {
          attempt.threw = true;
          throw new Error('the report failed');
        }
      }
    }
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        IdempotencyModule.forRootAsync({
          useFactory: async () => ({ store: (await store()).store, logger }),
        }),
      ],
      providers: [Reports],
    })
    class AppModule {}
    return AppModule;
  }

  async function start(
    stores: (() => Promise<OpenedStoreLike & { close?: () => Promise<void> }>)[],
    options: IdempotentOptions,
  ): Promise<() => Promise<void>> {
    const apps: INestApplicationContext[] = [];
    const opened: (OpenedStoreLike & { close?: () => Promise<void> })[] = [];
    for (const [instance, store] of stores.entries()) {
      const own = await store();
      opened.push(own);
      apps.push(
        await NestFactory.createApplicationContext(
          module(instance, async () => own, options),
          {
            logger: false,
          },
        ),
      );
    }
    return async () => {
      for (const app of apps) await app.close();
      for (const own of opened) await own.close?.().catch(() => undefined);
    };
  }

  let opened: OpenedStore;
  beforeAll(async () => {
    opened = await openStore('postgres', 'ticks_refused');
  });
  afterAll(async () => {
    await opened?.cleanup();
  });
  beforeEach(() => {
    attempts = [];
    warnings = [];
    throwFirst = false;
  });
  const fromEnv = () => storeFromEnv(opened.env);

  it('a run that throws frees the tick: an instance waiting on it runs it, in the same tick', async () => {
    const stop = await start([fromEnv, fromEnv], { lease: '2s' });
    // Both instances run now (a tick before that found one instance only).
    attempts = [];
    throwFirst = true;
    try {
      await waitFor(() => attempts.some((a) => !a.threw), 10_000);
    } finally {
      await stop();
    }
    const [failed, retried] = attempts;
    expect(failed.threw).toBe(true);
    expect(retried).toMatchObject({ tick: failed.tick, threw: false });
    expect(retried.instance).not.toBe(failed.instance);
  });

  it('in strict mode, a run that throws leaves the tick unknown: the waiting instance logs idempotency-outcome-unknown and does not run it', async () => {
    const stop = await start([fromEnv, fromEnv], { lease: '2s', onExpiredLease: 'refuse' });
    attempts = [];
    throwFirst = true;
    try {
      await waitFor(
        () => warnings.some((w) => w.message.includes('(idempotency-outcome-unknown)')),
        10_000,
      );
    } finally {
      await stop();
    }
    const [failed] = attempts;
    expect(failed.threw).toBe(true);
    expect(attempts.filter((a) => a.tick === failed.tick)).toEqual([failed]);
    const refused = warnings.find((w) => w.message.includes('(idempotency-outcome-unknown)'))!;
    expect(refused.instance).not.toBe(failed.instance);
    expect(refused.message).toContain('Reports.tick: the tick of ');
    expect(refused.message).toContain('was not run on this instance');
  });

  describe('when the store is down', () => {
    let cuttable: CuttableStore;
    beforeAll(async () => {
      cuttable = await openCuttableStore('ticks_down');
    });
    afterAll(async () => {
      await cuttable?.close();
    });

    it('the tick is not run on the instance: one warning, idempotency-store-unavailable; ticks run again once it is back', async () => {
      const stop = await start([async () => ({ store: cuttable.store })], { lease: '2s' });
      let restored = false;
      try {
        await cuttable.cut();
        attempts = []; // a tick may have run before the cut
        warnings = [];
        await waitFor(
          () => warnings.some((w) => w.message.includes('(idempotency-store-unavailable)')),
          10_000,
        );
        expect(attempts).toEqual([]);
        const refused = warnings.find((w) =>
          w.message.includes('(idempotency-store-unavailable)'),
        )!;
        expect(refused.message).toContain('Reports.tick: the tick of ');
        expect(refused.message).toContain('was not run on this instance');
        await cuttable.restore();
        restored = true;
        await waitFor(() => attempts.length > 0, 10_000);
      } finally {
        await stop();
        if (!restored) await cuttable.restore();
      }
    });
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
