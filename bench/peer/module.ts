/**
 * The benchmark application's module on the peer: the same trivial handler
 * as bench/http/app.ts's `/idempotent`, behind node-idempotency's @Idempotent
 * (its NodeIdempotencyInterceptor) on its in-memory or Redis adapter.
 */
import { Body, Controller, HttpCode, Module, Post, Type } from '@nestjs/common';
import { loadPeer, PeerStore } from './load';

export function peerModule(store: PeerStore, redisUrl: string, keyPrefix: string): Type {
  const peer = loadPeer();
  let runs = 0;

  @Controller()
  class PeerController {
    @Post('idempotent')
    @HttpCode(200)
    @peer.Idempotent()
    idempotent(@Body() body: { n: number }) {
      return { ok: true, n: body.n, run: ++runs };
    }
  }

  @Module({
    imports: [
      peer.NodeIdempotencyModule.forRootAsync({
        cacheKeyPrefix: keyPrefix || 'idem-bench-peer',
        storage:
          store === 'peer-redis'
            ? { adapter: 'redis', options: { url: redisUrl } }
            : { adapter: 'memory' },
      }),
    ],
    controllers: [PeerController],
  })
  class PeerBenchModule {}
  return PeerBenchModule;
}
