import { DoorPeer } from '../door-peer';

type Websockets = typeof import('@nestjs/websockets');

/**
 * `@nestjs/websockets` (whose `WsException` the refusals extend), loaded at
 * bootstrap only when an application has `@Idempotent` gateway handlers.
 */
export const websockets = new DoorPeer<Websockets>(
  '@nestjs/websockets',
  '@Idempotent gateway handlers need @nestjs/websockets, which could not be loaded: ',
);
