/** Injection token of the compiled `ModuleSettings` (the module's options, checked once). */
export const MODULE_SETTINGS = Symbol('IdempotencyModuleSettings');
