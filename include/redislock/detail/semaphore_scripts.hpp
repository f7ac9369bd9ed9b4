#pragma once
/// @file detail/semaphore_scripts.hpp
/// @brief Key layout and Lua scripts of redislock::basic_semaphore (N permits per name).
///
/// Key layout for a semaphore named N with key prefix P (default "redislock:"):
///
///   P{N}           zset    the holders: owner token -> its lease end (server time, ms), one
///                          member per held permit, plus the member "#permits" whose score is
///                          minus the semaphore's permit count (tokens never start with '#').
///                          A zset there without "#permits" is foreign: WRONGTYPE.
///                          A holder counts while its lease end is after the server's now; every
///                          script that writes removes the ended ones (ZREMRANGEBYSCORE 0 now:
///                          "#permits" has a negative score and stays). PEXPIREAT = the latest
///                          lease end, so Redis drops the key, and the permit count with it,
///                          exactly when the last hold has ended. Absent when nobody holds.
///   P{N}:fence     integer fencing counter, drawn from by fencing_token() while the holder's
///                          lease is valid (detail/fence_scripts.hpp); shared with the other lock
///                          kinds of the same name.
///   P{N}:pqueue    zset    waiting tokens, score = arrival time (server time, µs): the lowest is
///                          the head (detail/queue_lua.hpp). This kind's own queue: a mutex's
///                          P{N}:queue never names a semaphore waiter, nor the reverse.
///   P{N}:pwaiters  hash    token -> "<place expires at>:<lease ms>", as the mutex's waiters.
///   channel P{N}:w:<id>  a waiting object's channel (its tokens are "<id>:<n>"); a hand-off
///                        publishes the token it is for (as the mutex's).
///
/// The permit count lives on the server with the holders, so every client agrees on it while
/// anyone holds: the count an object was made with only seeds an idle semaphore (no holder),
/// and set_permits() changes it for everyone. Two clients made with different counts therefore
/// share whichever count the semaphore had when they came (the first acquirer's, or the last
/// set_permits()'), never each its own. Shrinking never revokes a valid hold (the holders above
/// the new count keep theirs until they release, and nobody is admitted until the count of
/// holders is below it); growing admits queued waiters at once (set_permits() hands the new
/// permits to the longest waiting live waiters, in its own script).
///
/// Waiting is the mutex's queued hand-off (detail/queue_lua.hpp): a release hands its permit to
/// the longest waiting live waiter in the same script (the token gets the waiter's lease, then
/// the waiter is told on its channel); a waiter whose place lapsed, or whose notice would reach
/// no subscriber on this server (detail/notify_lua.hpp), is dropped on the way. With
/// lock_options::fair, permits that fell free without a release (leases that ran out) go to
/// the head of the queue at the next attempt, and no attempt takes a permit past a queued
/// waiter; without it, whoever asks first takes a free permit (the queue is served by releases).
/// A lapsed hold publishes nothing: a refused attempt replies how long until the earliest
/// lease among the holders ends, and the waiter sleeps no longer than that.
///
/// Every script: KEYS = {holders, fence, queue, waiters} (extend, fence and remaining only use
/// the first two); ARGV[1] = token, ARGV[2] = waiter channel prefix "P{N}:w:", ARGV[3] = the
/// caller's permit count (used only when none is stored), then its own. The holders key is
/// written before any notice, and never deleted before the script's last write to it (the
/// "#permits" member keeps it while the script runs): on a migrating slot a write to a key the
/// script deleted would fail half-way (detail/notify_lua.hpp). A value of another type at P{N}
/// fails with WRONGTYPE before anything changes. All times are the server's (TIME).

#include <redislock/detail/fence_scripts.hpp>
#include <redislock/detail/queue_lua.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/script.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace redislock {
/// The largest permit count a semaphore accepts.
inline constexpr std::int64_t max_permits = 1000000;
}  // namespace redislock

