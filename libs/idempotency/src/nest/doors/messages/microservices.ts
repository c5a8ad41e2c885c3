import { DoorPeer } from '../door-peer';

type Microservices = typeof import('@nestjs/microservices');

/**
 * `@nestjs/microservices`, loaded at bootstrap when the application has
 * message handlers (`microservices.load()`), so an HTTP-only application runs
 * without the package installed.
 */
export const microservices = new DoorPeer<Microservices>(
  '@nestjs/microservices',
  '@Idempotent message handlers need @nestjs/microservices, which could not be loaded: ',
);
