import { Body, Controller, INestApplication, Post } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyModule } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { ADAPTERS, send, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { Probe } from './fixtures';

/**
 * Which handler a request reaches is Nest's `context.getHandler()`: a function,
 * not a name. One function can serve several controllers (inherited from a
 * base class), and a wrapping method decorator can rename it.
 */

const probe = new Probe();

/** A generic base controller: its handler is inherited, so the same function serves every subclass. */
abstract class ResourceController {
  protected abstract readonly resource: string;

  @Post()
  @Idempotent()
  create(@Body() body: { name: string }) {
    probe.ran(this.resource);
    return { resource: this.resource, id: randomUUID(), name: body.name };
  }
}

@Controller('cats')
class CatsController extends ResourceController {
  protected readonly resource = 'cat';
}

@Controller('dogs')
class DogsController extends ResourceController {
  protected readonly resource = 'dog';
}

/**
 * A method decorator in the style of tracing/metrics libraries: it replaces the
 * method with a wrapper (here named `traced`) and copies the metadata over, so
 * Nest still sees @Post and @Idempotent on the function it calls.
 */
function Traced(): MethodDecorator {
  return (_target, _key, descriptor: PropertyDescriptor) => {
    const original = descriptor.value as (...args: unknown[]) => unknown;
    descriptor.value = function traced(this: unknown, ...args: unknown[]) {
      probe.ran('traced');
      return original.apply(this, args);
    };
    for (const key of Reflect.getMetadataKeys(original)) {
      Reflect.defineMetadata(key, Reflect.getMetadata(key, original), descriptor.value);
    }
  };
}

@Controller('traced')
class TracedController {
  @Traced()
  @Post()
  @Idempotent()
  charge() {
    probe.ran('charge');
    return { id: randomUUID() };
  }
}

describe.each(ADAPTERS)('HTTP handler identity over %s', (adapter) => {
  let app: INestApplication;
  let url: string;
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  const schema = scratchSchema('http_ident');

  beforeAll(async () => {
    dataSource = await openDataSource();
    store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
    ({ app, url } = await startHttpApp(adapter, {
      imports: [IdempotencyModule.forRoot({ store })],
      controllers: [CatsController, DogsController, TracedController],
    }));
  });
  afterAll(async () => {
    await app?.close();
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });
  beforeEach(() => probe.executions.clear());

  it('controllers sharing an inherited handler keep their own records: one never replays the other', async () => {
    const k = randomUUID();
    const cat = await send(url, 'POST', '/cats', { key: k, body: { name: 'Rex' } });
    const dog = await send(url, 'POST', '/dogs', { key: k, body: { name: 'Rex' } });
    expect(cat.status).toBe(201);
    expect(dog.status).toBe(201);
    expect(dog.headers.get('idempotent-replayed')).toBeNull();
    expect(cat.json()).toMatchObject({ resource: 'cat' });
    expect(dog.json()).toMatchObject({ resource: 'dog' });
    expect(probe.count('cat')).toBe(1);
    expect(probe.count('dog')).toBe(1);

    const dogAgain = await send(url, 'POST', '/dogs', { key: k, body: { name: 'Rex' } });
    expect(dogAgain.headers.get('idempotent-replayed')).toBe('true');
    expect(dogAgain.text).toBe(dog.text);
    expect(probe.count('dog')).toBe(1);

    await expect(store.find({ scope: 'CatsController.create', key: k })).resolves.toMatchObject({
      state: 'COMPLETE',
    });
    await expect(store.find({ scope: 'DogsController.create', key: k })).resolves.toMatchObject({
      state: 'COMPLETE',
    });
  });

  it('a handler renamed by a wrapping method decorator is still idempotent (not a 500)', async () => {
    const k = randomUUID();
    const first = await send(url, 'POST', '/traced', { key: k });
    expect(first.status).toBe(201);
    const again = await send(url, 'POST', '/traced', { key: k });
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text).toBe(first.text);
    expect(probe.count('charge')).toBe(1);
    await expect(store.find({ scope: 'TracedController.charge', key: k })).resolves.toMatchObject({
      state: 'COMPLETE',
    });

    const missing = await send(url, 'POST', '/traced');
    expect(missing.status).toBe(400);
    expect(missing.json()).toMatchObject({ code: 'idempotency-key-missing' });
    expect(probe.count('charge')).toBe(1);
  });
});
