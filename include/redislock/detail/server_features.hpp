#pragma once
/// @file detail/server_features.hpp
/// @brief What a server offers beyond what every supported server has, found once per
/// connection (connection::features(); a reconnect, which may reach another server after a
/// failover, finds it again).
///
/// One round trip: `HELLO` (no protocol version: it answers the server's name and version and
/// changes nothing) pipelined with `EVAL "return 1" 0` (whether this connection may run
/// scripts). A user refused EVAL is asked `EVALSHA <sha1 of "return 1"> 0` (it may be allowed
/// that alone); NOSCRIPT then adds `SCRIPT LOAD "return 1"`, which tells a server without a Lua
/// engine. Redis 6.0 refuses HELLO without a version, as does an ACL without +hello: then
/// `INFO server` (refused too: the server is unknown and only what every server has is used).
/// No probe writes data.
///
/// Found:
///   set_ifeq  `SET key value IFEQ expected ...`: Redis 8.4+, Valkey 8.1+
///   delex     `DELEX key IFEQ expected`: Redis 8.4+
///   delifeq   `DELIFEQ key expected`: Valkey 9.0+
///   scripting the server runs Lua scripts for this user. Refused by an ACL user without
///             @scripting ("NOPERM ... 'eval' command") and by Valkey without its Lua engine
///             (built with BUILD_LUA=no, or `MODULE UNLOAD lua`: "ERR Could not find scripting
///             engine 'lua'"; EVALSHA answers NOSCRIPT there). Any other answer (BUSY, LOADING)
///             counts as scripting: what then fails says why itself.

#include <redislock/errors.hpp>
#include <redislock/reply.hpp>

#include <hiredis/hiredis.h>

#include <cstdlib>
#include <string>
#include <string_view>

namespace redislock::detail {

struct server_features {
  std::string server;  ///< "redis" or "valkey" ("" when unknown)
  int major = 0, minor = 0, patch = 0;
  bool set_ifeq = false, delex = false, delifeq = false;
  bool scripting = true;

  /// The Lua-free release exists here (compare-and-delete without a script).
  bool compare_and_delete() const noexcept { return delex || delifeq; }

  std::string describe() const {
    if (server.empty()) return "an unknown server";
    return server + " " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  }

  /// Fills the command flags from server and version.
  void derive() noexcept {
    const auto at_least = [&](int ma, int mi) { return major > ma || (major == ma && minor >= mi); };
    const bool redis = server == "redis", valkey = server == "valkey";
    set_ifeq = (redis && at_least(8, 4)) || (valkey && at_least(8, 1));
    delex = redis && at_least(8, 4);
    delifeq = valkey && at_least(9, 0);
  }

  void parse_version(std::string_view v) noexcept {
    int* parts[] = {&major, &minor, &patch};
    for (int* p : parts) {
      *p = 0;
      std::size_t i = 0;
      while (i < v.size() && v[i] >= '0' && v[i] <= '9') *p = *p * 10 + (v[i++] - '0');
      if (i >= v.size() || v[i] != '.') {
        v = {};
        continue;
      }
      v.remove_prefix(i + 1);
    }
  }
};

/// HELLO's RESP2 reply: a flat array "server", <name>, "version", <version>, ...
/// False when it is not one (an error: Redis 6.0 wants a protocol version).
inline bool read_hello(const redisReply& r, server_features& f) {
  if (r.type != REDIS_REPLY_ARRAY) return false;
  for (std::size_t i = 0; i + 1 < r.elements; i += 2) {
    const redisReply& k = *r.element[i];
    const redisReply& v = *r.element[i + 1];
    if (k.type != REDIS_REPLY_STRING && k.type != REDIS_REPLY_STATUS) continue;
    if (v.type != REDIS_REPLY_STRING && v.type != REDIS_REPLY_STATUS) continue;
    const std::string_view key(k.str, k.len), value(v.str, v.len);
    if (key == "server") f.server = std::string(value);
    else if (key == "version") f.parse_version(value);
  }
  return !f.server.empty();
}

/// INFO server's text: "redis_version:x.y.z", and on Valkey "server_name:valkey" with
/// "valkey_version:x.y.z" (its redis_version is a compatibility number).
inline void read_info_server(std::string_view text, server_features& f) {
  const auto field = [&](std::string_view name) -> std::string_view {
    const std::size_t at = text.find(std::string(name) + ":");
    if (at == std::string_view::npos || (at != 0 && text[at - 1] != '\n')) return {};
    const std::size_t start = at + name.size() + 1;
    return text.substr(start, text.find_first_of("\r\n", start) - start);
  };
  const std::string_view valkey = field("valkey_version");
  f.server = valkey.empty() ? "redis" : "valkey";
  f.parse_version(valkey.empty() ? field("redis_version") : valkey);
}

}  // namespace redislock::detail
