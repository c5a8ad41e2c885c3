import { Controller, Get, Header, Res, Sse, Version } from '@nestjs/common';
import { EventPattern, MessagePattern } from '@nestjs/microservices';
import { SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { CommandHandler } from '@nestjs/cqrs';
import { Mutation, Query, ResolveField, Resolver } from '@nestjs/graphql';
import { Processor, WorkerHost } from '@nestjs/bullmq';
import { Cron, Interval, Timeout } from '@nestjs/schedule';
import { EVENT_HANDLER, NEST_METADATA, ROUTE_PARAM, SCHEDULER_TYPE } from './nest-metadata';

/**
 * The metadata keys are read by value; each is pinned here by applying the
 * decorator that writes it, so a Nest release that renames one fails this
 * test rather than silently turning protection off.
 */
describe('NEST_METADATA: the keys Nest decorators write', () => {
  @Controller({ path: 'c', version: '2' })
  class Routes {
    @Get('x')
    @Version('3')
    @Header('X-Test', '1')
    route(@Res({ passthrough: true }) _res: unknown) {
      return 'x';
    }

    @Sse('events')
    events() {
      return undefined;
    }
  }

  class Messages {
    @MessagePattern('request')
    request() {
      return 'r';
    }

    @EventPattern<string>('event')
    event(_data: unknown) {
      return undefined;
    }
  }

  @WebSocketGateway()
  class Gateway {
    @SubscribeMessage('message')
    handle() {
      return undefined;
    }
  }

  class Ping {}

  @CommandHandler(Ping)
  class PingHandler {
    execute() {
      return undefined;
    }
  }

  @Resolver(() => String)
  class Resolvers {
    @Query(() => String)
    read() {
      return 'q';
    }

    @Mutation(() => String)
    write() {
      return 'm';
    }

    @ResolveField(() => String)
    field() {
      return 'f';
    }
  }

  const has = (key: string, target: object) => Reflect.hasMetadata(key, target);

  it('HTTP routes: path, method, @Header, route arguments, @Sse, passthrough, version', () => {
    const route = Routes.prototype.route;
    expect(has(NEST_METADATA.path, route)).toBe(true);
    expect(has(NEST_METADATA.method, route)).toBe(true);
    expect(Reflect.getMetadata(NEST_METADATA.headers, route)).toEqual([
      { name: 'X-Test', value: '1' },
    ]);
    const args = Reflect.getMetadata(NEST_METADATA.routeArguments, Routes, 'route') as Record<
      string,
      unknown
    >;
    expect(Object.keys(args).map((k) => Number(k.split(':')[0]))).toEqual([ROUTE_PARAM.response]);
    expect(Reflect.getMetadata(NEST_METADATA.responsePassthrough, Routes, 'route')).toBe(true);
    expect(has(NEST_METADATA.sse, Routes.prototype.events)).toBe(true);
    expect(Reflect.getMetadata(NEST_METADATA.version, Routes)).toBe('2');
    expect(Reflect.getMetadata(NEST_METADATA.version, route)).toBe('3');
  });

  it('message handlers: the pattern, and the handler type that tells an event from a request', () => {
    expect(has(NEST_METADATA.pattern, Messages.prototype.request)).toBe(true);
    expect(Reflect.getMetadata(NEST_METADATA.patternHandler, Messages.prototype.event)).toBe(
      EVENT_HANDLER,
    );
    expect(Reflect.getMetadata(NEST_METADATA.patternHandler, Messages.prototype.request)).not.toBe(
      EVENT_HANDLER,
    );
  });

  it('WebSocket gateways and their message handlers', () => {
    expect(has(NEST_METADATA.websocketGateway, Gateway)).toBe(true);
    expect(has(NEST_METADATA.websocketMessage, Gateway.prototype.handle)).toBe(true);
  });

  it('CQRS command handlers', () => {
    expect(has(NEST_METADATA.cqrsCommandHandler, PingHandler)).toBe(true);
  });

  it('GraphQL: the resolver class, the operation of each method, field resolvers', () => {
    expect(has(NEST_METADATA.graphqlResolver, Resolvers)).toBe(true);
    expect(Reflect.getMetadata(NEST_METADATA.graphqlResolver, Resolvers.prototype.write)).toBe(
      'Mutation',
    );
    expect(Reflect.getMetadata(NEST_METADATA.graphqlResolver, Resolvers.prototype.read)).toBe(
      'Query',
    );
    expect(has(NEST_METADATA.graphqlResolverName, Resolvers.prototype.write)).toBe(true);
    expect(Reflect.getMetadata(NEST_METADATA.graphqlResolveField, Resolvers.prototype.field)).toBe(
      true,
    );
  });

  @Processor('queue')
  class Jobs extends WorkerHost {
    process() {
      return Promise.resolve();
    }
  }

  class Timers {
    @Cron('0 * * * * *', { name: 'minutely', timeZone: 'UTC' })
    cron() {}

    @Interval(1000)
    interval() {}

    @Timeout(1000)
    timeout() {}
  }

  it('BullMQ processors and @nestjs/schedule timers: their kind and the cron options', () => {
    expect(has(NEST_METADATA.bullProcessor, Jobs)).toBe(true);
    const type = (method: object) => Reflect.getMetadata(NEST_METADATA.schedulerType, method);
    expect(type(Timers.prototype.cron)).toBe(SCHEDULER_TYPE.cron);
    expect(type(Timers.prototype.interval)).toBe(SCHEDULER_TYPE.interval);
    expect(type(Timers.prototype.timeout)).toBe(SCHEDULER_TYPE.timeout);
    expect(Reflect.getMetadata(NEST_METADATA.cronOptions, Timers.prototype.cron)).toMatchObject({
      cronTime: '0 * * * * *',
      name: 'minutely',
      timeZone: 'UTC',
    });
  });
});
