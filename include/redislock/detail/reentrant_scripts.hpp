#pragma once
/// @file detail/reentrant_scripts.hpp
/// @brief Key layout and Lua scripts of redislock::basic_reentrant_mutex.
///
/// Key layout for a lock named N with key prefix P (default "redislock:"):
///
///   P{N}         hash    @kind   = "reentrant" (tells this lock from a shared lock, also a hash)
///                        <owner> = hold count of the one owner; owner = "<instance hex>:<thread serial>:<generation>"
///                        (a new name per outermost acquisition: detail/owners.hpp)
///                        PX = lease, refreshed by every acquisition of the owner. Deleted
///                        when the count reaches zero. Absent when the lock is free.
///   P{N}:fence   integer fencing counter, drawn from by fencing_token() while the owner holds
///                the lock (detail/fence_scripts.hpp: expires, tokens still increase);
///                shared with the other lock kinds of the same name.
///   channel P{N}:released   a message is published when the lock becomes free.
///
/// Counts are sent by the client (the count it will hold after the call), not incremented on
/// the server: an attempt retried after a lost reply sets the same value again.
///
/// A string at P{N} (a redislock::mutex) fails with Redis's own WRONGTYPE; a hash that is not a
/// reentrant lock (a shared lock, or foreign data) fails with a WRONGTYPE error reply. Either
/// way before anything is changed.

#include <redislock/detail/fence_scripts.hpp>
#include <redislock/detail/notify_lua.hpp>
#include <redislock/script.hpp>

#include <string>

namespace redislock::detail::reentrant_scripts {

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

/// KEYS: lock, fence (unused). ARGV: owner, lease_ms, count (the count after this acquisition).
/// Reply: {1, 0} acquired or re-entered (the lease now runs lease_ms from the server's now);
///        {0, pttl} held by another owner; pttl = its remaining lease (-1: no expiry).
inline const script& acquire() {
  static const script s(std::string(prelude()) + R"lua(
local mine = redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1
if not mine and redis.call('HLEN', KEYS[1]) > 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('HSET', KEYS[1], '@kind', 'reentrant', ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, 0}
)lua");
  return s;
}

/// KEYS: lock, fence (unused). ARGV: owner, channel, count (the count left after this release).
/// Reply: 1 released (at count 0 the key is deleted and a message published on channel);
///        0 the owner holds nothing (its lease ran out): nothing changed.
inline const script& release() {
  static const script s(std::string(prelude()) + notify_lua() + R"lua(
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if tonumber(ARGV[3]) > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
else
  redis.call('DEL', KEYS[1])
  notify(ARGV[2], 'released')
end
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

/// KEYS: lock, fence. ARGV: owner.
/// Reply: a new fencing token (detail/fence_scripts.hpp) while the owner holds the lock; 0 otherwise.
inline const script& fence() {
  static const script s(std::string(prelude()) + next_fence_lua() + R"lua(
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
return next_fence(KEYS[2])
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
