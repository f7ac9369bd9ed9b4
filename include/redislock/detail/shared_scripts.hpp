#pragma once
/// @file detail/shared_scripts.hpp
/// @brief Key layout and Lua scripts of redislock::basic_shared_mutex (read/write lock).
///
/// Key layout for a lock named N with key prefix P (default "redislock:"):
///
///   P{N}           hash    @kind     = "shared" (tells this lock from a reentrant lock)
///                          @w        = owner id of the writer (absent: no writer)
///                          @wx       = the writer's lease end, server time in ms
///                          r:<owner> = that reader's hold count (reads are reentrant)
///                          x:<owner> = that reader's lease end, server time in ms
///                          g:<owner> = that reader's hold number: the client's number of the
///                          wait that began the read hold, so a late release of an earlier
///                          read hold of the same owner (kept while it writes) is told apart
///                          The key's PEXPIRE is the latest of the lease ends above, so Redis
///                          drops it exactly when the last hold has run out. Absent when free.
///                          (A field "@wq" left by an older version is ignored.)
///   P{N}:fence     integer fencing counter, drawn from by fencing_token() while the owner holds
///                          the lock (detail/fence_scripts.hpp: expires, tokens still increase);
///                          shared with the other lock kinds of the same name.
///   P{N}:squeue    zset    waiting owners, score = arrival time (server time, µs): the lowest is the head.
///                          Absent when nobody waits; expires at most wait_lease after the
///                          longest place in it. This kind's own: a mutex's P{N}:queue never
///                          names a shared waiter, nor the reverse.
///   P{N}:swaiters  hash    owner -> "<place expires at>:<lease ms>:<side><wait>" (server time,
///                          ms; side "w" or "r"; wait = the client's number for this wait, so a
///                          notice names one wait, never a later one of the same owner). A place
///                          lapses wait_lease after the earliest lease among the holds that kept
///                          the waiter out when it last asked. An owner has a field exactly
///                          while it is in the queue. (A "#seq" field of an older version is ignored.)
///   channel P{N}:w:<instance hex>:<thread serial>   one object's thread's channel (owners are
///                          "<instance>:<serial>:<generation>", so the channel is the owner id
///                          without its generation). A hand-off publishes "<owner> <side><wait>":
///                          a notice left from an earlier wait never completes a later one. The
///                          thread stays subscribed between waits (no SUBSCRIBE per wait),
///                          until it exits or a wait of it fails unheard.
///
/// Owners are renamed whenever the thread's holds have all ended (detail/owners.hpp), so a late
/// release or renewal of an earlier hold never touches a later one.
///
/// Every lease is kept per holder, as an absolute time on the server's clock (TIME inside the
/// script): a reader that crashes loses only its own hold when its lease ends, however often
/// other readers renew theirs. Every script first purges the holds whose lease has ended. No
/// client clock is ever compared with anything.
///
/// Waiting: a waiter subscribes to its channel, then joins the queue with acquire(mode "wait")
/// and sleeps. A release that frees the lock for others (the writer leaving, or the last reader)
/// admits the head of the queue in the same script (admit()): a writer at the head alone, or
/// the run of readers at the head up to the first queued writer, all together, each with its
/// own hold (count 1) and the lease it queued with, each told on its own channel. A waiter
/// whose place lapsed, or whose notice reaches no subscriber on this server
/// (detail/notify_lua.hpp), is dead: dropped on the way. Nested read releases admit nothing.
/// A lapsed hold publishes nothing: a refused attempt replies how long until the first hold
/// that blocks it may lapse, and the waiter sleeps no longer than that (detail/wake_wait.hpp).
///
/// Writer preference is the queue: a reader that holds nothing yet is not admitted while a
/// writer holds or any live entry is queued (after admit(), a queue that is not empty while no
/// writer holds starts with a live writer waiting for the readers inside). Re-entrant reads and
/// the writer's own read (downgrade) are admitted at once. There is no separate "writer
/// waiting" marker any more: a writer that gives up leaves the queue, which admits the readers
/// behind it at once; one that crashed holds readers back only until the next attempt or
/// release notices that nobody listens on its channel (its connection closed: admit() drops a
/// writer head blocked by readers when nobody listens for it, one PUBSUB NUMSUB, plus a
/// SHARDNUMSUB when that says 0, asked only while a writer waits behind readers); one that is
/// paused or cut off (still subscribed) until its place lapses (wait_lease after the holds it
/// saw). A live writer whose subscription is briefly down loses its place and queues again at
/// its next attempt; it is never granted the lock unheard.
///
/// Fairness: with lock_options::fair a free lock (holds lapsed) goes to the head of the queue,
/// and a new acquirer never enters past a non-empty queue (try_lock() included). Without it a
/// writer that finds the lock free takes it at once (the queue is served by releases).
///
/// A string at P{N} (a redislock::mutex) fails with Redis's own WRONGTYPE; a hash that is not a
/// shared lock (a reentrant lock, or foreign data) fails with a WRONGTYPE error reply. Either
/// way before anything is changed.
///
/// Every script: KEYS = {lock, fence, queue, waiters} (extend, fence and remaining only use the
/// first two); ARGV[1] = owner, ARGV[2] = waiter channel prefix "P{N}:w:", then its own.
/// Each script reads the lock hash once (HGETALL) and costs one EVALSHA.