namespace redislock::detail::semaphore_scripts {

/// `n` when it is a permit count a semaphore accepts; invalid_argument "<what>: ..." otherwise.
inline std::int64_t checked_permits(std::int64_t n, const char* what) {
  if (n < 1 || n > max_permits)
    throw invalid_argument(std::string(what) + ": permits must be in [1, " + std::to_string(max_permits) + "], got " +
                           std::to_string(n));
  return n;
}

/// The keys and fixed script arguments of one semaphore (layout above).
struct keys {
  static constexpr lock_kind kind = lock_kind::semaphore;  ///< the kind asked for (wrong_type_error)
  keys(std::string_view name, const lock_options& o)
      : lock(base_key(name, o)),
        fence(lock + ":fence"),
        queue(lock + ":pqueue"),
        waiters(lock + ":pwaiters"),
        waiter_prefix(lock + ":w:") {}
  std::string lock, fence, queue, waiters, waiter_prefix;
};

/// The semaphore's state (after queue_locals_lua()): the server's clock, `permits` (stored, or
/// the caller's), `held` (holders whose lease has not ended) and `mine` (whether the caller's
/// token holds a valid permit).
inline std::string state_lua() {
  return std::string(read_clock_lua()) + R"lua(
local prefix = ARGV[2]
local stored = redis.call('ZSCORE', lock, '#permits')
-- Every script leaves the key with "#permits" or deletes it: a zset without it is not ours.
if not stored and redis.call('EXISTS', lock) == 1 then
  return redis.error_reply('WRONGTYPE redislock: ' .. lock .. ' is a foreign zset, not a semaphore')
end
local permits = stored and -tonumber(stored) or tonumber(ARGV[3])
local held = redis.call('ZCOUNT', lock, '(' .. clock_ms, '+inf')
local mine = tonumber(redis.call('ZSCORE', lock, token) or '0') > clock_ms
)lua";
}

/// Statements, the last writes to the holders key: stores the permit count, sets the key's
/// expiry to the latest lease end and drops the ended holds; deletes the key when nobody holds.
inline const char* finish_lua() {
  return R"lua(
local last = redis.call('ZRANGE', lock, -1, -1, 'WITHSCORES')[2]
if last and tonumber(last) > clock_ms then
  if permits ~= (stored and -tonumber(stored)) then redis.call('ZADD', lock, -permits, '#permits') end
  redis.call('PEXPIREAT', lock, last)
  redis.call('ZREMRANGEBYSCORE', lock, 0, clock_ms)
elseif redis.call('EXISTS', lock) == 1 then
  redis.call('DEL', lock)
end
)lua";
}

/// Statements: hand free permits (while held < permits) to the longest waiting live waiters,
/// each with the lease it queued with. take_self: the caller's own entry met at the head is
/// taken (an attempt: `mine` turns true, nobody is told) rather than dropped (a stale entry).
/// The first pop may use redis.call (the queue existed when the script began, or it is empty);
/// the next ones pcall, as the queue may be gone (a migrating slot refuses a missing key).
inline std::string hand_off_permits_lua(bool take_self) {
  return std::string(R"lua(
do
  local head, take_self, popped = nil, )lua") +
         (take_self ? "true" : "false") + R"lua(, false
  while held < permits and not mine do
    if popped then
      head = redis.pcall('ZPOPMIN', queue)[1]
      if not head then break end
    end
    popped = true
)lua" + hand_off_lua(R"lua(
        redis.call('ZADD', lock, clock_ms + tonumber(lease), head)
)lua") + R"lua(
    if not handed then break end
    if handed == token then mine = true else held = held + 1 end
  end
end
)lua";
}

/// KEYS: holders, fence, queue, waiters.
/// ARGV: token, prefix, permits, lease_ms, mode, fair ("1"/"0"), wait_lease_ms.
///   mode "wait":  acquire, or join the queue (keeping our place) and refresh it: it lapses
///                 wait_lease after the earliest lease among the holders ends;
///   mode "try":   acquire only; never queue;
///   mode "leave": like "try", and leave the queue (giving up). A hand-off that reached us
///                 meanwhile is kept (reported as acquired) rather than dropped.
/// A permit already ours (handed to us, or an earlier attempt whose reply was lost) is kept:
/// its lease restarts from now. Otherwise a free permit (fewer holders than permits) is taken,
/// in fair mode only after the head of the queue got the free ones before us.
/// Reply: {1, 0} acquired; {0, ms} refused: the earliest lease among the holders ends in ms.
/// Error TRYAGAIN: a "wait" on a migrating slot whose queue this attempt emptied (handing
/// permits to its waiters): the caller was neither admitted nor queued, and may repeat it.
inline const script& acquire() {
  static const script s(std::string(queue_locals_lua()) + state_lua() + R"lua(
local lease, mode, fair, wait_lease = ARGV[4], ARGV[5], ARGV[6] == '1', tonumber(ARGV[7])
if not mine and fair then
)lua" + hand_off_permits_lua(true) +
                        R"lua(
end
if mine or held < permits then
)lua" + forget_lua() +
                        R"lua(
  redis.call('ZADD', lock, clock_ms + tonumber(lease), token)
)lua" + finish_lua() +
                        R"lua(
  return {1, 0}
