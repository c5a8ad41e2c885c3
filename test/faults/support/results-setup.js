// Global setup of the `faults` Jest project: a fresh folder for the figures
// each case records (read back by results-teardown.js).
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

module.exports = async function faultsSetup() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nest-idempotency-faults-'));
  process.env.IDEMPOTENCY_FAULTS_RESULTS_DIR = dir;
  process.env.IDEMPOTENCY_FAULTS_STARTED_AT = String(Date.now());
};