#include <redislock/detail/fence_scripts.hpp>
#include <redislock/detail/notify_lua.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/script.hpp>

#include <string>
#include <string_view>

namespace redislock::detail::shared_scripts {

/// The keys and fixed script arguments of one shared lock (layout above), built from a
/// validated name and options (detail::lock_identity).
struct keys {
  static constexpr lock_kind kind = lock_kind::shared;  ///< the kind asked for (wrong_type_error)
  keys(std::string_view name, const lock_options& o)
      : lock(base_key(name, o)),
        fence(lock + ":fence"),
        queue(lock + ":squeue"),
        waiters(lock + ":swaiters"),
        channel(lock + ":w:"),
        wait_lease_ms(std::to_string(o.wait_lease.count())) {}
  std::string lock, fence, queue, waiters;
  std::string channel;  // the waiter channel prefix "P{N}:w:" (ARGV[2] of every script)
  std::string wait_lease_ms;
};

/// The second argument detail::draw_fence sends to fence(): the channel prefix.
inline std::string_view fence_arg(const keys& k) noexcept { return k.channel; }

/// Loads the hash (after `local owner, prefix = ...`), checks its kind, purges ended holds;
/// defines finish(changed), which sets the key's expiry (or deletes it), then publishes the
/// notices of the admissions made meanwhile (`notices`).
inline std::string body_lua() {
  return R"lua(
-- TIME followed by writes needs effects replication: the default (and only) mode since Redis 7;
-- Redis 5 and 6 switch to it here.
if redis.replicate_commands then redis.replicate_commands() end
local key = KEYS[1]
local h = redis.call('HGETALL', key)
local kind, writer, wexp = false, false, 0
local counts, leases, gens = {}, {}, {}
for i = 1, #h, 2 do
  local f, v = h[i], h[i + 1]
  local p = string.sub(f, 1, 2)
  if f == '@kind' then kind = v
  elseif f == '@w' then writer = v
  elseif f == '@wx' then wexp = tonumber(v)
  elseif p == 'r:' then counts[string.sub(f, 3)] = tonumber(v)
  elseif p == 'x:' then leases[string.sub(f, 3)] = tonumber(v)
  elseif p == 'g:' then gens[string.sub(f, 3)] = v
  end
end
if #h > 0 and kind ~= 'shared' then
  return redis.error_reply('WRONGTYPE redislock: ' .. key .. ' is a ' .. (kind or 'foreign hash') ..
                           ', not a shared lock')
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])  -- below 2^53: exact
local now = math.floor(now_us / 1000)
local dirty = false  -- the hash was written (purge, grant): finish() sets its expiry
-- Notices of admissions ({channel, message, sharded}), published by finish() once the holds
-- and the key's expiry are written: a script that fails before (detail/notify_lua.hpp) has told
-- nobody, and a waiter not told finds its hold at its next attempt.
local notices = {}
if writer and wexp <= now then
  redis.call('HDEL', key, '@w', '@wx')
  writer, dirty = false, true
