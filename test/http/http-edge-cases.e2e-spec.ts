import {
  All,
  ArgumentsHost,
  Body,
  CallHandler,
  Catch,
  ClassSerializerInterceptor,
  Controller,
  ExceptionFilter,
  ExecutionContext,
  Get,
  HttpCode,
  HttpException,
  Injectable,
  INestApplication,
  Module,
  NestInterceptor,
  Param,
  Post,
  Put,
  Query,
  Res,
  UploadedFile,
  UseInterceptors,
} from '@nestjs/common';
import { APP_FILTER, APP_INTERCEPTOR, HttpAdapterHost } from '@nestjs/core';
import { FileInterceptor } from '@nestjs/platform-express';
import { Test } from '@nestjs/testing';
import { SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { Exclude } from 'class-transformer';
import { randomUUID } from 'node:crypto';
import { map } from 'rxjs';
import {
  decodeHttpResponse,
  Idempotent,
  IdempotencyConfigError,
  IdempotencyModule,
  IdempotencyModuleOptions,
  IdempotencyStoreUnavailableError,
  InMemoryIdempotencyStore,
  Lease,
  StoredPayload,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { CapturedLogs, startLoggedHttpApp } from '../support/captured-logs';
import { ADAPTERS, AdapterName, send, sendRaw } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { Probe } from './fixtures';

/**
 * HTTP edge cases: what is stored and replayed when other parts of Nest
 * (serializers, filters, parsers) act on the response, how keys and
 * fingerprints are read, and misconfigurations refused at bootstrap; each
 * against the real PostgreSQL store, on both adapters where HTTP is involved.
 */
const probe = new Probe();

/** Express's response (`setHeader`) or Fastify's reply (`header`). */
type EitherResponse = {
  header?: (n: string, v: string) => unknown;
  setHeader?: (n: string, v: string) => unknown;
};

/** Eight bytes, not all UTF-8, sent as application/octet-stream. */
function octetStream(res: EitherResponse): Buffer {
  (res.header ?? res.setHeader)!.call(res, 'Content-Type', 'application/octet-stream');
  return Buffer.from([0, 1, 2, 250, 251, 252, 10, 13]);
}

/** Fills every Buffer value it sees with '!', except the first one. */
@Injectable()
class OverwritingInterceptor implements NestInterceptor {
  private seen = 0;
  intercept(_context: ExecutionContext, next: CallHandler) {
    return next.handle().pipe(
      map((value: unknown) => {
        if (Buffer.isBuffer(value) && this.seen++ > 0) value.fill(0x21);
        return value;
      }),
    );
  }
}

class Account {
  constructor(
    readonly id: string,
    readonly email: string,
    passwordHash: string,
  ) {
    this.passwordHash = passwordHash;
  }
  @Exclude()
  passwordHash: string;
}

@Controller('defects')
class DefectsController {
  @Post('account')
  @Idempotent()
  account() {
    probe.ran('account');
    return new Account(randomUUID(), 'ann@example.com', 'hash-of-secret-password');
  }

  @Post('card')
  @Idempotent()
  card() {
    probe.ran('card');
    return { id: randomUUID(), cardNumber: '4111111111111111', last4: '1111' };
  }

  @Put('orders/:id')
  @Idempotent()
  putOrder(@Param('id') id: string, @Body() body: unknown) {
    probe.ran(`order:${id}`);
    return { id, body, token: randomUUID() };
  }

  @Post('charge')
  @Idempotent()
  charge(@Query('amount') amount: string) {
    probe.ran('charge');
    return { amount, token: randomUUID() };
  }

  @All('any')
  @Idempotent()
  any() {
    probe.ran('any');
    return { token: randomUUID() };
  }

  @Post('date')
  @Idempotent()
  date() {
    probe.ran('date');
    return new Date('2025-06-01T12:00:00.123Z');
  }

  @Post('bytes')
  @Idempotent()
  @HttpCode(200)
  bytes(@Res({ passthrough: true }) res: EitherResponse) {
    probe.ran('bytes');
    return octetStream(res);
  }

  @Post('unicode')
  @Idempotent()
  unicode() {
    probe.ran('unicode');
    return { text: 'café — 日本語 € 🧾', token: randomUUID() };
  }

  /** An outer interceptor overwrites the bytes it is handed, from the second call on. */
  @Post('bytes-overwritten')
  @Idempotent()
  @UseInterceptors(OverwritingInterceptor) // below @Idempotent: it runs outside it
  @HttpCode(200)
  overwritten(@Res({ passthrough: true }) res: EitherResponse) {
    probe.ran('bytes-overwritten');
    return octetStream(res);
  }

  @Post('template')
  @Idempotent({ key: 'order:{body.customerId}:{body.orderId}', fingerprint: false })
  template(@Body() body: { customerId: string; orderId: string }) {
    probe.ran(`template:${body.customerId}|${body.orderId}`);
    return { ...body, token: randomUUID() };
  }

  @Post('text')
  @Idempotent()
  text() {
    probe.ran('text');
    return { token: randomUUID() };
  }
}

@Controller('uploads')
class UploadsController {
  /** The file interceptor is listed below @Idempotent: multer has parsed the upload by the check. */
  @Post('parsed-first')
  @Idempotent()
  @UseInterceptors(FileInterceptor('file'))
  parsedFirst(@UploadedFile() file: { originalname: string; size: number }) {
    probe.ran('parsed-first');
    return { name: file.originalname, size: file.size, token: randomUUID() };
  }

  /** Listed above: the check runs before multer, and cannot see the body. */
  @Post('parsed-after')
  @UseInterceptors(FileInterceptor('file'))
  @Idempotent()
  parsedAfter(@UploadedFile() file: { originalname: string }) {
    probe.ran('parsed-after');
    return { name: file?.originalname };
  }
}

/** A catch-all filter of the application's own, as APP_FILTER: it must see the library's refusals. */
@Catch()
class RenderEverything implements ExceptionFilter {
  constructor(private readonly host: HttpAdapterHost) {}
  catch(exception: unknown, host: ArgumentsHost) {
    const status = exception instanceof HttpException ? exception.getStatus() : 500;
    const response = exception instanceof HttpException ? exception.getResponse() : null;
    this.host.httpAdapter.reply(
      host.switchToHttp().getResponse(),
      { renderedBy: 'application', status, code: (response as { code?: string } | null)?.code },
      status,
    );
  }
}

/** A store whose first `complete` per key fails, so the engine logs a retry. */
class FlakyStore extends TypeOrmIdempotencyStore {
  private failed = new WeakSet<Lease>();
  override async complete(lease: Lease, payload: StoredPayload): Promise<void> {
    if (!this.failed.has(lease)) {
      this.failed.add(lease);
      throw new IdempotencyStoreUnavailableError(
        'PostgreSQL did not answer complete within 5000 ms',
      );
    }
    return super.complete(lease, payload);
  }
}

describe.each(ADAPTERS)('HTTP edge cases, over %s', (adapter: AdapterName) => {
  const schema = scratchSchema('defects');
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  let app: INestApplication;
  let url: string;
  const logs = new CapturedLogs();

  const start = async (
    options: Partial<IdempotencyModuleOptions> = {},
    controllers: unknown[] = [DefectsController],
  ) =>
    startLoggedHttpApp(
      adapter,
      {
        imports: [IdempotencyModule.forRoot({ store, ...options })],
        controllers: controllers as never[],
        providers: [{ provide: APP_INTERCEPTOR, useClass: ClassSerializerInterceptor }],
      },
      logs,
    );

  beforeAll(async () => {
    dataSource = await openDataSource();
    store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
    ({ app, url } = await start(
      {
        sanitize: (result) => {
          // Deletes a field from what it is given: the first caller must still see it.
          if (result.kind === 'http' && result.body && typeof result.body === 'object') {
            delete (result.body as Record<string, unknown>).cardNumber;
          }
          return result;
        },
      },
      [DefectsController, UploadsController],
    ));
  });
  afterAll(async () => {
    await app?.close();
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });
  beforeEach(() => probe.executions.clear());

  const stored = async (scope: string, key: string) => {
    const record = await store.find({ scope, key });
    return decodeHttpResponse(record!.payload!);
  };

  it('stores what ClassSerializerInterceptor sent (APP_INTERCEPTOR), never the @Exclude()d field', async () => {
    const key = randomUUID();
    const first = await send(url, 'POST', '/defects/account', { key });
    expect(first.status).toBe(201);
    expect(first.text).not.toContain('hash-of-secret-password');
    const record = await store.find({ scope: 'DefectsController.account', key });
    expect(record!.payload!.toString('utf8')).not.toContain('hash-of-secret-password');
    const replay = await send(url, 'POST', '/defects/account', { key });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.text).toBe(first.text);
    expect(probe.count('account')).toBe(1);
  });

  it('hands sanitize a copy: the first caller keeps the field the sanitizer deletes', async () => {
    const key = randomUUID();
    const first = await send(url, 'POST', '/defects/card', { key });
    expect(first.json()).toMatchObject({ cardNumber: '4111111111111111' });
    const replay = await send(url, 'POST', '/defects/card', { key });
    expect(replay.json()).not.toHaveProperty('cardNumber');
    expect((await stored('DefectsController.card', key)).body.toString()).not.toContain('4111');
  });

  it('fingerprints the concrete path, the query and the method, not the route pattern', async () => {
    const key = randomUUID();
    expect((await send(url, 'PUT', '/defects/orders/1', { key, body: { a: 1 } })).status).toBe(200);
    const other = await send(url, 'PUT', '/defects/orders/2', { key, body: { a: 1 } });
    expect(other.status).toBe(422);
    expect(other.json()).toMatchObject({ code: 'idempotency-key-reused' });
    expect(probe.count('order:2')).toBe(0);

    const charge = randomUUID();
    expect((await send(url, 'POST', '/defects/charge?amount=100', { key: charge })).status).toBe(
      201,
    );
    expect(
      (await send(url, 'POST', '/defects/charge?amount=1000000', { key: charge })).status,
    ).toBe(422);
    const reordered = await send(url, 'POST', '/defects/charge?amount=100', { key: charge });
    expect(reordered.headers.get('idempotent-replayed')).toBe('true');

    const any = randomUUID();
    expect((await send(url, 'POST', '/defects/any', { key: any })).status).toBe(200);
    expect((await send(url, 'DELETE', '/defects/any', { key: any })).status).toBe(422);
    expect(probe.count('any')).toBe(1);
  });

  it('refuses a body nothing parsed before the check (415) rather than fingerprint it as null', async () => {
    const key = randomUUID();
    const reply = await send(url, 'POST', '/defects/text', {
      key,
      rawBody: 'amount=100',
      headers: { 'content-type': 'application/x-custom' },
    });
    expect(reply.status).toBe(415);
    // Fastify refuses a type it has no parser for itself; Express passes it on unparsed.
    if (adapter === 'express')
      expect(reply.json()).toMatchObject({ code: 'idempotency-body-unreadable' });
    expect(probe.count('text')).toBe(0);
    await expect(store.find({ scope: 'DefectsController.text', key })).resolves.toBeNull();
  });

  it('replays a Date result as the first response was: same status, content type and bytes', async () => {
    const key = randomUUID();
    const first = await send(url, 'POST', '/defects/date', { key });
    const replay = await send(url, 'POST', '/defects/date', { key });
    expect(replay.status).toBe(first.status);
    expect(replay.headers.get('content-type')).toBe(first.headers.get('content-type'));
    expect(replay.text).toBe(first.text);
    expect(probe.count('date')).toBe(1);
  });

  it('replays a Buffer with application/octet-stream as those bytes, not as JSON', async () => {
    const key = randomUUID();
    const first = await fetch(`${url}/defects/bytes`, {
      method: 'POST',
      headers: { 'idempotency-key': key },
    });
    const firstBytes = Buffer.from(await first.arrayBuffer());
    const replay = await fetch(`${url}/defects/bytes`, {
      method: 'POST',
      headers: { 'idempotency-key': key },
    });
    const replayBytes = Buffer.from(await replay.arrayBuffer());
    // Fastify sends the Buffer as it is; Express (Nest's adapter) sends it as JSON. Either way
    // the replay is what the first caller got.
    if (adapter === 'fastify')
      expect(firstBytes).toEqual(Buffer.from([0, 1, 2, 250, 251, 252, 10, 13]));
    expect(replayBytes).toEqual(firstBytes);
    expect(replay.headers.get('content-type')).toBe(first.headers.get('content-type'));
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
  });

  it('hands an outer interceptor a copy of the replayed bytes, which it may overwrite', async () => {
    const key = randomUUID();
    const send = async () => {
      const reply = await fetch(`${url}/defects/bytes-overwritten`, {
        method: 'POST',
        headers: { 'idempotency-key': key },
      });
      return Buffer.from(await reply.arrayBuffer());
    };
    const first = await send();
    const replays = [await send(), await send()];
    expect(replays).toEqual([first, first]);
    expect(probe.count('bytes-overwritten')).toBe(1);
  });

  it('replays a body with multi-byte UTF-8 characters byte for byte', async () => {
    const key = randomUUID();
    const send = () =>
      fetch(`${url}/defects/unicode`, { method: 'POST', headers: { 'idempotency-key': key } });
    const first = await send();
    const firstBytes = Buffer.from(await first.arrayBuffer());
    const replay = await send();
    const replayBytes = Buffer.from(await replay.arrayBuffer());
    expect(JSON.parse(firstBytes.toString('utf8'))).toMatchObject({ text: 'café — 日本語 € 🧾' });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replayBytes).toEqual(firstBytes);
    expect(replay.headers.get('content-length')).toBe(String(firstBytes.length));
    expect(probe.count('unicode')).toBe(1);
  });

  it('refuses a header key outside printable ASCII (UTF-8 bytes would arrive as mojibake)', async () => {
    const raw = Buffer.from('заказ-42', 'utf8').toString('latin1');
    const reply = await sendRaw(url, 'POST', '/defects/card', ['Idempotency-Key', raw], '{}');
    expect(reply.status).toBe(400);
    expect(reply.json()).toMatchObject({ code: 'idempotency-key-invalid' });
    expect(reply.text).toContain('printable ASCII');
    expect(probe.count('card')).toBe(0);
  });

  it('makes key templates injective: customer "1:2" with order "3" is not customer "1" with order "2:3"', async () => {
    const a = await send(url, 'POST', '/defects/template', {
      body: { customerId: '1:2', orderId: '3' },
    });
    const b = await send(url, 'POST', '/defects/template', {
      body: { customerId: '1', orderId: '2:3' },
    });
    expect(a.json()).toMatchObject({ customerId: '1:2' });
    expect(b.json()).toMatchObject({ customerId: '1' });
    expect(b.headers.get('idempotent-replayed')).toBeNull();
    expect(probe.count('template:1:2|3')).toBe(1);
    expect(probe.count('template:1|2:3')).toBe(1);
    const keys = (await store.list({ scope: 'DefectsController.template' }))
      .map((r) => r.key)
      .sort();
    expect(keys).toEqual(['order:1%3A2:3', 'order:1:2%3A3']);
  });

  it('an application catch-all filter (APP_FILTER) sees the refusals (400, 409, 422)', async () => {
    const filtered = await startLoggedHttpApp(
      adapter,
      {
        imports: [IdempotencyModule.forRoot({ store, defaults: { waitTimeout: 0 } })],
        controllers: [DefectsController],
        providers: [{ provide: APP_FILTER, useClass: RenderEverything }],
      },
      new CapturedLogs(),
    );
    try {
      const missing = await send(filtered.url, 'POST', '/defects/card');
      expect(missing.json()).toEqual({
        renderedBy: 'application',
        status: 400,
        code: 'idempotency-key-missing',
      });
      const key = randomUUID();
      await send(filtered.url, 'PUT', '/defects/orders/1', { key, body: {} });
      const reused = await send(filtered.url, 'PUT', '/defects/orders/9', { key, body: {} });
      expect(reused.json()).toEqual({
        renderedBy: 'application',
        status: 422,
        code: 'idempotency-key-reused',
      });
    } finally {
      await filtered.app.close();
    }
  });

  it('never writes the tenant (or the key) into a log line, not even on a completion retry', async () => {
    const flaky = new FlakyStore(dataSource, { schema });
    const captured = new CapturedLogs();
    const tenantApp = await startLoggedHttpApp(
      adapter,
      {
        imports: [
          IdempotencyModule.forRoot({
            store: flaky,
            tenant: () => 'ann.smith@example.com',
          }),
        ],
        controllers: [DefectsController],
      },
      captured,
    );
    try {
      const key = `raw-key-${randomUUID()}`;
      expect((await send(tenantApp.url, 'POST', '/defects/card', { key })).status).toBe(201);
      expect(captured.text()).toContain('completion of DefectsController.card/#');
      expect(captured.text()).not.toContain('ann.smith');
      expect(captured.text()).not.toContain(key);
    } finally {
      await tenantApp.app.close();
    }
  });

  if (adapter === 'express') {
    it('fingerprints a multipart upload parsed before the check (file and fields), and refuses one parsed after', async () => {
      const upload = (name: string, content: string, path: string, key: string) => {
        const form = new FormData();
        form.append('file', new Blob([content]), name);
        return fetch(`${url}${path}`, {
          method: 'POST',
          body: form,
          headers: { 'idempotency-key': key },
        });
      };
      const key = randomUUID();
      expect((await upload('a.txt', 'first', '/uploads/parsed-first', key)).status).toBe(201);
      expect((await upload('a.txt', 'other', '/uploads/parsed-first', key)).status).toBe(422);
      expect((await upload('b.txt', 'first', '/uploads/parsed-first', key)).status).toBe(422);
      const same = await upload('a.txt', 'first', '/uploads/parsed-first', key);
      expect(same.headers.get('idempotent-replayed')).toBe('true');
      expect(probe.count('parsed-first')).toBe(1);

      const after = await upload('a.txt', 'first', '/uploads/parsed-after', randomUUID());
      expect(after.status).toBe(415);
      expect(await after.json()).toMatchObject({ code: 'idempotency-body-unreadable' });
      expect(probe.count('parsed-after')).toBe(0);
    });
  }
});

