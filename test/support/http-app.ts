import { INestApplication, ModuleMetadata } from '@nestjs/common';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { AddressInfo } from 'node:net';

export type AdapterName = 'express' | 'fastify';
export const ADAPTERS: AdapterName[] = ['express', 'fastify'];

/** Starts a Nest HTTP application on a real socket (port 0) with the given adapter. */
export async function startHttpApp(
  adapter: AdapterName,
  metadata: ModuleMetadata,
  /** Runs before the app listens (enableCors, global pipes…). */
  configure?: (app: INestApplication) => void,
): Promise<{ app: INestApplication; url: string }> {
  const moduleRef = await Test.createTestingModule(metadata).compile();
  const app =
    adapter === 'fastify'
      ? moduleRef.createNestApplication(new FastifyAdapter(), { logger: false })
      : moduleRef.createNestApplication({ logger: false });
  configure?.(app);
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as AddressInfo;
  return { app, url: `http://127.0.0.1:${address.port}` };
}

export interface Reply {
  status: number;
  headers: Headers;
  text: string;
  json: () => unknown;
}

export async function send(
  url: string,
  method: string,
  path: string,
  options: {
    key?: string | string[];
    body?: unknown;
    rawBody?: string;
    headers?: Record<string, string>;
  } = {},
): Promise<Reply> {
  const headers = new Headers(options.headers);
  for (const key of ([] as string[]).concat(options.key ?? []))
    headers.append('Idempotency-Key', key);
  let body: string | undefined = options.rawBody;
  if (options.body !== undefined) body = JSON.stringify(options.body);
  if (body !== undefined && !headers.has('content-type'))
    headers.set('content-type', 'application/json');
  const response = await fetch(`${url}${path}`, { method, headers, body });
  const text = await response.text();
  return { status: response.status, headers: response.headers, text, json: () => JSON.parse(text) };
}

/** Sends raw header lines (e.g. the same header twice), which fetch would merge. */
export function sendRaw(
  url: string,
  method: string,
  path: string,
  rawHeaders: string[],
  body?: string,
): Promise<Reply> {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const http = require('node:http') as typeof import('node:http');
  return new Promise((resolve, reject) => {
    const target = new URL(`${url}${path}`);
    const headers = ['host', target.host, ...rawHeaders];
    if (body !== undefined)
      headers.push(
        'content-type',
        'application/json',
        'content-length',
        String(Buffer.byteLength(body)),
      );
    const request = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        method,
        headers: headers as unknown as Record<string, string>,
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (c: Buffer) => chunks.push(c));
        response.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const h = new Headers();
          for (const [k, v] of Object.entries(response.headers))
            if (v !== undefined) h.set(k, String(v));
          resolve({
            status: response.statusCode ?? 0,
            headers: h,
            text,
            json: () => JSON.parse(text),
          });
        });
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}
