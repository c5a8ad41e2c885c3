import {
  Inject,
  Injectable,
  Logger,
  OnApplicationBootstrap,
  OnApplicationShutdown,
} from '@nestjs/common';
import { EventEmitter } from 'node:events';
import { IdempotencyEngine } from '../core/engine';
import { DEFAULT_PURGE } from './config/idempotency.options';
import type { ModuleSettings } from './config/module-settings';
import { MODULE_SETTINGS } from './config/module-settings.provider';

export interface PurgeRun {
  purged: number;
  batches: number;
  error?: string;
}

/**
 * Runs `purgeExpired` on a timer in this instance: bounded batches, one run at
 * a time, timer unref'd and stopped at shutdown. Emits `run` after each run.
 */
@Injectable()
export class IdempotencyPurgeScheduler implements OnApplicationBootstrap, OnApplicationShutdown {
  readonly events = new EventEmitter();
  private readonly logger: { warn(message: string): void };
  private readonly intervalMs?: number;
  private readonly batchSize: number = DEFAULT_PURGE.batchSize;
  private timer?: NodeJS.Timeout;
  private running?: Promise<PurgeRun>;
  private stopped = false;

  constructor(
    @Inject(MODULE_SETTINGS) private readonly settings: ModuleSettings,
    private readonly engine: IdempotencyEngine,
  ) {
    this.logger = settings.options.logger ?? new Logger('IdempotencyPurge');
    if (settings.purge === false) return;
    this.intervalMs = settings.purge.intervalMs;
    this.batchSize = settings.purge.batchSize;
  }

  get enabled(): boolean {
    return this.intervalMs !== undefined;
  }

  onApplicationBootstrap(): void {
    if (this.intervalMs === undefined) return;
    this.timer = setInterval(() => void this.runOnce(), this.intervalMs);
    this.timer.unref();
  }

  async onApplicationShutdown(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running;
  }

  /** One purge run now (batches until one comes back short); concurrent calls share the run. */
  runOnce(): Promise<PurgeRun> {
    this.running ??= this.purge().finally(() => (this.running = undefined));
    return this.running;
  }

  private async purge(): Promise<PurgeRun> {
    const run: PurgeRun = { purged: 0, batches: 0 };
    try {
      while (!this.stopped) {
        // The engine's store: with telemetry on, each batch is a traced, timed store call.
        const purged = await this.engine.store.purgeExpired({ limit: this.batchSize });
        run.purged += purged;
        run.batches++;
        if (purged < this.batchSize) break;
      }
    } catch (error) {
      run.error = (error as Error).message;
      this.logger.warn(`purge of expired idempotency records failed: ${run.error}`);
    }
    this.events.emit('run', run);
    this.engine.publish({ type: 'purge-run', scope: '*', ...run });
    return run;
  }
}
