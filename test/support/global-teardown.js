module.exports = async function globalTeardown() {
  const embedded = globalThis.__EMBEDDED_PG__;
  if (embedded) await embedded.stop();
};
