#pragma once
/// @file eviction.hpp
/// @brief Whether the server may evict lock keys under memory pressure.
///
/// Every lock key carries a TTL (its lease), so a server at its maxmemory limit with a
/// volatile-* policy (volatile-lru, -lfu, -random, -ttl: the shortest leases first) or an
/// allkeys-* policy may delete a held lock, and another owner gets in while the holder still
/// believes it holds it. Only `noeviction` (writes then fail with OOM, a typed reply_error) or
/// no memory limit at all (maxmemory 0) keep held locks. A client checks once, on its first
/// connection (see client::eviction() and client_options::on_warning).

#include <redislock/connection.hpp>
#include <redislock/reply.hpp>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

namespace redislock {

/// What the server's memory policy means for held locks.
enum class eviction_risk {
  none,          ///< maxmemory-policy noeviction, or no maxmemory limit
  evicts_locks,  ///< a limit is set and the policy may evict keys with a TTL: held locks may vanish
  unknown,       ///< not checked yet, or CONFIG GET was refused (ACL, renamed command, managed service)
};

struct eviction_check {
  eviction_risk risk = eviction_risk::unknown;
  std::string policy;           ///< maxmemory-policy as the server reported it (empty: unknown)
  std::uint64_t maxmemory = 0;  ///< bytes; 0 = no limit (or unknown)
};

inline const char* to_string(eviction_risk r) noexcept {
  switch (r) {
    case eviction_risk::none: return "none";
    case eviction_risk::evicts_locks: return "evicts_locks";
    case eviction_risk::unknown: return "unknown";
  }
  return "?";
}

namespace detail {

// The value of a `CONFIG GET name` reply ({name, value}); empty when refused or absent.
inline std::string config_value(const redisReply& r) {
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 2 || r.element[1]->type != REDIS_REPLY_STRING) return {};
  return std::string(r.element[1]->str, r.element[1]->len);
}

}  // namespace detail

/// Asks the server (one round trip: CONFIG GET maxmemory and maxmemory-policy, pipelined).
/// A refused CONFIG (NOPERM, unknown command) gives eviction_risk::unknown, never an exception;
/// a lost connection throws connection_error like any command.
inline eviction_check check_eviction(connection& c) {
  c.append({"CONFIG", "GET", "maxmemory"});
  c.append({"CONFIG", "GET", "maxmemory-policy"});
  reply_ptr limit = c.read_reply(), policy = c.read_reply();
  eviction_check out;
  out.policy = detail::config_value(*policy);
  const std::string bytes = detail::config_value(*limit);
  if (out.policy.empty() || bytes.empty() || bytes.size() > 19 ||
      bytes.find_first_not_of("0123456789") != std::string::npos) {
    out.policy.clear();
    return out;
  }
  out.maxmemory = std::stoull(bytes);
  out.risk = out.policy == "noeviction" || out.maxmemory == 0 ? eviction_risk::none : eviction_risk::evicts_locks;
  return out;
}

/// The warning a client passes to client_options::on_warning for a risky server.
inline std::string eviction_warning(const eviction_check& e, std::string_view endpoint) {
  return "redislock: Redis at " + std::string(endpoint) + " has maxmemory " + std::to_string(e.maxmemory) +
         " with maxmemory-policy " + e.policy +
         ": under memory pressure it may evict held locks (their keys have a TTL). Use noeviction (README, "
         "\"Guarantees and limits\").";
}

namespace detail {

/// A client's once-per-client warning: to on_warning when set (its exceptions swallowed: a
/// logger's failure must not fail the lock call that connected), else a line on stderr.
inline void warn_if_evicting(const eviction_check& e, std::string_view endpoint,
                             const std::function<void(const std::string&)>& on_warning) noexcept {
  if (e.risk != eviction_risk::evicts_locks) return;
  try {
    const std::string message = eviction_warning(e, endpoint);
    if (!on_warning) {
      std::fprintf(stderr, "%s\n", message.c_str());
      return;
    }
    on_warning(message);
  } catch (...) {
  }
}

}  // namespace detail
}  // namespace redislock
