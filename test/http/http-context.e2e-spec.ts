import { Body, Controller, INestApplication, Post } from '@nestjs/common';
import { randomBytes, randomUUID } from 'node:crypto';
import {
  Idempotent,
  IdempotencyConfigError,
  IdempotencyContext,
  IdempotencyCtx,
  IdempotencyEngine,
  IdempotencyModule,
  IdempotencyModuleOptions,
  InMemoryIdempotencyStore,
  keyDigest,
} from 'nest-idempotency';
import { currentIdempotencyContext } from '../../libs/idempotency/src/core/current-context';
import { ADAPTERS, send, startHttpApp } from '../support/http-app';

/**
 * Issue 25, requirements 1 and 2 over HTTP: `@IdempotencyCtx()` hands an
 * `@Idempotent` route its record's context (Nest evaluates the parameter
 * inside the interceptor's `next.handle()`), with keys derived under the
 * module's `derivedKeys.secret`; elsewhere it is `undefined`.
 */
const SECRET = randomBytes(32);
let runs = 0;

/** What a handler saw, as it answers it: the context's digest, attempt and a derived key. */
function seen(ctx: IdempotencyContext | undefined) {
  runs++;
  if (ctx === undefined) return { ctx: null };
  return {
    isContext: ctx instanceof IdempotencyContext,
    keyDigest: ctx.keyDigest,
    attempt: ctx.attempt,
    charge: ctx.deriveKey('charge'),
    run: randomUUID(),
  };
}

@Controller('ctx')
class ContextController {
  @Post('charge')
  @Idempotent({ scope: 'ctx-charges' })
  charge(@Body() _body: unknown, @IdempotencyCtx() ctx: IdempotencyContext | undefined) {
    return seen(ctx);
  }

  @Post('slow')
  @Idempotent({ scope: 'ctx-slow' })
  async slow(@IdempotencyCtx() ctx: IdempotencyContext | undefined) {
    // Other requests' work interleaves with this one's before the context is read.
    await new Promise((resolve) => setTimeout(resolve, 5));
    return seen(ctx);
  }

  @Post('plain')
  plain(@IdempotencyCtx() ctx: IdempotencyContext | undefined) {
    return seen(ctx);
  }

  /** No `@IdempotencyCtx()`: the lifecycle leaves the context out of AsyncLocalStorage. */
  @Post('unread')
  @Idempotent({ scope: 'ctx-unread' })
  async unread() {
    await Promise.resolve();
    return { current: currentIdempotencyContext() !== undefined };
  }
}

/** The parameter declared on an inherited handler, `@Idempotent` on the subclass. */
@Controller('ctx-base')
class BaseContextController {
  @Post('charge')
  charge(@IdempotencyCtx() ctx: IdempotencyContext | undefined) {
    return seen(ctx);
  }
}

@Controller('ctx-sub')
@Idempotent({ scope: 'ctx-sub' })
class SubContextController extends BaseContextController {}

/** The key the engine derives for `key` under `SECRET`: what the route must have been given. */
async function derivedByEngine(scope: string, key: string): Promise<string> {
  const engine = new IdempotencyEngine(new InMemoryIdempotencyStore(), {
    logger: { warn: () => undefined, error: () => undefined },
    derivedKeys: { secret: SECRET },
  });
  const outcome = await engine.run(engine.policy({ scope, ttl: '1h' }), { key }, async (_s, ctx) =>
    ctx.deriveKey('charge'),
  );
  return outcome.value;
}

describe.each(ADAPTERS)('@IdempotencyCtx() over HTTP on %s', (adapter) => {
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    ({ app, url } = await startHttpApp(adapter, {
      imports: [
        IdempotencyModule.forRoot({
          store: new InMemoryIdempotencyStore(),
          purge: false,
          http: { required: false },
          derivedKeys: { secret: SECRET },
          tenant: false,
        }),
      ],
      controllers: [ContextController, SubContextController],
    }));
  });

  afterAll(async () => {
    await app?.close();
  });

  it("hands the route its record's context, with keys derived under the module's secret", async () => {
    const key = `order-${randomUUID()}`;
    const reply = await send(url, 'POST', '/ctx/charge', { key, body: { amount: 42 } });
    expect(reply.status).toBe(201);
    const body = reply.json() as ReturnType<typeof seen>;
    expect(body).toMatchObject({
      isContext: true,
      keyDigest: keyDigest('ctx-charges', key),
      attempt: 'first',
      charge: await derivedByEngine('ctx-charges', key),
    });
    expect(reply.text).not.toContain(key);

    // The duplicate is answered from the record: the handler does not run again.
    const before = runs;
    const replay = await send(url, 'POST', '/ctx/charge', { key, body: { amount: 42 } });
    expect(replay.text).toBe(reply.text);
    expect(runs).toBe(before);
  });

  it('gives each of many concurrent requests its own context', async () => {
    const keys = Array.from({ length: 30 }, () => `order-${randomUUID()}`);
    const replies = await Promise.all(keys.map((key) => send(url, 'POST', '/ctx/slow', { key })));
    expect(replies.map((r) => r.status)).toEqual(keys.map(() => 201));
    expect(replies.map((r) => (r.json() as { keyDigest: string }).keyDigest)).toEqual(
      keys.map((key) => keyDigest('ctx-slow', key)),
    );
  });

  it('is current only for a handler that takes it, an inherited parameter included', async () => {
    const unread = await send(url, 'POST', '/ctx/unread', { key: `k-${randomUUID()}` });
    expect(unread.json()).toEqual({ current: false });
    const key = `order-${randomUUID()}`;
    const inherited = await send(url, 'POST', '/ctx-sub/charge', { key });
    expect(inherited.status).toBe(201);
    expect(inherited.json()).toMatchObject({
      isContext: true,
      keyDigest: keyDigest('ctx-sub', key),
    });
  });

  it('is undefined on a route without @Idempotent and on a call without a key', async () => {
    const plain = await send(url, 'POST', '/ctx/plain', { key: `k-${randomUUID()}` });
    expect(plain.json()).toEqual({ ctx: null });
    const keyless = await send(url, 'POST', '/ctx/charge', { body: {} });
    expect(keyless.status).toBe(201);
    expect(keyless.json()).toEqual({ ctx: null });
  });
});

describe('derivedKeys module option', () => {
  const boot = async (options: Record<string, unknown>) => {
    try {
      const { app } = await startHttpApp('express', {
        imports: [
          IdempotencyModule.forRoot({
            store: new InMemoryIdempotencyStore(),
            purge: false,
            ...options,
          } as IdempotencyModuleOptions),
        ],
        controllers: [ContextController],
      });
      await app.close();
    } catch (error) {
      return error;
    }
    throw new Error('the application started');
  };

  it('stops the bootstrap for a short secret or an unknown key, naming the option', async () => {
    const short = await boot({ derivedKeys: { secret: 'too short' } });
    expect(short).toBeInstanceOf(IdempotencyConfigError);
    expect((short as Error).message).toMatch(
      /^IdempotencyModule: option "derivedKeys.secret" must be at least 32 bytes, got 9/,
    );
    expect((short as Error).message).not.toContain('too short');
    const typo = await boot({ derivedKeys: { secrt: SECRET } });
    expect((typo as Error).message).toBe(
      'IdempotencyModule: unknown option "derivedKeys.secrt" (did you mean "derivedKeys.secret"?)',
    );
    const misspelled = await boot({ derivedKey: { secret: SECRET } });
    expect((misspelled as Error).message).toMatch(
      /unknown option "derivedKey" \(did you mean "derivedKeys"\?\)/,
    );
  });
});
