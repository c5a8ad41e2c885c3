import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

/**
 * Generates the Prisma client of ./schema.prisma into ./generated (gitignored),
 * unless the one there was generated from this very schema: `prisma generate`
 * with Prisma 7's Rust-free client runs offline; its CLI only wants a schema
 * engine binary to exist (PRISMA_SCHEMA_ENGINE_BINARY), never runs it.
 * Generated, not committed: the client follows the installed Prisma version.
 */
export function generatePrismaClient(): void {
  const schema = path.join(__dirname, 'schema.prisma');
  const stamp = path.join(__dirname, 'generated', '.schema-sha256');
  const require = createRequire(__filename);
  const cli = require.resolve('prisma/build/index.js');
  const version = (require('prisma/package.json') as { version: string }).version;
  const digest = createHash('sha256').update(fs.readFileSync(schema)).update(version).digest('hex');
  if (fs.existsSync(stamp) && fs.readFileSync(stamp, 'utf8') === digest) return;
  execFileSync(process.execPath, [cli, 'generate', '--schema', schema], {
    env: {
      ...process.env,
      PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY ?? process.execPath,
      PRISMA_HIDE_UPDATE_MESSAGE: '1',
      CHECKPOINT_DISABLE: '1',
    },
    stdio: 'pipe',
  });
  fs.writeFileSync(stamp, digest);
}
