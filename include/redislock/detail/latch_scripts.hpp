#pragma once
/// @file detail/latch_scripts.hpp
/// @brief Key layout and Lua scripts of redislock::basic_latch (a count-down latch per name).
///
/// Key layout for a latch named N with key prefix P (default "redislock:"):
///
///   P{N}          hash    @kind   = "latch" (tells it from the reentrant and shared locks, also
///                                   hashes: every kind refuses the others' keys with WRONGTYPE)
///                         @id     = 32 hex digits drawn by the creator: this incarnation of the
///                                   latch. Every object remembers the @id it created or joined;
///                                   a script that finds the key gone, or another @id (the latch
///                                   expired and someone made a new one of the same name),
///                                   answers "expired" and changes nothing.
///                         count   = what is left to count down (0: open)
///                         initial = the count it was created with
///                         d:<c>   = n, one per applied count_down call c (128 random bits):
///                                   a resent call is recognised and not applied twice. At most
///                                   `initial` of them (each applied call takes at least 1).
///                         PEXPIRE = the lease: set at creation, and again by every join while
///                                   the count is above zero and by every count_down. So an
///                                   abandoned latch goes with its lease, and an open one stays
///                                   readable as open for one lease after the count_down that
///                                   opened it.
///   channel P{N}:open     the count_down that reaches zero publishes "*" here (classic or
///                         sharded, as the waiters listen on this server: detail/notify_lua.hpp):
///                         every waiter on it wakes (detail/subscriber.hpp) and reads the
///                         count again. Nothing is published when nobody listens.
///
/// All keys and the channel of one latch share its {hash tag}. A value of another kind at P{N}
/// fails with WRONGTYPE before anything changes.

#include <redislock/detail/notify_lua.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/script.hpp>

#include <string>
#include <string_view>

namespace redislock::detail::latch_scripts {

/// The keys of one latch (layout above).
struct keys {
  keys(std::string_view name, const lock_options& o) : lock(base_key(name, o)), channel(lock + ":open") {}
  std::string lock, channel;
};

/// Replies of count_down() and read() in their first element.
inline constexpr long long expired = -1;
inline constexpr long long over_count = -2;

// Statements: WRONGTYPE unless KEYS[1] is a latch or absent; `kind` (false when absent).
inline const char* prelude() {
  return R"lua(
local key = KEYS[1]
local kind = redis.call('HGET', key, '@kind')
if kind ~= 'latch' and (kind or redis.call('EXISTS', key) == 1) then
  return redis.error_reply('WRONGTYPE redislock: ' .. key .. ' is a ' .. (kind or 'foreign hash') .. ', not a latch')
end
)lua";
}

/// KEYS: latch. ARGV: expected, lease_ms, a new @id.
/// Creates the latch when absent; otherwise joins it (restarting its lease while the count is
/// above zero, never shortening it) when it was created with `expected`, else changes nothing.
/// Reply: {0 joined | 1 created | 2 created with another count, @id, count (2: its initial count)}.
inline const script& create() {
  static const script s(std::string(prelude()) + R"lua(
if not kind then
  redis.call('HSET', key, '@kind', 'latch', '@id', ARGV[3], 'count', ARGV[1], 'initial', ARGV[1])
  redis.call('PEXPIRE', key, ARGV[2])
  return {1, ARGV[3], tonumber(ARGV[1])}
end
local f = redis.call('HMGET', key, '@id', 'count', 'initial')
if f[3] ~= ARGV[1] then return {2, f[1], tonumber(f[3])} end
if tonumber(f[2]) > 0 and redis.call('PTTL', key) < tonumber(ARGV[2]) then redis.call('PEXPIRE', key, ARGV[2]) end
return {0, f[1], tonumber(f[2])}
)lua");
  return s;
}

/// KEYS: latch. ARGV: @id, n (>= 1), lease_ms, call id.
/// Takes n off the count and restarts the lease; at zero, wakes the waiters. A call id already
/// applied changes nothing (a resent call). n above the count changes nothing.
/// Reply: {count after, 0} applied (or already applied: count now); {-1, 0} expired;
///        {-2, count} over_count.
inline const script& count_down() {
  // Effects replication (Redis 6): the PUBSUB counts below come after writes.
  static const script s(std::string("if redis.replicate_commands then redis.replicate_commands() end\n") + prelude() +
                        R"lua(
local f = redis.call('HMGET', key, '@id', 'count')
if not kind or f[1] ~= ARGV[1] then return {-1, 0} end
local count, call = tonumber(f[2]), 'd:' .. ARGV[4]
if redis.call('HEXISTS', key, call) == 1 then return {count, 0} end
local n = tonumber(ARGV[2])
if n > count then return {-2, count} end
count = count - n
redis.call('HSET', key, 'count', count, call, n)
if redis.call('PTTL', key) < tonumber(ARGV[3]) then redis.call('PEXPIRE', key, ARGV[3]) end
if count == 0 then
  local channel, message = key .. ':open', '*'
)lua" + count_listeners_lua() +
                        R"lua(
  if listening > 0 then
)lua" + publish_lua() + R"lua(
  end
end
return {count, 0}
)lua");
  return s;
}

/// KEYS: latch. ARGV: @id.
/// Reply: {count, initial, pttl ms}; {-1, 0, -2} expired.
inline const script& read() {
  static const script s(std::string(prelude()) + R"lua(
local f = redis.call('HMGET', key, '@id', 'count', 'initial')
if not kind or f[1] ~= ARGV[1] then return {-1, 0, -2} end
return {tonumber(f[2]), tonumber(f[3]), redis.call('PTTL', key)}
)lua");
  return s;
}

}  // namespace redislock::detail::latch_scripts
