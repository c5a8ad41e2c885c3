import { IdempotencyConfigError } from '../../../core/errors';
import { CronSchedule } from './cron-schedule';

const at = (iso: string) => Date.parse(iso);

describe('CronSchedule: the scheduled time of the tick that is running', () => {
  it('names a tick by its scheduled second, however late its timer fired within the period', () => {
    const schedule = new CronSchedule({ cronTime: '*/5 * * * * *', timeZone: 'UTC' }, 'A.tick');
    for (const fired of [
      '2026-12-02T11:30:05.000Z',
      '2026-12-02T11:30:05.004Z',
      '2026-12-02T11:30:09.999Z',
    ]) {
      expect(new Date(schedule.scheduledAt(at(fired))).toISOString()).toBe(
        '2026-12-02T11:30:05.000Z',
      );
    }
    expect(schedule.nextAfter(at('2026-12-02T11:30:05.000Z'))).toBe(at('2026-12-02T11:30:10.000Z'));
  });

  it('finds a daily tick far back, in the cron time zone', () => {
    const schedule = new CronSchedule(
      { cronTime: '0 0 0 * * *', timeZone: 'America/New_York' },
      'A.daily',
    );
    // Midnight in New York is 05:00 UTC in December.
    expect(new Date(schedule.scheduledAt(at('2026-12-02T05:00:00.012Z'))).toISOString()).toBe(
      '2026-12-02T05:00:00.000Z',
    );
    expect(new Date(schedule.scheduledAt(at('2026-12-02T04:59:59.000Z'))).toISOString()).toBe(
      '2026-12-01T05:00:00.000Z',
    );
  });

  it('applies a utcOffset as cron does', () => {
    const schedule = new CronSchedule({ cronTime: '0 30 9 * * *', utcOffset: 330 }, 'A.india');
    // 09:30 at UTC+05:30 is 04:00 UTC.
    expect(new Date(schedule.scheduledAt(at('2026-12-02T04:00:00.300Z'))).toISOString()).toBe(
      '2026-12-02T04:00:00.000Z',
    );
  });

  it('names a one-off date by itself, and has no next tick', () => {
    const date = new Date(Date.now() + 60_000);
    const schedule = new CronSchedule({ cronTime: date }, 'A.once');
    expect(schedule.scheduledAt(date.getTime() + 3)).toBe(date.getTime());
    expect(schedule.nextAfter(date.getTime())).toBeUndefined();
  });

  it('refuses a cron time it cannot parse, naming the method', () => {
    expect(() => new CronSchedule({ cronTime: 'every tuesday' }, 'A.bad')).toThrow(
      IdempotencyConfigError,
    );
    expect(() => new CronSchedule({ cronTime: 'every tuesday' }, 'A.bad')).toThrow(/^A\.bad: /);
  });
});
