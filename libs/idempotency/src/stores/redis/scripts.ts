import { createHash } from 'node:crypto';

/**
 * The store's Lua scripts. Each transition is one script, so one round trip
 * and atomic on the server (a script runs alone). Sent as EVALSHA; a server
 * that does not have the script (restarted, flushed, a new master after a
 * failover) answers NOSCRIPT and the store sends it once as EVAL, which
 * caches it again.
 *
 * Every time decision uses the server's `TIME`, never the application's
 * clock. Times are stored as epoch milliseconds with three decimals
 * (microseconds), so records created in the same millisecond still order.
 *
 * The record is one hash:
 *
 *   s   scope                 k   key (both verbatim)
 *   st  IN_PROGRESS | COMPLETE
 *   l   lease id              le  lease expiry        (IN_PROGRESS only)
 *   e   TTL end               c   created             d   completed (COMPLETE only)
 *   f   fingerprint (absent: none)
 *   p   payload bytes (COMPLETE only)
 *   w   "1" once a duplicate waits on the record (IN_PROGRESS only)
 *   as  AMBIGUOUS since       ar  why: lease-expired | action-failed   (AMBIGUOUS only)
 *   rb  resolved by           ra  resolved at          (COMPLETE, when a resolution completed it)
 *   t:<step name>  a recorded step: "0" begun, or "1" and the value's bytes
 *                  (IN_PROGRESS and AMBIGUOUS only; a takeover keeps them)
 *   cn  continuation id (set by a suspension; kept after its resumption and
 *       completion, so a second resumption is told "consumed")
 *   sa  suspended answer      ss  suspended state      (SUSPENDED only)
 *
 * A held record (IN_PROGRESS under a caller's lease) has exactly s, k, st, l, le, e, c, the
 * optional f, w and cn, and its steps: COMPLETE counts on that to skip looking for step fields
 * when there are none, so a new field of a held record must be counted there.
 *
 * A SUSPENDED record is IN_PROGRESS with `sa` present: its lease id is a
 * fresh one nobody holds and its lease expiry `le` is the hold's end. Once
 * the hold lapses it is an ordinary expired lease, whose takeover (or move
 * to AMBIGUOUS) drops `cn`, `sa` and `ss`.
 *
 * and the key expires (PEXPIREAT) at the later of its TTL and its lease:
 * Redis removes a record by itself once nothing can use it any more, and
 * never while its lease is live. An AMBIGUOUS record has no expiry at all
 * (PERSIST): only a resolution ends it.
 */
export interface RedisScript {
  readonly name: string;
  readonly source: string;
  readonly sha: string;
}

const PRELUDE = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end
local function ms(x) return string.format('%.3f', x) end
local function at(x) return string.format('%.0f', math.ceil(x)) end
local function drop_steps(key)
  local fields = redis.call('HKEYS', key)
  for _, field in ipairs(fields) do
    if string.sub(field, 1, 2) == 't:' then redis.call('HDEL', key, field) end
  end
end
`;

function script(name: string, body: string): RedisScript {
  const source = `-- nest-idempotency: ${name}\n${PRELUDE}${body}`;
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

/**
 * KEYS[1] record. ARGV: scope, key, lease id, lease ms, ttl ms, has
 * fingerprint (1/0), fingerprint, watch (1/0), refuse an expired lease (1/0).
 *
 * Inserts, or steals an IN_PROGRESS record whose lease ran out (or a COMPLETE
 * one past its TTL that Redis has not removed yet), and returns {'acquired'}
 * ({'acquired', '1'} when it took a record over);
 * otherwise returns {'existing', state, fingerprint, payload (COMPLETE),
 * completed at, lease left ms, TTL left ms, AMBIGUOUS since, its reason,
 * moved now (1/0), suspended answer, continuation} and writes nothing, except that a caller that will wait
 * marks a live IN_PROGRESS record watched (once), so that complete and
 * release publish only for records someone waits on, and that in strict
 * mode (ARGV[9] = 1) an expired lease is not stolen: the record becomes
 * AMBIGUOUS (PERSIST: no expiry) and is reported so. An AMBIGUOUS record is
 * never stolen. A SUSPENDED record whose hold runs is reported with its
 * answer and continuation, and never marked watched (its duplicates are
 * answered at once). decide.ts isStealable, becomesAmbiguous and
 * fingerprintsConflict, in Lua.
 */
export const ACQUIRE = script(
  'acquire',
  `
