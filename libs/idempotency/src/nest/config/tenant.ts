import type { ExecutionContext } from '@nestjs/common';
import { hash } from 'node:crypto';
import { IdempotencyConfigError } from '../../core/errors';

/** Whose record a call reads and writes: a tenant (never logged), and whether it was applied by default. */
export interface CallTenant {
  tenant?: string;
  /** Applied by default from `request.user`, where earlier versions applied none. */
  derived: boolean;
}

export type TenantRule = (context: ExecutionContext, user: unknown) => CallTenant;

const NONE: CallTenant = { derived: false };

/**
 * The module's `tenant` option as a rule:
 *
 * - a function: its answer (none when it returns undefined);
 * - `false`: no tenant, every caller shares a key's record;
 * - not given: the caller as Nest applications identify it, `request.user`
 *   (set by a guard, Passport's included) with an `id` or a `sub`, as a
 *   digest; no tenant for a request without one.
 */
export function compileTenant(option: unknown): TenantRule {
  if (option === false) return () => NONE;
  if (typeof option === 'function') {
    const fn = option as (context: ExecutionContext) => string | undefined;
    return (context) => ({ tenant: fn(context), derived: false });
  }
  if (option === undefined) return (_context, user) => callerOf(user);
  throw new IdempotencyConfigError(
    `IdempotencyModule: option "tenant" must be a function of the ExecutionContext, or false, got ${typeof option}`,
  );
}

/** `request.user`'s `id` (else `sub`) as a digest: the caller a record belongs to. */
function callerOf(user: unknown): CallTenant {
  if (user === null || typeof user !== 'object') return NONE;
  const { id, sub } = user as { id?: unknown; sub?: unknown };
  const principal = isIdentifier(id) ? id : isIdentifier(sub) ? sub : undefined;
  if (principal === undefined) return NONE;
  return { tenant: `user:${hash('sha256', String(principal)).slice(0, 32)}`, derived: true };
}

function isIdentifier(value: unknown): value is string | number {
  return (
    (typeof value === 'string' && value !== '') ||
    (typeof value === 'number' && Number.isFinite(value))
  );
}
