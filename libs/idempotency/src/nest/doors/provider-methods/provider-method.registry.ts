import { NEST_METADATA, SCHEDULER_TYPE } from '../../nest-metadata';
import { AnyFunction, forEachMethod, standIn } from '../method-wrap';

/**
 * Nest runs no interceptor on a BullMQ processor's `process` or a `@Cron`
 * method: their explorers (`@nestjs/bullmq`'s, `@nestjs/schedule`'s) read
 * `instance[methodName]` in their own `onModuleInit` and call it directly.
 * Global modules' hooks run in import order, so ours may come after theirs;
 * the method they read must already be ours. So `@Idempotent` replaces such a
 * method, when the class is declared, by a wrapper (metadata copied) that
 * hands each call to the runner the explorer binds for the instance at
 * bootstrap; a call that arrives before that (a job picked up by a worker
 * started first) waits for it.
 */
export type ProviderMethodRunner = (args: unknown[]) => Promise<unknown>;

const runners = new WeakMap<object, Map<string | symbol, ProviderMethodRunner>>();
const waiting = new WeakMap<object, Map<string | symbol, () => void>>();
const pending = new WeakMap<object, Map<string | symbol, Promise<void>>>();
const WRAPPED = Symbol('nest-idempotency.provider-method');

/** The explorer's binding: from now on, calls of `instance[name]` go through `runner`. */
export function bindProviderMethod(
  instance: object,
  name: string | symbol,
  runner: ProviderMethodRunner,
): void {
  let bound = runners.get(instance);
  if (!bound) runners.set(instance, (bound = new Map()));
  bound.set(name, runner);
  waiting.get(instance)?.get(name)?.();
}

/** Whether `method` is one of these wrappers (so the explorer knows its calls reach a runner). */
export function isProviderMethodWrapper(method: unknown): boolean {
  return typeof method === 'function' && WRAPPED in method;
}

/** Wraps a method that a BullMQ processor's `process` or a `@Cron` method may turn out to be. */
export function wrapProviderMethod(original: AnyFunction, name: string | symbol): AnyFunction {
  if (WRAPPED in original) return original;
  const wrapper = function (this: unknown, ...args: unknown[]): unknown {
    return dispatch(this, args);
  };
  const dispatch = (instance: unknown, args: unknown[]): unknown => {
    if (instance === null || typeof instance !== 'object') return original.apply(instance, args);
    const runner = runners.get(instance)?.get(name);
    if (runner) return runner(args);
    // Not a job or a tick (a plain call of the method), or not bound yet.
    if (!isJobOrTick(wrapper, instance, name)) return original.apply(instance, args);
    return boundFor(instance, name).then(() => runners.get(instance)!.get(name)!(args));
  };
  return standIn(wrapper, original, WRAPPED);
}

/** The method the wrapper stands for. */
export function originalOf(method: AnyFunction): AnyFunction {
  return ((method as unknown as Record<symbol, AnyFunction>)[WRAPPED] ?? method) as AnyFunction;
}

/** Class-level `@Idempotent`: a processor's `process` and every `@Cron` method, inherited ones included. */
export function wrapProviderMethodsOf(classRef: { prototype: object }): void {
  const prototype = classRef.prototype as Record<string | symbol, unknown>;
  forEachMethod(classRef, (name, method, descriptor) => {
    const cron = Reflect.getMetadata(NEST_METADATA.schedulerType, method) === SCHEDULER_TYPE.cron;
    if (name !== 'process' && !cron) return;
    Object.defineProperty(prototype, name, {
      ...descriptor,
      value: wrapProviderMethod(method, name),
    });
  });
}

function isJobOrTick(method: object, instance: object, name: string | symbol): boolean {
  if (Reflect.getMetadata(NEST_METADATA.schedulerType, method) === SCHEDULER_TYPE.cron) return true;
  return (
    name === 'process' &&
    Reflect.hasMetadata(NEST_METADATA.bullProcessor, (instance as object).constructor)
  );
}

function boundFor(instance: object, name: string | symbol): Promise<void> {
  let promises = pending.get(instance);
  if (!promises) pending.set(instance, (promises = new Map()));
  let promise = promises.get(name);
  if (!promise) {
    promise = new Promise<void>((resolve) => {
      let resolvers = waiting.get(instance);
      if (!resolvers) waiting.set(instance, (resolvers = new Map()));
      resolvers.set(name, resolve);
    });
    promises.set(name, promise);
  }
  return promise;
}

/** The method decorator (on a class: the wrapping of its `process` and `@Cron` methods). */
export function MarkProviderMethod(): ClassDecorator & MethodDecorator {
  return ((target: object, key?: string | symbol, descriptor?: PropertyDescriptor) => {
    if (descriptor) {
      if (typeof descriptor.value === 'function' && key !== undefined)
        descriptor.value = wrapProviderMethod(descriptor.value as AnyFunction, key);
      return descriptor;
    }
    wrapProviderMethodsOf(target as { prototype: object });
    return undefined;
  }) as ClassDecorator & MethodDecorator;
}
