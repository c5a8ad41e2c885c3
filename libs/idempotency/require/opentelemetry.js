'use strict';
// `require('nest-idempotency/opentelemetry')`: see load.js.
module.exports = require('./load.js')(
  () => require('../dist/esm/opentelemetry.js'),
  () => require('../dist/opentelemetry.js'),
);
