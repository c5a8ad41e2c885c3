import { AcquireRequest, AcquireResult } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { Gate } from './gate';

/**
 * The real PostgreSQL store, recording what each `tryAcquire` was asked for
 * (scope, lease, wait, ttl), so a test can see which options reached the store.
 */
export class RecordingStore extends TypeOrmIdempotencyStore {
  readonly acquires: AcquireRequest[] = [];
  private readonly watchers: {
    match: (r: AcquireRequest) => boolean;
    gate: Gate<AcquireRequest>;
  }[] = [];

  override tryAcquire(request: AcquireRequest): Promise<AcquireResult> {
    this.acquires.push(request);
    for (const watcher of this.watchers.filter((w) => w.match(request))) {
      this.watchers.splice(this.watchers.indexOf(watcher), 1);
      watcher.gate.open(request);
    }
    return super.tryAcquire(request);
  }

  /** Resolves on the next `tryAcquire` call that `match` accepts. */
  nextAcquire(match: (request: AcquireRequest) => boolean): Promise<AcquireRequest> {
    const gate = new Gate<AcquireRequest>();
    this.watchers.push({ match, gate });
    return gate.promise;
  }

  /** The requests made so far for one key. */
  acquiresFor(key: string): AcquireRequest[] {
    return this.acquires.filter((r) => r.key === key);
  }
}
