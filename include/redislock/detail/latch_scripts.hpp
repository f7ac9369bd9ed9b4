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
///                         round   = which use of the latch this is: 1 from its creation,
///                                   one more at each set_count() that starts it again once
///                                   open. Absent: 1 (a latch made before rounds existed).
///                         @set    = the round's id: the random id of the set_count() call
///                                   that started it (absent in round 1: ''). A set_count
///                                   sent again after its reply was lost finds its own round,
///                                   and starts no other.
///                         @prev   = the id of the round before this one (absent in round 1).
///                         count   = what is left to count down in this round (0: open)
///                         initial = the count this round started with
///                         PEXPIRE = the lease: set at creation, and again by every join while
///                                   the count is above zero, by every count_down and by
///                                   every set_count. So an abandoned latch goes with its
///                                   lease, and an open one stays readable as open for one
///                                   lease after the count_down that opened it.
///                         Nothing else: seven fields at most, whatever the count and the rounds.
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
/// Rounds. Every object remembers the round it is in (the one it created, joined, started or
/// moved to), by number and id, and every call names it. set_count() starts round r + 1 only
/// when round r is open, so a later round proves that r opened: a waiter of round r is told
/// "open" even when the next round started before it read again, and never waits on the next
/// round by mistake. A count_down for round r once the latch is in a later round changes
/// nothing (round_over): a slow participant of an old round never counts down the new one.
/// Replication is asynchronous: a failover can lose the set_count that started an object's
/// round r, and someone may then start another round r on the new master. The round's id tells
/// them apart (the object's round is lost: for it the latch is gone, never open), and so does
/// round r + 1's @prev. A round two or more ahead is taken as proof that the object's round
/// opened: after a failover lost round r, once the latch on the new master reaches round r + 2,
/// the lost round's objects see "open" (docs/latch.md, Rounds).
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
/// So the server holds the hash's fields (five in round 1, seven after) plus one record per
/// object that counted down in the last call_record_ms, whatever the count (a latch counted
/// down 10^7 times by one object keeps one record; by 10^7 one-shot objects, those of the last
/// minute).
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
/// count_down(): the caller's round opened and a later one started; nothing was counted.
inline constexpr long long round_over = -4;

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

// Statements: creates the latch (round 1, count ARGV[1], lease ARGV[2], @id ARGV[3]) and
// returns {1, @id, count, round, round id}.
inline const char* create_lua() {
  return R"lua(
redis.call('HSET', key, '@kind', 'latch', '@id', ARGV[3], 'round', 1, 'count', ARGV[1], 'initial', ARGV[1])
redis.call('PEXPIRE', key, ARGV[2])
return {1, ARGV[3], tonumber(ARGV[1]), 1, ''}
)lua";
}

// Statement: restarts the lease with ARGV[2] unless what is left of it is longer.
inline const char* lengthen_lease_lua() {
  return "if redis.call('PTTL', key) < tonumber(ARGV[2]) then redis.call('PEXPIRE', key, ARGV[2]) end\n";
}

// Defines place(f, mine, mine_id): where the caller's round (its number and id: '' for round 1)
// stands against the latch's current round, f = HMGET of 'round', '@set', '@prev':
// 'same' (the caller's round is the current one), 'past' (it opened: a later round followed
// it), 'lost' (a failover lost it: the number now names another round, or the latch went back).
// Round r + 1 proves that r opened only when its @prev is r's id; a round two or more ahead is
// taken as proof (the rule's one blind spot: see "Rounds" above).
inline const char* place_lua() {
  return R"lua(
local function place(f, mine, mine_id)
  local round = tonumber(f[1] or '1')
  if round == mine then return (f[2] or '') == mine_id and 'same' or 'lost' end
  if round == mine + 1 then return (f[3] or '') == mine_id and 'past' or 'lost' end
  if round > mine then return 'past' end
  return 'lost'
end
)lua";
}

/// KEYS: latch. ARGV: expected, lease_ms, a new @id.
/// Creates the latch when absent; otherwise joins its current round (restarting its lease while
/// the count is above zero, never shortening it) when that round started with `expected`, else
/// changes nothing. A create sent again finds the latch its first send made (its @id), and
/// answers as that send did: created, round 1, whatever rounds came since.
/// Reply: {0 joined | 1 created, @id, count, round, round id}; {2, @id, the round's initial count}.
inline const script& create() {
  static const script s(std::string(prelude()) + "if not kind then\n" + create_lua() + "end\n" + R"lua(
local f = redis.call('HMGET', key, '@id', 'count', 'initial', 'round', '@set')
if f[1] == ARGV[3] then return {1, f[1], tonumber(ARGV[1]), 1, ''} end
if f[3] ~= ARGV[1] then return {2, f[1], tonumber(f[3])} end
if tonumber(f[2]) > 0 then
)lua" + lengthen_lease_lua() +
                        R"lua(
end
return {0, f[1], tonumber(f[2]), tonumber(f[4] or '1'), f[5] or ''}
)lua");
  return s;
}

