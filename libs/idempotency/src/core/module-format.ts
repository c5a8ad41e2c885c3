/**
 * What the package's two builds do differently, in one file. This one is the
 * CommonJS build's (and the tests'); the ES-module build ships
 * module-format.esm.js in its place (tools/build.mjs).
 */

/** The module format of the build this file is part of. */
export const MODULE_FORMAT = 'commonjs' as 'commonjs' | 'module';

/** Loads a package synchronously, resolved from this package. */
export function requirePackage(name: string): unknown {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require(name);
}

/**
 * Loads a package ahead of its use. In a CommonJS module this is `require`
 * as well: `import()` there fails under Jest's CommonJS runtime.
 */
export async function importPackage(name: string): Promise<unknown> {
  return requirePackage(name);
}