local now = now_ms()
local r = redis.call('HMGET', KEYS[1], 'st', 'le', 'e', 'f', 'd', 'w', 'cn', 'p')
local state = r[1]
local stolen = '0'
if state then
  local lease_left = 0
  if state == 'IN_PROGRESS' then lease_left = tonumber(r[2]) - now end
  local expires_left = tonumber(r[3]) - now
  local moved = '0'
  if state == 'IN_PROGRESS' and lease_left <= 0 and ARGV[9] == '1' then
    redis.call('HDEL', KEYS[1], 'l', 'le', 'w', 'cn', 'sa', 'ss')
    redis.call('HSET', KEYS[1], 'st', 'AMBIGUOUS', 'as', ms(now), 'ar', 'lease-expired')
    redis.call('PERSIST', KEYS[1])
    state = 'AMBIGUOUS'
    moved = '1'
  end
  if state == 'AMBIGUOUS' then
    local a = redis.call('HMGET', KEYS[1], 'as', 'ar')
    return {'existing', state, r[4], false, false, ms(0), ms(expires_left), a[1], a[2], moved}
  end
  local live
  if state == 'IN_PROGRESS' then live = lease_left > 0 else live = expires_left > 0 end
  if live then
    if state == 'IN_PROGRESS' and r[7] then
      local answer = redis.call('HGET', KEYS[1], 'sa')
      if answer then
        return {'existing', state, r[4], false, false, ms(lease_left), ms(expires_left),
          false, false, '0', answer, r[7]}
      end
    end
    local payload = false
    if state == 'COMPLETE' then
      payload = r[8]
    elseif ARGV[8] == '1' and not r[6] and not (ARGV[6] == '1' and r[4] and r[4] ~= ARGV[7]) then
      redis.call('HSET', KEYS[1], 'w', '1')
    end
    return {'existing', state, r[4], payload, r[5], ms(lease_left), ms(expires_left)}
  end
  -- An expired lease's takeover keeps the steps its holder recorded (and drops a lapsed
  -- suspension); an expired result is gone.
  if state == 'IN_PROGRESS' then redis.call('HDEL', KEYS[1], 'f', 'w', 'cn', 'sa', 'ss') else redis.call('DEL', KEYS[1]) end
  stolen = '1'
end
local lease_at = now + tonumber(ARGV[4])
local expires_at = now + tonumber(ARGV[5])
if ARGV[6] == '1' then
  redis.call('HSET', KEYS[1], 's', ARGV[1], 'k', ARGV[2], 'st', 'IN_PROGRESS', 'l', ARGV[3],
    'le', ms(lease_at), 'e', ms(expires_at), 'c', ms(now), 'f', ARGV[7])
else
  redis.call('HSET', KEYS[1], 's', ARGV[1], 'k', ARGV[2], 'st', 'IN_PROGRESS', 'l', ARGV[3],
    'le', ms(lease_at), 'e', ms(expires_at), 'c', ms(now))
end
redis.call('PEXPIREAT', KEYS[1], at(math.max(lease_at, expires_at)))
return {'acquired', stolen}
`,
);

/**
 * KEYS[1] record. ARGV: lease id, payload, ttl ms, publish command (PUBLISH
 * or SPUBLISH), channel, message. Returns 0 (not held under this lease), 1
 * (completed), 2 (completed, and a waiter was told).
 */
export const COMPLETE = script(
  'complete',
  `
local r = redis.call('HMGET', KEYS[1], 'st', 'l', 'w', 'f', 'cn')
if r[1] ~= 'IN_PROGRESS' or r[2] ~= ARGV[1] then return 0 end
local now = now_ms()
local expires_at = now + tonumber(ARGV[3])
redis.call('HDEL', KEYS[1], 'l', 'le', 'w')
-- Past s, k, st, e, c and the optional f and cn, a held record's fields are its steps:
-- looked for only when there are more.
local plain = 5
if r[4] then plain = plain + 1 end
if r[5] then plain = plain + 1 end
if redis.call('HLEN', KEYS[1]) > plain then drop_steps(KEYS[1]) end
redis.call('HSET', KEYS[1], 'st', 'COMPLETE', 'p', ARGV[2], 'd', ms(now), 'e', ms(expires_at))
redis.call('PEXPIREAT', KEYS[1], at(expires_at))
if r[3] then
  redis.call(ARGV[4], ARGV[5], ARGV[6])
  return 2
