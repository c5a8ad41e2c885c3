import type { CallHandler } from '@nestjs/common';
import { AsyncLocalStorage } from 'node:async_hooks';
import { lastValueFrom } from 'rxjs';
import { NEST_METADATA } from '../nest-metadata';
import { AnyFunction, forEachMethod, standIn } from './method-wrap';

/**
 * Strict mode has to tell "the handler threw" (it may have had effects: the
 * record becomes AMBIGUOUS) from "something before it threw" (a pipe's
 * validation, an interceptor listed after `@Idempotent`: nothing ran, the
 * record is released). Both surface as the same error out of `next.handle()`.
 *
 * So `@Idempotent` replaces the decorated method with a thin wrapper that
 * marks the current call's `HandlerEntry` (an AsyncLocalStorage store the
 * adapter opens around `next.handle()`) and calls the original. Nest reads
 * `instance[methodName]` once, at bootstrap, for routes (Express and
 * Fastify), message handlers and resolvers, so the wrapper is what it calls,
 * and `context.getHandler()` is the wrapper everywhere (the explorer keys its
 * plans by that same function). The original's metadata (every key, written
 * by the decorators listed below `@Idempotent`) is copied onto the wrapper;
 * decorators listed above it write onto the wrapper directly.
 */
export class HandlerEntry {
  /** True once the handler's own body was called. */
  entered = false;
}

const entries = new AsyncLocalStorage<HandlerEntry>();
const WRAPPED = Symbol('nest-idempotency.handler-entry');

/**
 * Runs the rest of the chain (pipes, inner interceptors, the handler) and
 * resolves with its value; with an `entry`, records in it whether the
 * handler's body was entered. `lastValueFrom` subscribes synchronously, inside
 * the store's scope, and Nest binds the chain's async scope there.
 */
export function handleNext(next: CallHandler, entry?: HandlerEntry): Promise<unknown> {
  if (!entry) return lastValueFrom(next.handle(), { defaultValue: undefined });
  return entries.run(entry, () => lastValueFrom(next.handle(), { defaultValue: undefined }));
}

/** The method decorator (and, on a class, the wrapping of each of its handlers). */
export function MarkHandlerEntry(): ClassDecorator & MethodDecorator {
  return ((target: object, _key?: string | symbol, descriptor?: PropertyDescriptor) => {
    if (descriptor) {
      if (typeof descriptor.value === 'function')
        descriptor.value = wrap(descriptor.value as AnyFunction);
      return descriptor;
    }
    wrapHandlersOf(target as { prototype: object });
    return undefined;
  }) as ClassDecorator & MethodDecorator;
}

/** Class-level `@Idempotent`: each route, message, gateway or resolver handler, inherited ones included. */
function wrapHandlersOf(classRef: { prototype: object }): void {
  const prototype = classRef.prototype as Record<string | symbol, unknown>;
  forEachMethod(classRef, (name, method, descriptor) => {
    if (!isHandler(method)) return;
    Object.defineProperty(prototype, name, { ...descriptor, value: wrap(method) });
  });
}

function isHandler(method: object): boolean {
  return (
    Reflect.hasOwnMetadata(NEST_METADATA.path, method) ||
    Reflect.hasOwnMetadata(NEST_METADATA.pattern, method) ||
    Reflect.hasOwnMetadata(NEST_METADATA.websocketMessage, method) ||
    Reflect.hasOwnMetadata(NEST_METADATA.graphqlResolver, method)
  );
}

function wrap(original: AnyFunction): AnyFunction {
  if ((original as unknown as Record<symbol, unknown>)[WRAPPED]) return original;
  const wrapper = function (this: unknown, ...args: unknown[]): unknown {
    const entry = entries.getStore();
    if (entry !== undefined) entry.entered = true;
    return original.apply(this, args);
  };
  return standIn(wrapper, original, WRAPPED);
}
