#pragma once
/// @file detail/reentrant_scripts.hpp
/// @brief Key layout and Lua scripts of redislock::basic_reentrant_mutex.
///
/// Key layout for a lock named N with key prefix P (default "redislock:"):
///
///   P{N}           hash    @kind   = "reentrant" (tells this lock from a shared lock, also a hash)
///                          <owner> = hold count of the one owner; owner = "<instance hex>:<thread
///                          serial>:<generation>" (a new name per outermost acquisition: detail/owners.hpp) PX = lease,
///                          refreshed by every acquisition of the owner. Deleted (or handed to a waiter) when the count
///                          reaches zero. Absent when free.
///   P{N}:fence     integer fencing counter, drawn from by fencing_token() while the owner holds
///                          the lock (detail/fence_scripts.hpp: expires, tokens still increase);
///                          shared with the other lock kinds of the same name.
///   P{N}:rqueue    zset    waiting owners, score = arrival time (server time, µs): the lowest is the head.
///                          Absent when nobody waits; expires at most wait_lease after the
///                          longest place in it (detail/queue_lua.hpp).
///   P{N}:rwaiters  hash    owner -> "<place expires at>:<lease ms>" (server time, ms). A field
///                          exactly while the owner is queued.
///   channel P{N}:w:<instance hex>:<thread serial>   a waiting thread's channel (one per object
///                          and thread, so threads of one object wait at once); a hand-off
///                          publishes the full owner id it is for, so a notice for an earlier
///                          generation is told apart. Kept subscribed between the thread's waits.
///
/// The queue keys are this kind's own, never the mutex's P{N}:queue / P{N}:waiters: a mutex
/// release must never hand a reentrant waiter a string key, nor the reverse.
///
/// Waiting: a waiter subscribes to its channel, then joins the queue with acquire("wait"). A
/// release that brings the count to zero hands the lock to the longest waiting live waiter in
/// the same script: the hash becomes {@kind = reentrant, <waiter> = 1} with the waiter's lease,
/// and only that waiter is told, on its own channel. Dead waiters (place lapsed, or nobody
/// listening on this server: detail/notify_lua.hpp) are skipped and dropped. A nested release
/// (count > 0) hands off nothing. Fair mode differs only when the lock is free while waiters
/// are queued (the holder's lease ran out): it goes to the head of the queue, where the default
/// mode lets whoever asks first take it.
///
/// Counts are sent by the client (the count it will hold after the call), not incremented on
/// the server: an attempt retried after a lost reply sets the same value again. A hand-off
/// stores 1, the count of the outermost acquisition it completes.
///
/// A string at P{N} (a redislock::mutex) fails with Redis's own WRONGTYPE; a hash that is not a
/// reentrant lock (a shared lock, or foreign data) fails with a WRONGTYPE error reply. Either
/// way before anything is changed. The {N} hash tag puts every key and channel in one cluster slot.

#include <redislock/detail/fence_scripts.hpp>
#include <redislock/detail/queue_lua.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/script.hpp>

#include <string>
#include <string_view>

namespace redislock::detail::reentrant_scripts {

/// The keys and constant arguments of one reentrant lock (layout above), built from a validated name and options
/// (detail::lock_identity).
struct keys {
  static constexpr lock_kind kind = lock_kind::reentrant;  ///< the kind asked for (wrong_type_error)
  keys(std::string_view name, const lock_options& o)
      : lock(base_key(name, o)),
        fence(lock + ":fence"),
        queue(lock + ":rqueue"),
        waiters(lock + ":rwaiters"),
        waiter_prefix(lock + ":w:"),
        wait_lease_ms(std::to_string(o.wait_lease.count())) {}
  std::string lock, fence, queue, waiters, waiter_prefix, wait_lease_ms;
};

/// The second argument detail::draw_fence sends to fence() (unused: none).
inline std::string_view fence_arg(const keys&) noexcept { return {}; }

// Returns the WRONGTYPE error reply when KEYS[1] is not a reentrant lock (or free).
inline const char* prelude() {
  return R"lua(
local kind = redis.call('HGET', KEYS[1], '@kind')
if kind ~= 'reentrant' and (kind or redis.call('EXISTS', KEYS[1]) == 1) then
  return redis.error_reply('WRONGTYPE redislock: ' .. KEYS[1] .. ' is a ' .. (kind or 'foreign hash') ..
                           ', not a reentrant lock')
end
)lua";
}

// The hand-off statements (detail/queue_lua.hpp) with this kind's grant: the hash becomes
// {@kind, <waiter> = 1} with its lease, the releaser's (or removed holder's) field `token`
// gone (this kind writes no other field). Never a DEL of the key first: on a migrating slot
// the HSET after it would fail.
// Used by acquire(), release() and force_release.
inline std::string hand_off() {
  return hand_off_lua(R"lua(
        redis.call('HSET', lock, '@kind', 'reentrant', head, 1)
        redis.call('HDEL', lock, token)
        redis.call('PEXPIRE', lock, lease)
)lua");
}

