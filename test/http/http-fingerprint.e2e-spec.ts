import {
  Body,
  Controller,
  HttpCode,
  INestApplication,
  Post,
  Query,
  UploadedFile,
  UseInterceptors,
} from '@nestjs/common';
import { FileInterceptor } from '@nestjs/platform-express';
import { createHash, randomUUID } from 'node:crypto';
import { encodeHttpResponse, Idempotent, IdempotencyModule } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { ADAPTERS, AdapterName, send, startHttpApp } from '../support/http-app';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';
import { Probe } from './fixtures';

/**
 * The default fingerprint over real sockets (issue 20, item 4): every part of
 * a client's request that reaches the handler counts, and nothing a client
 * sends is taken for a file's bytes.
 */
const probe = new Probe();
const sha256 = (bytes: Buffer | string) => createHash('sha256').update(bytes).digest('hex');
/** How a client's JSON body can spell a serialized Buffer: `{ "type": "Buffer", "data": [...] }`. */
const bufferShaped = (text: string) => ({ type: 'Buffer', data: [...Buffer.from(text)] });

/**
 * A multer storage engine that keeps neither the bytes nor a path, as one
 * streaming to object storage does: it reports what the storage said (here an
 * ETag of the content, as S3 gives one).
 */
class ObjectStorage {
  _handleFile(
    _request: unknown,
    file: { stream: NodeJS.ReadableStream },
    done: (error: Error | null, info?: { etag: string; size: number }) => void,
  ): void {
    const chunks: Buffer[] = [];
    file.stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    file.stream.on('error', (error: Error) => done(error));
    file.stream.on('end', () => {
      const content = Buffer.concat(chunks);
      done(null, { etag: createHash('md5').update(content).digest('hex'), size: content.length });
    });
  }
  _removeFile(_request: unknown, _file: unknown, done: (error: Error | null) => void): void {
    done(null);
  }
}

@Controller('fp')
class FingerprintController {
  @Post('payments')
  @Idempotent()
  pay(@Body() body: { owner: string; amount: number }) {
    probe.ran('pay');
    return { owner: body.owner, amount: body.amount, token: randomUUID() };
  }

  @Post('search')
  @Idempotent()
  @HttpCode(200)
  search(@Query('tag') tag: string | string[]) {
    probe.ran('search');
    return { tags: ([] as string[]).concat(tag), token: randomUUID() };
  }

  @Post('archived')
  @Idempotent()
  @UseInterceptors(FileInterceptor('file', { storage: new ObjectStorage() }))
  archive(@UploadedFile() file: { etag: string }) {
    probe.ran('archive');
    return { etag: file.etag, token: randomUUID() };
  }

  @Post('documents')
  @Idempotent()
  @UseInterceptors(FileInterceptor('file'))
  upload(@UploadedFile() file: { originalname: string }, @Body() fields: Record<string, string>) {
    probe.ran('upload');
    return { name: file.originalname, fields, token: randomUUID() };
  }
}

