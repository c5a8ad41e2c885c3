/**
 * Case 12's kill points and reply (shared by the spec and tx-app.ts, which
 * cannot be imported: it starts an app). See tx-app.ts for where each point is.
 */
export const KILL_POINTS = [
  'before-insert',
  'after-insert',
  'before-commit',
  'after-commit',
] as const;
export type KillPoint = (typeof KILL_POINTS)[number];

/** The headers that ask a request to be held (and its process killed) at a point. */
export const POINT_HEADER = 'x-fault-point';
export const TAG_HEADER = 'x-fault-tag';

/** What a call's response carries, and what its row records. */
export interface RowReply {
  attempt: string;
  row: number;
  pid: number;
}
