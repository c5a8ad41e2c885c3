import { type OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { forgetPrototypeHold, holdThroughPrototype, type PrototypeHold } from './prototype-hold';

/** A response as the adapter finished it: status, headers and body bytes, before any byte is sent. */
export interface FinishedResponse {
  readonly status: number;
  /** Lower-case names. */
  readonly headers: OutgoingHttpHeaders;
  readonly body: Buffer;
}

/** What to write instead: the finished response as it is, or another one. */
export type Outgoing =
  | { kind: 'as-finished' }
  | { kind: 'replace'; status: number; headers: OutgoingHttpHeaders; body: Buffer };

type WriteHead = ServerResponse['writeHead'];
type Write = ServerResponse['write'];
type End = ServerResponse['end'];
type Callback = (error?: Error | null) => void;

const AS_FINISHED: Outgoing = { kind: 'as-finished' };

/** Up to this size a replaced body is written with its head as one string (see `send`). */
const ONE_PIECE_BYTES = 16 * 1024;
const NODE_END = ServerResponse.prototype.end;

/**
 * Holds back what Express or Fastify write to the Node response until
 * `decide` has seen it: both adapters end a response with `writeHead` (Fastify)
 * and `end(body)`, after every interceptor, serializer and filter ran, so
 * what is held is exactly what the client would receive. `decide` may take its
 * time (storing the result); nothing reaches the socket until it answers.
 *
 * `release()` lets the calls through again, before or after it ended.
 *
 * The hold replaces the response's `writeHead`, `write` and `end` with
 * methods of its own, put back by assignment, never `delete` (deleting own
 * properties turns the response into a dictionary-mode object, which slows
 * every later property access Node and the framework make on it); on an
 * Express response it is installed once on the prototype instead (see
 * ./prototype-hold.ts).
 */
export class HeldResponse implements PrototypeHold {
  /** What writes the response once nothing is held (put back on it, when held with methods of its own). */
  private readonly writeHead: WriteHead;
  private readonly write: Write;
  private readonly end: End;
  /** Held through the response's prototype (Express; see ./prototype-hold.ts), not methods of its own. */
  private readonly throughPrototype: boolean;
  private status = 0;
  private headHeaders: OutgoingHttpHeaders | undefined = undefined;
  private held = false;
  /** The body as written: usually one chunk (a string or bytes), sometimes several. */
  private first: string | Buffer | undefined = undefined;
  private firstEncoding: BufferEncoding = 'utf8';
  private rest: Buffer[] | undefined = undefined;
  private callbacks: Callback[] | undefined = undefined;
  private released = false;
  ended = false;

  constructor(
    readonly res: ServerResponse,
    private readonly decide: (finished: FinishedResponse) => Outgoing | Promise<Outgoing>,
  ) {
    const below = holdThroughPrototype(res, this);
    if (below !== undefined) {
      this.throughPrototype = true;
      this.writeHead = below.writeHead;
      this.write = below.write;
      this.end = below.end;
      return;
    }
    this.throughPrototype = false;
    // Whatever is there now (the prototype's methods, or another wrapper's) is put back later.
    this.writeHead = res.writeHead;
    this.write = res.write;
    this.end = res.end;
    res.writeHead = ((status: number, a?: unknown, b?: unknown) =>
      this.heldWriteHead(status, a, b)) as WriteHead;
    res.write = ((chunk: unknown, a?: unknown, b?: unknown) =>
      this.heldWrite(chunk, a, b)) as Write;
    res.end = ((a?: unknown, b?: unknown, c?: unknown) => this.heldEnd(a, b, c)) as End;
  }

  /** Stops holding: the response's own methods are back (nothing held is written). */
  release(): void {
    this.restore();
    if (this.throughPrototype && !this.ended) forgetPrototypeHold(this);
  }

  holding(): boolean {
    return !this.released;
  }

  heldWriteHead(status: number, a?: unknown, b?: unknown): ServerResponse {
    this.held = true;
    this.status = status;
    this.headHeaders = headersOf(a, b);
    return this.res;
  }

  heldWrite(chunk: unknown, a?: unknown, b?: unknown): boolean {
    this.collect(chunk, a, b);
    return true;
  }

  heldEnd(a?: unknown, b?: unknown, c?: unknown): ServerResponse {
    if (typeof a === 'function') this.addCallback(a as Callback);
    else this.collect(a, b, c);
    this.restore();
    this.flush();
    return this.res;
  }

  private addCallback(callback: Callback): void {
    (this.callbacks ??= []).push(callback);
  }

  private collect(chunk: unknown, a: unknown, b: unknown): void {
    const encoding = typeof a === 'string' ? (a as BufferEncoding) : 'utf8';
    if (typeof a === 'function') this.addCallback(a as Callback);
    if (typeof b === 'function') this.addCallback(b as Callback);
    if (chunk === undefined || chunk === null) return;
    let piece: string | Buffer;
    if (typeof chunk === 'string') piece = chunk;
    else if (Buffer.isBuffer(chunk)) piece = chunk;
    else if (chunk instanceof Uint8Array)
      piece = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    else return;
    if (this.first === undefined && this.rest === undefined) {
      this.first = piece;
      this.firstEncoding = encoding;
      return;
    }
    const rest = (this.rest ??= []);
    if (this.first !== undefined) {
      rest.push(toBuffer(this.first, this.firstEncoding));
      this.first = undefined;
    }
    rest.push(toBuffer(piece, encoding));
  }

  private restore(): void {
    if (this.released) return;
    this.released = true;
    if (this.throughPrototype) return;
    const res = this.res;
    res.writeHead = this.writeHead;
    res.write = this.write;
    res.end = this.end;
  }

  /**
   * Asks `decide` what goes out, and writes it. When `decide` answers at once
   * (a replay, a refusal) the bytes go out inside the application's `end()`;
   * only a wait marks the response ended meanwhile (see `markEnded`).
   */
  private flush(): void {
    const res = this.res;
    // getHeaders() is a fresh object with lower-case names; writeHead's own come on top.
    const headers = res.getHeaders();
    const given = this.headHeaders;
    if (given !== undefined)
      for (const name of Object.keys(given)) headers[name.toLowerCase()] = given[name];
    for (const name of Object.keys(headers)) if (headers[name] === undefined) delete headers[name];
    const finished = new Finished(
      this.held ? this.status : res.statusCode,
      headers,
      this.first,
      this.firstEncoding,
      this.rest,
    );
    let decided: Outgoing | Promise<Outgoing>;
    try {
      decided = this.decide(finished);
    } catch {
      decided = AS_FINISHED;
    }
    if (decided instanceof Promise) {
      this.markEnded(true);
      decided.then(
        (outgoing) => this.send(outgoing, finished),
        () => this.send(AS_FINISHED, finished),
      );
    } else this.send(decided, finished);
  }

  /** See `WRITABLE_ENDED`; through the prototype, its `writableEnded` reads `ended`. */
  private markEnded(ended: boolean): void {
    if (this.throughPrototype) this.ended = ended;
    else markEnded(this.res, ended);
  }

  private send(outgoing: Outgoing, finished: FinishedResponse): void {
    const res = this.res;
    const given = this.headHeaders;
    const callbacks = this.callbacks;
    const done =
      callbacks === undefined
        ? undefined
        : () => {
            for (const callback of callbacks) callback();
          };
    this.markEnded(false);
    if (this.throughPrototype) forgetPrototypeHold(this);
    if (res.destroyed) return done?.();
    if (outgoing.kind === 'as-finished') {
      if (this.held) this.writeHead.call(res, this.status, given);
      // One string goes back as it came, so Node writes it with the head in one piece.
      const body =
        this.rest === undefined && typeof this.first === 'string' && this.firstEncoding === 'utf8'
          ? this.first
          : finished.body;
      return endWith(res, this.end, body, false, done);
    }
    for (const name of res.getHeaderNames()) res.removeHeader(name);
    // A 204 or 304 has no body, and no Content-Length either (RFC 9110).
    const bodiless = outgoing.status === 204 || outgoing.status === 304;
    // Built afresh rather than copied and `delete`d from: an object that loses a property is slow to read.
    const out: OutgoingHttpHeaders = {};
    const replacing = outgoing.headers;
    for (const name of Object.keys(replacing))
      if (name !== 'content-length') out[name] = replacing[name];
    if (!bodiless) out['content-length'] = String(outgoing.body.length);
    this.writeHead.call(res, outgoing.status, out);
    if (bodiless) return endWith(res, this.end, undefined, false, done);
    const bytes = outgoing.body;
    // On Node's own `end`, a small body goes as a latin1 string (one character per byte, so the
    // bytes are unchanged), which Node sends in one piece with the head where bytes would go as a
    // second chunk. Another library's `end` (compression, a logger) gets the bytes, as it expects.
    if (this.end === NODE_END && bytes.length <= ONE_PIECE_BYTES)
      return endWith(res, this.end, bytes.toString('latin1'), true, done);
    endWith(res, this.end, bytes, false, done);
  }
}

/** The finished response; its body is joined into one `Buffer` only when something reads it (a replay does not). */
class Finished implements FinishedResponse {
  private bytes: Buffer | undefined = undefined;

  constructor(
    readonly status: number,
    readonly headers: OutgoingHttpHeaders,
    private readonly first: string | Buffer | undefined,
    private readonly firstEncoding: BufferEncoding,
    private readonly rest: Buffer[] | undefined,
  ) {}

  get body(): Buffer {
    if (this.bytes !== undefined) return this.bytes;
    if (this.rest !== undefined) this.bytes = Buffer.concat(this.rest);
    else if (this.first === undefined) this.bytes = Buffer.alloc(0);
    else this.bytes = toBuffer(this.first, this.firstEncoding);
    return this.bytes;
  }
}

/**
 * `end.call(res, body[, 'latin1'][, done])`, with the `end` the hold sits on (not whatever a
 * wrapper installed after the hold put on the response since, which already ran for these
 * bytes): the encoding only for a latin1 string, the callback only when there is one, so that
 * a wrapper of `end` taking `(chunk, callback)` still gets both.
 */
function endWith(
  res: ServerResponse,
  end: End,
  body: string | Buffer | undefined,
  latin1: boolean,
  done: (() => void) | undefined,
): void {
  const send = end as (this: ServerResponse, ...args: unknown[]) => unknown;
  if (latin1) {
    if (done === undefined) send.call(res, body, 'latin1');
    else send.call(res, body, 'latin1', done);
  } else if (done === undefined) send.call(res, body);
  else send.call(res, body, done);
}

/** Set on a held response whose application called `end()`, until the held bytes go out. */
const ENDED = Symbol('nest-idempotency.ended');
type Marked = ServerResponse & { [ENDED]?: boolean };

/**
 * `writableEnded`, as the application sees it: ended once it called `end()`,
 * though the held bytes are not out yet. Fastify's `reply.then`, which Nest
 * awaits, then settles at once instead of adding end-of-stream listeners to
 * the socket. `finished` stays Node's own, so a graceful `server.close()`
 * still waits for the held response (it closes only connections whose
 * response finished), and `writableFinished` waits for the bytes.
 */
const WRITABLE_ENDED: PropertyDescriptor = {
  configurable: true,
  enumerable: false,
  get(this: Marked): boolean {
    return this[ENDED] === true || this.finished;
  },
};

function markEnded(res: ServerResponse, ended: boolean): void {
  const marked = res as Marked;
  if (ended && marked[ENDED] === undefined)
    Object.defineProperty(res, 'writableEnded', WRITABLE_ENDED);
  if (ended || marked[ENDED] !== undefined) marked[ENDED] = ended;
}

function toBuffer(piece: string | Buffer, encoding: BufferEncoding): Buffer {
  return typeof piece === 'string' ? Buffer.from(piece, encoding) : piece;
}

/** writeHead(status[, statusMessage][, headers]): the headers, lower-cased when given as a raw list. */
function headersOf(a: unknown, b: unknown): OutgoingHttpHeaders | undefined {
  const headers = a !== null && typeof a === 'object' ? a : b;
  if (headers === null || typeof headers !== 'object') return undefined;
  if (Array.isArray(headers)) {
    const out: OutgoingHttpHeaders = {};
    for (let i = 0; i + 1 < headers.length; i += 2)
      out[String(headers[i]).toLowerCase()] = headers[i + 1];
    return out;
  }
  return headers as OutgoingHttpHeaders;
}
