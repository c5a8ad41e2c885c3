import { Controller } from '@nestjs/common';
import {
  EventPattern,
  GrpcMethod,
  GrpcStreamCall,
  GrpcStreamMethod,
  MessagePattern,
} from '@nestjs/microservices';
import { Observable } from 'rxjs';
import { IdempotencyConfigError } from '../../../core/errors';
import { compileGrpcMethod } from './grpc-method';

/** Nest's own decorators write the metadata read here; a release that renames a key fails this. */
describe('compileGrpcMethod', () => {
  @Controller()
  class Handlers {
    @GrpcMethod('Payments', 'Charge')
    unary() {
      return {};
    }

    @GrpcStreamMethod('Payments', 'Watch')
    watch(requests: Observable<unknown>) {
      return requests;
    }

    @GrpcStreamCall('Payments', 'Upload')
    upload() {
      return undefined;
    }

    @MessagePattern('orders.create')
    request() {
      return {};
    }

    @EventPattern<string>('orders.created')
    event(_data: unknown) {
      return undefined;
    }
  }

  it('tells a unary @GrpcMethod from other message handlers', () => {
    expect(compileGrpcMethod(Handlers.prototype.unary, 'Handlers.unary')).toBe(true);
    expect(compileGrpcMethod(Handlers.prototype.request, 'Handlers.request')).toBe(false);
    expect(compileGrpcMethod(Handlers.prototype.event, 'Handlers.event')).toBe(false);
  });

  it.each([
    ['watch', '@GrpcStreamMethod'],
    ['upload', '@GrpcStreamCall'],
  ] as const)('refuses the streaming method %s (%s), naming it', (method, decorator) => {
    const compile = () => compileGrpcMethod(Handlers.prototype[method], `Handlers.${method}`);
    expect(compile).toThrow(IdempotencyConfigError);
    expect(compile).toThrow(`Handlers.${method}: @Idempotent applies to unary gRPC methods`);
    expect(compile).toThrow(decorator);
  });
});
