'use strict';
// `require('nest-idempotency/testing')`: see load.js.
module.exports = require('./load.js')(
  () => require('../dist/esm/testing.js'),
  () => require('../dist/testing.js'),
);
