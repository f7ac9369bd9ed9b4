#pragma once
// What the server under test is (the suite runs against several: scripts/test.sh's redis6,
// redis8 and valkey9 variants), for the few tests whose set-up differs between them.

#include "redis_server.hpp"

#include <redislock/connection.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace redislock_test {

/// The server's Redis-compatible version as major * 10000 + minor * 100 + patch, from INFO
/// server's redis_version (Valkey reports the Redis version it is compatible with there).
inline int server_version(redislock::connection& c) {
  redislock::reply_ptr r = c.command({"INFO", "server"});
  const std::string info(r->str, r->len);
  const std::size_t at = info.find("redis_version:");
  int major = 0, minor = 0, patch = 0;
  if (at != std::string::npos) std::sscanf(info.c_str() + at, "redis_version:%d.%d.%d", &major, &minor, &patch);
  return major * 10000 + minor * 100 + patch;
}

/// The version of the server binary the harness starts (redis_server_binary(), from its
/// --version line "Redis server v=6.0.16 ..."; Valkey: "Valkey server v=9.1.2 ..."), as
/// major * 10000 + minor * 100 + patch. Asked once per process.
inline int server_binary_version() {
  static const int version = [] {
    int major = 0, minor = 0, patch = 0;
    if (FILE* p = ::popen(("'" + redis_server_binary() + "' --version").c_str(), "r")) {
      char line[256] = {};
      if (std::fgets(line, sizeof line, p) != nullptr) {
        const char* v = std::strstr(line, " v=");
        if (v != nullptr) std::sscanf(v, " v=%d.%d.%d", &major, &minor, &patch);
      }
      ::pclose(p);
    }
    return major * 10000 + minor * 100 + patch;
  }();
  return version;
}

/// ACL SETUSER rules that allow a user the channels matching `pattern` only. Redis 6.0 has no
/// channel permissions (every user may use every channel): nothing to add there.
inline std::vector<std::string> acl_channel_rules(redislock::connection& c, const std::string& pattern) {
  if (server_version(c) < 60200) return {};
  return {"resetchannels", "&" + pattern};
}

}  // namespace redislock_test
