import { IdempotencyConfigError } from '../../../core/errors';
import { optionalPeer } from '../../../core/optional-peer';

/** The part of `cron`'s `CronTime` (the package `@nestjs/schedule` runs its jobs with) used here. */
interface CronTimeLike {
  realDate: boolean;
  source: unknown;
  getNextDateFrom(start: Date, timeZone?: string): { toMillis(): number };
}

type CronPackage = {
  CronTime: new (source: unknown, timeZone?: string, utcOffset?: number) => CronTimeLike;
};

/** What `@Cron(cronTime, options)` wrote. */
export interface CronOptions {
  cronTime: unknown;
  name?: string;
  timeZone?: string;
  utcOffset?: number;
}

/**
 * A cron method's schedule, parsed as `@nestjs/schedule` parses it. A tick
 * is named by the time it was scheduled for, not by the moment its timer
 * fired: `cron` fires a tick at or after its scheduled time (never before:
 * an early timer is set again), so the latest scheduled time not after "now"
 * is the tick's own, the same on every instance whose timer fired within the
 * tick's period, whatever milliseconds their clocks and timers differ by.
 */
export class CronSchedule {
  private readonly time: CronTimeLike;
  private readonly zone: string | undefined;

  constructor(options: CronOptions, where: string) {
    const { CronTime } = optionalPeer<CronPackage>('cron');
    try {
      this.time = new CronTime(options.cronTime, options.timeZone, options.utcOffset);
    } catch (error) {
      throw new IdempotencyConfigError(
        `${where}: its @Cron time could not be parsed: ${(error as Error).message}`,
        { cause: error },
      );
    }
    this.zone = options.timeZone ?? offsetZone(options.utcOffset);
  }

  /** The scheduled time (ms since the epoch) of the tick running at `nowMs`. */
  scheduledAt(nowMs: number): number {
    if (this.time.realDate) return this.at(this.time.source);
    // Look back until a window holds an occurrence, then walk to the last one not after now.
    for (let lookbackMs = 1000; lookbackMs < 20 * 365 * 86_400_000; lookbackMs *= 2) {
      let at = this.next(nowMs - lookbackMs);
      if (at > nowMs) continue;
      for (let next = this.next(at); next <= nowMs; next = this.next(at)) at = next;
      return at;
    }
    return Math.floor(nowMs / 1000) * 1000;
  }

  /** The scheduled time of the tick after the one at `scheduledMs`, or undefined for a one-off date. */
  nextAfter(scheduledMs: number): number | undefined {
    return this.time.realDate ? undefined : this.next(scheduledMs);
  }

  private next(fromMs: number): number {
    return this.time.getNextDateFrom(new Date(fromMs), this.zone).toMillis();
  }

  private at(source: unknown): number {
    const value = source as { toMillis?: () => number; getTime?: () => number };
    return value.toMillis?.() ?? value.getTime?.() ?? Number(source);
  }
}

/** `utcOffset` (minutes) as the zone name `cron` itself gives it, e.g. `UTC+05:30`. */
function offsetZone(utcOffset: number | undefined): string | undefined {
  if (utcOffset === undefined || utcOffset === null) return undefined;
  const sign = utcOffset < 0 ? '-' : '+';
  const minutes = Math.abs(utcOffset);
  const hh = String(Math.trunc(minutes / 60)).padStart(2, '0');
  const mm = String(minutes % 60).padStart(2, '0');
  return `UTC${sign}${hh}:${mm}`;
}
