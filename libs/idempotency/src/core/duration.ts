import { IdempotencyConfigError } from './errors';

/** A duration as users write it: ISO-8601 (`PT30S`, `P30D`), shorthand (`250ms`, `5m`) or milliseconds. */
export type Duration = string | number;

/** Node timers overflow past 2^31 - 1 ms (about 24.8 days) and would fire at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;
/** 100 years: every backend's timestamp type holds now + this (PostgreSQL, MariaDB DATETIME, Redis). */
export const MAX_TTL_MS = 100 * 365 * 86_400_000;

/**
 * The one rule per kind of duration, applied wherever one is given (module
 * defaults, `@Idempotent`, the engine, purge options), so the same value is
 * accepted or refused the same way everywhere.
 */
export const DURATION_RULES = {
  /** Timed by the heartbeat: bounded by Node's timers. */
  lease: { allowZero: false, maxMs: MAX_TIMER_MS, most: 'at most 24.8 days (2^31 - 1 ms)' },
  /** Zero: look once and answer at once. */
  waitTimeout: { allowZero: true, maxMs: MAX_TIMER_MS, most: 'at most 24.8 days (2^31 - 1 ms)' },
  /** Kept in the store's clock, not a timer. */
  ttl: { allowZero: false, maxMs: MAX_TTL_MS, most: 'at most 100 years' },
  /** A continuation's hold (`ctx.suspend`): kept in the store's clock, not a timer. */
  hold: { allowZero: false, maxMs: MAX_TTL_MS, most: 'at most 100 years' },
  /** A timer (the purge schedule). */
  interval: { allowZero: false, maxMs: MAX_TIMER_MS, most: 'at most 24.8 days (2^31 - 1 ms)' },
} as const;

export type DurationKind = keyof typeof DURATION_RULES;

const SHORTHAND = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/;
const SHORTHAND_MS: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};
// Weeks, days and time parts only: years and months have no fixed length.
const ISO =
  /^P(?:(\d+(?:\.\d+)?)W)?(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$/;
const ISO_MS = [604_800_000, 86_400_000, 3_600_000, 60_000, 1000];

/**
 * Parses a duration to whole milliseconds by the rule for `kind`, or throws
 * `IdempotencyConfigError` naming `where` (e.g. `PaymentsController.create`),
 * the option as the user wrote it (`option`, e.g. `defaults.ttl`) and the value.
 */
export function parseDuration(
  value: unknown,
  kind: DurationKind,
  option: string = kind,
  where?: string,
): number {
  const rule = DURATION_RULES[kind];
  const ms = toMilliseconds(value);
  const place = where ? `${where}: ` : '';
  if (ms === undefined) {
    throw new IdempotencyConfigError(
      `${place}option "${option}" has an invalid duration ${describe(value)}; use ISO-8601 (PT30S), shorthand (250ms, 30s, 5m, 24h, 7d) or milliseconds`,
    );
  }
  if (ms < 0 || (ms === 0 && !rule.allowZero)) {
    throw new IdempotencyConfigError(
      `${place}option "${option}" must be ${rule.allowZero ? 'zero or more' : 'greater than zero'}, got ${describe(value)}`,
    );
  }
  if (ms > rule.maxMs) {
    throw new IdempotencyConfigError(
      `${place}option "${option}" is too long (${describe(value)}); ${rule.most}`,
    );
  }
  return ms;
}

function toMilliseconds(value: unknown): number | undefined {
  if (typeof value === 'number') {
    return Number.isFinite(value) ? Math.round(value) : undefined;
  }
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  const short = SHORTHAND.exec(text);
  if (short) return Math.round(Number(short[1]) * SHORTHAND_MS[short[2]]);
  if (text.startsWith('-')) return -1;
  const iso = ISO.exec(text.toUpperCase());
  if (!iso || text === 'P' || text.toUpperCase().endsWith('T')) return undefined;
  let total = 0;
  let any = false;
  for (let i = 0; i < ISO_MS.length; i++) {
    if (iso[i + 1] !== undefined) {
      any = true;
      total += Number(iso[i + 1]) * ISO_MS[i];
    }
  }
  return any ? Math.round(total) : undefined;
}

function describe(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value) : String(value);
}
