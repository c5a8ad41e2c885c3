'use strict';
// `require('nest-idempotency/store-kit')`: see load.js.
module.exports = require('./load.js')(
  () => require('../dist/esm/store-kit.js'),
  () => require('../dist/store-kit.js'),
);
