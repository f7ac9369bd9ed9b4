#pragma once
/// @file detail/notify_lua.hpp
/// @brief The Lua every lock script uses to publish a release or hand-off notice.
///
/// A notice goes to the waiters listening on THIS server, and only when there are any: a
/// script counts them (count_listeners_lua()), makes the waiter the holder, and only then
/// publishes (publish_lua()). The mutex's and the reentrant mutex's hand-off splice these as
/// statements; the shared kind counts with listeners_on_lua() and publishes its notices at the
/// very end of the script, after the key's expiry is set (shared_scripts::body_lua()).
///  - The write comes before the notice because a script can fail half-way: on a migrating
///    slot Redis refuses, mid-script, a command on a key missing from this node (one the script
///    itself deleted included), and what ran before stays done. A notice already sent would
///    tell a waiter it holds a lock that was never written (seen in test_cluster before the
///    fix: a reentrant release deleted the lock key, published, then failed on its HSET).
///  - Listeners are counted first (PUBSUB NUMSUB, then PUBSUB SHARDNUMSUB), without sending
///    anything, because a published message also reaches subscribers of this server's replicas
///    (replication and the cluster bus forward PUBLISH and SPUBLISH) while no count includes
///    them. A waiter still subscribed on a demoted master — a stale cluster map or Sentinel
///    answer after a failover — must never receive a hand-off the script was not counting on:
///    the script gives the lock to the next waiter, and the notice would tell the stale one
///    that the lock is its own (a double grant, reproduced on a real cluster in review).
///  - Classic first: single-server and Sentinel clients SUBSCRIBE (Redis 6 support), and they
///    are most users. Then sharded: a redislock::cluster_client's waiters SSUBSCRIBE on the node
///    that owns the channel's slot (every lock channel carries the lock's {hash tag}, so the
///    channel is on the script's own slot: no CROSSSLOT). redis.pcall turns an unknown
///    subcommand (SHARDNUMSUB before Redis 7) or an ACL refusal into "nobody listens": never an
///    unsafe notice, at worst a waiter that wakes on its own timer (recheck_interval) instead.
/// One script per kind and no flag from the caller: clients of both kinds may share a lock.
/// Cost: one in-script PUBSUB call per notice to a classic waiter (two to a sharded one, and
/// two when nobody listens); nothing is published when nobody listens.

#include <string>

namespace redislock::detail {

/// Statements: count the listeners of `channel` (a local the caller declared) on this server,
/// classic first, then sharded. Declares `listening` (their count) and `sharded` (whether they
/// are sharded subscribers).
inline const char* count_listeners_lua() {
  return R"lua(
local listening, sharded = redis.pcall('PUBSUB', 'NUMSUB', channel), false
if type(listening) == 'table' and type(listening[2]) == 'number' and listening[2] > 0 then
  listening = listening[2]
else
  listening, sharded = redis.pcall('PUBSUB', 'SHARDNUMSUB', channel), true
  listening = type(listening) == 'table' and type(listening[2]) == 'number' and listening[2] or 0
end
)lua";
}

/// Statements: publish `message` on `channel` to the listeners count_listeners_lua() counted.
inline const char* publish_lua() {
  return R"lua(
redis.call(sharded and 'SPUBLISH' or 'PUBLISH', channel, message)
)lua";
}

/// Defines listeners_on(channel), which returns the count and whether they are sharded.
inline std::string listeners_on_lua() {
  return std::string("local function listeners_on(channel)\n") + count_listeners_lua() +
         "return listening, sharded\nend\n";
}

}  // namespace redislock::detail
