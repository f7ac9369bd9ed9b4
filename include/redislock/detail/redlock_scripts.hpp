#pragma once
/// @file detail/redlock_scripts.hpp
/// @brief Key layout and scripts of redislock::basic_redlock, on each of its N servers.
///
/// Key layout on every server, for a lock named N with key prefix P (default "redislock:"):
///
///   P{N}         string   `token` or `token#round`, PX = lease. Absent when free. token: the
///                         holder's owner token (fresh 128 random bits per attempt, hex, never
///                         '#'); round: the number of the last lease-setting round applied
///                         here (none: the acquisition, round 0). The same key as basic_mutex's:
///                         one name is one lock; do not use one name for both kinds.
///   P{N}:rfence  integer  this server's copy of the fencing register: the highest fencing
///                         token written here. Only raised, never expires.
///
/// Commands (each one round trip, sent to all servers in parallel). Every script compares only
/// the owner part (before '#'), whatever round was applied:
///   acquire  `SET P{N} token NX PX lease` (OK: acquired here; nil: held by another)
///   release  release_owned()   compare-and-delete
///   extend   extend_round()    compare-and-SET `token#round` PX lease, unless a round as
///                              recent was applied here already
///   check    remaining()       our PTTL, -2 when not ours
///   fencing  fence_read() on all, then fence_raise() on all (see basic_redlock::fencing_token)
///
/// Round numbers: a lease-setting round (extend(), the renewal) may time out on a server and
/// still reach it later (the client has dropped that connection; the command sat in a stalled
/// network path or a stopped server's receive buffer), after a later round that went out on a
/// new connection. The holder numbers its rounds 1, 2, ... per hold, one at a time; a server
/// applies a round only when it is later than the one it applied last, so a round that arrives
/// late never undoes a later round (a late short lease cannot cut a longer one the client counts
/// on). The round lives in the value, so it goes with the key: a late round finds nothing once
/// the key was released or expired, and can never bring it back.

#include <redislock/lock_options.hpp>
#include <redislock/script.hpp>

#include <string>
#include <string_view>

namespace redislock::detail::redlock_scripts {

/// Defines ours(value, token): whether a value of P{N} (false when absent) is held by token,
/// in any round.
inline const char* ours_lua() {
  return R"lua(
local function ours(v, token) return v == token or (v and string.sub(v, 1, #token + 1) == token .. '#') end
)lua";
}

/// The keys of one redlock on each server, as in the layout above.
struct keys {
  keys(std::string_view name, const lock_options& o) : lock(base_key(name, o)), fence(lock + ":rfence") {}
  std::string lock, fence;
};

/// KEYS: lock. ARGV: token, lease_ms, round (a positive integer, below 2^53).
/// Reply: 1 the lease now runs lease_ms from the server's now, and the value is token#round;
///        -1 stale: our key here already has this round or a later one (nothing written);
///        0 the lock is not ours.
inline const script& extend_round() {
  static const script s(std::string(ours_lua()) + R"lua(
local v = redis.call('GET', KEYS[1])
if not ours(v, ARGV[1]) then return 0 end
local round = tonumber(ARGV[3])
if (tonumber(string.sub(v, #ARGV[1] + 2)) or 0) >= round then return -1 end
redis.call('SET', KEYS[1], ARGV[1] .. '#' .. ARGV[3], 'PX', ARGV[2])
return 1
)lua");
  return s;
}

/// KEYS: lock. ARGV: token.
/// Reply: 1 deleted (it was ours); 0 the lock is not ours.
inline const script& release_owned() {
  static const script s(std::string(ours_lua()) + R"lua(
if ours(redis.call('GET', KEYS[1]), ARGV[1]) then return redis.call('DEL', KEYS[1]) end
return 0
)lua");
  return s;
}

/// KEYS: lock. ARGV: token.
/// Reply: the remaining lease in ms when the lock is ours (-1: no expiry); -2 when it is not.
inline const script& remaining() {
  static const script s(std::string(ours_lua()) + R"lua(
if ours(redis.call('GET', KEYS[1]), ARGV[1]) then return redis.call('PTTL', KEYS[1]) end
return -2
)lua");
  return s;
}

/// KEYS: lock, fence. ARGV: token.
/// Reply: this server's fencing register (0 when unset) while the lock here is ours; -1 when not.
inline const script& fence_read() {
  static const script s(std::string(ours_lua()) + R"lua(
if not ours(redis.call('GET', KEYS[1]), ARGV[1]) then return -1 end
return tonumber(redis.call('GET', KEYS[2]) or '0')
)lua");
  return s;
}

/// KEYS: lock, fence. ARGV: token, proposed token.
/// Reply: 0 the register was below the proposal and now holds it; -1 the lock here is not
/// ours (nothing written); a positive n: the register already holds n >= the proposal (nothing
/// written). Strictly raising makes a value win on at most one writer per server.
inline const script& fence_raise() {
  static const script s(std::string(ours_lua()) + R"lua(
if not ours(redis.call('GET', KEYS[1]), ARGV[1]) then return -1 end
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
local proposed = tonumber(ARGV[2])
if current >= proposed then return current end
redis.call('SET', KEYS[2], ARGV[2])
return 0
)lua");
  return s;
}

}  // namespace redislock::detail::redlock_scripts
