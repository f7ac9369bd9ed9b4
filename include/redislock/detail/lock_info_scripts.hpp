#pragma once
/// @file detail/lock_info_scripts.hpp
/// @brief Read-only introspection scripts, one per lock kind, and the force-release scripts
/// built on them (redislock::inspect() and redislock::force_release(), lock_info.hpp).
///
/// Every script: KEYS = {lock, fence, queue, waiters} (the queue keys of the kind the script is
/// for: P{N}:queue / P{N}:waiters for the mutex, P{N}:rqueue / P{N}:rwaiters for the reentrant
/// mutex, P{N}:squeue / P{N}:swaiters for the shared mutex), ARGV[1] = waiter channel prefix "P{N}:w:".
///
/// Each script first tells the kind of the key (TYPE, then the hash's @kind field):
/// "none" (absent), "mutex" (a string), "reentrant", "shared", "latch", "election" (hashes
/// told apart by @kind), "semaphore" (a zset with the "#permits" member), or "foreign <type>". A script
/// that finds another kind than its own replies {kind} alone, and the caller runs that kind's
/// script; so each reply is one atomic snapshot of one kind. The mutex script also answers
/// for "foreign" (there is nothing else to read), and every kind's script for "none", with
/// its own queue's waiters: inspect() adds them up for a free name.
///
/// Reply: {kind, pttl, fence, waiters, writer_waiting_ms, holders...}
///   pttl               the lock key's remaining time in ms (-2 absent, -1 no expiry)
///   fence              the fencing counter's value (GET P{N}:fence; 0 when absent)
///   waiters            live places in the kind's queue
///   writer_waiting_ms  shared: how long the longest live place of a queued writer still lasts
///                      (new readers queue behind it meanwhile; 0: no writer waits);
///                      semaphore: its permit count instead; latch: its round's initial
///                      count, followed by its count left and its round (a latch has no holders)
///   holders            flat groups of 4: owner, role ("holder", "writer", "reader"), hold
///                      count, remaining ms of that hold
///
/// Layout fields each kind's script reads (keep in step with the kind's *_scripts.hpp):
///   mutex      P{N} (string: the holder's token "<object id>:<n>"; a Redlock's key on one of
///              its masters: "<token>" or "<token>#<round>", reported as its token), PTTL P{N};
///              P{N}:queue (members), P{N}:waiters (token -> "<place expires ms>:<lease>");
///              P{N}:fence. Counting live waiters reads the whole queue: O(waiters), an
///              administrator's call, never on a lock's path.
///   reentrant  P{N} hash: @kind, <owner> = count (every field not starting with '@' is an
///              owner); PTTL P{N}; P{N}:rqueue and P{N}:rwaiters as the mutex's; P{N}:fence.
///   shared     P{N} hash: @kind, @w, @wx, r:<owner>, x:<owner>; P{N}:fence; P{N}:squeue
///              (members), P{N}:swaiters (owner -> "<place expires ms>:<lease>:<side><wait>").
///              Holds whose lease end has passed are left out (the lock scripts purge them on
///              their next call); nothing is written.
///   semaphore  P{N} zset: "#permits" (score -N), token -> lease end (server ms); P{N}:fence;
///              P{N}:pqueue and P{N}:pwaiters as the mutex's. Ended holds are left out.
///   latch      P{N} hash: @kind, count, initial, round (detail/latch_scripts.hpp); PTTL P{N} is its
///              lease; "waiters" are the connections subscribed to its channel P{N}:open on
///              this server (it has no queue).
///   election   P{N} hash: @kind, @owner (the leader, reported as the one holder, role
///              "leader"), PTTL P{N}; P{N}:equeue and P{N}:ewaiters as the mutex's; P{N}:fence.
///              Its scripts also take KEYS[5] = P{N}:evalues and ARGV[2] = its broadcast channel.
///
/// The force-release scripts reply what the kind's info script would have replied just before
/// they removed it, and then, when the lock was held:
///   mutex, reentrant  hand the lock to the longest waiting live waiter, exactly as a release
///              does (the kind's hand_off()), or delete P{N} when nobody live waits;
///   shared     remove every hold and admit the head of its queue (a writer, or the run of
///              readers), exactly as a release does (shared_scripts::queue_lua);
///   semaphore  remove every hold and hand the freed permits to the longest waiting live
///              waiters, exactly as releases do (semaphore_scripts::hand_off_permits_lua);
///   latch      nothing: a latch has no holders (its participants count it down; its lease
///              ends it). The reply is its info.
///   election   hand leadership to the longest waiting live campaigner with a new term, as a
///              resignation does, or delete P{N} and announce that nobody leads.
/// None deletes P{N} before the hand-off writes it (detail/notify_lua.hpp: migrating slots).
/// The fencing counter is kept: the next holder's token is still higher than the removed one's.

