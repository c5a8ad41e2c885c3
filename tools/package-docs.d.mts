// Types of package-docs.mjs, for the tests that use it.
export const PACKAGE: string;
export function shippedDocuments(root?: string): string[];
export function repositoryUrl(manifest: { repository?: string | { url?: string } }): string;
export function markdownLinks(markdown: string): { target: string; start: number; end: number }[];
export function isAbsoluteOrAnchor(target: string): boolean;
export function resolveLink(fromDocument: string, target: string): { path: string; anchor: string };
export function rewriteLinks(
  document: string,
  markdown: string,
  options: { root: string; shipped: string[]; repository: string },
): string;
export function stagePackageDocs(options?: { root?: string; packageDir?: string }): string[];
