import Table from 'cli-table3';
import { IdempotencyRecordView } from '../core/store';

/** A bordered table without colours, so output is the same on a terminal, in a pipe and in a test. */
export function renderTable(
  head: string[],
  rows: string[][],
  colWidths?: Array<number | null>,
): string {
  const table = new Table({
    head,
    style: { head: [], border: [] },
    ...(colWidths ? { colWidths, wordWrap: true } : {}),
  });
  table.push(...rows);
  return table.toString();
}

const NO_BORDERS = {
  top: '',
  'top-mid': '',
  'top-left': '',
  'top-right': '',
  bottom: '',
  'bottom-mid': '',
  'bottom-left': '',
  'bottom-right': '',
  left: '',
  'left-mid': '',
  mid: '',
  'mid-mid': '',
  right: '',
  'right-mid': '',
  middle: '  ',
};

/**
 * Columns without borders, two spaces apart, as `ps` and `kubectl` print
 * them: a border costs three columns a cell, which an 80-column terminal
 * cannot spare. Widths count what a terminal shows (wide characters twice).
 */
export function renderColumns(head: string[], rows: string[][]): string {
  const table = new Table({
    head,
    chars: NO_BORDERS,
    style: { head: [], border: [], 'padding-left': 0, 'padding-right': 0 },
  });
  table.push(...rows);
  return table
    .toString()
    .split('\n')
    .map((line) => line.trimEnd())
    .join('\n');
}

/** A two-column table of labels and values. */
export function renderFields(fields: Array<[string, string]>): string {
  const table = new Table({ style: { head: [], border: [] } });
  table.push(...fields.map(([label, value]) => ({ [label]: value })));
  return table.toString();
}

/** `2026-01-02T03:04:05Z`: UTC, to the second. */
export function formatInstant(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

const UNITS: Array<[string, number]> = [
  ['d', 86_400_000],
  ['h', 3_600_000],
  ['m', 60_000],
  ['s', 1000],
];

/** A length of time in its two largest units: `2d 3h`, `4m 5s`, `7s`, `350ms`. */
export function formatDuration(ms: number): string {
  let rest = Math.abs(Math.round(ms));
  if (rest < 1000) return `${rest}ms`;
  const parts: string[] = [];
  for (const [unit, size] of UNITS) {
    if (rest >= size || parts.length > 0) {
      parts.push(`${Math.floor(rest / size)}${unit}`);
      rest %= size;
    }
    if (parts.length === 2) break;
  }
  return parts.filter((part, i) => i === 0 || !part.startsWith('0')).join(' ');
}

/** A length of time in its largest unit, rounded down: `350ms` is `0s`, `4m 59s` is `4m`, `2d 3h` is `2d`. */
export function formatShortDuration(ms: number): string {
  const rest = Math.abs(Math.round(ms));
  if (rest < 60_000) return `${Math.floor(rest / 1000)}s`;
  if (rest < 3_600_000) return `${Math.floor(rest / 60_000)}m`;
  if (rest < 86_400_000) return `${Math.floor(rest / 3_600_000)}h`;
  return `${Math.floor(rest / 86_400_000)}d`;
}

/** `in 5m 2s` for the future, `5m 2s ago` for the past, relative to `now`. */
export function formatRelative(at: Date, now: Date): string {
  const ms = at.getTime() - now.getTime();
  return ms > 0 ? `in ${formatDuration(ms)}` : `${formatDuration(ms)} ago`;
}

/**
 * The state as a read finds it, and nothing more: `IN_PROGRESS (lease expired)`
 * for an expired lease nobody has taken over, `COMPLETE (TTL expired)` for a
 * result that will not be replayed any more but has not been purged.
 */
export function stateLabel(view: IdempotencyRecordView, now: Date): string {
  if (view.state === 'IN_PROGRESS' && view.leaseExpired) return 'IN_PROGRESS (lease expired)';
  if (view.state === 'COMPLETE' && view.expiresAt.getTime() <= now.getTime()) {
    return 'COMPLETE (TTL expired)';
  }
  return view.state;
}

/** The lease column: when it ends and how long is left, as the server's clock sees it. */
export function leaseLabel(view: IdempotencyRecordView, now: Date): string {
  if (view.state !== 'IN_PROGRESS' || !view.leaseExpiresAt) return '-';
  const at = formatInstant(view.leaseExpiresAt);
  if (view.leaseExpired) {
    const ago = Math.max(0, now.getTime() - view.leaseExpiresAt.getTime());
    return `${at} (expired ${formatDuration(ago)} ago)`;
  }
  const left = Math.max(0, view.leaseExpiresAt.getTime() - now.getTime());
  return `${at} (${formatDuration(left)} left)`;
}

export function instantWithRelative(at: Date, now: Date): string {
  return `${formatInstant(at)} (${formatRelative(at, now)})`;
}

/** `200,000`: a count as a reader groups its digits. */
export function thousands(count: number): string {
  return count.toLocaleString('en-US');
}

export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

export function median(values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.floor(sorted.length / 2)];
}

/** Milliseconds to one decimal below 10, whole above. */
export function roundMs(ms: number): number {
  return Math.abs(ms) < 10 ? Math.round(ms * 10) / 10 : Math.round(ms);
}
