/**
 * Injection token of the compiled `ModuleSettings` (the module's options, checked once).
 * A global symbol: the same in both builds of the package.
 */
export const MODULE_SETTINGS = Symbol.for('nest-idempotency.ModuleSettings');
