#pragma once
// Reading what a server did: INFO sections as fields, single INFO counters, and the commands
// clients sent (MONITOR, scripts' own calls left out). Keys and their contents: redis_keys.hpp.
// (INFO commandstats per command: command_calls() in redis_server.hpp.)

#include "redis_keys.hpp"

#include <redislock/connection.hpp>
#include <redislock/options.hpp>
#include <redislock/reply.hpp>

#include <map>
#include <random>
#include <string>
#include <vector>

namespace redislock_test {

/// INFO <section> as a field map ("role" -> "master"); empty when the server does not answer.
inline std::map<std::string, std::string> info_fields(const redislock::connection_options& o, const char* section) {
  std::map<std::string, std::string> fields;
  try {
    redislock::connection c(o);
    const std::string text = reply_text(*c.command({"INFO", section}));
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t end = text.find("\r\n", pos);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(pos, end - pos);
      const auto colon = line.find(':');
      if (colon != std::string::npos) fields[line.substr(0, colon)] = line.substr(colon + 1);
      pos = end + 2;
    }
  } catch (const std::exception&) {
  }
  return fields;
}

/// One counter of an INFO line "<line>:a=1,b=2" (e.g. section "errorstats", line
/// "errorstat_TRYAGAIN", field "count"); 0 when absent.
inline long long info_counter(redislock::connection& c, const char* section, const std::string& line,
                              const std::string& field) {
  const std::string text = reply_text(*c.command({"INFO", section}));
  const auto at_line = text.find(line + ":");
  if (at_line == std::string::npos) return 0;
  const auto end = text.find("\r\n", at_line);
  const std::string fields = text.substr(at_line + line.size() + 1, end - at_line - line.size() - 1);
  const auto at = ("," + fields).find("," + field + "=");
  return at == std::string::npos ? 0 : std::stoll(fields.substr(at + field.size() + 1));
}

/// The commands clients send to one server, as MONITOR sees them (a script's own calls are
/// left out: they are not round trips). take() returns what arrived since the last take(): it
/// sends a marker through `admin` and reads up to it, so it never waits on a timer.
class command_monitor {
 public:
  explicit command_monitor(const redislock::connection_options& o) : c_(o) { c_.command({"MONITOR"}); }

  std::vector<std::string> take(redislock::connection& admin) {
    static thread_local std::minstd_rand rng{std::random_device{}()};
    const std::string marker = "command-monitor-marker-" + std::to_string(rng());
    admin.command({"ECHO", marker});
    std::vector<std::string> seen;
    for (;;) {
      const std::string line = reply_text(*c_.read_reply());  // bounded by the command timeout
      if (line.find(marker) != std::string::npos) return seen;
      if (line.find(" lua] ") == std::string::npos) seen.push_back(line);
    }
  }

 private:
  redislock::connection c_;
};

}  // namespace redislock_test
