#pragma once
/// @file detail/mutex_scripts.hpp
/// @brief Key layout and Lua scripts of redislock::basic_mutex.
///
/// Key layout for a lock named N with key prefix P (default "redislock:"):
///
///   P{N}         string  the holder's owner token (128 random bits, hex); PX = lease.
///                        Absent when the lock is free.
///   P{N}:fence   integer fencing counter, INCRed by every successful acquisition; no expiry,
///                so tokens strictly increase for the life of the data set.
///   channel P{N}:released   a message is published on every release (wakes waiters).
///
/// The {N} hash tag puts both keys in one cluster slot, so no script hits CROSSSLOT.
/// A value of another type at P{N} makes every script fail with WRONGTYPE before changing
/// anything.

#include <redislock/script.hpp>

namespace redislock::detail::mutex_scripts {

/// KEYS: lock, fence. ARGV: token, lease_ms.
/// Reply: {1, fence} acquired (also when the lock already holds this very token: a retry of an
///        attempt whose reply was lost is idempotent, and restarts the lease from now, so the
///        caller's lease always runs from an attempt it sent after it started waiting);
///        {0, pttl} held by someone else; pttl is the holder's remaining lease in ms
///        (-1: the key has no expiry).
inline const script& acquire() {
  static const script s(R"lua(
local holder = redis.call('GET', KEYS[1])
if holder == false then
  local fence = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, fence}
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
return {0, redis.call('PTTL', KEYS[1])}
)lua");
  return s;
}

/// KEYS: lock. ARGV: token, channel.
/// Reply: 1 released (and published on channel); 0 the lock is not ours (lease ran out).
inline const script& release() {
  static const script s(R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
)lua");
  return s;
}

/// KEYS: lock. ARGV: token, lease_ms.
/// Reply: 1 the lease now runs lease_ms from the server's now; 0 the lock is not ours.
inline const script& extend() {
  static const script s(R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
)lua");
  return s;
}

/// KEYS: lock. ARGV: token.
/// Reply: the remaining lease in ms when the lock is ours (-1: no expiry); -2 when it is not.
inline const script& remaining() {
  static const script s(R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -2
)lua");
  return s;
}

}  // namespace redislock::detail::mutex_scripts
