import { AbstractLogger, type DataSource, type Logger } from 'typeorm';
import type { QueryLog } from '../sql/query-log';

/**
 * Whether the DataSource's logger does anything with `logQuery`, so that the
 * parameters shown in place of the real ones (digests, sizes) are built only
 * for a logger that will see them. TypeORM's own loggers (what `logging`
 * configures) say so themselves; any other logger, or one whose `logQuery`
 * was replaced, is always called.
 */
export function logsQueries(logger: Logger): boolean {
  if (logger instanceof AbstractLogger && logger.logQuery === AbstractLogger.prototype.logQuery) {
    return (logger as unknown as { isLogEnabledFor(type: string): boolean }).isLogEnabledFor(
      'query',
    );
  }
  return true;
}

/** The DataSource's logger as a dialect's query log. */
export function typeormQueryLog(dataSource: DataSource): QueryLog {
  return {
    logsQueries: () => logsQueries(dataSource.logger),
    query: (text, shown) => dataSource.logger.logQuery(text, shown),
    queryError: (error, text, shown) => dataSource.logger.logQueryError(error, text, shown),
    warn: (message) => dataSource.logger.log('warn', message),
  };
}