#include <redislock/detail/election_scripts.hpp>
#include <redislock/detail/kind_clash.hpp>
#include <redislock/detail/latch_scripts.hpp>
#include <redislock/detail/mutex_scripts.hpp>
#include <redislock/detail/reentrant_scripts.hpp>
#include <redislock/detail/semaphore_scripts.hpp>
#include <redislock/detail/shared_scripts.hpp>
#include <redislock/script.hpp>

#include <string>

namespace redislock::detail::lock_info_scripts {

/// Defines kind_of_lock() (the kind of KEYS[1], as described above: detail/kind_clash.hpp),
/// now_ms(), fence_value(), live_waiters() (the places in the queue KEYS[3] whose KEYS[4] entry
/// has not lapsed) and add_holder() (appends one holder's group of 4 to a reply).
inline std::string kind_lua() {
  return std::string(kind_of_lock_lua()) + R"lua(
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function fence_value() return tonumber(redis.call('GET', KEYS[2]) or '0') end
local function live_waiters()
  local now, live = now_ms(), 0
  for _, w in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local expiry = string.match(redis.call('HGET', KEYS[4], w) or '', '^(%d+):')
    if expiry and tonumber(expiry) > now then live = live + 1 end
  end
  return live
end
local function add_holder(r, owner, role, count, ms)
  local n = #r
  r[n + 1], r[n + 2], r[n + 3], r[n + 4] = owner, role, count, ms
end
)lua";
}

/// Defines info(): the reply above for the mutex (or for a free / foreign key), or {kind}.
inline const char* mutex_info_lua() {
  return R"lua(
local function info()
  local kind = kind_of_lock()
  if kind == 'reentrant' or kind == 'shared' or kind == 'semaphore' or kind == 'latch' or kind == 'election' then
    return {kind}
  end
  local pttl = redis.call('PTTL', KEYS[1])
  local r = {kind, pttl, fence_value(), live_waiters(), 0}
  if kind == 'mutex' then
    -- Up to a '#': a Redlock's value may be "<token>#<round>" (mutex tokens have no '#').
    add_holder(r, string.match(redis.call('GET', KEYS[1]), '^[^#]*'), 'holder', 1, pttl)
  end
  return r
end
)lua";
}

/// The opening of info() for a kind whose lease is the key's (reentrant, election): {kind} for
/// another kind, else the reply's head for it or a free key, in `r` (holders follow), and `pttl`.
inline std::string info_head_lua(const char* own_kind) {
  return std::string(R"lua(
local function info()
  local kind = kind_of_lock()
  if kind ~= ')lua") +
         own_kind + R"lua(' and kind ~= 'none' then return {kind} end
  local pttl = redis.call('PTTL', KEYS[1])
  local r = {kind, pttl, fence_value(), live_waiters(), 0}
)lua";
}

/// Defines info() for the reentrant mutex, or for a free key (its own queue's waiters), or {kind}.
inline std::string reentrant_info_lua() {
  return info_head_lua("reentrant") + R"lua(
  local h = redis.call('HGETALL', KEYS[1])
  for i = 1, #h, 2 do
    if string.sub(h[i], 1, 1) ~= '@' then  -- '@' fields are the lock's own (@kind)
      add_holder(r, h[i], 'holder', tonumber(h[i + 1]) or 0, pttl)
    end
  end
  return r
end
)lua";
}

