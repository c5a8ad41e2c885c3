/** Things worth an operator's attention; emitted by the engine, never a substitute for an error. */
export type IdempotencyEvent =
  | {
      type: 'lease-lost';
      scope: string;
      keyDigest: string;
      /** Where the loss was noticed: a refused heartbeat, completion or release. */
      during: 'heartbeat' | 'complete' | 'release';
    }
  | { type: 'completion-retry'; scope: string; keyDigest: string; attempt: number; error: string }
  | { type: 'release-failed'; scope: string; keyDigest: string; error: string };

export type IdempotencyEventListener = (event: IdempotencyEvent) => void;
