#pragma once
/// @file detail/notify_lua.hpp
/// @brief The Lua every lock script uses to publish a release or hand-off notice.
///
/// notify(channel, message) publishes where waiters listen and returns how many received it:
///  - SPUBLISH first (sharded pub/sub, Redis 7): a redislock::cluster_client's waiters
///    SSUBSCRIBE on the node that owns the channel's slot, and every lock channel carries the
///    lock's {hash tag}, so the channel is on the script's own slot (no CROSSSLOT) and the count
///    is exact whatever node the waiter's client reached first;
///  - classic PUBLISH when nobody received the sharded message: single-server and Sentinel
///    clients SUBSCRIBE (Redis 6 support), and so does everyone where SPUBLISH is unknown
///    (Redis < 7) or refused by an ACL: redis.pcall turns that error into "nobody listened".
/// No flag from the caller picks the verb, so each lock kind keeps one script and one SHA,
/// and clients of both kinds may share a lock. The price: a classic waiter's notice costs one
/// extra (empty) SPUBLISH, and on a cluster a notice nobody listens to (a waiter that died or
/// waits with backoff) is also PUBLISHed, which Redis Cluster broadcasts to every node, as
/// every notice was before sharded pub/sub.

namespace redislock::detail {

inline const char* notify_lua() {
  return R"lua(
local function notify(channel, message)
  local n = redis.pcall('SPUBLISH', channel, message)
  if type(n) == 'number' and n > 0 then return n end
  return redis.call('PUBLISH', channel, message)
end
)lua";
}

}  // namespace redislock::detail
