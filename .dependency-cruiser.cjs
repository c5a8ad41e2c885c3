/**
 * The import rules `npm run lint` holds the library to (dependency-cruiser).
 * One rule for now: no import cycles in libs/, type-only imports included,
 * so that every module can be read (and loaded) after the ones it imports.
 */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'An import cycle: move what both sides need into a module of its own.',
      from: { path: '^libs/' },
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '(^|/)dist/' },
  },
};