describe.each(ADAPTERS)('the default fingerprint, over %s', (adapter: AdapterName) => {
  const schema = scratchSchema('fingerprint');
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    dataSource = await openDataSource();
    store = new TypeOrmIdempotencyStore(dataSource, { schema, ensureSchema: true });
    ({ app, url } = await startHttpApp(adapter, {
      imports: [IdempotencyModule.forRoot({ store })],
      controllers: [FingerprintController],
    }));
  });
  afterAll(async () => {
    await app?.close();
    await dropSchema(dataSource, schema);
    await dataSource.destroy();
  });
  beforeEach(() => probe.executions.clear());

  const pay = (key: string, body: unknown) => send(url, 'POST', '/fp/payments', { key, body });

  it('counts the fields beside "type": "Buffer" and "data" in a JSON body: another owner or amount is 422', async () => {
    const payment = (owner: string, amount: number) => ({
      ...bufferShaped('invoice 7'),
      owner,
      amount,
    });
    const key = randomUUID();
    const first = await pay(key, payment('alice', 100));
    expect(first.status).toBe(201);
    for (const changed of [payment('bob', 100), payment('alice', 1000000)]) {
      const reused = await pay(key, changed);
      expect(reused.status).toBe(422);
      expect(reused.json()).toMatchObject({ code: 'idempotency-key-reused' });
    }
    const retry = await pay(key, payment('alice', 100));
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.text).toBe(first.text);

    // The same one level down.
    const nested = randomUUID();
    const order = (owner: string) => ({ order: { ...bufferShaped('invoice 7'), owner } });
    expect((await pay(nested, order('alice'))).status).toBe(201);
    expect((await pay(nested, order('bob'))).status).toBe(422);
    expect(probe.count('pay')).toBe(2);
  });

  it('tells a Buffer-shaped object from the string "bytes:<sha-256>" of its bytes, in a field, an array or as the whole body', async () => {
    const tag = `bytes:${sha256(Buffer.from('invoice 7'))}`;
    const pairs: [unknown, unknown][] = [
      [{ document: bufferShaped('invoice 7') }, { document: tag }],
      [
        { documents: [bufferShaped('a'), bufferShaped('b')] },
        { documents: [`bytes:${sha256('a')}`, `bytes:${sha256('b')}`] },
      ],
      [bufferShaped('invoice 7'), { type: 'Buffer', data: [...Buffer.from('invoice 8')] }],
    ];
    for (const [first, second] of pairs) {
      const key = randomUUID();
      expect((await pay(key, first)).status).toBe(201);
      expect((await pay(key, second)).status).toBe(422);
    }
    expect(probe.count('pay')).toBe(pairs.length);
  });

  it('keeps the order of a repeated query parameter (the handler gets it as an array), not the order of names', async () => {
    const key = randomUUID();
    const first = await send(url, 'POST', '/fp/search?tag=red&tag=blue&page=1', { key });
    expect(first.json()).toMatchObject({ tags: ['red', 'blue'] });
    expect((await send(url, 'POST', '/fp/search?tag=blue&tag=red&page=1', { key })).status).toBe(
      422,
    );
    const reordered = await send(url, 'POST', '/fp/search?page=1&tag=red&tag=blue', { key });
    expect(reordered.headers.get('idempotent-replayed')).toBe('true');
    expect(probe.count('search')).toBe(1);
  });

  it('still replays a record written before the upgrade for a request 0.2 fingerprinted unambiguously', async () => {
    const key = randomUUID();
    const body = { owner: 'alice', amount: 100, note: 'bytes: not a digest' };
    // The text 0.2 hashed: method, path, query, canonical JSON body, one per line.
    const legacy = sha256(
      'POST\n/fp/payments\n\n{"amount":100,"note":"bytes: not a digest","owner":"alice"}',
    );
    await seed(key, legacy, '{"from":"before the upgrade"}');
    const retry = await pay(key, body);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.json()).toEqual({ from: 'before the upgrade' });
    expect(probe.count('pay')).toBe(0);
  });

  it('refuses (422) the retry of a record written before the upgrade when 0.2 read its body as bytes: that fingerprint also stood for other requests', async () => {
    const key = randomUUID();
    const document = bufferShaped('invoice 7');
    // 0.2 hashed the Buffer-shaped object as its bytes alone, which bob's request matched too.
    const legacy = sha256(
      `POST\n/fp/payments\n\n{"amount":100,"document":"bytes:${sha256(Buffer.from('invoice 7'))}","owner":"alice"}`,
    );
    await seed(key, legacy, '{"from":"before the upgrade"}');
    const retry = await pay(key, { document, owner: 'alice', amount: 100 });
    expect(retry.status).toBe(422);
    expect(probe.count('pay')).toBe(0);
  });

  if (adapter === 'express') {
    it('counts the text fields of a multipart body beside its file', async () => {
      const upload = (owner: string, content: string, key: string) => {
        const form = new FormData();
        form.append('owner', owner);
        form.append('file', new Blob([content]), 'a.txt');
        return fetch(`${url}/fp/documents`, {
          method: 'POST',
          body: form,
          headers: { 'idempotency-key': key },
        });
      };
      const key = randomUUID();
      expect((await upload('alice', 'scan', key)).status).toBe(201);
      expect((await upload('bob', 'scan', key)).status).toBe(422);
      expect((await upload('alice', 'other scan', key)).status).toBe(422);
      const same = await upload('alice', 'scan', key);
      expect(same.headers.get('idempotent-replayed')).toBe('true');
      expect(probe.count('upload')).toBe(1);
    });
  }

  if (adapter === 'express') {
    it('tells apart two files a storage engine kept neither in memory nor on disk, by what the engine recorded', async () => {
      const upload = (content: string, key: string) => {
        const form = new FormData();
        form.append('file', new Blob([content]), 'scan.pdf');
        return fetch(`${url}/fp/archived`, {
          method: 'POST',
          body: form,
          headers: { 'idempotency-key': key },
        });
      };
      const key = randomUUID();
      expect((await upload('page 1', key)).status).toBe(201);
      // Same name, type and size: only the engine's record of the content differs.
      expect((await upload('page 2', key)).status).toBe(422);
      expect((await upload('page 1', key)).headers.get('idempotent-replayed')).toBe('true');
      expect(probe.count('archive')).toBe(1);
    });
  }

  /** A COMPLETE record as an earlier version left it, with that version's fingerprint. */
  async function seed(key: string, fingerprint: string, json: string): Promise<void> {
    const acquired = await store.tryAcquire({
      scope: 'FingerprintController.pay',
      key,
      leaseMs: 30_000,
      waitTimeoutMs: 0,
      ttlMs: 3_600_000,
      fingerprint,
    });
    if (acquired.kind !== 'acquired') throw new Error(`seeding found ${acquired.kind}`);
    await store.complete(
      acquired.lease,
      encodeHttpResponse({
        status: 201,
        headers: { 'content-type': 'application/json; charset=utf-8' },
        body: Buffer.from(json),
      }),
    );
  }
});
