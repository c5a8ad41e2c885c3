import { scopeOfStored, storedScope } from '../core/key';

/** The tenant mark of a stored scope (`#tenant:`), as core/key.ts writes it. */
const TENANT_MARK = storedScope('', '');

/** A statement and its parameters, for `DataSource.query`. */
export interface DigestSearchStatement {
  sql: string;
  params: unknown[];
}

/**
 * `findByDigest` on the records table: one statement that reads the scope's
 * rows (the stored scope, and `<scope>#tenant:…` for a scope without a tenant)
 * and hashes each key on the server as `keyDigest` does (SHA-256 over the
 * UTF-8 key, or over the tenant, a NUL byte and the key), so only the rows
 * whose first 12 hex digits match travel back, never 200,000 keys. There is
 * no index on the scope: the server reads the whole table once (docs/cli.md
 * has the figures).
 *
 * The server's hash is a filter, not the judge: the caller confirms every row
 * with `storedKeyDigest`, so a difference between the two could hide a record
 * but never pick a wrong one.
 */
export function postgresDigestSearch(
  table: string,
  scope: string,
  hex: string,
): DigestSearchStatement {
  return {
    sql: `SELECT scope, "key" FROM ${table}
      WHERE (scope = $1 OR left(scope, char_length($2::text)) = $2::text)
        AND left(encode(sha256(CASE strpos(scope, $3::text)
              WHEN 0 THEN convert_to("key", 'UTF8')
              ELSE convert_to(substr(scope, strpos(scope, $3::text) + char_length($3::text)), 'UTF8')
                || '\\x00'::bytea || convert_to("key", 'UTF8')
            END), 'hex'), 12) = $4`,
    params: [scope, tenantsOf(scope), TENANT_MARK, hex],
  };
}

/**
 * The same on MySQL and MariaDB: SHA2 over the utf8mb4 bytes; CHAR(0) is the
 * NUL byte. The scope compares byte for byte (utf8mb4_bin pads: `=` alone
 * would take `acme ` for `acme`).
 */
export function mysqlDigestSearch(
  table: string,
  scope: string,
  hex: string,
): DigestSearchStatement {
  const tenants = tenantsOf(scope);
  return {
    sql: `SELECT scope, \`key\` AS \`key\` FROM ${table}
      WHERE ((scope = ? AND CAST(scope AS BINARY) = CAST(? AS BINARY))
          OR (LEFT(scope, CHAR_LENGTH(?)) = ? AND CAST(LEFT(scope, CHAR_LENGTH(?)) AS BINARY) = CAST(? AS BINARY)))
        AND LEFT(SHA2(IF(LOCATE(?, scope) = 0, \`key\`,
              CONCAT(SUBSTRING(scope, LOCATE(?, scope) + CHAR_LENGTH(?)), CHAR(0), \`key\`)), 256), 12) = ?`,
    params: [
      scope,
      scope,
      tenants,
      tenants,
      tenants,
      tenants,
      TENANT_MARK,
      TENANT_MARK,
      TENANT_MARK,
      hex,
    ],
  };
}

/**
 * `<scope>#tenant:`, the start of every stored scope of the scope's tenants;
 * null for a stored scope that names its tenant already (only that one is read).
 */
export function tenantsOf(scope: string): string | null {
  return scopeOfStored(scope) === scope ? storedScope(scope, '') : null;
}
