import type { ServerResponse } from 'node:http';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { storedFileFields, type FingerprintParts } from './fingerprint';

/** The parts of an Express or Fastify request the HTTP door reads. */
export interface HttpRequest {
  method: string;
  url: string;
  originalUrl?: string;
  headers: Record<string, string | string[] | undefined>;
  rawHeaders?: string[];
  raw?: { rawHeaders?: string[] };
  body?: unknown;
  params?: Record<string, unknown>;
  query?: Record<string, unknown>;
  user?: unknown;
  file?: unknown;
  files?: unknown;
}

/** The Node response under an Express (itself) or a Fastify (`reply.raw`) response. */
export function nodeResponse(response: unknown): ServerResponse {
  return (
    response && typeof response === 'object' && 'raw' in response ? response.raw : response
  ) as ServerResponse;
}

/** True when the request announced a body (a length, or a chunked transfer). */
export function hasBody(request: HttpRequest): boolean {
  const length = Number(request.headers['content-length']);
  return (
    (Number.isFinite(length) && length > 0) || request.headers['transfer-encoding'] !== undefined
  );
}

/** The body's size: as declared, else as parsed. */
export function bodySize(request: HttpRequest): number {
  const declared = Number(request.headers['content-length']);
  if (Number.isFinite(declared) && declared > 0) return declared;
  const body = request.body;
  if (body === undefined || body === null) return 0;
  if (typeof body === 'string' || Buffer.isBuffer(body)) return Buffer.byteLength(body);
  return Buffer.byteLength(JSON.stringify(body) ?? '');
}

/** What the default fingerprint covers of this request. */
export function fingerprintParts(request: HttpRequest): FingerprintParts {
  const url = request.originalUrl ?? request.url;
  const q = url.indexOf('?');
  return {
    method: request.method,
    path: q < 0 ? url : url.slice(0, q),
    query: q < 0 ? '' : url.slice(q + 1),
    body: request.body,
    files: uploadedFiles(request),
    params: request.params,
  };
}

/** multer's `file` / `files`, described by name, type, size and a digest of the content, never the bytes. */
function uploadedFiles(request: HttpRequest): unknown {
  if (request.file === undefined && request.files === undefined) return undefined;
  const describe = (file: unknown): unknown => {
    const f = file as {
      fieldname?: string;
      originalname?: string;
      mimetype?: string;
      size?: number;
      buffer?: Buffer;
      path?: string;
    };
    return {
      field: f.fieldname,
      name: f.originalname,
      type: f.mimetype,
      size: f.size,
      // The content, whether multer kept it in memory or wrote it to disk (under a random name).
      content: Buffer.isBuffer(f.buffer)
        ? createHash('sha256').update(f.buffer).digest('hex')
        : f.path
          ? createHash('sha256').update(readFileSync(f.path)).digest('hex')
          : storedFileFields(file as object),
    };
  };
  const files = request.files;
  return {
    file: request.file === undefined ? null : describe(request.file),
    files: Array.isArray(files)
      ? files.map(describe)
      : files && typeof files === 'object'
        ? Object.fromEntries(
            Object.entries(files).map(([k, v]) => [k, ([] as unknown[]).concat(v).map(describe)]),
          )
        : null,
  };
}
