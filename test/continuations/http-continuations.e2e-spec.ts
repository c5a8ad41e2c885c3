import { Body, Controller, HttpCode, INestApplication, Post } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import {
  Idempotent,
  IdempotencyConfigError,
  IdempotencyContext,
  IdempotencyCtx,
  IdempotencyModule,
  IdempotencyStore,
  InMemoryIdempotencyStore,
} from 'nest-idempotency';
import { ADAPTERS, send, startHttpApp } from '../support/http-app';

/**
 * Issue 25, requirement 4, over HTTP: a route returns `ctx.suspend`, its
 * client gets 202 and the `Idempotency-Continuation` header, duplicates get
 * the same, and a `resumes` route admits one resumption per token, whose
 * result completes the suspended record. Two applications share the store,
 * as two pods would.
 */
const runs = { pay: 0, confirm: 0 };

@Controller('pay')
class PaymentsController {
  @Post()
  @Idempotent({ scope: 'Payments.pay' })
  pay(@Body() body: { amount: number }, @IdempotencyCtx() ctx: IdempotencyContext) {
    runs.pay++;
    return ctx.suspend(
      { status: 'challenge', amount: body.amount },
      { hold: '1m', state: { amount: body.amount } },
    );
  }

  @Post('confirm')
  @Idempotent({ resumes: 'Payments.pay' })
  confirm(@Body() body: { approved: boolean }, @IdempotencyCtx() ctx: IdempotencyContext) {
    runs.confirm++;
    const { amount } = ctx.resumed as { amount: number };
    return { status: body.approved ? 'paid' : 'declined', amount, attempt: ctx.attempt };
  }

  @Post('quick')
  @HttpCode(200)
  @Idempotent({ scope: 'Payments.quick' })
  quick(@IdempotencyCtx() ctx: IdempotencyContext) {
    return ctx.suspend({ status: 'pending' }, { hold: '300ms' });
  }

  @Post('quick/confirm')
  @Idempotent({ resumes: 'Payments.quick' })
  quickConfirm() {
    return { status: 'too late?' };
  }
}

const CONTINUATION = 'idempotency-continuation';

