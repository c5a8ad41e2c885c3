// Runs before `npm pack` / `npm publish` of libs/idempotency: the package ships
// the repository's README, LICENSE, CHANGELOG and docs/ (copied in, links to
// what does not ship made absolute: tools/package-docs.mjs; git-ignored there)
// and a fresh build of dist/ (tools/build.mjs: CommonJS and ES modules).
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { stagePackageDocs } from './package-docs.mjs';

stagePackageDocs();
execFileSync(process.execPath, [path.join(import.meta.dirname, 'build.mjs'), '--clean'], {
  stdio: 'inherit',
});
