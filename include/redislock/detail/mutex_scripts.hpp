#pragma once
/// @file detail/mutex_scripts.hpp
/// @brief Key layout and Lua scripts of redislock::basic_mutex (both modes).
///
/// Key layout for a lock named N with key prefix P (default "redislock:"):
///
///   P{N}           string  the holder's owner token; PX = its lease. Absent when free.
///   P{N}:fence     integer fencing counter. basic_mutex::fencing_token() draws from it, only
///                          while the caller's lease is valid, so tokens follow the order of the
///                          holds. Expires fence_lifetime after the last token; tokens still
///                          increase (detail/fence_scripts.hpp).
///   P{N}:queue     zset    waiting tokens, score = arrival time (server time, µs): the lowest
///                          is the head. Absent when nobody waits; expires at most wait_lease
///                          after the longest place in it.
///   P{N}:waiters   hash    token -> "<place expires at>:<lease ms>" (server time, ms): a
///                          waiter's place lapses wait_lease after the lease of the holder it
///                          last saw (its attempts refresh it). A token has a field exactly
///                          while it is in the queue. (A "#seq" field of an older version is ignored.)
///                          Expires with the queue (which also vanishes with its last member).
///   channel P{N}:w:<id>  a waiter object's channel (its tokens are "<id>:<n>"); a hand-off
///                        publishes the token it is for, so a late notice for an earlier
///                        acquisition of the same object is told apart. The object stays
///                        subscribed between waits (no SUBSCRIBE per contended acquisition).
///
/// The uncontended acquire is not a script but one command, `SET P{N} token NX GET PX lease`
/// (basic_mutex::attempt_first): nil = acquired; our own token = acquired by an earlier attempt
/// whose reply was lost; another token = held; WRONGTYPE for a key of another type.
///
/// Waiting (both modes): a waiter subscribes to its object's channel, then joins the queue with
/// queue_attempt("wait"). A release hands the lock to the longest waiting live waiter in the
/// same script: the lock key gets that waiter's token and full lease, and the waiter is told on
/// its channel, so the hand-off costs the waiter no round trip. A waiter counts as live when
/// its place has not lapsed and its notice reaches a subscriber (detail/notify_lua.hpp) (a crashed process's connection
/// is closed, so it is skipped at once); dead ones are dropped on the way.
/// Fair mode differs only when the lock is free while waiters are queued (a holder's lease ran
/// out): it goes to the head of the queue, where the default mode lets whoever asks first take it.
///
/// The {N} hash tag puts all keys in one cluster slot, so no script hits CROSSSLOT. A value of
/// another type at P{N} makes every command fail with WRONGTYPE before anything changes.
/// All times are the server's (TIME inside the scripts): clients' clocks never matter.
///
/// The Lua-free path (a server that runs no scripts for this connection: an ACL user without
/// @scripting, Valkey without Lua; docs/servers.md) keeps the same key and value, so a Lua-free
/// holder and a scripted one exclude each other (the command forms: detail/plain_key_commands.hpp):
///   acquire  the same `SET P{N} token NX GET PX lease`; our own token (a lost reply) gets its
///            lease restarted with `SET P{N} token IFEQ token PX lease`
///   extend   `SET P{N} token IFEQ token PX lease` (also the renewal wherever the server has it)
///   release  release_without_script(): `DELEX P{N} IFEQ token` (Redis 8.4+) or
///            `DELIFEQ P{N} token` (Valkey 9.0+); no hand-off (nobody queues)
///   remaining remaining_without_script(): MULTI GET PTTL EXEC
/// No queue, hand-off, fair mode or fencing token (basic_mutex refuses those with
/// scripting_unavailable_error); waiting is by jittered backoff.

#include <redislock/detail/fence_scripts.hpp>
#include <redislock/detail/plain_key_commands.hpp>
#include <redislock/detail/queue_lua.hpp>
#include <redislock/connection.hpp>
#include <redislock/detail/server_features.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/reply.hpp>
#include <redislock/script.hpp>

#include <string>
#include <string_view>