end
return 1
`,
);

/** KEYS[1] record. ARGV: lease id, publish command, channel, message. Returns 0, 1 (deleted) or 2 (deleted, waiter told). */
export const RELEASE = script(
  'release',
  `
local r = redis.call('HMGET', KEYS[1], 'st', 'l', 'w')
if r[1] ~= 'IN_PROGRESS' or r[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if r[3] then
  redis.call(ARGV[2], ARGV[3], ARGV[4])
  return 2
end
return 1
`,
);

/**
 * KEYS[1] record. ARGV: lease id, reason, publish command, channel, message.
 * Strict mode: moves the record from IN_PROGRESS under this lease to
 * AMBIGUOUS, with no expiry (PERSIST). Returns 0 (not held under this lease),
 * 1 (moved), 2 (moved, and a waiter was told: it looks again and is refused).
 */
export const MARK_AMBIGUOUS = script(
  'mark-ambiguous',
  `
local r = redis.call('HMGET', KEYS[1], 'st', 'l', 'w')
if r[1] ~= 'IN_PROGRESS' or r[2] ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'l', 'le', 'w')
redis.call('HSET', KEYS[1], 'st', 'AMBIGUOUS', 'as', ms(now_ms()), 'ar', ARGV[2])
redis.call('PERSIST', KEYS[1])
if r[3] then
  redis.call(ARGV[3], ARGV[4], ARGV[5])
  return 2
end
return 1
`,
);

/**
 * KEYS[1] record. ARGV: outcome (completed | not-executed), payload, ttl ms,
 * resolved by. Ends an AMBIGUOUS record: completed makes it COMPLETE with the
 * payload, expiring ttl ms from now, with who resolved it and when;
 * not-executed deletes it. Returns {'resolved', at} or, changing nothing,
 * {'not-ambiguous', state or false}.
 */
export const RESOLVE = script(
  'resolve',
  `
local state = redis.call('HGET', KEYS[1], 'st')
if state ~= 'AMBIGUOUS' then return {'not-ambiguous', state} end
local now = now_ms()
if ARGV[1] == 'not-executed' then
  redis.call('DEL', KEYS[1])
  return {'resolved', ms(now)}
end
local expires_at = now + tonumber(ARGV[3])
redis.call('HDEL', KEYS[1], 'as', 'ar')
drop_steps(KEYS[1])
redis.call('HSET', KEYS[1], 'st', 'COMPLETE', 'p', ARGV[2], 'd', ms(now), 'e', ms(expires_at),
  'rb', ARGV[4], 'ra', ms(now))
redis.call('PEXPIREAT', KEYS[1], at(expires_at))
return {'resolved', ms(now)}
`,
);

/** KEYS[1] record. ARGV: lease id, lease ms. Moves the lease and the key's expiry; returns 1, or 0 when not held. */
export const EXTEND = script(
  'extend',
  `
local r = redis.call('HMGET', KEYS[1], 'st', 'l', 'e')
if r[1] ~= 'IN_PROGRESS' or r[2] ~= ARGV[1] then return 0 end
local lease_at = now_ms() + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'le', ms(lease_at))
redis.call('PEXPIREAT', KEYS[1], at(math.max(lease_at, tonumber(r[3]))))
return 1
`,
);

/** KEYS[1] record. Read-only: the record's fields and 'now' (the server's time), or nil. */
export const VIEW = script(
  'view',
  `
