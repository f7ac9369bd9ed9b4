#pragma once
/// @file detail/sentinel_discovery.hpp
/// @brief Asking Redis Sentinel for a service's master, and checking that a node is a master.

#include <redislock/connection.hpp>
#include <redislock/errors.hpp>
#include <redislock/options.hpp>
#include <redislock/reply.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace redislock {

/// One Sentinel's address.
struct sentinel_endpoint {
  std::string host = "127.0.0.1";
  int port = 26379;
};

namespace detail {

/// A master's address as a Sentinel reported it.
struct master_address {
  std::string host;
  int port = 0;
  bool operator==(const master_address& o) const { return host == o.host && port == o.port; }
  bool operator!=(const master_address& o) const { return !(*this == o); }
  std::string endpoint() const { return host + ":" + std::to_string(port); }
};

/// Asks the sentinels in turn, starting at index `first`, for the master of `service`:
/// `SENTINEL GET-MASTER-ADDR-BY-NAME <service>`, each bounded by `base`'s connect and command
/// timeouts. A sentinel that is down, refuses our credentials, answers an error or does not
/// know the name is skipped. Returns the address and sets `answered` to the index of the one
/// that answered; throws discovery_error (naming each sentinel's answer) when none did.
/// `base` carries the Sentinel credentials and TLS settings; its host/port/db are replaced.
inline master_address ask_sentinels(const std::vector<sentinel_endpoint>& sentinels, const std::string& service,
                                    connection_options base, std::size_t first, std::size_t& answered) {
  base.unix_path.clear();
  base.db = 0;
  std::string failures;
  std::optional<server_version_error> too_old;  // thrown when no sentinel answered
  const std::size_t n = sentinels.size();
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = (first + k) % n;
    base.host = sentinels[i].host;
    base.port = sentinels[i].port;
    try {
      connection c(base);
      reply_ptr r = c.command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", service});
      if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_ARRAY && r->elements == 0)) {
        failures += "; " + base.endpoint() + ": does not know master '" + service + "'";
        continue;
      }
      const std::string_view host = as_string(element(*r, 0));
      const std::string_view port = as_string(element(*r, 1));
      master_address a;
      a.host = std::string(host);
      try {
        a.port = parse_port_or_db(port, "port", 65535);
      } catch (const invalid_argument&) {  // the sentinel's answer is bad, not the caller's input
        throw reply_error("SENTINEL GET-MASTER-ADDR-BY-NAME: bad port");
      }
      if (a.host.empty() || a.port == 0) throw reply_error("SENTINEL GET-MASTER-ADDR-BY-NAME: bad address");
      answered = i;
      return a;
    } catch (const invalid_argument&) {
      throw;  // the options cannot work with any sentinel (e.g. TLS without TLS support)
    } catch (const server_version_error& e) {
      if (!too_old) too_old = e;
      failures += "; " + base.endpoint() + ": " + e.what();
    } catch (const error& e) {  // connection_error, auth_error, reply_error
      failures += "; " + base.endpoint() + ": " + e.what();
    }
  }
  if (too_old) throw *too_old;  // the options need newer sentinels: waiting will not help
  throw discovery_error("sentinel: no sentinel named the master of '" + service + "'" + failures);
}

/// True when the node answers ROLE with "master" (a replica, or a sentinel, does not).
inline bool is_master(connection& c) {
  reply_ptr r = c.command({"ROLE"});
  return as_string(element(*r, 0)) == "master";
}

/// Error replies after which the command certainly did not run (the node is a replica now,
/// or a promoted replica is still loading its data set). Inside a script the refusal is the
/// script's error: Redis 6 wraps it, with the reply's own '-' ("… @user_script: 87:
/// -READONLY …"); a script refused a write wrote nothing, a replica runs no write.
inline bool is_not_master_reply(std::string_view message) noexcept {
  std::string_view cause = script_error_cause(message);
  if (cause.size() != message.size() && starts_with(cause, "-")) cause.remove_prefix(1);
  return starts_with(cause, "READONLY") || starts_with(cause, "LOADING") || starts_with(cause, "MASTERDOWN");
}

}  // namespace detail
}  // namespace redislock
