/**
 * `instanceof` for the library's error classes that holds across the copies
 * of the package one process may load (its CommonJS and ES-module builds):
 * each class carries a brand, its name under a global symbol, on its
 * prototype, and a value is an instance when a prototype in its chain carries
 * the same brand. Classes without a brand of their own (an application's
 * subclass) keep plain `instanceof`.
 */
const ERROR_CLASS = Symbol.for('nest-idempotency.error-class');

type Branded = Record<typeof ERROR_CLASS, string | undefined>;

/** Gives `errorClass` its brand: a name no other class of the library has. */
export function brandErrorClass(errorClass: { prototype: object }, name: string): void {
  Object.defineProperty(errorClass.prototype, ERROR_CLASS, { value: name });
}

/** `value instanceof errorClass`, by brand when `value` comes from another copy of the package. */
export function isBrandedInstance(errorClass: { prototype: object }, value: unknown): boolean {
  if (Function.prototype[Symbol.hasInstance].call(errorClass, value)) return true;
  if (typeof value !== 'object' || value === null) return false;
  if (!Object.hasOwn(errorClass.prototype, ERROR_CLASS)) return false;
  const brand = (errorClass.prototype as Branded)[ERROR_CLASS];
  for (let p: object | null = Object.getPrototypeOf(value); p; p = Object.getPrototypeOf(p)) {
    if (Object.hasOwn(p, ERROR_CLASS) && (p as Branded)[ERROR_CLASS] === brand) return true;
  }
  return false;
}
