'use strict';
// `require('nest-idempotency/mysql')`: see load.js.
module.exports = require('./load.js')(
  () => require('../dist/esm/mysql.js'),
  () => require('../dist/mysql.js'),
);
