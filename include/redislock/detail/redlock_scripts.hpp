#pragma once
/// @file detail/redlock_scripts.hpp
/// @brief Key layout and scripts of redislock::basic_redlock, on each of its N servers.
///
/// Key layout on every server, for a lock named N with key prefix P (default "redislock:"):
///
///   P{N}         string   the holder's owner token (fresh 128 random bits per attempt),
///                         PX = lease. Absent when free. The same key as basic_mutex's: one
///                         name is one lock; do not use one name for both kinds.
///   P{N}:rfence  integer  this server's copy of the fencing register: the highest fencing
///                         token written here. Only raised, never expires.
///
/// Commands (each one round trip, sent to all servers in parallel):
///   acquire  `SET P{N} token NX PX lease` (OK: acquired here; nil: held by another)
///   release  mutex_scripts::release_owned()   compare-and-delete
///   extend   mutex_scripts::extend()          compare-and-PEXPIRE
///   check    mutex_scripts::remaining()       our PTTL, -2 when not ours
///   fencing  fence_read() on all, then fence_raise() on all (see basic_redlock::fencing_token)

#include <redislock/lock_options.hpp>
#include <redislock/script.hpp>

#include <string>
#include <string_view>

namespace redislock::detail::redlock_scripts {

/// The keys of one redlock on each server, as in the layout above.
struct keys {
  keys(std::string_view name, const lock_options& o) : lock(base_key(name, o)), fence(lock + ":rfence") {}
  std::string lock, fence;
};

/// KEYS: lock, fence. ARGV: token.
/// Reply: this server's fencing register (0 when unset) while the lock here is ours; -1 when not.
inline const script& fence_read() {
  static const script s(R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
return tonumber(redis.call('GET', KEYS[2]) or '0')
)lua");
  return s;
}

/// KEYS: lock, fence. ARGV: token, proposed token.
/// Reply: 0 the register was below the proposal and now holds it; -1 the lock here is not
/// ours (nothing written); a positive n: the register already holds n >= the proposal (nothing
/// written). Strictly raising makes a value win on at most one writer per server.
inline const script& fence_raise() {
  static const script s(R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
local proposed = tonumber(ARGV[2])
if current >= proposed then return current end
redis.call('SET', KEYS[2], ARGV[2])
return 0
)lua");
  return s;
}

}  // namespace redislock::detail::redlock_scripts