describe('misconfigurations refused at bootstrap', () => {
  const store = () => new InMemoryIdempotencyStore();
  const boot = async (metadata: Parameters<typeof Test.createTestingModule>[0]) => {
    const moduleRef = await Test.createTestingModule(metadata)
      .setLogger(new CapturedLogs())
      .compile();
    const app = moduleRef.createNestApplication({ logger: false });
    try {
      await app.init();
    } finally {
      await app.close().catch(() => undefined);
    }
  };
  const refusal = async (metadata: Parameters<typeof Test.createTestingModule>[0]) => {
    try {
      await boot(metadata);
    } catch (error) {
      return error as Error;
    }
    throw new Error('the application started');
  };

  it('IdempotencyModule.forRoot imported twice, naming the importers', async () => {
    @Module({
      imports: [IdempotencyModule.forRoot({ store: store() })],
      controllers: [DefectsController],
    })
    class PaymentsFeatureModule {}
    const error = await refusal({
      imports: [IdempotencyModule.forRoot({ store: store() }), PaymentsFeatureModule],
    });
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect(error.message).toMatch(
      /^IdempotencyModule\.forRoot\/forRootAsync is configured 2 times \(imported by /,
    );
    expect(error.message).toContain('PaymentsFeatureModule');
  });

  it('two controllers of the same name (URI versioning) would share a scope', async () => {
    const v1 = (() => {
      @Controller({ path: 'orders', version: '1' })
      class OrdersController {
        @Post()
        @Idempotent()
        create() {
          return 1;
        }
      }
      return OrdersController;
    })();
    const v2 = (() => {
      @Controller({ path: 'orders', version: '2' })
      class OrdersController {
        @Post()
        @Idempotent()
        create() {
          return 2;
        }
      }
      return OrdersController;
    })();
    const error = await refusal({
      imports: [IdempotencyModule.forRoot({ store: store() })],
      controllers: [v1, v2],
    });
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect(error.message).toContain(
      'OrdersController.create and OrdersController.create would share the idempotency scope "OrdersController.create"',
    );
    expect(error.message).toContain("@Idempotent({ scope: '…' })");
  });

  it.each([
    [
      'a service method',
      () => {
        @Injectable()
        class PaymentsService {
          @Idempotent()
          charge() {
            return 1;
          }
        }
        return {
          providers: [PaymentsService],
          name: 'PaymentsService.charge',
          kind: 'a provider (a service)',
        };
      },
    ],
    [
      'a service class',
      () => {
        @Injectable()
        @Idempotent()
        class LedgerService {
          post() {
            return 1;
          }
        }
        return {
          providers: [LedgerService],
          name: 'LedgerService',
          kind: 'a provider (a service)',
        };
      },
    ],
    [
      // Gateways are a door now (test/gateways); only a method that handles no message is refused.
      'a WebSocket gateway method that is not a @SubscribeMessage handler',
      () => {
        @WebSocketGateway()
        class EventsGateway {
          @SubscribeMessage('pay')
          pay() {
            return 1;
          }
          @Idempotent({ key: 'data.id' })
          helper() {
            return 1;
          }
        }
        return {
          providers: [EventsGateway],
          name: 'EventsGateway.helper',
          kind: 'a method of a WebSocket gateway that is not a @SubscribeMessage handler',
        };
      },
    ],
  ])('12: @Idempotent on %s, which nothing would protect', async (_label, make) => {
    const { providers, name, kind } = make();
    const error = await refusal({
      imports: [IdempotencyModule.forRoot({ store: store() })],
      providers,
    });
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect(error.message).toMatch(new RegExp(`^${name.replace('.', '\\.')}: @Idempotent is on `));
    expect(error.message).toContain(kind);
    // Issue 20, item 11: Nest does run interceptors on a gateway's handlers.
    if (kind.includes('gateway')) expect(error.message).not.toContain('Nest does not intercept');
  });

  it('@Idempotent on a controller method that is not a handler', async () => {
    @Controller('x')
    class HelperController {
      @Get()
      list() {
        return [];
      }
      @Idempotent()
      helper() {
        return 1;
      }
    }
    const error = await refusal({
      imports: [IdempotencyModule.forRoot({ store: store() })],
      controllers: [HelperController],
    });
    expect(error.message).toMatch(
      /^HelperController\.helper: @Idempotent is on a method that is not a route or message handler/,
    );
  });

  it('a ttl past what every store can hold (10^16 ms), naming the option; P30D is a fine default', async () => {
    @Controller('ttl')
    class TtlController {
      @Post()
      @Idempotent({ ttl: 1e16 })
      create() {
        return 1;
      }
    }
    const error = await refusal({
      imports: [IdempotencyModule.forRoot({ store: store() })],
      controllers: [TtlController],
    });
    expect(error.message).toBe(
      'TtlController.create: option "ttl" is too long (10000000000000000); at most 100 years',
    );
    await expect(
      boot({
        imports: [IdempotencyModule.forRoot({ store: store(), defaults: { ttl: 'P30D' } })],
        controllers: [DefectsController],
      }),
    ).resolves.toBeUndefined();
  });

  it('forgetting IdempotencyModule altogether fails the bootstrap with what to add', async () => {
    const error = await refusal({ controllers: [DefectsController] });
    expect(error.message).toBe(
      '@Idempotent is used but IdempotencyModule is not configured: add IdempotencyModule.forRoot({ store }) (or forRootAsync) to the root module',
    );
  });
});
