import {
  BadRequestException,
  CallHandler,
  Controller,
  ExecutionContext,
  Header,
  HttpCode,
  HttpException,
  Injectable,
  NestInterceptor,
  Param,
  ParseIntPipe,
  Post,
  SetMetadata,
  UseInterceptors,
} from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import {
  Idempotent,
  IdempotencyEvent,
  IdempotencyModule,
  IdempotencyNotExecutedError,
  IdempotencyStore,
  IdempotencyStoreUnavailableError,
  InMemoryIdempotencyStore,
} from 'nest-idempotency';
import { Observable } from 'rxjs';
import { ADAPTERS, AdapterName, send, startHttpApp } from '../support/http-app';

const ran: Record<string, number> = {};
const count = (name: string) => (ran[name] = (ran[name] ?? 0) + 1);
const seenByInterceptor: unknown[] = [];

/** An interceptor listed below @Idempotent that fails before the handler is called. */
@Injectable()
class FailsFirst implements NestInterceptor {
  intercept(): Observable<unknown> {
    throw new BadRequestException('refused by an inner interceptor');
  }
}

/** Reads metadata written by a decorator below @Idempotent, through context.getHandler(). */
@Injectable()
class ReadsMetadata implements NestInterceptor {
  constructor(private readonly reflector: Reflector) {}
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    seenByInterceptor.push(this.reflector.get('audit', context.getHandler()));
    return next.handle();
  }
}

@UseInterceptors(ReadsMetadata)
@Controller('strict')
class StrictController {
  @Post('charge')
  @Idempotent({ onExpiredLease: 'refuse' })
  charge() {
    return { charged: count('charge') };
  }

  @Post('throws')
  @Idempotent({ onExpiredLease: 'refuse' })
  throws() {
    count('throws');
    throw new Error('the provider hung up mid-charge');
  }

  @Post('declined')
  @Idempotent({ onExpiredLease: 'refuse' })
  declined() {
    count('declined');
    throw new HttpException('declined', 402, { cause: new IdempotencyNotExecutedError() });
  }

  @Post('amount/:amount')
  @Idempotent({ onExpiredLease: 'refuse' })
  amount(@Param('amount', ParseIntPipe) amount: number) {
    return { amount, runs: count('amount') };
  }

  @Post('inner')
  @Idempotent({ onExpiredLease: 'refuse' })
  @UseInterceptors(FailsFirst)
  inner() {
    return { runs: count('inner') };
  }

  @Header('x-above', 'kept')
  @Post('decorated')
  @Idempotent({ onExpiredLease: 'refuse' })
  @HttpCode(202)
  @SetMetadata('audit', 'below @Idempotent')
  decorated() {
    return { runs: count('decorated') };
  }

  @Post('reconciled')
  @Idempotent({
    onExpiredLease: 'refuse',
    reconcile: ({ key }) =>
      key === 'known'
        ? { outcome: 'completed', value: { charged: 'elsewhere' } }
        : { outcome: 'unknown' },
  })
  reconciled() {
    count('reconciled');
    throw new Error('timed out');
  }
}

@Controller('lenient')
class CompletionController {
  @Post('error')
  @Idempotent()
  failsLoudly() {
    return { runs: count('error') };
  }

  @Post('return')
  @Idempotent({ onCompletionFailure: 'return' })
  returnsAnyway() {
    return { runs: count('return') };
  }
}

