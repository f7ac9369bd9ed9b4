#pragma once
// What the benchmarks share: the raw-hiredis baseline lock, the throwaway server they start,
// timing helpers and main().
#include "redis_server.hpp"

#include <redislock/redislock.hpp>

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace redislock_bench {

using namespace redislock;
using redislock_test::redis_server;
using clk = std::chrono::steady_clock;
using std::chrono::nanoseconds;

inline redis_server* g_server = nullptr;  // this run's server, started by bench_main()
inline std::string g_self;                // this program's path, for child processes

inline client_options options_for(int port) {
  client_options o;
  o.connection.port = port;
  o.connection.command_timeout = std::chrono::seconds(10);
  o.pool_size = 2;
  return o;
}
inline double seconds_per_run() {
  const char* s = std::getenv("REDISLOCK_BENCH_SECONDS");
  return s && *s ? std::atof(s) : 2.0;
}

inline std::int64_t now_ns() { return std::chrono::duration_cast<nanoseconds>(clk::now().time_since_epoch()).count(); }

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

/// The baseline: what a hand-written lock on raw hiredis sends, through hiredis's own blocking
/// API (no redislock code on its path).
class raw_lock {
 public:
  explicit raw_lock(int port) : c_(redisConnect("127.0.0.1", port)) {
    if (c_ == nullptr || c_->err) throw std::runtime_error("raw_lock: cannot connect");
    sha_ = string_reply({"SCRIPT", "LOAD", kDelete});
    same_release_sha_ = string_reply({"SCRIPT", "LOAD", detail::mutex_scripts::release().source()});
  }
  ~raw_lock() { redisFree(c_); }
  raw_lock(const raw_lock&) = delete;
  raw_lock& operator=(const raw_lock&) = delete;

  bool lock(std::string_view key, std::string_view token) {
    return command({"SET", key, token, "NX", "PX", "30000"})->type == REDIS_REPLY_STATUS;
  }
  void unlock(std::string_view key, std::string_view token) { command({"EVALSHA", sha_, "1", key, token}); }
  /// The very commands redislock's mutex sends (SET NX GET PX, and its release script, which
  /// also looks for queued waiters), sent raw: the difference to redislock is then the
  /// library's client-side cost alone.
  void lock_same_commands(std::string_view key, std::string_view token) {
    command({"SET", key, token, "NX", "GET", "PX", "30000"});
  }
  void unlock_same_commands(std::string_view key, std::string_view token) {
    const std::string k(key);
    command({"EVALSHA", same_release_sha_, "4", k, k + ":fence", k + ":queue", k + ":waiters", token, k + ":w:"});
  }
  void ping() { command({"PING"}); }

 private:
  reply_ptr command(std::initializer_list<std::string_view> argv) {
    const char* ptrs[12];
    std::size_t lens[12];
    int n = 0;
    for (std::string_view a : argv) {
      ptrs[n] = a.data();
      lens[n++] = a.size();
    }
    reply_ptr r(static_cast<redisReply*>(redisCommandArgv(c_, n, ptrs, lens)));
    if (!r || r->type == REDIS_REPLY_ERROR) throw std::runtime_error("raw_lock: command failed");
    return r;
  }
  std::string string_reply(std::initializer_list<std::string_view> argv) {
    reply_ptr r = command(argv);
    return std::string(r->str, r->len);
  }
  static constexpr const char* kDelete =
      "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
  redisContext* c_;
  std::string sha_, same_release_sha_;
};

/// The server's CPU and command counts at one instant.
struct server_sample {
  double cpu = 0;                          // seconds
  std::map<std::string, long long> calls;  // per command, "info" left out
  double script_usec = 0;                  // time the server spent running EVALSHA (scripts)
  std::map<std::string, double> usec;      // per command, time spent in it (calls inside scripts too)
  long long total() const {
    long long n = 0;
    for (const auto& [k, v] : calls) n += v;
    return n;
  }
  long long of(const std::string& c) const {
    auto it = calls.find(c);
    return it == calls.end() ? 0 : it->second;
  }
};

inline server_sample sample(connection& admin) {
  reply_ptr r = admin.command({"INFO", "cpu"});
  server_sample s;
  std::istringstream cpu(std::string(r->str, r->len));
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("used_cpu_user:", 0) == 0) s.cpu += std::atof(line.c_str() + 14);
    if (line.rfind("used_cpu_sys:", 0) == 0) s.cpu += std::atof(line.c_str() + 13);
  }
  r = admin.command({"INFO", "commandstats"});
  std::istringstream stats(std::string(r->str, r->len));
  for (std::string line; std::getline(stats, line);) {
    if (line.rfind("cmdstat_", 0) != 0) continue;
    const auto colon = line.find(':'), calls = line.find("calls=");
    if (colon == std::string::npos || calls == std::string::npos) continue;
    std::string name = line.substr(8, colon - 8);
    if (name == "info") continue;
    s.calls[name] = std::atoll(line.c_str() + calls + 6);
    const auto usec = line.find(",usec=");
    if (usec == std::string::npos) continue;
    s.usec[name] = std::atof(line.c_str() + usec + 6);
    if (name == "evalsha") s.script_usec = s.usec[name];
  }
  return s;
}

inline void spin_for(nanoseconds d) {
  const auto end = clk::now() + d;
  while (clk::now() < end) {
  }
}

/// main(): runs `child(argv)` when argv[1] is child_flag with child_argc arguments in all
/// (a child process of a benchmark), else the benchmarks against a server of their own.
inline int bench_main(int argc, char** argv, const char* child_flag, int child_argc, int (*child)(char**)) {
  if (argc == child_argc && std::strcmp(argv[1], child_flag) == 0) {
    try {
      return child(argv);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", child_flag + 2, e.what());
      return 1;
    }
  }
  g_self = "/proc/self/exe";
  char path[4096];
  const ssize_t len = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (len > 0) g_self.assign(path, static_cast<std::size_t>(len));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  redis_server server;
  g_server = &server;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_server = nullptr;
  return 0;
}

}  // namespace redislock_bench