end
-- Refused: somebody holds (held >= permits >= 1), so finish() keeps the key.
)lua" + finish_lua() +
                        R"lua(
local first = redis.call('ZRANGEBYSCORE', lock, '(' .. clock_ms, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]
local pttl = math.max(tonumber(first or clock_ms + 1000) - clock_ms, 1)
if mode == 'wait' then
  local place = pttl + wait_lease
  -- As detail/queue_lua.hpp's join, but a queue emptied by the hand-off above cannot be made
  -- again on a migrating slot's source: the client repeats the attempt (TRYAGAIN).
  local joined = redis.pcall('HSET', waiters, token, (clock_ms + place) .. ':' .. lease)
  if not (type(joined) == 'table' and joined.err) then joined = redis.pcall('ZADD', queue, 'NX', clock_us, token) end
  if type(joined) == 'table' and joined.err then
    if string.find(joined.err, 'non local key', 1, true) then
      return redis.error_reply('TRYAGAIN redislock: the queue of ' .. lock .. ' is moving with its slot')
    end
    return joined
  end
  if redis.call('PTTL', queue) < place then
    redis.call('PEXPIRE', queue, place + wait_lease)
    redis.call('PEXPIRE', waiters, place + wait_lease)
  end
elseif mode == 'leave' then
  if redis.pcall('HDEL', waiters, token) == 1 then redis.call('ZREM', queue, token) end
end
return {0, pttl}
)lua");
  return s;
}

/// KEYS: holders, fence, queue, waiters. ARGV: token, prefix, permits.
/// Reply: 1 released (the permit handed to the longest waiting live waiter, if any);
///        0 the token holds no valid permit (its lease ran out): nothing is written.
inline const script& release() {
  static const script s(std::string(queue_locals_lua()) + state_lua() + R"lua(
if not mine then return 0 end
redis.call('ZREM', lock, token)
held, mine = held - 1, false
)lua" + hand_off_permits_lua(false) +
                        finish_lua() + "return 1\n");
  return s;
}

/// KEYS: holders, fence, queue, waiters. ARGV: "#" (a token no waiter has), prefix, permits (the
/// new count, >= 1).
/// Stores the new count (while anyone holds) and hands the permits it frees to the longest
/// waiting live waiters. Reply: the number of valid holders afterwards.
inline const script& set_permits() {
  static const script s(std::string(queue_locals_lua()) + state_lua() + R"lua(
permits = tonumber(ARGV[3])
mine = false
)lua" + hand_off_permits_lua(false) +
                        finish_lua() + "return held\n");
  return s;
}

/// KEYS: holders. ARGV: token, prefix, permits, lease_ms.
/// Reply: 1 the token's lease now ends lease_ms from the server's now; 0 it holds no valid permit.
inline const script& extend() {
  static const script s(std::string(queue_locals_lua()) + state_lua() + R"lua(
if not mine then return 0 end
redis.call('ZADD', lock, 'XX', clock_ms + tonumber(ARGV[4]), token)
)lua" + finish_lua() + "return 1\n");
  return s;
}

/// KEYS: holders, fence. ARGV: token, prefix, permits, fence lifetime (ms).
/// Reply: a new fencing token (detail/fence_scripts.hpp) while the token holds a valid permit; 0 otherwise.
inline const script& fence() {
  static const script s(std::string(queue_locals_lua()) + state_lua() + next_fence_lua() + R"lua(
if mine then return next_fence(fence, ARGV[4]) end
return 0
)lua");
  return s;
}

/// KEYS: holders. ARGV: token, prefix, permits.
/// Reply: the ms left of the token's lease while it holds a valid permit; -2 otherwise.
inline const script& remaining() {
  static const script s(std::string(queue_locals_lua()) + state_lua() + R"lua(
if mine then return tonumber(redis.call('ZSCORE', lock, token)) - clock_ms end
return -2
)lua");
  return s;
}

/// KEYS: holders. ARGV: "#", prefix, permits.
/// Reply: {stored permit count (0: none stored, the semaphore is idle), valid holders}.
inline const script& count() {
  static const script s(std::string(queue_locals_lua()) + state_lua() + R"lua(
return {stored and permits or 0, held}
)lua");
  return s;
}

}  // namespace redislock::detail::semaphore_scripts