end
local gone = {}
for o, x in pairs(leases) do
  if x <= now then gone[#gone + 1] = o end
end
for _, o in ipairs(gone) do
  redis.call('HDEL', key, 'r:' .. o, 'x:' .. o, 'g:' .. o)
  leases[o], counts[o], gens[o], dirty = nil, nil, nil, true
end
-- The latest lease end among the holds (0: no holds).
local function last_hold()
  local last = 0
  if writer then last = wexp end
  for _, x in pairs(leases) do
    if x > last then last = x end
  end
  return last
end
-- changed: the script wrote to the hash (an untouched hash keeps its expiry: no write). Then
-- sends the notices.
local function finish(changed)
  if changed or dirty then
    local last = last_hold()
    if last > now then
      redis.call('PEXPIRE', key, last - now)
    elseif #h > 0 or dirty then
      redis.call('DEL', key)
    end
  end
  for _, n in ipairs(notices) do
    local channel, message, sharded = n[1], n[2], n[3]
)lua" + std::string(publish_lua()) +
         R"lua(
  end
end
)lua";
}

inline std::string prelude() { return std::string("local owner, prefix = ARGV[1], ARGV[2]\n") + body_lua(); }

/// The queue (after body_lua): KEYS[3] queue, KEYS[4] waiters.
/// admit(self, wait) admits the head of the queue while it may enter: a writer alone when
/// nobody holds, readers (up to the first queued writer) while no writer holds. Dead entries
/// (place lapsed, or nobody listening: checked for a writer head only when it is blocked by
/// readers, or when it is told) are dropped. The caller's own entry (self) is admitted
/// without a notice when it is for this wait, and dropped otherwise (a stale entry of an earlier
/// wait). Returns whether self was admitted, and when the head that stays blocked (if any) lapses.
inline std::string queue_lua() {
  return listeners_on_lua() + R"lua(
local queue, waiters = KEYS[3], KEYS[4]
-- A command on the queue keys, which this script may have deleted already (the last member
-- admitted or dropped): on a migrating slot Redis refuses a key missing from this node, and
-- that means it is not there (nil). Any other refusal is raised again as it was.
local function on_queue(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'non local key', 1, true) then return nil end
    return redis.call(...)
  end
  return r
end
local function forget(w)
  if on_queue('HDEL', waiters, w) == 1 then redis.call('ZREM', queue, w) end
end
local function drop(w)
  on_queue('ZREM', queue, w)
  on_queue('HDEL', waiters, w)
end
local function grant(o, side, lease, tag)
  dirty = true
  if side == 'w' then
    writer, wexp = o, now + tonumber(lease)
    redis.call('HSET', key, '@kind', 'shared', '@w', o, '@wx', wexp)
  else
    counts[o], leases[o], gens[o] = 1, now + tonumber(lease), tag
    redis.call('HSET', key, '@kind', 'shared', 'r:' .. o, 1, 'x:' .. o, leases[o], 'g:' .. o, tag)
  end
end
local function channel_of(w)
  return prefix .. (string.match(w, '^(.+):%d+$') or w)
end
local function listening(w)
  return (listeners_on(channel_of(w))) > 0
end
local function admit(self, wait)
  local got_self = false
  while true do
    local head = (on_queue('ZRANGE', queue, 0, 0) or {})[1]
    if not head then return got_self, false end
    local expiry, lease, side, tag =
        string.match(on_queue('HGET', waiters, head) or '', '^(%d+):(%d+):([rw])(%d+)$')
    expiry = tonumber(expiry)
    if not expiry or expiry <= now or (head == self and side .. tag ~= wait) then
      drop(head)
    elseif writer then
      return got_self, expiry
    elseif side == 'w' and next(leases) then
      -- A writer waiting for the readers inside holds new readers back only while somebody
      -- listens for it: a crashed one's connection is closed (asked only in this case).
      if head == self or listening(head) then return got_self, expiry end
      drop(head)
    else
      drop(head)
      if head == self then
        got_self = true
        grant(head, side, lease, tag)
      else
        -- Told only by finish(), after the holds and the key's expiry (detail/notify_lua.hpp).
        local channel = channel_of(head)
        local n, sharded = listeners_on(channel)
        if n > 0 then
          grant(head, side, lease, tag)
          notices[#notices + 1] = {channel, head .. ' ' .. side .. tag, sharded}
        end
      end
    end
  end
end
)lua";
}

