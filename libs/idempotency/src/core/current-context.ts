import { AsyncLocalStorage } from 'node:async_hooks';
import type { IdempotencyContext } from './context';

/**
 * The context of the idempotent call whose work is running, for the code it
 * calls that the action's arguments do not reach (Nest's `@IdempotencyCtx()`,
 * which Nest evaluates inside the interceptor's `next.handle()`). The
 * lifecycle opens it around each run of work that reads it
 * (`CallWork.readsContext`), and only there: the first store entered turns
 * on promise hooks that every later promise of the process pays for. One
 * store for the whole process, found through a global symbol, so that both
 * builds of the package (CommonJS and ES module) see the same one.
 */
const STORE = Symbol.for('nest-idempotency.current-context');

type ContextStorage = AsyncLocalStorage<IdempotencyContext | undefined>;

const storage = ((globalThis as Record<symbol, unknown>)[STORE] ??= new AsyncLocalStorage<
  IdempotencyContext | undefined
>()) as ContextStorage;

/** Runs `work` with `context` as the current call's (`undefined`: a run with no record). */
export function runInContext<T>(context: IdempotencyContext | undefined, work: () => T): T {
  // A run without a record inside none has nothing to change.
  if (context === undefined && storage.getStore() === undefined) return work();
  return storage.run(context, work);
}

/** The running idempotent call's context, or `undefined` outside one. */
export function currentIdempotencyContext(): IdempotencyContext | undefined {
  return storage.getStore();
}
