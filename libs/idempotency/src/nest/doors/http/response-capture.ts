import type { ServerResponse } from 'node:http';
import type { Capture } from '../../../core/lifecycle';
import type { DoorCapture } from '../door';
import { FinishedResponse, HeldResponse, Outgoing } from './raw-response';

const AS_FINISHED: Outgoing = { kind: 'as-finished' };
const ANSWERED_EARLY: Capture = { kind: 'answered-early' };

/**
 * One HTTP call's result as its client receives it. The handler's value goes
 * back to Nest as soon as the handler returns (`value`), every interceptor,
 * serializer and filter writes it, and the written response is held back
 * from the socket (`HeldResponse`) until the lifecycle has stored it and says
 * what goes out (`answer`): the response as written, or a refusal in its place.
 */
export class ResponseCapture implements DoorCapture {
  private held: HeldResponse | undefined = undefined;
  private handlerReturned = false;
  private answeredEarly = false;
  /** Made only for a run whose response is held (a replay or a refusal never needs them). */
  private finishedDeferred: Deferred<FinishedResponse> | undefined = undefined;
  private outgoingDeferred: Deferred<Outgoing> | undefined = undefined;
  /** The handler's value, once it returned. */
  readonly value = deferred<unknown>();

  constructor(
    private readonly res: ServerResponse,
    /** The stored form of a finished response, for the record `keyDigest` names. */
    private readonly store: (finished: FinishedResponse, keyDigest: () => string) => Capture,
  ) {}

  starting(capturing: boolean): void {
    if (capturing) this.held = new HeldResponse(this.res, (finished) => this.decide(finished));
  }

  /** The handler failed: its error response goes out as it is. */
  failed(): void {
    this.held?.release();
  }

  /** `ctx.suspend`: the token its answer carries (set before the answer is written). */
  continuation: string | undefined = undefined;

  suspended(answer: unknown, token: string): unknown {
    this.continuation = token;
    return answer;
  }

  returned(value: unknown): void {
    this.handlerReturned = true;
    this.value.resolve(value);
  }

  capture(_value: unknown, keyDigest: () => string): Capture | Promise<Capture> {
    if (this.answeredEarly) return ANSWERED_EARLY;
    return this.finished.promise.then((finished) => this.store(finished, keyDigest));
  }

  /** What goes out in place of the held response; `undefined`: the response as written. */
  answer(replace: (finished: FinishedResponse) => Outgoing | undefined): void {
    void this.finished.promise.then((finished) =>
      this.outgoing.resolve(replace(finished) ?? AS_FINISHED),
    );
  }

  /** The response goes out as written, whatever happened after the handler returned. */
  answerAsWritten(): void {
    this.outgoing.resolve(AS_FINISHED);
  }

  private get finished(): Deferred<FinishedResponse> {
    return (this.finishedDeferred ??= deferred<FinishedResponse>());
  }

  private get outgoing(): Deferred<Outgoing> {
    return (this.outgoingDeferred ??= deferred<Outgoing>());
  }

  private decide(finished: FinishedResponse): Promise<Outgoing> {
    if (!this.handlerReturned) {
      // Something answered before the handler returned (an outer timeout, say).
      this.answeredEarly = true;
      return Promise.resolve(AS_FINISHED);
    }
    this.finished.resolve(finished);
    return this.outgoing.promise;
  }
}

export interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

export function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