/// KEYS: latch. ARGV: count (>= 0), lease_ms, a new random id (the call's: the @id of a latch
/// it creates, the @set of a round it starts).
/// Starts the next round with `count` when the current one is open (restarting the lease, never
/// shortening it; the round's @prev is the open round's id), or creates the latch (round 1)
/// when absent; changes nothing while the current round counts. A call sent again finds the
/// latch or round its first send made when that round is the current one or the one before it
/// (a resend comes within the client's retries, milliseconds after the first send), and answers
/// as that send did.
/// Reply: {1 started (or created) | 0 still counting, @id, count, round, round id}: as create()'s.
inline const script& set_count() {
  static const script s(std::string(prelude()) + "if not kind then\n" + create_lua() + "end\n" + R"lua(
local f = redis.call('HMGET', key, '@id', 'count', 'round', '@set', 'initial', '@prev')
local count, round, set = tonumber(f[2]), tonumber(f[3] or '1'), f[4] or ''
if set == ARGV[3] then return {1, f[1], tonumber(f[5]), round, set} end
if f[6] == ARGV[3] then return {1, f[1], tonumber(ARGV[1]), round - 1, ARGV[3]} end
if f[1] == ARGV[3] then return {1, f[1], tonumber(ARGV[1]), 1, ''} end
if count > 0 then return {0, f[1], count, round, set} end
round = round + 1
redis.call('HSET', key, 'round', round, 'count', ARGV[1], 'initial', ARGV[1], '@set', ARGV[3], '@prev', set)
)lua" + lengthen_lease_lua() +
                        R"lua(
return {1, f[1], tonumber(ARGV[1]), round, ARGV[3]}
)lua");
  return s;
}

/// KEYS: latch, the caller's call record. ARGV: @id, n (>= 1), lease_ms, call number (>= 1),
/// call_record_ms, the caller's round, its round id.
/// Takes n off the count, records the call number and restarts the lease; at zero, wakes the
/// waiters. A number the record already has (or exceeds) changes nothing (a resent call). n
/// above the count, or a caller's round that is past, changes nothing; a lost round is, for
/// its objects, an expired latch.
/// Reply: {count after, 0} applied (or already applied: count now); {-1, 0} expired;
///        {-2, count} over_count; {-3, 0} already applied, and the latch expired since;
///        {-4, round} round_over.
inline const script& count_down() {
  // Effects replication (Redis 6): the PUBSUB counts below come after writes.
  static const script s(std::string("if redis.replicate_commands then redis.replicate_commands() end\n") + prelude() +
                        place_lua() + R"lua(
local f = redis.call('HMGET', key, 'round', '@set', '@prev', '@id', 'count')
local at = kind and f[4] == ARGV[1] and place(f, tonumber(ARGV[6]), ARGV[7]) or 'lost'
local call = tonumber(ARGV[4])
local applied = tonumber(redis.call('GET', KEYS[2]) or '0')
if applied >= call then
  if at ~= 'lost' then return {tonumber(f[5]), 0} end
  return {-3, 0}
end
if at == 'lost' then return {-1, 0} end
if at == 'past' then return {-4, tonumber(f[1])} end
local count, n = tonumber(f[5]), tonumber(ARGV[2])
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

/// KEYS: latch. ARGV: @id, the caller's round, its round id.
/// Reply: {count of the caller's round (0 when past, -1 when expired or lost), the current
///         round's initial count, pttl ms, current round, its id, its count (-1: expired)}.
inline const script& read() {
  static const script s(std::string(prelude()) + place_lua() + R"lua(
local f = redis.call('HMGET', key, 'round', '@set', '@prev', '@id', 'count', 'initial')
if not kind or f[4] ~= ARGV[1] then return {-1, 0, -2, 0, '', -1} end
local at, count = place(f, tonumber(ARGV[2]), ARGV[3]), tonumber(f[5])
local mine = at == 'same' and count or (at == 'past' and 0 or -1)
return {mine, tonumber(f[6]), redis.call('PTTL', key), tonumber(f[1] or '1'), f[2] or '', count}
)lua");
  return s;
}

}  // namespace redislock::detail::latch_scripts
