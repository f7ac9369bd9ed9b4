#pragma once
/// @file options.hpp
/// @brief Connection and client options, and parsing of redis:// and unix:// URIs.

#include <redislock/errors.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace redislock {

/// How to reach one Redis server. A zero duration means "no timeout" (not recommended).
struct connection_options {
  std::string host = "127.0.0.1";
  int port = 6379;
  /// When non-empty, connect over this Unix socket and ignore host/port.
  std::string unix_path;
  /// ACL user name; empty means "AUTH password" (the default user).
  std::string user;
  /// Empty means no AUTH. Never printed in messages.
  std::string password;
  /// SELECT this database after connecting when non-zero.
  int db = 0;
  /// rediss:// — requires hiredis >= 1.0 with hiredis_ssl and REDISLOCK_WITH_TLS (see README);
  /// without them, connecting with tls = true throws invalid_argument.
  bool tls = false;
  std::string tls_ca_file;    ///< CA bundle to verify the server; empty: system default
  std::string tls_cert_file;  ///< client certificate (mutual TLS), optional
  std::string tls_key_file;   ///< client private key (mutual TLS), optional
  /// The name the server's certificate must carry (DNS name or IP address) and the SNI sent
  /// (DNS names only); empty: host.
  std::string tls_server_name;
  /// Bounds establishing the connection: the TCP connect and, with tls, the TLS handshake.
  /// Also the most a timed lock call (try_lock, try_lock_for, try_lock_until) runs past its
  /// deadline: within one, every wait (connect, send, reply) ends by the deadline plus this.
  std::chrono::milliseconds connect_timeout{1000};
  /// Applies to each send and each reply read; a timed-out connection is discarded. Within a
  /// timed lock call, cut to end by the call's deadline plus connect_timeout.
  std::chrono::milliseconds command_timeout{1000};
  /// A connection left idle at least this long is checked for a close by the server (CLIENT
  /// KILL, a restart, the server's idle timeout) before its next command, without a round trip
  /// (one poll), so the command goes to a fresh connection instead of failing. A connection
  /// used more recently is trusted: a close within this window fails that one command with
  /// connection_error, and the next reconnects. 0: check before every command (one more system
  /// call per command).
  std::chrono::microseconds idle_check_after{100};

  /// "host:port" or the socket path: for messages (never includes credentials).
  std::string endpoint() const { return unix_path.empty() ? host + ":" + std::to_string(port) : unix_path; }
};

/// Options of a redislock::client (a thread-safe pool of connections).
struct client_options {
  connection_options connection;
  /// Most connections open at once. Calls beyond that wait for one to be returned.
  std::size_t pool_size = 8;
  /// How long a call waits for a free connection before timeout_error.
  std::chrono::milliseconds pool_wait_timeout{1000};
  /// Called (once per client, on the thread that made its first connection) with a one-line
  /// warning when the server may evict held locks (eviction.hpp). Empty: the line goes to
  /// stderr. Set it to route the warning to your logger, or to a no-op to silence it.
  std::function<void(const std::string& message)> on_warning{};
};

namespace detail {

/// Rejects settings no server could be reached with: a negative timeout (which would otherwise
/// read as "none": a silent hang), a negative database, a TCP port outside 1..65535.
/// `who` starts the message ("client", "connection", ...).
inline void check_connection_options(const connection_options& o, const char* who) {
  const std::string w(who);
  if (o.connect_timeout.count() < 0) throw invalid_argument(w + ": connect_timeout must not be negative");
  if (o.command_timeout.count() < 0) throw invalid_argument(w + ": command_timeout must not be negative");
  if (o.idle_check_after.count() < 0) throw invalid_argument(w + ": idle_check_after must not be negative");
  if (o.db < 0) throw invalid_argument(w + ": db must not be negative");
  if (o.unix_path.empty() && (o.port <= 0 || o.port > 65535)) throw invalid_argument(w + ": port must be in 1..65535");
}

inline int parse_port_or_db(std::string_view text, const char* what, int max) {
  if (text.empty() || text.size() > 10) throw invalid_argument(std::string("redis uri: bad ") + what);
  long value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') throw invalid_argument(std::string("redis uri: bad ") + what);
    value = value * 10 + (c - '0');
  }
  if (value > max) throw invalid_argument(std::string("redis uri: ") + what + " out of range");
  return static_cast<int>(value);
}

inline std::string percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%') {
      int hi = i + 2 < text.size() ? hex(text[i + 1]) : -1;
      int lo = i + 2 < text.size() ? hex(text[i + 2]) : -1;
      if (hi < 0 || lo < 0) throw invalid_argument("redis uri: bad percent-encoding");
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace detail

/// Parses `redis://[[user]:password@]host[:port][/db]`, `rediss://...` (TLS) and
/// `unix:///path/to.sock[?db=N]`. User and password may be percent-encoded.
/// Throws invalid_argument (whose message never contains the password).
inline connection_options parse_uri(std::string_view uri, connection_options base = {}) {
  connection_options o = std::move(base);
  auto scheme_end = uri.find("://");
  if (scheme_end == std::string_view::npos) throw invalid_argument("redis uri: missing scheme");
  std::string_view scheme = uri.substr(0, scheme_end);
  std::string_view rest = uri.substr(scheme_end + 3);

  if (scheme == "unix") {
    auto query = rest.find('?');
    std::string_view path = rest.substr(0, query);
    if (path.empty() || path.front() != '/') throw invalid_argument("redis uri: unix socket path must be absolute");
    o.unix_path = std::string(path);
    if (query != std::string_view::npos) {
      std::string_view q = rest.substr(query + 1);
      if (!detail::starts_with(q, "db=")) throw invalid_argument("redis uri: only ?db=N is supported");
      o.db = detail::parse_port_or_db(q.substr(3), "db", 1 << 20);
    }
    return o;
  }
  if (scheme != "redis" && scheme != "rediss") throw invalid_argument("redis uri: unknown scheme");
  o.tls = scheme == "rediss";
  o.unix_path.clear();

  auto at = rest.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    auto colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      // redis://secret@host is the common spelling of a password-only URI.
      o.user.clear();
      o.password = detail::percent_decode(userinfo);
    } else {
      o.user = detail::percent_decode(userinfo.substr(0, colon));
      o.password = detail::percent_decode(userinfo.substr(colon + 1));
    }
  }
  auto slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) o.db = detail::parse_port_or_db(db, "db", 1 << 20);
  }
  if (!hostport.empty() && hostport.front() == '[') {  // [::1]:6380
    auto close = hostport.find(']');
    if (close == std::string_view::npos) throw invalid_argument("redis uri: bad IPv6 host");
    o.host = std::string(hostport.substr(1, close - 1));
    hostport = hostport.substr(close + 1);
    if (!hostport.empty()) {
      if (hostport.front() != ':') throw invalid_argument("redis uri: bad port");
      o.port = detail::parse_port_or_db(hostport.substr(1), "port", 65535);
    }
  } else {
    auto colon = hostport.find(':');
    o.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) o.port = detail::parse_port_or_db(hostport.substr(colon + 1), "port", 65535);
  }
  if (o.host.empty()) throw invalid_argument("redis uri: missing host");
  if (o.port == 0) throw invalid_argument("redis uri: port must not be 0");
  return o;
}

}  // namespace redislock
