'use strict';
// `require('nest-idempotency/pg')`: see load.js.
module.exports = require('./load.js')(
  () => require('../dist/esm/pg.js'),
  () => require('../dist/pg.js'),
);
