#pragma once
/// @file detail/election_scripts.hpp
/// @brief Key layout and Lua scripts of redislock::basic_election (one leader per name).
///
/// Key layout for an election named N with key prefix P (default "redislock:"):
///
///   P{N}           hash    @kind  = "election" (tells it from the other kinds' keys: a mutex's
///                                   GET fails with WRONGTYPE on a hash, the reentrant and
///                                   shared kinds refuse a hash whose @kind is not theirs)
///                          @owner = the leader's owner token "<object id>:<n>"
///                          @value = the value the leader campaigned with
///                          @term  = the leader's term: a fencing token drawn from P{N}:fence
///                                   by the script that granted leadership
///                          PX = the leader's lease. Absent when nobody leads.
///   P{N}:fence     integer fencing counter shared with the other lock kinds of the name
///                          (detail/fence_scripts.hpp): terms strictly increase per name.
///   P{N}:equeue    zset    waiting campaigners' tokens, score = arrival time (server µs).
///   P{N}:ewaiters  hash    token -> "<place expires at>:<lease ms>" (detail/queue_lua.hpp).
///   P{N}:evalues   hash    token -> the value it campaigns with, while it is queued; expires
///                          no earlier than the queue.
///   channel P{N}:w:<id>  a campaigning object's channel: a hand-off publishes the token it is
///                        for (as the mutex's).
///   channel P{N}:leader  the broadcast channel: every grant publishes the new term, every
///                        resignation that leaves nobody leading publishes "0". A lease that
///                        runs out publishes nothing: observers wake at the leader's lease end.
///                        Published only when it has listeners on this server (classic and
///                        sharded counted apart, detail/notify_lua.hpp); a notice only wakes an
///                        observer, which then reads the state, so a notice reaching a stale
///                        subscriber is harmless.
///
/// Leadership is the mutex's queued hand-off: a resignation hands leadership to the longest
/// waiting live campaigner in the same script (a new term is drawn for it, the hash gets its
/// token, value and lease, then it is told on its channel). Every write comes before every
/// notice (detail/notify_lua.hpp: a migrating slot can fail a script half-way).
///
/// Every script: KEYS = {lock, fence, queue, waiters, values}; ARGV[1] = token, ARGV[2] =
/// waiter channel prefix "P{N}:w:", ARGV[3] = the broadcast channel, ARGV[4..7] its own (empty
/// when unused), ARGV[8] = the fencing counter's lifetime in ms (a new term is a token). A value at
/// P{N} that is not an election (a string, another kind's hash, foreign data) fails with
/// WRONGTYPE before anything changes. All times are the server's.

#include <redislock/detail/fence_scripts.hpp>
#include <redislock/detail/queue_lua.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/script.hpp>

#include <string>
#include <string_view>

namespace redislock::detail::election_scripts {

/// The keys, channels and fixed script arguments of one election (layout above).
struct keys {
  static constexpr lock_kind kind = lock_kind::election;  ///< the kind asked for (wrong_type_error)
  keys(std::string_view name, const lock_options& o)
      : lock(base_key(name, o)),
        fence(lock + ":fence"),
        queue(lock + ":equeue"),
        waiters(lock + ":ewaiters"),
        values(lock + ":evalues"),
        waiter_prefix(lock + ":w:"),
        notices(lock + ":leader") {}
  std::string lock, fence, queue, waiters, values, waiter_prefix, notices;
};

/// The locals of every script, and the kind check: WRONGTYPE unless P{N} is an election or absent.
inline std::string prelude_lua() {
  return std::string(queue_locals_lua()) + R"lua(
local values, prefix, notices, fence_lifetime = KEYS[5], ARGV[2], ARGV[3], ARGV[8]
local kind = redis.call('HGET', lock, '@kind')
if kind ~= 'election' and (kind or redis.call('EXISTS', lock) == 1) then
  return redis.error_reply('WRONGTYPE redislock: ' .. lock .. ' is a ' .. (kind or 'foreign hash') ..
                           ', not an election')
end
local owner = redis.call('HGET', lock, '@owner')
)lua";
}

/// Statements: publish `message` (a local) on the broadcast channel to its listeners on this
/// server, classic and sharded (an observer of either client kind may listen).
inline const char* announce_lua() {
  return R"lua(
do
  local n = redis.pcall('PUBSUB', 'NUMSUB', notices)
  if type(n) == 'table' and type(n[2]) == 'number' and n[2] > 0 then redis.call('PUBLISH', notices, message) end
  n = redis.pcall('PUBSUB', 'SHARDNUMSUB', notices)
  if type(n) == 'table' and type(n[2]) == 'number' and n[2] > 0 then redis.call('SPUBLISH', notices, message) end
end
)lua";
}

/// Statements: an error reply, before anything is written, when the fencing counter cannot give
/// the next term (foreign data there): a grant draws it after the hand-off has popped its
/// campaigner, and a script that fails half-way keeps what it wrote.
inline const char* refuse_bad_counter_lua() {
  return R"lua(
if not tonumber(redis.call('GET', fence) or '0') then
  return redis.error_reply('ERR the fencing counter ' .. fence .. ' is not an integer')
end
)lua";
}

