export * from './core';
export * from './stores/memory/in-memory.store';
export * from './stores/cache/replay-cache.store';
export * from './stores/typeorm/typeorm.store';
export { createIdempotencyMigration } from './stores/typeorm/migration';
export { createTableSql } from './stores/typeorm/schema';
export * from './nest';
