#pragma once
/// @file detail/queue_lua.hpp
/// @brief The wait-queue Lua shared by the lock kinds that hand the lock to their longest
/// waiting live waiter (redislock::mutex, redislock::reentrant_mutex).
///
/// Each kind keeps its own queue keys (a mutex release must never hand a reentrant waiter a
/// string key, nor the reverse), with the same layout:
///   queue    zset  waiting owners, score = arrival time (server time, µs): the lowest is the
///                  head. Absent when nobody waits; expires at most wait_lease after the longest
///                  place in it.
///   waiters  hash  owner -> "<place expires at>:<lease ms>" (server time, ms). An owner has a
///                  field exactly while it is queued. (A "#seq" field left by an older version
///                  is ignored.)
/// A waiter's channel is the waiter channel prefix followed by its owner id up to the last
/// ':' (owners end in ":<n>"): one channel per waiting object (mutex) or object and thread
/// (reentrant), which receives every hand-off for it, naming the full owner id.

#include <redislock/detail/notify_lua.hpp>

#include <string>

namespace redislock::detail {

/// Lua shared by the queue-aware scripts, in parts: queue_locals_lua() (releases) or
/// queue_state_lua() (attempts), then hand_off_defs_lua(grant_lua) where the script hands off
/// (each kind's hand_off_lua() is queue_locals_lua() and its hand-off functions).
/// queue_locals_lua(): KEYS lock, fence, queue, waiters and ARGV[1] = the caller's owner (token)
/// as locals; server_now() reads TIME once per script, only when needed, and returns it in ms
/// (now_us: the same in µs, the arrival time of a new place).
/// queue_state_lua(): the same, and forget(owner), which leaves the queue.
/// hand_off_defs_lua(grant_lua): `grant_lua` defines `local function grant(owner, lease_ms)`, which
/// makes `owner` the holder of the (free, or the releaser's) lock with that lease; it may use
/// the locals above. hand_off(prefix, take_self[, popped]) gives the lock to the first live
/// waiter and returns its owner (nil: nobody waits); popped: the head, when the caller already
/// popped it. The caller itself, at the head, is returned without a message when take_self (an
/// attempt), and dropped otherwise (a release: a stale entry of the releaser's). A waiter is
/// live when its place has not lapsed and notify() counts a listener on its channel; dead ones
/// are dropped. An attempt defines these only in the branch that hands off (fair mode, a free
/// lock): each `local function` is an allocation on every run of the script.
/// A waiter's field in the waiters hash and its entry in the queue are added and removed
/// together (same script), so HDEL's reply tells whether an owner was queued.
inline const char* queue_locals_lua() {
  // TIME in a script that writes relies on effects replication, the default from Redis 5 on.
  return R"lua(
local lock, fence, queue, waiters, token = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
local time_of_script, now_us
local function server_now()
  if not time_of_script then
    local t = redis.call('TIME')
    -- Below 2^53, so exact as a Lua number and as ZADD's score.
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    time_of_script = math.floor(now_us / 1000)
  end
  return time_of_script
end
)lua";
}

inline std::string queue_state_lua() {
  return std::string(queue_locals_lua()) + R"lua(
local function forget(w)
  if redis.call('HDEL', waiters, w) == 1 then redis.call('ZREM', queue, w) end
end
)lua";
}

inline std::string hand_off_defs_lua(const char* grant_lua) {
  // The hand-off is on the critical path of every contended acquisition: few calls. An empty
  // queue vanishes by itself (ZPOPMIN of the last member); the waiters hash expires with it.
  return std::string(notify_lua()) + grant_lua + R"lua(
local function hand_off(prefix, take_self, popped)
  while true do
    local head = popped or redis.call('ZPOPMIN', queue)[1]
    popped = nil
    if not head then return nil end
    local expiry, lease = string.match(redis.call('HGET', waiters, head) or '', '^(%d+):(%d+)$')
    redis.call('HDEL', waiters, head)
    if head == token then
      if take_self then return head end
    elseif expiry and tonumber(expiry) > server_now() then
      -- Owners are "<channel id>:<n>"; a waiter listens on one channel for all its owner ids.
      if notify(prefix .. (string.match(head, '^(.+):%d+$') or head), head) > 0 then
        grant(head, lease)
        return head
      end
    end
  end
end
)lua";
}

/// The end of a queue attempt (both kinds) that found the lock held by another: replies
/// {0, the holder's PTTL}; mode "wait" joins the queue first, keeping our place, and refreshes
/// it: it now lapses wait_lease after the holder's lease ends (the waiter wakes when that lease
/// ends anyway, so waiting behind a holder costs no refreshes); mode "leave" leaves it. Needs
/// the locals of queue_state_lua() plus mode, wait_lease (ms, a number) and lease (the caller's, ms).
/// Joining: PTTL, TIME, HSET, ZADD NX, PTTL of the queue; both PEXPIREs only when the queue
/// would lapse before this place.
inline const char* queue_not_acquired_lua() {
  return R"lua(
local pttl = redis.call('PTTL', lock)
if mode == 'wait' then
  -- A holder without expiry (PERSISTed) is looked at again every second by its waiters.
  local place = (pttl >= 0 and pttl or 1000) + wait_lease
  redis.call('HSET', waiters, token, string.format('%d:%s', server_now() + place, lease))
  -- NX: a new waiter queues at its arrival time; a refresh keeps its place. Should the queue
  -- have gone without the hash (evicted, deleted by hand, or expired a millisecond earlier on
  -- Redis < 7), the waiter is queued again (last) instead of stranded. The order is the
  -- server clock's: a clock stepped back can put a later arrival first (order, never exclusion).
  redis.call('ZADD', queue, 'NX', now_us, token)
  -- The queue never outlives its longest place by more than wait_lease, so crashed waiters
  -- leave no garbage behind; extending it one wait_lease further than needed spares the
  -- PEXPIREs of the joins that follow within that time.
  if redis.call('PTTL', queue) < place then
    redis.call('PEXPIRE', queue, place + wait_lease)
    redis.call('PEXPIRE', waiters, place + wait_lease)
  end
elseif mode == 'leave' then
  forget(token)
end
return {0, pttl}
)lua";
}

}  // namespace redislock::detail
