import { NEST_METADATA, SCHEDULER_TYPE } from '../../nest-metadata';
import { AnyFunction, forEachMethod, standIn } from '../method-wrap';

/**
 * Nest runs no interceptor on a CQRS command handler's `execute`, a BullMQ
 * processor's `process` or a `@Cron` method. `@nestjs/bullmq`'s and
 * `@nestjs/schedule`'s explorers read `instance[methodName]` in their own
 * `onModuleInit` and call it directly; global modules' hooks run in import
 * order, so ours may come after theirs, and the method they read must
 * already be ours. So `@Idempotent` replaces the method, when the class is
 * declared, by a wrapper (metadata copied) that hands each call to the
 * runner the binder binds for the instance at bootstrap; a call that
 * arrives before that (a job picked up by a worker started first) waits for
 * it.
 *
 * A method decorator cannot tell, when it runs, what its method will turn
 * out to be (`@Cron` may be listed above it, `@CommandHandler` is on the
 * class), so every `@Idempotent` method is wrapped. The explorer settles the
 * wrappers of the handlers Nest intercepts (routes, message, gateway and
 * resolver handlers) as plain at bootstrap: from then on their calls go
 * straight to the method, with no lookup.
 */
export type ProviderMethodRunner = (args: unknown[]) => Promise<unknown>;

/** The kinds of provider method a runner is bound for. */
export type ProviderMethodKind = 'command' | 'job' | 'tick';

const runners = new WeakMap<object, Map<string | symbol, ProviderMethodRunner>>();
const waiting = new WeakMap<object, Map<string | symbol, () => void>>();
const pending = new WeakMap<object, Map<string | symbol, Promise<void>>>();
const WRAPPED = Symbol('nest-idempotency.provider-method');
const SETTLE = Symbol('nest-idempotency.provider-method.settle');

/** The binder's binding: from now on, calls of `instance[name]` go through `runner`. */
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

/** Whether `method` is one of these wrappers (so the binder knows its calls reach a runner). */
export function isProviderMethodWrapper(method: unknown): boolean {
  return typeof method === 'function' && WRAPPED in method;
}

/**
 * The explorer's word that `method` is a handler Nest intercepts (a route, a
 * message, gateway or resolver handler): its wrapper, if it is one, calls
 * the method directly from now on.
 */
export function settleAsPlain(method: unknown): void {
  if (isProviderMethodWrapper(method)) (method as unknown as Record<symbol, () => void>)[SETTLE]();
}

/** Wraps a method that may turn out to be a command handler's `execute`, a processor's `process` or a `@Cron` method. */
export function wrapProviderMethod(original: AnyFunction, name: string | symbol): AnyFunction {
  if (WRAPPED in original) return original;
  let plain = false;
  const wrapper = function (this: unknown, ...args: unknown[]): unknown {
    if (plain) return original.apply(this, args);
    return dispatch(this, args);
  };
  const dispatch = (instance: unknown, args: unknown[]): unknown => {
    if (instance === null || typeof instance !== 'object') return original.apply(instance, args);
    const runner = runners.get(instance)?.get(name);
    if (runner) return runner(args);
    // Not a provider method (a plain call of the method), or not bound yet.
    if (providerMethodKind(wrapper, instance.constructor, name) === undefined)
      return original.apply(instance, args);
    return boundFor(instance, name).then(() => runners.get(instance)!.get(name)!(args));
  };
  Object.defineProperty(wrapper, SETTLE, { value: () => (plain = true) });
  return standIn(wrapper, original, WRAPPED);
}

/** The method the wrapper stands for. */
export function originalOf(method: AnyFunction): AnyFunction {
  return ((method as unknown as Record<symbol, AnyFunction>)[WRAPPED] ?? method) as AnyFunction;
}

/**
 * What `classRef`'s method `name` is: a command handler's `execute`, a
 * BullMQ processor's `process`, a `@Cron` method, or none of these.
 */
export function providerMethodKind(
  method: object,
  classRef: unknown,
  name: string | symbol,
): ProviderMethodKind | undefined {
  if (Reflect.getMetadata(NEST_METADATA.schedulerType, method) === SCHEDULER_TYPE.cron)
    return 'tick';
  if (typeof classRef !== 'function') return undefined;
  if (name === 'process' && Reflect.hasMetadata(NEST_METADATA.bullProcessor, classRef))
    return 'job';
  if (name === 'execute' && Reflect.hasMetadata(NEST_METADATA.cqrsCommandHandler, classRef))
    return 'command';
  return undefined;
}

/** Class-level `@Idempotent`: `execute`, `process` and every `@Cron` method, inherited ones included. */
function wrapProviderMethodsOf(classRef: { prototype: object }): void {
  const prototype = classRef.prototype as Record<string | symbol, unknown>;
  forEachMethod(classRef, (name, method, descriptor) => {
    const cron = Reflect.getMetadata(NEST_METADATA.schedulerType, method) === SCHEDULER_TYPE.cron;
    if (name !== 'execute' && name !== 'process' && !cron) return;
    Object.defineProperty(prototype, name, {
      ...descriptor,
      value: wrapProviderMethod(method, name),
    });
  });
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

/** The method decorator (on a class: the wrapping of its `execute`, `process` and `@Cron` methods). */
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
