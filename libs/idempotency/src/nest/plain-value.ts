import { optionalPeer } from '../core/optional-peer';

let classTransformer: { instanceToPlain(value: unknown): unknown } | null | undefined;

function isClassInstance(value: unknown): boolean {
  if (value === null || typeof value !== 'object') return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype !== Object.prototype && prototype !== null && !Array.isArray(value);
}

/**
 * A handler's return value as it is stored: class instances as
 * class-transformer makes them plain (when it is installed), as
 * ClassSerializerInterceptor would, so fields it excludes are never stored.
 */
export function toPlain(value: unknown): unknown {
  const classes = Array.isArray(value) ? value.some(isClassInstance) : isClassInstance(value);
  if (!classes) return value;
  if (classTransformer === undefined) {
    try {
      // A CommonJS package: `require` loads it in every runtime, when first needed.
      classTransformer = optionalPeer<{ instanceToPlain(value: unknown): unknown }>(
        'class-transformer',
      );
    } catch {
      classTransformer = null;
    }
  }
  return classTransformer ? classTransformer.instanceToPlain(value) : value;
}
