#pragma once
/// @file detail/fence_scripts.hpp
/// @brief The fencing counter that every lock kind draws its fencing tokens from.
///
/// Key: P{N}:fence, integer, shared by the lock kinds of one name. It exists only while
/// tokens are being asked for: each draw keeps it at least lock_options::fence_lifetime more
/// (the drawing holder's option; a draw never shortens what an earlier draw with a longer
/// lifetime set, nor removes an expiry-free counter's), so a lock name used once (per order,
/// per user) leaves nothing behind for long, and a name whose holders never ask for tokens
/// never creates it.
///
/// A token is the larger of (the counter + 1) and the server's clock in microseconds (TIME), and
/// becomes the counter. Tokens strictly increase per name unless a draw finds the counter gone
/// and the server's clock behind the highest token drawn before:
///   - while the counter lives and is current, each token is at least the counter + 1;
///   - the counter is gone only once the clock read fence_lifetime past the last draw (expiry
///     is judged on the same clock as TIME), so a token from the clock after that is below the
///     highest one only if, at the last draw, the clock was more than fence_lifetime behind the
///     highest token: the clock's lag. Only a clock set back makes a lag (all its backward
///     steps not yet made up by the time since, summed); one slewed, never stepped, has none;
///   - a counter lost (a restart without persistence) or gone back (a failover to a replica that
///     missed the last updates: replication is asynchronous) leaves the clock alone: the new
///     token is higher if the server's clock is past the highest token, i.e. past the old
///     master's clock when it drew it, which the failover's own duration gives unless the
///     clocks differ by more than that.
/// So fence_lifetime is the clock lag tokens survive, and the data nodes of a replicated set
/// need synchronised clocks. Tokens are integers below 2^53 (µs since 1970 are about 2^51 in
/// 2026), so they are exact in Lua and fit std::uint64_t and every SQL BIGINT. Consecutive
/// tokens are not consecutive integers: only their order means anything.

#include <redislock/lock_options.hpp>

#include <string>

namespace redislock::detail {

/// The argument a script that draws tokens passes to next_fence(): the counter's lifetime in ms.
inline std::string fence_lifetime_arg(const lock_options& o) { return std::to_string(o.fence_lifetime.count()); }

/// Lua: next_fence(key, lifetime_ms) returns the next token from the counter at `key` (see the
/// file comment) and keeps the counter at least lifetime_ms more (fence_lifetime_arg()): longer
/// when it already had longer to live, or no expiry. A value of
/// another type fails with WRONGTYPE, a string that is not an integer with an error reply,
/// before anything changes; callers return its result as the script's reply.
inline std::string next_fence_lua() {
  return R"lua(
local function next_fence(key, lifetime_ms)
  local counter = tonumber(redis.call('GET', key) or '0')
  if not counter then return redis.error_reply('ERR the fencing counter ' .. key .. ' is not an integer') end
  local t = redis.call('TIME')
  local token = math.max(counter + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  local left = redis.call('PTTL', key)
  if left == -1 or left > tonumber(lifetime_ms) then
    redis.call('SET', key, string.format('%d', token), 'KEEPTTL')
  else
    redis.call('SET', key, string.format('%d', token), 'PX', lifetime_ms)
  end
  return token
end
)lua";
}

}  // namespace redislock::detail
