'use strict';
// `require('nest-idempotency')`: see load.js.
module.exports = require('./load.js')(
  () => require('../dist/esm/index.js'),
  () => require('../dist/index.js'),
);
