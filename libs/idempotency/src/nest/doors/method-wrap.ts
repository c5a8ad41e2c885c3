/** What the decorator-time wrappers (handler entry, provider methods) share. */
export type AnyFunction = (this: unknown, ...args: unknown[]) => unknown;

/** Visits each method of a class once, its own and inherited ones, the nearest definition first. */
export function forEachMethod(
  classRef: { prototype: object },
  visit: (name: string, method: AnyFunction, descriptor: PropertyDescriptor) => void,
): void {
  const seen = new Set<string>();
  for (
    let level: object | null = classRef.prototype;
    level && level !== Object.prototype;
    level = Object.getPrototypeOf(level)
  ) {
    for (const name of Object.getOwnPropertyNames(level)) {
      if (name === 'constructor' || seen.has(name)) continue;
      seen.add(name);
      const descriptor = Object.getOwnPropertyDescriptor(level, name);
      const method = descriptor?.value as unknown;
      if (descriptor && typeof method === 'function')
        visit(name, method as AnyFunction, descriptor);
    }
  }
}

/**
 * Makes `wrapper` stand in for `original` wherever Nest looks: its metadata,
 * name and length, and `original` under `marker`, so it is wrapped only once.
 */
export function standIn(wrapper: AnyFunction, original: AnyFunction, marker: symbol): AnyFunction {
  for (const key of Reflect.getOwnMetadataKeys(original)) {
    Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, original), wrapper);
  }
  Object.defineProperty(wrapper, 'name', { value: original.name });
  Object.defineProperty(wrapper, 'length', { value: original.length });
  Object.defineProperty(wrapper, marker, { value: original });
  return wrapper;
}
