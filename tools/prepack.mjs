// Runs before `npm pack` / `npm publish` of libs/idempotency: the package ships
// the repository's README, LICENSE and CHANGELOG (copied in, git-ignored there)
// and a fresh build of dist/.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '..');
const PACKAGE = path.join(ROOT, 'libs/idempotency');
for (const file of ['README.md', 'LICENSE', 'CHANGELOG.md']) {
  fs.copyFileSync(path.join(ROOT, file), path.join(PACKAGE, file));
}
fs.rmSync(path.join(PACKAGE, 'dist'), { recursive: true, force: true });
execFileSync(
  process.execPath,
  [
    path.join(ROOT, 'node_modules/typescript/bin/tsc'),
    '-p',
    path.join(PACKAGE, 'tsconfig.lib.json'),
  ],
  { stdio: 'inherit' },
);