describe.each(ADAPTERS)('strict mode over HTTP (%s)', (adapter: AdapterName) => {
  const clock = { now: Date.UTC(2030, 0, 1) };
  const store = new InMemoryIdempotencyStore({ now: () => clock.now });
  const events: IdempotencyEvent[] = [];
  let url: string;
  let close: () => Promise<void>;

  beforeAll(async () => {
    for (const name of Object.keys(ran)) delete ran[name];
    const started = await startHttpApp(adapter, {
      imports: [
        IdempotencyModule.forRoot({
          store,
          purge: false,
          onEvent: (event) => events.push(event),
          logger: { warn: () => undefined, error: () => undefined },
        }),
      ],
      controllers: [StrictController],
    });
    url = started.url;
    close = () => started.app.close();
  });
  afterAll(() => close?.());

  const problemOf = (reply: { json: () => unknown }) => reply.json() as { code: string };

  it('refuses an expired lease with 409 idempotency-outcome-unknown and no Retry-After, every time', async () => {
    // A holder that took the key and died: its lease runs out, nobody steals it.
    const held = await store.tryAcquire({
      scope: 'StrictController.charge',
      key: 'dead-holder',
      leaseMs: 30_000,
      waitTimeoutMs: 0,
      ttlMs: 86_400_000,
      fingerprint: null,
    });
    expect(held.kind).toBe('acquired');
    clock.now += 31_000;
    for (let attempt = 0; attempt < 2; attempt++) {
      const reply = await send(url, 'POST', '/strict/charge', { key: 'dead-holder' });
      expect(reply.status).toBe(409);
      expect(reply.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(reply.headers.get('retry-after')).toBeNull();
      expect(problemOf(reply).code).toBe('idempotency-outcome-unknown');
    }
    expect(ran.charge).toBeUndefined();
    const view = await store.find({ scope: 'StrictController.charge', key: 'dead-holder' });
    expect(view).toMatchObject({ state: 'AMBIGUOUS', ambiguousReason: 'lease-expired' });
    // A fresh key still runs.
    expect((await send(url, 'POST', '/strict/charge', { key: 'fresh' })).status).toBe(201);
  });

  it('a handler that throws makes the record AMBIGUOUS: the retry is refused, nothing runs twice', async () => {
    expect((await send(url, 'POST', '/strict/throws', { key: 't1' })).status).toBe(500);
    const retry = await send(url, 'POST', '/strict/throws', { key: 't1' });
    expect(retry.status).toBe(409);
    expect(problemOf(retry).code).toBe('idempotency-outcome-unknown');
    expect(ran.throws).toBe(1);
  });

  it('an error marked IdempotencyNotExecutedError (as a cause) frees the key: the retry runs', async () => {
    expect((await send(url, 'POST', '/strict/declined', { key: 'd1' })).status).toBe(402);
    expect((await send(url, 'POST', '/strict/declined', { key: 'd1' })).status).toBe(402);
    expect(ran.declined).toBe(2);
  });

  it('a pipe or an inner interceptor that fails before the handler is not an execution: released', async () => {
    expect((await send(url, 'POST', '/strict/amount/abc', { key: 'p1' })).status).toBe(400);
    expect(await store.find({ scope: 'StrictController.amount', key: 'p1' })).toBeNull();
    expect((await send(url, 'POST', '/strict/amount/abc', { key: 'p1' })).status).toBe(400);
    expect(ran.amount).toBeUndefined();
    const ok = await send(url, 'POST', '/strict/amount/5', { key: 'p2' });
    expect(ok.json()).toEqual({ amount: 5, runs: 1 });

    expect((await send(url, 'POST', '/strict/inner', { key: 'i1' })).status).toBe(400);
    expect((await send(url, 'POST', '/strict/inner', { key: 'i1' })).status).toBe(400);
    expect(await store.find({ scope: 'StrictController.inner', key: 'i1' })).toBeNull();
  });

  it('keeps the decorators on either side of @Idempotent working (metadata on the wrapped handler)', async () => {
    seenByInterceptor.length = 0;
    const reply = await send(url, 'POST', '/strict/decorated', { key: 'm1' });
    expect(reply.status).toBe(202);
    expect(reply.headers.get('x-above')).toBe('kept');
    expect(seenByInterceptor).toEqual(['below @Idempotent']);
    const replay = await send(url, 'POST', '/strict/decorated', { key: 'm1' });
    expect(replay.status).toBe(202);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(ran.decorated).toBe(1);
  });

  it('asks the reconcile hook: completed is replayed with the route status, unknown is refused', async () => {
    expect((await send(url, 'POST', '/strict/reconciled', { key: 'known' })).status).toBe(500);
    const resolved = await send(url, 'POST', '/strict/reconciled', { key: 'known' });
    expect(resolved.status).toBe(201);
    expect(resolved.json()).toEqual({ charged: 'elsewhere' });
    expect(resolved.headers.get('idempotent-replayed')).toBe('true');
    const view = await store.find({ scope: 'StrictController.reconciled', key: 'known' });
    expect(view).toMatchObject({ state: 'COMPLETE', resolvedBy: 'reconcile' });
    expect(events).toContainEqual(
      expect.objectContaining({ type: 'resolved', outcome: 'completed', resolver: 'reconcile' }),
    );

    expect((await send(url, 'POST', '/strict/reconciled', { key: 'other' })).status).toBe(500);
    expect((await send(url, 'POST', '/strict/reconciled', { key: 'other' })).status).toBe(409);
    expect(ran.reconciled).toBe(2);
  });
});

describe.each(ADAPTERS)('onCompletionFailure over HTTP (%s)', (adapter: AdapterName) => {
  const memory = new InMemoryIdempotencyStore();
  // Every completion fails: the store cannot be reached (after a start that went well).
  const store = Object.assign(Object.create(memory) as IdempotencyStore, {
    init: () => memory.init(),
    complete: () => Promise.reject(new IdempotencyStoreUnavailableError('down')),
  });
  const warnings: string[] = [];
  let url: string;
  let close: () => Promise<void>;

  beforeAll(async () => {
    for (const name of Object.keys(ran)) delete ran[name];
    const started = await startHttpApp(adapter, {
      imports: [
        IdempotencyModule.forRoot({
          store,
          purge: false,
          logger: { warn: (m) => warnings.push(m), error: () => undefined },
        }),
      ],
      controllers: [CompletionController],
    });
    url = started.url;
    close = () => started.app.close();
  });
  afterAll(() => close?.());

  it("'error' (default) answers 503; 'return' answers the handler's own response and warns", async () => {
    const failed = await send(url, 'POST', '/lenient/error', { key: 'e1' });
    expect(failed.status).toBe(503);
    expect((failed.json() as { code: string }).code).toBe('idempotency-completion-failed');
    const returned = await send(url, 'POST', '/lenient/return', { key: 'r1' });
    expect(returned.status).toBe(201);
    expect(returned.json()).toEqual({ runs: 1 });
    expect(warnings.some((w) => w.includes("onCompletionFailure is 'return'"))).toBe(true);
  }, 20_000);
});

describe('strict mode on a store that does not support it', () => {
  it('fails the bootstrap, naming Class.method', async () => {
    const plain = new InMemoryIdempotencyStore();
    const store = Object.assign(Object.create(plain) as IdempotencyStore, {
      strictMode: undefined,
    });
    await expect(
      startHttpApp('express', {
        imports: [IdempotencyModule.forRoot({ store, purge: false })],
        controllers: [StrictController],
      }),
    ).rejects.toThrow(
      "StrictController.charge: onExpiredLease: 'refuse' (strict mode) needs a store that supports it",
    );
  });
});
