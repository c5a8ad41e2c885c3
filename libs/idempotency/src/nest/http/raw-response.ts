import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';

/** A response as the adapter finished it: status, headers and body bytes, before any byte is sent. */
export interface FinishedResponse {
  status: number;
  /** Lower-case names. */
  headers: OutgoingHttpHeaders;
  body: Buffer;
}

/** What to write instead: the finished response as it is, or another one. */
export type Outgoing =
  | { kind: 'as-finished' }
  | { kind: 'replace'; status: number; headers: OutgoingHttpHeaders; body: Buffer };

type WriteHead = ServerResponse['writeHead'];
type Write = ServerResponse['write'];
type End = ServerResponse['end'];
type Callback = (error?: Error | null) => void;

/**
 * Holds back what Express or Fastify write to the Node response until
 * `decide` has seen it: both adapters end a response with `writeHead` (Fastify)
 * and `end(body)`, after every interceptor, serializer and filter ran, so
 * what is held is exactly what the client would receive. `decide` may take its
 * time (storing the result); nothing reaches the socket until it answers.
 *
 * `release()` puts the response's own methods back, before or after it ended.
 */
export class HeldResponse {
  private readonly originals: { writeHead: WriteHead; write: Write; end: End };
  private head?: { status: number; headers: OutgoingHttpHeaders };
  private readonly chunks: Buffer[] = [];
  private callbacks: Callback[] = [];
  private released = false;

  constructor(
    private readonly res: ServerResponse,
    private readonly decide: (finished: FinishedResponse) => Promise<Outgoing>,
  ) {
    this.originals = { writeHead: res.writeHead, write: res.write, end: res.end };
    // Own properties shadow the prototype's methods for this one response.
    res.writeHead = ((status: number, ...rest: unknown[]) => {
      this.head = { status, headers: headersOf(rest) };
      return res;
    }) as WriteHead;
    res.write = ((chunk: unknown, ...rest: unknown[]) => {
      this.collect(chunk, rest);
      return true;
    }) as Write;
    res.end = ((...args: unknown[]) => {
      const chunk = typeof args[0] === 'function' ? undefined : args[0];
      this.collect(chunk, args.slice(1));
      if (typeof args[0] === 'function') this.callbacks.push(args[0] as Callback);
      this.restore();
      void this.flush();
      return res;
    }) as End;
  }

  /** Stops holding: the response's own methods are back (nothing held is written). */
  release(): void {
    this.restore();
  }

  private collect(chunk: unknown, rest: unknown[]): void {
    const encoding = typeof rest[0] === 'string' ? (rest[0] as BufferEncoding) : 'utf8';
    for (const arg of rest) if (typeof arg === 'function') this.callbacks.push(arg as Callback);
    if (chunk === undefined || chunk === null) return;
    if (typeof chunk === 'string') this.chunks.push(Buffer.from(chunk, encoding));
    else if (chunk instanceof Uint8Array) this.chunks.push(Buffer.from(chunk));
  }

  private restore(): void {
    if (this.released) return;
    this.released = true;
    const res = this.res as unknown as Record<string, unknown>;
    delete res.writeHead;
    delete res.write;
    delete res.end;
    // Own methods set before ours (another wrapper) are put back as they were.
    if (this.res.writeHead !== this.originals.writeHead)
      this.res.writeHead = this.originals.writeHead;
    if (this.res.write !== this.originals.write) this.res.write = this.originals.write;
    if (this.res.end !== this.originals.end) this.res.end = this.originals.end;
  }

  private async flush(): Promise<void> {
    const finished: FinishedResponse = {
      status: this.head?.status ?? this.res.statusCode,
      headers: { ...lowerCased(this.res.getHeaders()), ...lowerCased(this.head?.headers ?? {}) },
      body: Buffer.concat(this.chunks),
    };
    let outgoing: Outgoing;
    try {
      outgoing = await this.decide(finished);
    } catch {
      outgoing = { kind: 'as-finished' };
    }
    const done = (error?: Error | null) => {
      for (const callback of this.callbacks) callback(error);
    };
    if (this.res.destroyed) return done();
    if (outgoing.kind === 'as-finished') {
      if (this.head) this.res.writeHead(this.head.status, this.head.headers);
      this.res.end(finished.body, () => done());
      return;
    }
    for (const name of this.res.getHeaderNames()) this.res.removeHeader(name);
    // A 204 or 304 has no body, and no Content-Length either (RFC 9110).
    const bodiless = outgoing.status === 204 || outgoing.status === 304;
    const headers = { ...outgoing.headers };
    delete headers['content-length'];
    if (!bodiless) headers['content-length'] = String(outgoing.body.length);
    this.res.writeHead(outgoing.status, headers);
    this.res.end(bodiless ? undefined : outgoing.body, () => done());
  }
}

function headersOf(rest: unknown[]): OutgoingHttpHeaders {
  const headers = rest.find((arg) => arg !== null && typeof arg === 'object');
  if (!headers) return {};
  if (Array.isArray(headers)) {
    const out: OutgoingHttpHeaders = {};
    for (let i = 0; i + 1 < headers.length; i += 2)
      out[String(headers[i]).toLowerCase()] = headers[i + 1];
    return out;
  }
  return headers as OutgoingHttpHeaders;
}

function lowerCased(headers: OutgoingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers))
    if (value !== undefined) out[name.toLowerCase()] = value;
  return out;
}
