#pragma once
/// @file detail/fence_scripts.hpp
/// @brief The fencing counter that every lock kind draws its fencing tokens from.
///
/// Key: P{N}:fence, integer, shared by the lock kinds of one name. It exists only while
/// tokens are being asked for: it expires kFenceTtlMs after the last token was drawn, so a
/// lock name used once (per order, per user) leaves nothing behind for long, and a name whose
/// holders never ask for tokens never creates it.
///
/// A token is the counter + 1 (INCR) while the counter exists, and the server's clock in
/// microseconds (TIME) when it does not. Tokens therefore strictly increase per name:
///   - while the counter lives, by INCR;
///   - across its expiry (or a restart without persistence that lost it), because each earlier
///     token is at most the clock reading in µs at the moment it was drawn (the counter started
///     from a clock reading and grew by one per token, one round trip each, far slower than
///     one per µs), and the new one is a later clock reading.
/// The second point needs the server's clock not to step back by more than the counter's
/// lifetime since the last token (7 days): run the server with NTP slewing, not stepping, as
/// for any lease. Tokens are integers below 2^53 (µs since 1970 are about 2^51 in 2026), so
/// they are exact in Lua and fit std::uint64_t and every SQL BIGINT.

#include <string>

namespace redislock::detail {

/// How long the fencing counter outlives the last token drawn from it.
inline constexpr long long kFenceTtlMs = 7LL * 24 * 3600 * 1000;

/// Lua: next_fence(key) returns the next token from the counter at `key` (see the file
/// comment) and keeps the counter for kFenceTtlMs. A value of another type fails with
/// WRONGTYPE before anything changes.
inline std::string next_fence_lua() {
  return R"lua(
local function next_fence(key)
  local token
  if redis.call('EXISTS', key) == 1 then
    token = redis.call('INCR', key)
  else
    local t = redis.call('TIME')
    token = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', key, string.format('%d', token))
  end
  redis.call('PEXPIRE', key, )lua" +
         std::to_string(kFenceTtlMs) + R"lua()
  return token
end
)lua";
}

}  // namespace redislock::detail
