import { Controller, HttpCode, Post } from '@nestjs/common';
import type { Server } from 'node:http';
import { randomUUID } from 'node:crypto';
import {
  Idempotent,
  IdempotencyModule,
  InMemoryIdempotencyStore,
  Lease,
  StoredPayload,
} from 'nest-idempotency';
import { ADAPTERS, send, startHttpApp } from '../support/http-app';

/**
 * A graceful shutdown (`app.close()`, as on SIGTERM in a rolling deploy)
 * while a response is held back until its record is stored: the server
 * closes idle connections at once, and the held one is not idle, so its
 * client still gets the response once the record is written.
 */
function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** The in-memory store whose completions wait for `open`, once `armed`. */
class GatedStore extends InMemoryIdempotencyStore {
  armed = false;
  readonly completing = deferred();
  readonly open = deferred();

  override async complete(lease: Lease, payload: StoredPayload): Promise<void> {
    if (this.armed) {
      this.completing.resolve();
      await this.open.promise;
    }
    return super.complete(lease, payload);
  }
}

let runs = 0;

@Controller('shutdown')
class ShutdownController {
  @Post('charge')
  @HttpCode(200)
  @Idempotent({ scope: 'shutdown-charges' })
  charge() {
    return { charged: ++runs };
  }
}

describe.each(ADAPTERS)('a graceful shutdown during a held response (%s)', (adapter) => {
  it('lets the held response out once its record is stored, instead of cutting the connection', async () => {
    const store = new GatedStore();
    const { app, url } = await startHttpApp(adapter, {
      imports: [IdempotencyModule.forRoot({ store, purge: false })],
      controllers: [ShutdownController],
    });
    const server = app.getHttpServer() as Server;
    const idleClosed = deferred();
    const closeIdle = server.closeIdleConnections.bind(server);
    server.closeIdleConnections = () => {
      closeIdle();
      idleClosed.resolve();
    };
    store.armed = true;
    const before = runs;
    const reply = send(url, 'POST', '/shutdown/charge', { key: randomUUID(), body: {} });
    await store.completing.promise;
    const closing = app.close();
    await idleClosed.promise;
    store.open.resolve();
    const answered = await reply;
    expect(answered.status).toBe(200);
    expect(answered.json()).toEqual({ charged: before + 1 });
    // The client keeps its connection alive; the server would wait out its keep-alive timeout.
    server.closeAllConnections();
    await closing;
  });
});