namespace redislock::detail::mutex_scripts {

/// The keys of one mutex, as in the layout above (waiter_prefix: the channels' "P{N}:w:").
struct keys {
  static constexpr lock_kind kind = lock_kind::mutex;  ///< the kind asked for (wrong_type_error)
  keys(std::string_view name, const lock_options& o)
      : lock(base_key(name, o)),
        fence(lock + ":fence"),
        queue(lock + ":queue"),
        waiters(lock + ":waiters"),
        waiter_prefix(lock + ":w:") {}
  std::string lock, fence, queue, waiters, waiter_prefix;
};

/// The hand-off statements (detail/queue_lua.hpp) with the mutex's grant: the lock key gets the
/// waiter's token and lease. Used by the attempts, the release and force_release.
inline std::string hand_off() {
  return hand_off_lua(R"lua(
        redis.call('SET', lock, head, 'PX', lease)
)lua");
}

/// KEYS: lock, fence, queue, waiters.
/// ARGV: token, lease_ms, mode, fair ("1"/"0"), wait_lease_ms, waiter_channel_prefix ("P{N}:w:").
///   mode "wait":  acquire, or join the queue (keeping our place) and refresh it: it now lapses
///                 wait_lease after the holder's lease ends (the waiter wakes when that lease
///                 ends anyway, so waiting behind a holder costs no refreshes);
///   mode "try":   acquire only; never queue;
///   mode "leave": like "try", and leave the queue (giving up). A hand-off that reached us
///                 meanwhile is kept (reported as acquired) rather than dropped.
/// A free lock is taken by the caller, except in fair mode, where it first goes to the head of
/// the queue (which may be the caller). The lock already holding our token (handed to us, or
/// an earlier attempt whose reply was lost) is ours: the lease restarts from now, so it always
/// runs from an attempt the caller sent.
/// Reply: {1, 0} acquired; {0, pttl} not acquired: the holder's remaining lease in ms
///        (-1: no expiry).
inline const script& queue_attempt() {
  // Joining: GET, then detail/queue_lua.hpp's queue_not_acquired_lua().
  static const script s(std::string(queue_locals_lua()) + R"lua(
local lease, mode, fair, wait_lease, prefix = ARGV[2], ARGV[3], ARGV[4] == '1', tonumber(ARGV[5]), ARGV[6]
local holder = redis.call('GET', lock)
if holder == false and fair then
  -- (Writes after the notice below are safe: with the lock key absent Redis never runs this
  -- script on a migrating slot's source, where a write could fail mid-script.)
  local head, take_self = nil, true
)lua" + hand_off() +
                        R"lua(
  holder = handed or false
end
if holder == false or holder == token then
)lua" + forget_lua() +
                        R"lua(
  redis.call('SET', lock, token, 'PX', lease)
  return {1, 0}
end
)lua" + queue_not_acquired_lua());
  return s;
}

/// KEYS: lock, fence, queue, waiters. ARGV: token, waiter_channel_prefix.
/// Reply: 1 released (handed to the first live waiter, or deleted when nobody waits);
///        0 the lock is not ours (the lease ran out).
inline const script& release() {
  // The uncontended path (nobody queued) is GET, ZPOPMIN (nothing: the queue is absent), DEL,
  // before anything of the hand-off runs. A hand-off overwrites the lock key, so it is deleted
  // only when nobody live was waiting (and nothing is written before the owner check).
  static const script s(R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local head = redis.call('ZPOPMIN', KEYS[3])[1]
if not head then
  redis.call('DEL', KEYS[1])
  return 1
end
)lua" + std::string(queue_locals_lua()) +
                        R"lua(
local take_self, prefix = false, ARGV[2]
)lua" + hand_off() +
                        R"lua(
if not handed then redis.call('DEL', lock) end
return 1
)lua");
  return s;
}

/// KEYS: lock. ARGV: token, lease_ms.
/// Reply: 1 the lease now runs lease_ms from the server's now; 0 the lock is not ours.
inline const script& extend() {
  static const script s(R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
)lua");
  return s;
}

/// KEYS: lock, fence. ARGV: token, fence lifetime (ms).
/// Reply: a new fencing token (detail/fence_scripts.hpp) while the lock is ours; 0 when it is not.
inline const script& fence() {
  static const script s(next_fence_lua() + R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then return next_fence(KEYS[2], ARGV[2]) end
return 0
)lua");
  return s;
}

/// KEYS: lock. ARGV: token.
/// Reply: the remaining lease in ms when the lock is ours (-1: no expiry); -2 when it is not.
inline const script& remaining() {
  static const script s(R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -2
)lua");
  return s;
}

/// The release without a script: 1 released, 0 the lock is not ours. `f` has DELEX or DELIFEQ.
inline std::int64_t release_without_script(connection& c, const server_features& f, std::string_view lock,
                                           std::string_view token) {
  const command_form release = delete_ifeq(f, lock, token);
  return as_integer(*c.command(release.data(), release.size()));
}

/// remaining() without a script: one transaction, so the value and the PTTL are read at once.
inline std::int64_t remaining_without_script(connection& c, std::string_view lock, std::string_view token) {
  c.append({"MULTI"});
  c.append({"GET", lock});
  c.append({"PTTL", lock});
  c.append({"EXEC"});
  for (int i = 0; i < 3; ++i) checked(*c.read_reply());  // +OK, +QUEUED, +QUEUED
  const reply_ptr r = c.read_reply();
  const redisReply& value = element(*r, 0);
  if (value.type != REDIS_REPLY_STRING || std::string_view(value.str, value.len) != token) return -2;
  return as_integer(element(*r, 1));
}

}  // namespace redislock::detail::mutex_scripts