/// Statements: `who` (a local) becomes the leader with value `value` and lease `lease` (ms):
/// a new term is drawn, the hash written, then the grant is announced. Declares `term`. (The
/// announcement's `message` is scoped: the hand-off's own `message`, the token it is for, is
/// published on the waiter's channel right after this.)
inline std::string grant_lua(const char* who, const char* value) {
  return std::string("local term = string.format('%d', next_fence(fence, fence_lifetime))\n") +
         "redis.call('HSET', lock, '@kind', 'election', '@owner', " + who + ", '@value', " + value +
         ", '@term', term)\n" + "redis.call('PEXPIRE', lock, lease)\n" + "do\n  local message = term\n" +
         announce_lua() + "end\n";
}

/// The hand-off (detail/queue_lua.hpp) with the election's grant: the head's queued value is
/// taken from the values hash (pcall: the hash may be gone on a migrating slot's source).
/// Every head taken off the queue (granted, or passed over as dead) loses its queued value.
inline std::string hand_off() {
  return hand_off_lua(grant_lua("head", "queued").c_str(), R"lua(
  local queued = redis.pcall('HGET', values, head)
  if type(queued) ~= 'string' then queued = '' end
  redis.pcall('HDEL', values, head)
)lua");
}

/// KEYS: lock, fence, queue, waiters, values.
/// ARGV: token, prefix, notices, lease_ms, mode, wait_lease_ms, value.
///   mode "wait":  lead, or join the queue (keeping our place) with `value` and refresh it;
///   mode "try":   lead only; never queue;
///   mode "leave": like "try", and leave the queue. A hand-off that reached us meanwhile is
///                 kept (reported as leading) rather than dropped.
/// Leadership already holding our token (handed to us, or an earlier attempt whose reply was
/// lost) is ours: its lease restarts from now, its term stays. Otherwise nobody leading: we
/// lead, with a new term.
/// Reply: {1, term} leading; {0, pttl} another leads: its remaining lease in ms (-1: no expiry).
inline const script& attempt() {
  static const script s(prelude_lua() + next_fence_lua() + R"lua(
local lease, mode, wait_lease, value = ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7]
if owner == token then
)lua" + forget_lua() + R"lua(
  redis.pcall('HDEL', values, token)
  redis.call('PEXPIRE', lock, lease)
  return {1, tonumber(redis.call('HGET', lock, '@term'))}
end
if owner == false then
)lua" + refuse_bad_counter_lua() +
                        forget_lua() + R"lua(
  redis.pcall('HDEL', values, token)
)lua" + grant_lua("token", "value") +
                        R"lua(
  return {1, tonumber(term)}
end
if mode == 'wait' then
  local pttl = redis.call('PTTL', lock)
  local keep = (pttl >= 0 and pttl or 1000) + 2 * wait_lease
  redis.call('HSET', values, token, value)
  if redis.call('PTTL', values) < keep then redis.call('PEXPIRE', values, keep) end
elseif mode == 'leave' then
  redis.pcall('HDEL', values, token)
end
)lua" + queue_not_acquired_lua());
  return s;
}

/// KEYS: lock, fence, queue, waiters, values. ARGV: token, prefix, notices.
/// Reply: 1 resigned (leadership handed to the longest waiting live campaigner, or the hash
///        deleted and "0" announced when nobody waits); 0 the token does not lead (its lease
///        ran out): nothing is written.
inline const script& resign() {
  static const script s(prelude_lua() + next_fence_lua() + R"lua(
if owner ~= token then return 0 end
)lua" + refuse_bad_counter_lua() +
                        R"lua(
local head, take_self = nil, false
)lua" + hand_off() + R"lua(
if not handed then
  redis.call('DEL', lock)
  local message = '0'
)lua" + announce_lua() + R"lua(
end
return 1
)lua");
  return s;
}

/// KEYS: lock. ARGV: token, prefix, notices, lease_ms.
/// Reply: 1 the lease now runs lease_ms from the server's now; 0 the token does not lead.
inline const script& extend() {
  static const script s(prelude_lua() + R"lua(
if owner ~= token then return 0 end
redis.call('PEXPIRE', lock, ARGV[4])
return 1
)lua");
  return s;
}

/// KEYS: lock. ARGV: token, prefix, notices.
/// Reply: the token's term (its fencing token, drawn when it was granted) while it leads; 0 otherwise.
inline const script& term() {
  static const script s(prelude_lua() + R"lua(
if owner ~= token then return 0 end
return tonumber(redis.call('HGET', lock, '@term'))
)lua");
  return s;
}

/// KEYS: lock. ARGV: token, prefix, notices.
/// Reply: the remaining lease in ms while the token leads (-1: no expiry); -2 otherwise.
inline const script& remaining() {
  static const script s(prelude_lua() + R"lua(
if owner ~= token then return -2 end
return redis.call('PTTL', lock)
)lua");
  return s;
}

/// KEYS: lock. ARGV: "#" (no token), prefix, notices.
/// Reply: {} nobody leads; {owner, value, term, pttl} the leader, read at once.
inline const script& leader() {
  static const script s(prelude_lua() + R"lua(
if not owner then return {} end
-- HGET rather than HMGET: the commands every kind's ACL grants (docs/guarantees.md).
local value, term = redis.call('HGET', lock, '@value'), redis.call('HGET', lock, '@term')
return {owner, value or '', tonumber(term or '0'), redis.call('PTTL', lock)}
)lua");
  return s;
}

}  // namespace redislock::detail::election_scripts
