import type { IdempotencyStore } from '../core/store';

/**
 * What a store under test offers the conformance kit. Only `store` is
 * required; each optional part makes more scenarios meaningful.
 */
export interface ContractHarness {
  /** Instance A. One instance serves the whole catalogue: each scenario uses a scope of its own. */
  store: IdempotencyStore;
  /**
   * Instance B: the same backend through connections of its own, as another
   * process would have. For a shared store, give it a long fallback poll
   * (a minute), so that only a real wake-up makes it answer quickly.
   * Default: `store` itself.
   */
  other?: IdempotencyStore;
  /**
   * The backend's raw state of a scope's records, as text (for a SQL table:
   * every column and the row version). Two equal snapshots mean nothing was
   * written. Default: the records as `find`/`list` show them.
   */
  snapshot?: (scope: string) => Promise<string>;
  /**
   * Whose clock decides leases and TTLs: `store` for a shared backend (the
   * database's clock; checked by moving this process's clock an hour either
   * way), `process` for an in-process store.
   */
  clock?: 'store' | 'process';
  /**
   * Who removes expired records: `purge` (the default) when `purgeExpired`
   * deletes them, `backend` when the backend expires them itself (Redis key
   * expiry), so `purgeExpired` has nothing to delete.
   */
  expiry?: 'purge' | 'backend';
  /**
   * Whether the strict-mode scenarios apply. Default: whether the store
   * declares `strictMode`. A store that does not gets N/A for them.
   */
  strictMode?: boolean;
  /**
   * Whether the recorded-step scenarios apply. Default: whether the store
   * declares `steps`. A store that does not gets N/A for them.
   */
  steps?: boolean;
  /**
   * Whether the continuation scenarios apply. Default: whether the store
   * declares `continuations`. A store that does not gets N/A for them.
   */
  continuations?: boolean;
  /** Largest payload the store was configured to accept (the kit checks one byte more is refused). Default 1 MiB. */
  maxPayloadBytes?: number;
  /** Called once after the catalogue. */
  close?: () => Promise<unknown>;
}

/** How hard the load-bearing scenarios push. */
export interface ContractScale {
  /** Concurrent acquirers of one key, split over the two instances. Default 50. */
  concurrency: number;
  /** Iterations of the completion/arrival race over two instances. Default 10,000. */
  raceIterations: number;
}

export const DEFAULT_SCALE: ContractScale = { concurrency: 50, raceIterations: 10_000 };