/// Defines info() for the shared mutex, or for a free key (its own queue's waiters), or {kind};
/// holds already ended are left out.
inline const char* shared_info_lua() {
  return R"lua(
local function info()
  local kind = kind_of_lock()
  if kind ~= 'shared' and kind ~= 'none' then return {kind} end
  local now = now_ms()
  local f = {}
  local h = redis.call('HGETALL', KEYS[1])
  for i = 1, #h, 2 do f[h[i]] = h[i + 1] end
  local live, writer_waits = 0, 0
  for _, w in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local expiry, side = string.match(redis.call('HGET', KEYS[4], w) or '', '^(%d+):%d+:([rw])')
    expiry = tonumber(expiry)
    if expiry and expiry > now then
      live = live + 1
      if side == 'w' then writer_waits = math.max(writer_waits, expiry - now) end
    end
  end
  local r = {kind, redis.call('PTTL', KEYS[1]), fence_value(), live, writer_waits}
  local wexp = tonumber(f['@wx'] or '0') or 0
  if f['@w'] and wexp > now then
    add_holder(r, f['@w'], 'writer', 1, wexp - now)
  end
  for field, count in pairs(f) do
    if string.sub(field, 1, 2) == 'r:' then
      local o = string.sub(field, 3)
      local x = tonumber(f['x:' .. o] or '0') or 0
      if x > now then
        add_holder(r, o, 'reader', tonumber(count) or 0, x - now)
      end
    end
  end
  return r
end
)lua";
}

/// Defines info() for the semaphore (its permit count in place of writer_waiting_ms), or for a
/// free key (its own queue's waiters), or {kind}; holds already ended are left out.
inline const char* semaphore_info_lua() {
  return R"lua(
local function info()
  local kind = kind_of_lock()
  if kind ~= 'semaphore' and kind ~= 'none' then return {kind} end
  local r = {kind, redis.call('PTTL', KEYS[1]), fence_value(), live_waiters(), 0}
  -- A free name needs no more (and no more ACL permissions than the other kinds' scripts).
  if kind == 'none' then return r end
  local now = now_ms()
  r[5] = -tonumber(redis.call('ZSCORE', KEYS[1], '#permits'))
  local h = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #h, 2 do add_holder(r, h[i], 'holder', 1, tonumber(h[i + 1]) - now) end
  return r
end
)lua";
}

/// Defines info() for a latch, or for a free key, or {kind}.
inline std::string latch_info_lua() {
  return listeners_on_lua() + R"lua(
local function info()
  local kind = kind_of_lock()
  if kind ~= 'latch' and kind ~= 'none' then return {kind} end
  local f = redis.call('HMGET', KEYS[1], 'initial', 'count', 'round')
  return {kind, redis.call('PTTL', KEYS[1]), fence_value(), (listeners_on(KEYS[1] .. ':open')),
          tonumber(f[1] or '0'), tonumber(f[2] or '0'), tonumber(f[3] or (kind == 'latch' and '1' or '0'))}
end
)lua";
}

/// Defines info() for the election (its leader as the one holder, role "leader"), or for a free
/// key (its own queue's waiters), or {kind}.
inline std::string election_info_lua() {
  return info_head_lua("election") + R"lua(
  local owner = kind == 'election' and redis.call('HGET', KEYS[1], '@owner')
  if owner then add_holder(r, owner, 'leader', 1, pttl) end
  return r
end
)lua";
}

/// The snapshot of one kind: "return info()".
inline const script& mutex_info() {
  static const script s(std::string(kind_lua()) + mutex_info_lua() + "return info()\n");
  return s;
}
inline const script& reentrant_info() {
  static const script s(std::string(kind_lua()) + reentrant_info_lua() + "return info()\n");
  return s;
}
inline const script& shared_info() {
  static const script s(std::string(kind_lua()) + shared_info_lua() + "return info()\n");
  return s;
}

inline const script& semaphore_info() {
  static const script s(std::string(kind_lua()) + semaphore_info_lua() + "return info()\n");
  return s;
}
inline const script& election_info() {
  static const script s(std::string(kind_lua()) + election_info_lua() + "return info()\n");
  return s;
}

