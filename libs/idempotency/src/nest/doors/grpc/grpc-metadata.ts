import { keyFromBytes } from '../../../core/key';

/** The part of `@grpc/grpc-js`' `Metadata` read and written here (the call's own class is used). */
export interface GrpcMetadata {
  get(name: string): (string | Uint8Array)[];
  set(name: string, value: string): void;
  getMap(): Record<string, string | Uint8Array>;
}

export function isGrpcMetadata(value: unknown): value is GrpcMetadata {
  const candidate = value as Partial<GrpcMetadata> | null | undefined;
  return (
    typeof candidate?.get === 'function' &&
    typeof candidate.set === 'function' &&
    typeof candidate.getMap === 'function'
  );
}

/**
 * The call's metadata as key expressions see it (`message.metadata`): each
 * entry under its lower-case name, as a string, or an array when it was sent
 * several times; binary (`-bin`) values as lossless text (`keyFromBytes`).
 */
export function metadataView(metadata: GrpcMetadata | undefined): Record<string, unknown> {
  if (!metadata) return {};
  const view: Record<string, unknown> = {};
  for (const name of Object.keys(metadata.getMap())) {
    const values = metadata
      .get(name)
      .map((value) => (typeof value === 'string' ? value : keyFromBytes(value)));
    view[name] = values.length === 1 ? values[0] : values;
  }
  return view;
}

/** New trailing metadata of the same class as the call's (so it is the server's own grpc-js). */
export function trailersLike(metadata: GrpcMetadata | undefined): GrpcMetadata | undefined {
  if (!metadata) return undefined;
  return new (metadata.constructor as new () => GrpcMetadata)();
}
