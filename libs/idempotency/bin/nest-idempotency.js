#!/usr/bin/env node
// The package's bin. It is committed, so it exists before the build: npm skips
// linking a bin whose file is missing, and `npm ci` links bins before `prepare`
// builds dist/. The CLI itself is dist/cli/main.js (src/cli/main.ts).
'use strict';
const path = require('node:path');
const fs = require('node:fs');

const main = path.join(__dirname, '..', 'dist', 'cli', 'main.js');
if (!fs.existsSync(main)) {
  process.stderr.write(
    'error: nest-idempotency is not built (no dist/cli/main.js); run `npm run build`\n',
  );
  process.exit(6);
}
require(main);
