'use strict';
// `require('nest-idempotency/redis')`: see load.js.
module.exports = require('./load.js')(
  () => require('../dist/esm/redis.js'),
  () => require('../dist/redis.js'),
);