local h = redis.call('HGETALL', KEYS[1])
if #h == 0 then return false end
h[#h + 1] = 'now'
h[#h + 1] = ms(now_ms())
return h
`,
);

/**
 * KEYS[1] record. ARGV: lease id, step name. Returns {0} when not held under
 * this lease; else the step's field ("1" and its value when recorded), after
 * marking it begun ("0") when it had none.
 */
export const STEP_BEGIN = script(
  'step-begin',
  `
local r = redis.call('HMGET', KEYS[1], 'st', 'l')
if r[1] ~= 'IN_PROGRESS' or r[2] ~= ARGV[1] then return {0} end
local field = 't:' .. ARGV[2]
local v = redis.call('HGET', KEYS[1], field)
if v then return {1, v} end
redis.call('HSET', KEYS[1], field, '0')
return {1, '0'}
`,
);

/** KEYS[1] record. ARGV: lease id, step name, value. Records the step; returns 1, or 0 when not held. */
export const STEP_RECORD = script(
  'step-record',
  `
local r = redis.call('HMGET', KEYS[1], 'st', 'l')
if r[1] ~= 'IN_PROGRESS' or r[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 't:' .. ARGV[2], '1' .. ARGV[3])
return 1
`,
);

/**
 * KEYS[1] record. ARGV: lease id, new lease id, continuation, answer, state,
 * hold ms, publish command, channel, message. Moves the record held under the
 * lease to SUSPENDED: the new lease id (nobody holds it: the suspender is
 * fenced out), the hold's end as lease expiry, the continuation, answer and
 * state; recorded steps stay. Returns 0 (not held under this lease), 1
 * (suspended), 2 (suspended, and a waiter was told: it looks again and is
 * answered suspended).
 */
export const SUSPEND = script(
  'suspend',
  `
local r = redis.call('HMGET', KEYS[1], 'st', 'l', 'w', 'e')
if r[1] ~= 'IN_PROGRESS' or r[2] ~= ARGV[1] then return 0 end
local hold_at = now_ms() + tonumber(ARGV[6])
redis.call('HDEL', KEYS[1], 'w')
redis.call('HSET', KEYS[1], 'l', ARGV[2], 'le', ms(hold_at), 'cn', ARGV[3], 'sa', ARGV[4],
  'ss', ARGV[5])
redis.call('PEXPIREAT', KEYS[1], at(math.max(hold_at, tonumber(r[4]))))
if r[3] then
  redis.call(ARGV[7], ARGV[8], ARGV[9])
  return 2
end
return 1
`,
);

/**
 * KEYS[1] record (found by scope and locator). ARGV: scope, continuation, new
 * lease id, lease ms, ttl ms. Admits the one resumption: a record of that
 * scope, IN_PROGRESS and SUSPENDED with that continuation, hold not lapsed,
 * gets the new lease (lease ms from now, TTL ttl ms from now), its answer and
 * state dropped and its continuation kept; returns {'admitted', key, state}.
 * Otherwise changes nothing and returns {'consumed'} (that continuation, no
 * longer suspended: resumed or COMPLETE), {'lapsed'} (still suspended with
 * it, hold over) or {'unknown'} (no record, another scope or continuation,
 * AMBIGUOUS).
 */
export const RESUME = script(
  'resume',
  `
local r = redis.call('HMGET', KEYS[1], 's', 'st', 'cn', 'le')
if not r[2] or r[1] ~= ARGV[1] or r[3] ~= ARGV[2] then return {'unknown'} end
if r[2] == 'COMPLETE' then return {'consumed'} end
if r[2] ~= 'IN_PROGRESS' then return {'unknown'} end
local h = redis.call('HMGET', KEYS[1], 'sa', 'ss', 'k')
if not h[1] then return {'consumed'} end
local now = now_ms()
if tonumber(r[4]) <= now then return {'lapsed'} end
local lease_at = now + tonumber(ARGV[4])
local expires_at = now + tonumber(ARGV[5])
redis.call('HDEL', KEYS[1], 'sa', 'ss', 'w')
redis.call('HSET', KEYS[1], 'l', ARGV[3], 'le', ms(lease_at), 'e', ms(expires_at))
redis.call('PEXPIREAT', KEYS[1], at(math.max(lease_at, expires_at)))
return {'admitted', h[3], h[2]}
`,
);

export const SCRIPTS: readonly RedisScript[] = [
  SUSPEND,
  RESUME,
  STEP_BEGIN,
  STEP_RECORD,
  ACQUIRE,
  COMPLETE,
  RELEASE,
  EXTEND,
  VIEW,
  MARK_AMBIGUOUS,
  RESOLVE,
];