/// Force release of a mutex: the snapshot, then, if held, hand off like a release (deleting the
/// key when nobody live waits).
inline const script& mutex_break() {
  static const script s(std::string(kind_lua()) + mutex_info_lua() + queue_locals_lua() + R"lua(
local r = info()
if r[1] ~= 'mutex' then return r end
-- The hand-off drops the removed holder's own place (if it queued again) instead of handing to
-- it, and overwrites the key: deleted only when nobody takes it (never before: see
-- detail/notify_lua.hpp).
token = redis.call('GET', lock)
local head, take_self, prefix = nil, false, ARGV[1]
)lua" + mutex_scripts::hand_off() +
                        "if not handed then redis.call('DEL', lock) end\nreturn r\n");
  return s;
}

/// Force release of a reentrant mutex: the snapshot, then, if held, hand off like the last
/// release (deleting the key when nobody live waits).
inline const script& reentrant_break() {
  static const script s(std::string(kind_lua()) + reentrant_info_lua() + queue_locals_lua() + R"lua(
local r = info()
if r[1] ~= 'reentrant' then return r end
-- As the mutex's: the hand-off replaces the holder's field (r[6]) by the waiter's. (Any
-- further holder fields, which this kind never writes, go first; the key keeps @kind.)
token = r[6] or ''
for i = 10, #r, 4 do redis.call('HDEL', lock, r[i]) end
local head, take_self, prefix = nil, false, ARGV[1]
)lua" + reentrant_scripts::hand_off() +
                        "if not handed then redis.call('DEL', lock) end\nreturn r\n");
  return s;
}

// The shared mutex: the snapshot, then, if held, remove every hold and admit the head of the queue.
inline const script& shared_break() {
  static const script s(std::string(kind_lua()) + shared_info_lua() + R"lua(
local r = info()
if r[1] ~= 'shared' then return r end
-- Every hold goes; the key stays (@kind) until finish(): the admissions below write to it.
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  if fields[i] ~= '@kind' then redis.call('HDEL', KEYS[1], fields[i]) end
end
local owner, prefix = '', ARGV[1]
)lua" + shared_scripts::body_lua() +
                        shared_scripts::queue_lua() + R"lua(
admit(false, '')
finish(true)
return r
)lua");
  return s;
}

// The semaphore: the snapshot, then, if held, remove every hold and hand the freed permits on.
inline const script& semaphore_break() {
  static const script s(std::string(kind_lua()) + semaphore_info_lua() + queue_locals_lua() + read_clock_lua() + R"lua(
local r = info()
if r[1] ~= 'semaphore' then return r end
-- Every hold goes; the key stays ("#permits") until finish: the hand-offs below write to it.
-- token is ARGV[1], the channel prefix: no waiter's token.
local prefix, permits, stored, held, mine = ARGV[1], r[5], -r[5], 0, false
redis.call('ZREMRANGEBYSCORE', lock, 0, '+inf')
)lua" + semaphore_scripts::hand_off_permits_lua(false) +
                        semaphore_scripts::finish_lua() + "return r\n");
  return s;
}

/// A latch's snapshot (read-only).
inline const script& latch_info() {
  static const script s(std::string(kind_lua()) + latch_info_lua() + "return info()\n");
  return s;
}

/// A latch has no holders to remove: its "break" is its snapshot, and changes nothing.
inline const script& latch_break() { return latch_info(); }

// The election: the snapshot, then, if someone leads, hand leadership on like a resignation
// (a new term for the longest waiting live campaigner), or delete the key and announce that
// nobody leads. KEYS: lock, fence, queue, waiters, values; ARGV: channel prefix, broadcast channel,
// the fencing counter's lifetime (ms).
inline const script& election_break() {
  static const script s(std::string(kind_lua()) + election_info_lua() + queue_locals_lua() + next_fence_lua() + R"lua(
local r = info()
if r[1] ~= 'election' or #r < 6 then return r end
-- The removed leader's own place (if it queued again) is dropped, never handed to.
token = r[6]
local values, prefix, notices, fence_lifetime = KEYS[5], ARGV[1], ARGV[2], ARGV[3]
)lua" + election_scripts::refuse_bad_counter_lua() +
                        R"lua(
local head, take_self = nil, false
)lua" + election_scripts::hand_off() +
                        R"lua(
if not handed then
  redis.call('DEL', lock)
  local message = '0'
)lua" + election_scripts::announce_lua() +
                        "end\nreturn r\n");
  return s;
}

}  // namespace redislock::detail::lock_info_scripts