/// KEYS: lock, fence, queue, waiters.
/// ARGV: owner, lease_ms, count (the count after this acquisition), mode, fair ("1"/"0"),
///       wait_lease_ms, waiter_channel_prefix ("P{N}:w:").
///   mode "wait":  acquire, or join the queue (keeping our place) and refresh it (it lapses
///                 wait_lease after the holder's lease ends);
///   mode "try":   acquire only; never queue;
///   mode "leave": like "try", and leave the queue (giving up). A hand-off that reached us
///                 meanwhile is kept (reported as acquired) rather than dropped.
/// The owner's own hold (a re-entry, a hand-off to it, or an earlier attempt whose reply was
/// lost) is always acquired: count set, lease restarted from now. A free lock is taken by the
/// caller, except in fair mode, where it first goes to the head of the queue (maybe the caller).
/// Reply: {1, 0} acquired or re-entered (the lease now runs lease_ms from the server's now);
///        {0, pttl} held by another owner; pttl = its remaining lease (-1: no expiry);
///        {2, 0} a re-entry (count > 1) whose hold is gone (lease ran out, or force-released):
///        nothing changed.
inline const script& acquire() {
  // Uncontended: HGET @kind, EXISTS, HEXISTS, HDEL (forget), HSET, PEXPIRE; a re-entry the
  // same without EXISTS. Fair mode adds a ZPOPMIN of the (absent) queue to a free lock.
  static const script s(std::string(prelude()) + queue_locals_lua() + R"lua(
local lease, count, mode, fair, wait_lease, prefix =
  ARGV[2], ARGV[3], ARGV[4], ARGV[5] == '1', tonumber(ARGV[6]), ARGV[7]
local mine = redis.call('HEXISTS', lock, token) == 1
-- A re-entry (count > 1) whose hold is gone: another owner may have held the lock since, so
-- it is never taken again (nor queued for) under the outer hold's name.
if not mine and tonumber(count) > 1 then return {2, 0} end
local other = false
if not mine then
  -- The prelude let through a reentrant hash (kind) or an absent key (kind == false).
  if kind and redis.call('HLEN', lock) > 1 then
    other = true
  elseif fair then
    local head, take_self = nil, true
)lua" + hand_off() +
                        R"lua(
    other = handed ~= nil and handed ~= token
  end
end
if not other then
)lua" + forget_lua() +
                        R"lua(
  redis.call('HSET', lock, '@kind', 'reentrant', token, count)
  redis.call('PEXPIRE', lock, lease)
  return {1, 0}
end
)lua" + queue_not_acquired_lua());
  return s;
}

/// KEYS: lock, fence, queue, waiters. ARGV: owner, waiter_channel_prefix, count (the count
/// left after this release).
/// Reply: 1 released (at count 0 handed to the first live waiter, or deleted when nobody
///        waits); 0 the owner holds nothing (its lease ran out): nothing changed.
inline const script& release() {
  // The last release with nobody queued: HGET @kind, HEXISTS, ZPOPMIN (nothing), DEL, before
  // anything of the hand-off runs.
  static const script s(std::string(prelude()) + R"lua(
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if tonumber(ARGV[3]) > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
local head = redis.call('ZPOPMIN', KEYS[3])[1]
if not head then
  redis.call('DEL', KEYS[1])
  return 1
end
)lua" + queue_locals_lua() +
                        R"lua(
local take_self, prefix = false, ARGV[2]
)lua" + hand_off() +
                        R"lua(
if not handed then redis.call('DEL', lock) end
return 1
)lua");
  return s;
}

/// KEYS: lock, fence (unused). ARGV: owner, lease_ms.
/// Reply: 1 the lease now runs lease_ms from the server's now; 0 the owner holds nothing.
inline const script& extend() {
  static const script s(std::string(prelude()) + R"lua(
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
)lua");
  return s;
}

/// KEYS: lock, fence. ARGV: owner, fence_arg() (unused), fence lifetime (ms).
/// Reply: a new fencing token (detail/fence_scripts.hpp) while the owner holds the lock; 0 otherwise.
inline const script& fence() {
  static const script s(std::string(prelude()) + next_fence_lua() + R"lua(
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
return next_fence(KEYS[2], ARGV[3])
)lua");
  return s;
}

/// KEYS: lock, fence (unused). ARGV: owner.
/// Reply: the remaining lease in ms while the owner holds the lock (-1: no expiry); -2 otherwise.
inline const script& remaining() {
  static const script s(std::string(prelude()) + R"lua(
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -2 end
return redis.call('PTTL', KEYS[1])
)lua");
  return s;
}

}  // namespace redislock::detail::reentrant_scripts
