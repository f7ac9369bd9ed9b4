#pragma once
/// @file detail/notify_lua.hpp
/// @brief The Lua every lock script uses to publish a release or hand-off notice.
///
/// notify(channel, message) publishes to the waiters listening on THIS server and returns how
/// many there are; it publishes nothing when there are none. The shared kind calls it; the
/// mutex's and the reentrant mutex's hand-off splice the same as statements
/// (notify_statements_lua()).
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

/// Statements: the same as notify(channel, message), with `channel`, `message` and `notified`
/// (0) locals the caller declared; `notified` becomes the count. Declares `local listening`.
/// The hand-off splices this in rather than calling notify(): no function to create per run.
inline const char* notify_statements_lua() {
  return R"lua(
local listening = redis.pcall('PUBSUB', 'NUMSUB', channel)
if type(listening) == 'table' and type(listening[2]) == 'number' and listening[2] > 0 then
  notified = redis.call('PUBLISH', channel, message)
else
  listening = redis.pcall('PUBSUB', 'SHARDNUMSUB', channel)
  if type(listening) == 'table' and type(listening[2]) == 'number' and listening[2] > 0 then
    notified = redis.call('SPUBLISH', channel, message)
  end
end
)lua";
}

/// Defines listeners(subcommand, channel) (the count PUBSUB NUMSUB or SHARDNUMSUB gives; 0 when
/// the subcommand is unknown or refused) and notify(channel, message).
inline std::string notify_lua() {
  return std::string(R"lua(
local function listeners(subcommand, channel)
  local r = redis.pcall('PUBSUB', subcommand, channel)
  if type(r) == 'table' and type(r[2]) == 'number' then return r[2] end
  return 0
end
local function notify(channel, message)
  local notified = 0
)lua") + notify_statements_lua() +
         R"lua(
  return notified
end
)lua";
}

}  // namespace redislock::detail
