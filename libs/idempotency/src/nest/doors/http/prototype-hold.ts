import { ServerResponse } from 'node:http';

type WriteHead = ServerResponse['writeHead'];
type Write = ServerResponse['write'];
type End = ServerResponse['end'];

/** The methods a hold sits on: what writes the response once nothing is held. */
export interface HeldMethods {
  writeHead: WriteHead;
  write: Write;
  end: End;
}

/** What the methods installed on a response prototype ask of the hold of the response they run for. */
export interface PrototypeHold {
  readonly res: ServerResponse;
  /** False once the hold let go (ended, or released): the calls go through. */
  holding(): boolean;
  /** The application ended the response, and the held bytes are not out yet (see `writableEnded`). */
  readonly ended: boolean;
  heldWriteHead(status: number, a?: unknown, b?: unknown): ServerResponse;
  heldWrite(chunk: unknown, a?: unknown, b?: unknown): boolean;
  heldEnd(a?: unknown, b?: unknown, c?: unknown): ServerResponse;
}

/**
 * Express gives each response its application's prototype
 * (`Object.setPrototypeOf(res, app.response)`), which leaves every response
 * with a hidden class of its own in V8: each property added to it (a held
 * response's three methods, put back afterwards) takes V8's slow store path,
 * about 3 µs apiece. So on such a response the hold is installed once, on
 * the framework's response prototype right above Node's (Express's own
 * `response` object, which every application and mounted application of
 * that Express inherits, so a request that moves between them stays held):
 * its `writeHead`, `write` and `end` ask the response's socket which hold,
 * if any, is on the response it runs for. A socket serves one response at a
 * time (`socket._httpMessage`); a pipelined response waiting for its turn
 * has no socket yet, and is held with methods of its own. Responses that
 * are not held go through, at the cost of a property read, to whatever
 * Node's prototype has then (an agent that patches it later is still called).
 */
const HOLD = Symbol('nest-idempotency.hold');
const INSTALLED = Symbol('nest-idempotency.prototype-hold');

type Marked = { [HOLD]?: PrototypeHold; _httpMessage?: unknown };
type Name = keyof HeldMethods;
const NAMES: readonly Name[] = ['writeHead', 'write', 'end'];

interface Installed extends HeldMethods {
  /** What runs below them: the prototype's own method where it had one, else Node's of the moment. */
  below(): HeldMethods;
}

function holdOf(res: ServerResponse): PrototypeHold | undefined {
  const hold = (res.socket as Marked | null)?.[HOLD];
  return hold !== undefined && hold.res === res ? hold : undefined;
}

/**
 * Holds `res` through its framework's prototype, where that is what `res`
 * runs (no method of its own, none replaced on the prototypes since) and
 * its socket is its own: the methods the hold sits on, or `undefined` when
 * the hold must install methods on the response itself.
 */
export function holdThroughPrototype(
  res: ServerResponse,
  hold: PrototypeHold,
): HeldMethods | undefined {
  const own = Object.getPrototypeOf(res) as object | null;
  if (own === ServerResponse.prototype || own === null || !(own instanceof ServerResponse))
    return undefined;
  const socket = res.socket as (Marked & object) | null;
  if (socket === null || socket === undefined || socket._httpMessage !== res) return undefined;
  const installed = installedOn(frameworkPrototype(own));
  if (
    res.writeHead !== installed.writeHead ||
    res.write !== installed.write ||
    res.end !== installed.end
  )
    return undefined;
  socket[HOLD] = hold;
  return installed.below();
}

/** The socket forgets `hold` (it stays only until the next response on that socket otherwise). */
export function forgetPrototypeHold(hold: PrototypeHold): void {
  const socket = hold.res.socket as Marked | null;
  if (socket?.[HOLD] === hold) socket[HOLD] = undefined;
}

/** The prototype right above Node's `ServerResponse.prototype` in `proto`'s chain. */
function frameworkPrototype(proto: object): ServerResponse {
  let at = proto;
  for (;;) {
    const parent = Object.getPrototypeOf(at) as object;
    if (parent === ServerResponse.prototype) return at as ServerResponse;
    at = parent;
  }
}

function installedOn(proto: ServerResponse): Installed {
  const marked = proto as ServerResponse & { [INSTALLED]?: Installed };
  if (Object.prototype.hasOwnProperty.call(proto, INSTALLED)) return marked[INSTALLED]!;
  // A method of the framework's own stays below; otherwise Node's, looked up at each call.
  const kept: Partial<HeldMethods> = {};
  for (const name of NAMES) {
    if (Object.prototype.hasOwnProperty.call(proto, name))
      (kept as Record<Name, unknown>)[name] = proto[name];
  }
  const node = ServerResponse.prototype;
  const below = (): HeldMethods => ({
    writeHead: kept.writeHead ?? node.writeHead,
    write: kept.write ?? node.write,
    end: kept.end ?? node.end,
  });
  const installed: Installed = {
    below,
    writeHead: function (this: ServerResponse, ...args: unknown[]) {
      const hold = holdOf(this);
      if (hold !== undefined && hold.holding())
        return hold.heldWriteHead(args[0] as number, args[1], args[2]);
      return ((kept.writeHead ?? node.writeHead) as (...a: unknown[]) => ServerResponse).apply(
        this,
        args,
      );
    } as WriteHead,
    write: function (this: ServerResponse, ...args: unknown[]) {
      const hold = holdOf(this);
      if (hold !== undefined && hold.holding()) return hold.heldWrite(args[0], args[1], args[2]);
      return ((kept.write ?? node.write) as (...a: unknown[]) => boolean).apply(this, args);
    } as Write,
    end: function (this: ServerResponse, ...args: unknown[]) {
      const hold = holdOf(this);
      if (hold !== undefined && hold.holding()) return hold.heldEnd(args[0], args[1], args[2]);
      return ((kept.end ?? node.end) as (...a: unknown[]) => ServerResponse).apply(this, args);
    } as End,
  };
  // `writableEnded` as on a response held with methods of its own (see raw-response.ts).
  const ended = getterOf(proto, 'writableEnded');
  Object.defineProperty(proto, 'writableEnded', {
    configurable: true,
    enumerable: false,
    get(this: ServerResponse): boolean {
      if (holdOf(this)?.ended === true) return true;
      return ended ? (ended.call(this) as boolean) : this.finished;
    },
  });
  Object.defineProperty(proto, INSTALLED, { value: installed });
  proto.writeHead = installed.writeHead;
  proto.write = installed.write;
  proto.end = installed.end;
  return installed;
}

/** The getter `name` resolves to from `object`, up its prototype chain. */
function getterOf(object: object | null, name: string): (() => unknown) | undefined {
  for (let at = object; at !== null; at = Object.getPrototypeOf(at) as object | null) {
    const descriptor = Object.getOwnPropertyDescriptor(at, name);
    if (descriptor) return descriptor.get;
  }
  return undefined;
}
