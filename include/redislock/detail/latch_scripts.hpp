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
///                         PEXPIRE = the lease: set at creation, and again by every join while
///                                   the count is above zero and by every count_down. So an
///                                   abandoned latch goes with its lease, and an open one stays
///                                   readable as open for one lease after the count_down that
///                                   opened it.
///                         Nothing else: four fields, whatever the count.
///   P{N}:c:<o>    string  the call record of object o (128 random bits, drawn by each object):
///                         the number of o's last applied count_down call (1, 2, ... per object).
///                         PEXPIRE = call_record_ms after that call, independent of the latch's
///                         lease (it may outlive the latch).
///   channel P{N}:open     the count_down that reaches zero publishes "*" here (classic or
///                         sharded, as the waiters listen on this server: detail/notify_lua.hpp):
///                         every waiter on it wakes (detail/subscriber.hpp) and reads the
///                         count again. Nothing is published when nobody listens.
///
/// All keys and the channel of one latch share its {hash tag}. A value of another kind at P{N}
/// fails with WRONGTYPE before anything changes.
///
/// Why call records, and why this shape. A count_down whose reply was lost is sent once more
/// (latch.hpp): the server must tell that resend from a new call, so each call is numbered.
/// Only a resend needs the record, and a resend comes only
///  - for the object's latest call: an object sends one count_down at a time (latch.hpp
///    serialises them), and never resends an earlier call once it has moved on. So one record
///    per object, holding its last applied number, recognises every resend, and a late delivery
///    of an older call of the object (a number at or below the record) is not applied either;
///  - shortly after the first send: the object resends only within resend_horizon of that call's
///    first send, so a record kept call_record_ms (twice that) after it is still there. A record
///    then expires on its own, per object: no scan, no server clock, no growth with the count.
/// So the server holds the four fields of the hash plus one record per object that counted down
/// in the last call_record_ms, whatever the count (a latch counted down 10^7 times by one object
/// keeps one record; by 10^7 one-shot objects, those of the last minute). The records that were
/// one field per call for the latch's life (`d:<call id>`, about 93 bytes each) are gone.
/// Because a record outlives the latch, a resend that finds the latch expired but its number
/// recorded learns that its first send was applied (applied_then_expired) instead of being told
/// the latch expired without counting. What remains: a delivery of a call delayed more than
/// call_record_ms past the object's last count_down (a stalled network path) is applied as new.

#include <redislock/detail/notify_lua.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/script.hpp>

#include <chrono>
#include <string>
#include <string_view>

namespace redislock::detail::latch_scripts {

/// The keys of one latch (layout above).
struct keys {
  static constexpr lock_kind kind = lock_kind::latch;  ///< the kind asked for (wrong_type_error)
  keys(std::string_view name, const lock_options& o) : lock(base_key(name, o)), channel(lock + ":open") {}
  /// The call record of the object `caller` (layout above).
  std::string record(std::string_view caller) const { return lock + ":c:" + std::string(caller); }
  std::string lock, channel;
};

/// Replies of count_down() and read() in their first element.
inline constexpr long long expired = -1;
inline constexpr long long over_count = -2;
/// count_down(): this call was applied, by an earlier send, and the latch is gone since.
inline constexpr long long applied_then_expired = -3;

/// How long a call record lives after the object's last applied count_down, and how long after
/// a call's first send the object may still send it again (half of it: room for a resend that
/// is slow to arrive, and for clocks that run at slightly different rates).
inline constexpr std::chrono::milliseconds call_record_ms{60000};
inline constexpr std::chrono::milliseconds resend_horizon = call_record_ms / 2;

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

/// KEYS: latch, the caller's call record. ARGV: @id, n (>= 1), lease_ms, call number (>= 1),
/// call_record_ms.
/// Takes n off the count, records the call number and restarts the lease; at zero, wakes the
/// waiters. A number the record already has (or exceeds) changes nothing (a resent call). n
/// above the count changes nothing.
/// Reply: {count after, 0} applied (or already applied: count now); {-1, 0} expired;
///        {-2, count} over_count; {-3, 0} already applied, and the latch expired since.
inline const script& count_down() {
  // Effects replication (Redis 6): the PUBSUB counts below come after writes.
  static const script s(std::string("if redis.replicate_commands then redis.replicate_commands() end\n") + prelude() +
                        R"lua(
local f = redis.call('HMGET', key, '@id', 'count')
local live, call = kind and f[1] == ARGV[1], tonumber(ARGV[4])
local applied = tonumber(redis.call('GET', KEYS[2]) or '0')
if applied >= call then
  if live then return {tonumber(f[2]), 0} end
  return {-3, 0}
end
if not live then return {-1, 0} end
local count, n = tonumber(f[2]), tonumber(ARGV[2])
if n > count then return {-2, count} end
count = count - n
redis.call('HSET', key, 'count', count)
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
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
