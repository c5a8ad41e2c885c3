'use strict';
// `require('nest-idempotency/typeorm')`: see load.js.
module.exports = require('./load.js')(
  () => require('../dist/esm/typeorm.js'),
  () => require('../dist/typeorm.js'),
);
