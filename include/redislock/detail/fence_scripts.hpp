#pragma once
/// @file detail/fence_scripts.hpp
/// @brief The fencing counter that every lock kind draws its fencing tokens from.
///
/// Key: P{N}:fence, integer, shared by the lock kinds of one name. It exists only while
/// tokens are being asked for: it expires kFenceTtlMs after the last token was drawn, so a
/// lock name used once (per order, per user) leaves nothing behind for long, and a name whose
/// holders never ask for tokens never creates it.
///
/// A token is the larger of (the counter + 1) and the server's clock in microseconds (TIME), and
/// becomes the counter. Tokens therefore strictly increase per name:
///   - while the counter lives, because each is at least the counter + 1;
///   - across its expiry or loss (a restart without persistence), because each earlier token
///     was at most a clock reading in µs plus the tokens drawn since (one round trip each, far
///     slower than one per µs), and the new one is a later clock reading;
///   - across a failover to a replica that missed the last updates (replication is
///     asynchronous: its counter is BEHIND tokens already handed out), for the same reason: the
///     new master's clock is past the old one's by the failover's own duration, unless the two
///     clocks differ by more than that.
/// The clock bound needs the servers' clocks slewed, not stepped (as for any lease), and the
/// data nodes of a replicated set synchronised. Tokens are integers below 2^53 (µs since 1970
/// are about 2^51 in 2026), so they are exact in Lua and fit std::uint64_t and every SQL BIGINT.
/// Consecutive tokens are not consecutive integers: only their order means anything.

#include <string>

namespace redislock::detail {

/// How long the fencing counter outlives the last token drawn from it.
inline constexpr long long kFenceTtlMs = 7LL * 24 * 3600 * 1000;

/// Lua: next_fence(key) returns the next token from the counter at `key` (see the file
/// comment) and keeps the counter for kFenceTtlMs. A value of another type fails with
/// WRONGTYPE, a string that is not an integer with an error reply, before anything changes;
/// callers return its result as the script's reply.
inline std::string next_fence_lua() {
  return R"lua(
local function next_fence(key)
  local counter = tonumber(redis.call('GET', key) or '0')
  if not counter then return redis.error_reply('ERR the fencing counter ' .. key .. ' is not an integer') end
  local t = redis.call('TIME')
  local token = math.max(counter + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('SET', key, string.format('%d', token), 'PX', )lua" +
         std::to_string(kFenceTtlMs) + R"lua()
  return token
end
)lua";
}

}  // namespace redislock::detail
