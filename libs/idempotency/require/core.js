'use strict';
// `require('nest-idempotency/core')`: see load.js.
module.exports = require('./load.js')(
  () => require('../dist/esm/core.js'),
  () => require('../dist/core.js'),
);
