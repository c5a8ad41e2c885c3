import { formatDuration } from './format';

/** What a command says about long work while it runs: a line redrawn on the terminal. */
export interface Progress {
  /** What is under way now, e.g. `purging public.idempotency_records: 12,000 deleted so far`. */
  show(text: string): void;
  /** Erases the line, before the command prints its result or an error. */
  clear(): void;
}

/** Progress where there is no terminal to draw on, or with `--json`: nothing at all. */
export const NO_PROGRESS: Progress = { show: () => undefined, clear: () => undefined };

/** Work shorter than this shows nothing: a quick command prints its result and no flicker. */
export const PROGRESS_DELAY_MS = 1000;
const REDRAW_MS = 250;
/** Carriage return, then erase to the end of the line (ECMA-48 EL). */
const ERASE_LINE = '\r\x1b[K';

/**
 * One line on stderr, drawn once the work has taken `delayMs` and redrawn
 * four times a second with the time it has taken, cut to the terminal's
 * width so that it never wraps (a wrapped line cannot be erased). Its timer
 * is unref'd: a progress line never keeps the process alive.
 */
export class TerminalProgress implements Progress {
  private text: string | undefined;
  private startedAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private drawn = false;

  constructor(
    private readonly write: (text: string) => void,
    private readonly columns: () => number | undefined,
    private readonly delayMs = PROGRESS_DELAY_MS,
  ) {}

  show(text: string): void {
    this.text = text;
    if (this.timer) return;
    this.startedAt = performance.now();
    this.timer = setTimeout(() => this.draw(), this.delayMs);
    this.timer.unref();
  }

  clear(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.text = undefined;
    if (this.drawn) this.write(ERASE_LINE);
    this.drawn = false;
  }

  private draw(): void {
    if (this.text === undefined) return;
    const took = ` (${formatDuration(performance.now() - this.startedAt)})`;
    // A terminal that does not say its width (0, as under `script`) is taken for 80 columns;
    // the last column stays free, and the time taken is cut last.
    const width = (this.columns() || 80) - 1;
    this.write(`${ERASE_LINE}${fit(this.text, width - took.length)}${took}`);
    this.drawn = true;
    this.timer = setTimeout(() => this.draw(), REDRAW_MS);
    this.timer.unref();
  }
}

/** `text` cut to `width` characters, ending in `…` when it was longer. */
function fit(text: string, width: number): string {
  const characters = [...text];
  if (characters.length <= width) return text;
  return `${characters.slice(0, Math.max(0, width - 1)).join('')}…`;
}