/// Acquisition, either side. ARGV: owner, prefix, lease_ms, mode, fair ("1"/"0"), wait_lease_ms,
/// side ("w"/"r"), wait (the client's number for this wait), count (read: the count after this
/// acquisition), continues: what the client holds that this read continues ("" nothing;
/// "r<n>": its read hold number n, a nested read; "w": its write hold, a downgrade). A
/// continued hold that is gone (lease ran out, force-released) is never taken again: another
/// owner may have held the lock in between.
///   mode "wait":  acquire, or join the queue (keeping our place) and refresh it: it lapses
///                 wait_lease after the earliest lease among the holds that block us;
///   mode "try":   acquire only; never queue;
///   mode "leave": like "try", and leave the queue (giving up); a hand-off that reached us
///                 meanwhile is kept (reported as acquired). Leaving may unblock the readers
///                 behind us: they are admitted (and told) at once.
/// Ours already (handed to us, or an earlier attempt whose reply was lost), a re-entrant read
/// or the writer's own read: acquired, the lease restarts from now.
/// Reply: {1, 0} acquired;
///        {0, ms} refused; ms = the time until the earliest of the holds that block it (or the
///        writer queued ahead of a reader) may lapse (> 0);
///        {-1, 0} refused: a write by an owner that holds a read hold (an upgrade would deadlock);
///        {2, 0} refused: the hold it continues is gone; nothing changed but the purge.
/// Error TRYAGAIN: a "wait" on a migrating slot whose queue this attempt emptied (its keys
/// cannot be made again on the source); the caller was neither admitted nor queued, so the
/// attempt may be repeated, as cluster_client does.
inline const script& acquire() {
  static const script s(prelude() + queue_lua() + R"lua(
local lease, mode, fair, wait_lease, side, count = ARGV[3], ARGV[4], ARGV[5] == '1', tonumber(ARGV[6]), ARGV[7], ARGV[9]
local wait, continues = side .. ARGV[8], ARGV[10] or ''
if side == 'w' and counts[owner] then
  finish()
  return {-1, 0}
end
if continues ~= '' then
  local held
  if continues == 'w' then
    held = writer == owner
  else
    held = counts[owner] and (not gens[owner] or 'r' .. gens[owner] == continues)
  end
  if not held then
    finish()
    return {2, 0}
  end
end
local function take()
  forget(owner)
  if side == 'w' then
    writer, wexp = owner, now + tonumber(lease)
    redis.call('HSET', key, '@kind', 'shared', '@w', owner, '@wx', wexp)
  else
    counts[owner], leases[owner] = tonumber(count), now + tonumber(lease)
    redis.call('HSET', key, '@kind', 'shared', 'r:' .. owner, count, 'x:' .. owner, leases[owner])
    -- A read hold begun by this wait is numbered by it (whatever an earlier one left here).
    if count == '1' then redis.call('HSET', key, 'g:' .. owner, ARGV[8]) end
  end
  finish(true)
  return {1, 0}
end
if writer == owner or (side == 'r' and counts[owner]) then return take() end
-- Without fair, a writer that finds the lock free takes it before the queue is looked at.
if side == 'w' and not fair and not writer and not next(leases) then return take() end
local got, head_lapses = admit(owner, wait)
if got then
  finish()
  return {1, 0}
end
if not head_lapses then  -- nobody is queued
  if not writer and (side == 'r' or not next(leases)) then return take() end
end
-- Refused: until the earliest blocking hold may lapse (a reader behind a queued writer: or
-- that writer's place).
local first = false
if writer then
  first = wexp
else
  for _, x in pairs(leases) do
    if not first or x < first then first = x end
  end
  if side == 'r' and head_lapses and (not first or head_lapses < first) then first = head_lapses end
end
local pttl = first and math.max(first - now, 1) or 1000
if mode == 'wait' then
  local place = pttl + wait_lease
  -- On a migrating slot, a queue that admit() just emptied (its keys deleted) cannot be made
  -- again here: Redis refuses a key missing from this node. Keep what admit() did (finish) and
  -- let the client retry, as it does TRYAGAIN, until the slot has moved.
  local joined = redis.pcall('HSET', waiters, owner, string.format('%d:%s:%s', now + place, lease, wait))
  -- NX: a new waiter queues at its arrival time (server clock, µs), a refresh keeps its place,
  -- and a waiter whose entry vanished without its field is queued again, not stranded.
  if not (type(joined) == 'table' and joined.err) then joined = redis.pcall('ZADD', queue, 'NX', now_us, owner) end
  if type(joined) == 'table' and joined.err then
    finish()
    if string.find(joined.err, 'non local key', 1, true) then
      return redis.error_reply('TRYAGAIN redislock: the queue of ' .. key .. ' is moving with its slot')
    end
    return joined
  end
  -- The queue never outlives its longest place by more than wait_lease (crashed waiters leave
  -- no garbage); one wait_lease more than needed spares the PEXPIREs of the joins that follow.
  if redis.call('PTTL', queue) < place then
    redis.call('PEXPIRE', queue, place + wait_lease)
    redis.call('PEXPIRE', waiters, place + wait_lease)
  end
elseif mode == 'leave' and on_queue('HDEL', waiters, owner) == 1 then
  redis.call('ZREM', queue, owner)
  admit(owner, '')
end
finish()
return {0, pttl}
)lua");
  return s;
}

/// Write release. ARGV: owner, prefix.
/// Reply: 1 released (the head of the queue admitted); 0 the owner is not the writer (its lease
/// ran out): nothing changed but the purge.
inline const script& release() {
  static const script s(prelude() + R"lua(
if writer ~= owner then
  finish()
  return 0
end
redis.call('HDEL', key, '@w', '@wx')
writer = false
)lua" + queue_lua() + R"lua(
admit(owner, '')
finish(true)
return 1
)lua");
  return s;
}

/// Read release. ARGV: owner, prefix, count (the count left after this release), the read
/// hold's number (g:<owner>; absent: any).
/// Reply: 1 released (at count 0 the owner's hold is removed; when no holds remain, the head
///        of the queue is admitted); 0 the owner holds no read hold with that number (its lease
///        ran out, or this is a late release of an earlier one): nothing changed.
inline const script& release_shared() {
  static const script s(prelude() + R"lua(
if not counts[owner] or ((ARGV[4] or '') ~= '' and gens[owner] and gens[owner] ~= ARGV[4]) then
  finish()
  return 0
end
if tonumber(ARGV[3]) > 0 then
  redis.call('HSET', key, 'r:' .. owner, ARGV[3])  -- nested: nothing to hand over
  finish(true)
  return 1
end
redis.call('HDEL', key, 'r:' .. owner, 'x:' .. owner, 'g:' .. owner)
leases[owner], counts[owner], gens[owner] = nil, nil, nil
)lua" + queue_lua() + R"lua(
if not writer and not next(leases) then admit(owner, '') end
finish(true)
return 1
)lua");
  return s;
}

/// Renewal. ARGV: owner, prefix, lease_ms, side ("write" or "read"), the read hold's number
/// (g:<owner>; "" or absent: any).
/// Reply: 1 the owner's hold on that side now ends lease_ms from the server's now;
///        0 the owner holds nothing on that side (its lease ran out), or not that read hold (a
///        late renewal of an earlier one): nothing changed.
inline const script& extend() {
  static const script s(prelude() + R"lua(
local until_ms, number = now + tonumber(ARGV[3]), ARGV[5] or ''
if ARGV[4] == 'write' and writer == owner then
  wexp = until_ms
  redis.call('HSET', key, '@wx', wexp)
elseif ARGV[4] == 'read' and counts[owner] and (number == '' or not gens[owner] or gens[owner] == number) then
  leases[owner] = until_ms
  redis.call('HSET', key, 'x:' .. owner, until_ms)
else
  finish()
  return 0
end
finish(true)
return 1
)lua");
  return s;
}

/// Fencing token. ARGV: owner, prefix, fence lifetime (ms).
/// Reply: a new token (detail/fence_scripts.hpp) while the owner holds a hold on either side;
///        0 when it holds nothing (its leases ran out).
inline const script& fence() {
  static const script s(prelude() + next_fence_lua() + R"lua(
finish()
if writer ~= owner and not counts[owner] then return 0 end
return next_fence(KEYS[2], ARGV[3])
)lua");
  return s;
}

/// Remaining lease. ARGV: owner, prefix, side ("write" or "read").
/// Reply: ms left of the owner's hold on that side; -2 when it holds nothing there.
inline const script& remaining() {
  static const script s(prelude() + R"lua(
finish()
if ARGV[3] == 'write' and writer == owner then return wexp - now end
if ARGV[3] == 'read' and counts[owner] and leases[owner] then return leases[owner] - now end
return -2
)lua");
  return s;
}

}  // namespace redislock::detail::shared_scripts
