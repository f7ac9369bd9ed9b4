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

/// The queue Lua is spliced into each script as statements, not defined as functions: every
/// `local function` is an allocation on every run of a script, and the hand-off is on the
/// critical path of every contended acquisition (about a tenth of its script time, measured).
///
/// queue_locals_lua(): KEYS lock, fence, queue, waiters and ARGV[1] = the caller's owner (token)
/// as locals, and clock_ms / clock_us, the server's clock once read (nil until then).
inline const char* queue_locals_lua() {
  return R"lua(
local lock, fence, queue, waiters, token = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
local clock_ms, clock_us
)lua";
}

/// Statements: read the server's clock into clock_us (µs: a new place's arrival time) and
/// clock_ms (ms: place expiries), unless this script already did.
inline const char* read_clock_lua() {
  // TIME in a script that writes relies on effects replication, the default from Redis 5 on.
  return R"lua(
if not clock_ms then
  local t = redis.call('TIME')
  -- Below 2^53, so exact as a Lua number and as ZADD's score.
  clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  clock_ms = math.floor(clock_us / 1000)
end
)lua";
}

/// Statements: the caller (token) leaves the queue. A waiter's field in the waiters hash and its
/// entry in the queue are added and removed together (same script), so HDEL's reply tells
/// whether it was queued.
inline const char* forget_lua() {
  return R"lua(
if redis.call('HDEL', waiters, token) == 1 then redis.call('ZREM', queue, token) end
)lua";
}

/// Statements: hand the lock to the first live waiter. Needs queue_locals_lua()'s locals and
/// these, which the caller declares as locals (an undeclared one would be a global: an error):
///   head       the queue's head when the caller already popped it, else nil;
///   take_self  whether the caller's own entry, met at the head, is taken (an attempt: `handed`
///              is the caller, and nobody is told) or dropped (a release: a stale entry of the
///              releaser's);
///   prefix     the waiter channel prefix.
/// Declares `handed`: the owner the lock went to, nil when nobody live waits. `grant_lua`
/// (statements) makes `head` the holder of the free, or the releaser's, lock with lease `lease`
/// (ms, a string); it runs before the notice is published, and must not delete the lock key
/// (detail/notify_lua.hpp: on a migrating slot a later write to it would fail). A waiter is
/// live when its place has not lapsed and its channel has a listener on this server; dead ones
/// are dropped on the way. An empty queue vanishes by itself (ZPOPMIN of the last member); the
/// waiters hash expires with it.
/// `popped_lua` (statements, optional) runs for every head taken off the queue, granted or
/// passed over, before `grant_lua`: a kind that keeps more per waiter drops it there.
inline std::string hand_off_lua(const char* grant_lua, const char* popped_lua = "") {
  return std::string(R"lua(
local handed
if not head then head = redis.call('ZPOPMIN', queue)[1] end
while head do
  local place = redis.call('HGET', waiters, head)
  redis.call('HDEL', waiters, head)
)lua") + popped_lua +
         R"lua(
  if head == token then
    if take_self then
      handed = head
      break
    end
  else
    local expiry, lease = string.match(place or '', '^(%d+):(%d+)$')
    if expiry then
)lua" + read_clock_lua() +
         R"lua(
    end
    if expiry and tonumber(expiry) > clock_ms then
      -- Owners are "<channel id>:<n>"; a waiter listens on one channel for all its owner ids.
      local channel, message = prefix .. (string.match(head, '^(.+):%d+$') or head), head
)lua" + count_listeners_lua() +
         R"lua(
      if listening > 0 then
)lua" + grant_lua +
         publish_lua() + R"lua(
        handed = head
        break
      end
    end
  end
  -- The next head. Once a pop took the queue's last member the key is gone, and on a migrating
  -- slot Redis refuses a command on a key missing from this node: nobody is left then (the
  -- same key, popped a moment ago, can fail for no other reason).
  head = redis.pcall('ZPOPMIN', queue)[1]
end
)lua";
}

/// The end of a queue attempt (both kinds) that found the lock held by another: replies
/// {0, the holder's PTTL}; mode "wait" joins the queue first, keeping our place, and refreshes
/// it: it now lapses wait_lease after the holder's lease ends (the waiter wakes when that lease
/// ends anyway, so waiting behind a holder costs no refreshes); mode "leave" leaves it. Needs
/// the locals of queue_locals_lua() plus mode, wait_lease (ms, a number) and lease (the caller's, ms).
/// Joining: PTTL, TIME, HSET, ZADD NX, PTTL of the queue; both PEXPIREs only when the queue
/// would lapse before this place.
inline std::string queue_not_acquired_lua() {
  return R"lua(
local pttl = redis.call('PTTL', lock)
if mode == 'wait' then
  -- A holder without expiry (PERSISTed) is looked at again every second by its waiters.
  local place = (pttl >= 0 and pttl or 1000) + wait_lease
)lua" + std::string(read_clock_lua()) +
         R"lua(
  -- A whole number below 10^14 (leases and wait_lease are at most max_lease, 30 days), so `..`
  -- writes every digit, as "%d" would, without the call.
  redis.call('HSET', waiters, token, (clock_ms + place) .. ':' .. lease)
  -- NX: a new waiter queues at its arrival time; a refresh keeps its place. Should the queue
  -- have gone without the hash (evicted, deleted by hand, or expired a millisecond earlier on
  -- Redis < 7), the waiter is queued again (last) instead of stranded. The order is the
  -- server clock's: a clock stepped back can put a later arrival first (order, never exclusion).
  redis.call('ZADD', queue, 'NX', clock_us, token)
  -- The queue never outlives its longest place by more than wait_lease, so crashed waiters
  -- leave no garbage behind; extending it one wait_lease further than needed spares the
  -- PEXPIREs of the joins that follow within that time.
  if redis.call('PTTL', queue) < place then
    redis.call('PEXPIRE', queue, place + wait_lease)
    redis.call('PEXPIRE', waiters, place + wait_lease)
  end
elseif mode == 'leave' then
)lua" + forget_lua() +
         R"lua(
end
return {0, pttl}
)lua";
}

}  // namespace redislock::detail