describe.each(ADAPTERS)('Continuations over HTTP on %s', (adapter) => {
  const store = new InMemoryIdempotencyStore();
  let apps: INestApplication[] = [];
  let a: string;
  let b: string;

  beforeAll(async () => {
    const started = await Promise.all(
      [0, 1].map(() =>
        startHttpApp(adapter, {
          imports: [IdempotencyModule.forRoot({ store, purge: false, tenant: false })],
          controllers: [PaymentsController],
        }),
      ),
    );
    apps = started.map((s) => s.app);
    [a, b] = started.map((s) => s.url);
  });

  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
  });

  it('answers 202 with the token, replays it to duplicates, and admits one resumption whose result completes the record', async () => {
    const key = `pay-${randomUUID()}`;
    const before = { ...runs };
    const first = await send(a, 'POST', '/pay', { key, body: { amount: 5 } });
    expect(first.status).toBe(202);
    expect(first.json()).toEqual({ status: 'challenge', amount: 5 });
    const token = first.headers.get(CONTINUATION)!;
    expect(token).toMatch(/^[0-9a-f]{64}\.[A-Za-z0-9_-]{22}$/);
    expect(token).not.toContain(key);

    const duplicate = await send(b, 'POST', '/pay', { key, body: { amount: 5 } });
    expect(duplicate.status).toBe(202);
    expect(duplicate.headers.get(CONTINUATION)).toBe(token);
    expect(duplicate.headers.get('idempotent-replayed')).toBe('true');
    expect(duplicate.text).toBe(first.text);

    const resumptions = await Promise.all(
      [a, b, a, b].map((url) =>
        send(url, 'POST', '/pay/confirm', {
          body: { approved: true },
          headers: { 'Idempotency-Continuation': token },
        }),
      ),
    );
    const statuses = resumptions.map((r) => r.status).sort();
    expect(statuses).toEqual([201, 409, 409, 409]);
    const admitted = resumptions.find((r) => r.status === 201)!;
    expect(admitted.json()).toEqual({ status: 'paid', amount: 5, attempt: 'resumption' });
    for (const refused of resumptions.filter((r) => r.status === 409)) {
      expect(refused.json()).toMatchObject({ code: 'idempotency-resumption-refused' });
      expect(refused.headers.get('content-type')).toMatch(/application\/problem\+json/);
    }

    const after = await send(b, 'POST', '/pay', { key, body: { amount: 5 } });
    expect(after.status).toBe(201);
    expect(after.json()).toEqual({ status: 'paid', amount: 5, attempt: 'resumption' });
    expect(after.headers.get('idempotent-replayed')).toBe('true');
    expect(runs.pay - before.pay).toBe(1);
    expect(runs.confirm - before.confirm).toBe(1);
  });

  it('replays a resumption retried under its own Idempotency-Key', async () => {
    const key = `pay-${randomUUID()}`;
    const token = (await send(a, 'POST', '/pay', { key, body: { amount: 7 } })).headers.get(
      CONTINUATION,
    )!;
    const own = `confirm-${randomUUID()}`;
    const before = runs.confirm;
    const resume = (url: string) =>
      send(url, 'POST', '/pay/confirm', {
        key: own,
        body: { approved: false },
        headers: { 'Idempotency-Continuation': token },
      });
    const first = await resume(a);
    const retry = await resume(b);
    expect(first.status).toBe(201);
    expect(retry.status).toBe(201);
    expect(retry.text).toBe(first.text);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(runs.confirm - before).toBe(1);
    // Another key with the consumed token is refused.
    const other = await send(b, 'POST', '/pay/confirm', {
      key: `confirm-${randomUUID()}`,
      body: { approved: true },
      headers: { 'Idempotency-Continuation': token },
    });
    expect(other.status).toBe(409);
  });

  it("keeps the route's @HttpCode, and refuses a resumption after the hold lapsed (410)", async () => {
    const key = `quick-${randomUUID()}`;
    const first = await send(a, 'POST', '/pay/quick', { key });
    expect(first.status).toBe(200);
    const token = first.headers.get(CONTINUATION)!;
    await new Promise((resolve) => setTimeout(resolve, 450));
    const late = await send(b, 'POST', '/pay/quick/confirm', {
      headers: { 'Idempotency-Continuation': token },
    });
    expect(late.status).toBe(410);
    expect(late.json()).toMatchObject({ code: 'idempotency-resumption-refused' });
  });

  it('refuses a missing or malformed token (400) and one of another scope (404)', async () => {
    const missing = await send(a, 'POST', '/pay/confirm', { body: { approved: true } });
    expect(missing.status).toBe(400);
    const malformed = await send(a, 'POST', '/pay/confirm', {
      body: { approved: true },
      headers: { 'Idempotency-Continuation': 'abc' },
    });
    expect(malformed.status).toBe(400);
    const token = (
      await send(a, 'POST', '/pay', { key: `pay-${randomUUID()}`, body: { amount: 1 } })
    ).headers.get(CONTINUATION)!;
    const elsewhere = await send(b, 'POST', '/pay/quick/confirm', {
      headers: { 'Idempotency-Continuation': token },
    });
    expect(elsewhere.status).toBe(404);
  });
});

describe('resumes at bootstrap', () => {
  const boot = async (store: IdempotencyStore, resumes: unknown) => {
    @Controller('x')
    class X {
      @Post()
      @Idempotent({ resumes: resumes as string })
      x() {
        return 1;
      }
    }
    try {
      const { app } = await startHttpApp('express', {
        imports: [IdempotencyModule.forRoot({ store, purge: false })],
        controllers: [X],
      });
      await app.close();
      return undefined;
    } catch (error) {
      return error as Error;
    }
  };

  it('refuses a resumes that is not a scope, naming the handler', async () => {
    const error = await boot(new InMemoryIdempotencyStore(), 42);
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect(error!.message).toMatch(/X\.x: option "resumes" must be the scope/);
  });

  it('refuses resumes on a store without continuations', async () => {
    const memory = new InMemoryIdempotencyStore();
    const bare: IdempotencyStore = {
      tryAcquire: (r) => memory.tryAcquire(r),
      complete: (l, p) => memory.complete(l, p),
      release: (l) => memory.release(l),
      extend: (l) => memory.extend(l),
      purgeExpired: (o) => memory.purgeExpired(o),
      find: (id) => memory.find(id),
      list: (f) => memory.list(f),
    };
    const error = await boot(bare, 'Payments.pay');
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect(error!.message).toMatch(/needs a store with continuations/);
  });
});
