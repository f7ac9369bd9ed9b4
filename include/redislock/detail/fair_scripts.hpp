#pragma once
/// @file detail/fair_scripts.hpp
/// @brief Key layout and Lua scripts of the fair (FIFO) mode of basic_mutex
/// (lock_options::fair = true).
///
/// Key layout for a lock named N with key prefix P, in addition to detail/mutex_scripts.hpp:
///
///   P{N}           string  the holder's token. After a hand-off it holds the head waiter's
///                          token with PX = what is left of that waiter's wait lease, until
///                          the waiter claims it (then PX = its lease and a fencing token).
///   P{N}:fence     integer fencing counter (INCRed on every acquisition/claim).
///   P{N}:queue     zset    waiting tokens, score = arrival number: ZRANGE 0 0 is the head.
///   P{N}:waiters   hash    token -> server time (ms) at which the waiter's place expires
///                          (each attempt refreshes it to now + wait_lease); field "#seq" is
///                          the arrival counter. Deleted when the queue empties.
///   channel P{N}:w:<token>  the hand-off to that waiter is published here.
///   channel P{N}:released   published when a release leaves the lock free (queue empty).
///
/// All times are the server's (TIME inside the scripts): clients' clocks never matter.
/// A waiter that vanished keeps its place until its wait lease runs out; it is dropped when it
/// reaches the head. If the lock was handed to it, the hand-off key expires with that same
/// wait lease. So a crashed waiter blocks the queue for at most its wait lease.
/// Fair and non-fair objects must not share a lock name (non-fair ones ignore the queue).

#include <redislock/script.hpp>

#include <string>

namespace redislock::detail::fair_scripts {

/// Shared Lua: server time, and settle() which hands a free lock to the first live waiter.
/// Expects the KEYS layout lock, fence, queue, waiters and ARGV[1] = the caller's token.
inline std::string prelude() {
  // TIME before writes needs effects replication (the default from Redis 5 on; enable it
  // explicitly where it is not).
  return R"lua(
if redis.replicate_commands then redis.replicate_commands() end
local lock, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function forget(w)
  redis.call('ZREM', queue, w)
  redis.call('HDEL', waiters, w)
end
local function tidy()
  if redis.call('ZCARD', queue) == 0 then redis.call('DEL', waiters) end
end
-- A free lock goes to the first waiter whose place has not expired; it has what is left of its
-- wait lease to claim it. Returns true when the lock was handed to someone.
local function settle(prefix)
  if redis.call('EXISTS', lock) == 1 then return false end
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then return false end
    local expiry = tonumber(redis.call('HGET', waiters, head) or '0')
    if expiry > now then
      redis.call('SET', lock, head, 'PX', expiry - now)
      if head ~= token then redis.call('PUBLISH', prefix .. head, 'handoff') end
      return true
    end
    forget(head)
  end
end
)lua";
}

/// KEYS: lock, fence, queue, waiters.
/// ARGV: token, lease_ms, wait_lease_ms, mode, waiter_channel_prefix ("P{N}:w:").
///   mode "wait": join the queue (or keep our place) and refresh our wait lease;
///   mode "try":  acquire only if the lock is free and nobody is queued; never queue;
///   mode "leave": like "try", and leave the queue (giving up). A hand-off that reached us
///                 meanwhile is claimed rather than dropped.
/// Reply: {1, fence} acquired (claimed a hand-off, or took a free lock with an empty queue;
///        a retry after a lost reply restarts the lease and returns the current fence again);
///        {0, pttl} not acquired; pttl = remaining ms of the current holder (or hand-off),
///        -1 no expiry, -2 free.
inline const script& acquire() {
  static const script s(prelude() + R"lua(
local lease, wait_lease, mode, prefix = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
settle(prefix)
local holder = redis.call('GET', lock)
if holder == token then
  if redis.call('ZSCORE', queue, token) then
    forget(token)
    tidy()
    local f = redis.call('INCR', fence)
    redis.call('SET', lock, token, 'PX', lease)
    return {1, f}
  end
  -- A retry of an attempt whose reply was lost: the lease restarts from now, as for the
  -- non-fair mutex, so the caller's lease always runs from an attempt it sent.
  redis.call('PEXPIRE', lock, lease)
  return {1, tonumber(redis.call('GET', fence) or '0')}
end
if holder == false then
  local f = redis.call('INCR', fence)
  redis.call('SET', lock, token, 'PX', lease)
  return {1, f}
end
if mode == 'wait' then
  if not redis.call('ZSCORE', queue, token) then
    redis.call('ZADD', queue, redis.call('HINCRBY', waiters, '#seq', 1), token)
  end
  redis.call('HSET', waiters, token, now + wait_lease)
elseif mode == 'leave' then
  forget(token)
  tidy()
end
return {0, redis.call('PTTL', lock)}
)lua");
  return s;
}

/// KEYS: lock, fence, queue, waiters. ARGV: token, released_channel, waiter_channel_prefix.
/// Reply: 1 released: handed to the head waiter (published on its channel) or, with nobody
///        waiting, deleted (published on released_channel); 0 the lock is not ours.
inline const script& release() {
  static const script s(prelude() + R"lua(
if redis.call('GET', lock) ~= token then return 0 end
redis.call('DEL', lock)
if not settle(ARGV[3]) then
  tidy()
  redis.call('PUBLISH', ARGV[2], 'released')
end
return 1
)lua");
  return s;
}

}  // namespace redislock::detail::fair_scripts
