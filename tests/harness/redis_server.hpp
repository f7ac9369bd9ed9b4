#pragma once
// A throwaway redis-server for one test suite: started on a free loopback port (never 6379),
// without persistence, and stopped by the destructor. Readiness is the server's own
// "Ready to accept connections" log line, read from a pipe; no sleeping.

#include "process.hpp"

#include <redislock/connection.hpp>
#include <redislock/options.hpp>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace redislock_test {

/// A loopback port that was free a moment ago (the kernel picks it).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("free_port: cannot bind");
  }
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

/// A free loopback port whose cluster bus port (port + 10000) is free too.
inline int free_port_with_bus() {
  for (int tries = 0; tries < 100; ++tries) {
    const int port = free_port();
    if (port + 10000 > 65535) continue;
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port + 10000));
    const bool bus_free = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (fd >= 0) ::close(fd);
    if (bus_free) return port;
  }
  throw std::runtime_error("free_port_with_bus: no port pair found");
}

inline std::string redis_server_binary() {
  const char* env = std::getenv("REDISLOCK_REDIS_SERVER");
  return env && *env ? env : "redis-server";
}

/// How to start a server other than the default one.
struct server_config {
  /// Additional redis-server arguments (e.g. {"--requirepass", "x"}).
  std::vector<std::string> extra;
  /// Sentinel mode (`redis-server <file> --sentinel`): Sentinel needs a configuration file it
  /// can rewrite, so `config_file_text` is written to a file in a fresh temporary directory
  /// (removed by the destructor) and passed first.
  bool sentinel = false;
  std::string config_file_text;
};

class redis_server {
 public:
  /// Starts a server; `extra` are additional redis-server arguments (e.g. {"--requirepass", "x"}).
  /// with_cluster_bus: the port is chosen so that port + 10000 (the cluster bus) is free too.
  explicit redis_server(std::vector<std::string> extra = {}, bool with_cluster_bus = false)
      : redis_server(server_config{std::move(extra), false, {}}, with_cluster_bus) {}
  explicit redis_server(server_config config, bool with_cluster_bus = false)
      : extra_(std::move(config.extra)), sentinel_(config.sentinel) {
    // Every server works in a fresh temporary directory of its own (removed by the destructor):
    // whatever it writes (a replica's RDB after a full sync, Sentinel's rewritten
    // configuration) lands there, never in the caller's working directory.
    char dir[] = "/tmp/redislock-test-XXXXXX";
    if (::mkdtemp(dir) == nullptr) throw std::runtime_error("redis_server: mkdtemp failed");
    dir_ = dir;
    if (sentinel_ || !config.config_file_text.empty()) {
      config_file_ = dir_ + "/redis.conf";
      config_text_ = std::move(config.config_file_text);
    }
    for (int tries = 0; tries < 5; ++tries) {
      port_ = with_cluster_bus ? free_port_with_bus() : free_port();
      if (start()) return;
    }
    remove_dir();
    throw std::runtime_error("redis_server: could not start redis-server (is it installed?)");
  }
  ~redis_server() {
    stop();
    remove_dir();
  }
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  int port() const { return port_; }
  std::string uri() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  redislock::connection_options options() const {
    redislock::connection_options o;
    o.host = "127.0.0.1";
    o.port = port_;
    return o;
  }
  pid_t pid() const { return process_.pid(); }

  /// An administrative connection (not through the library's pool).
  redislock::connection admin() const { return redislock::connection(options()); }

  /// Stops the server (SIGTERM, bounded wait, then SIGKILL). Data is gone: no persistence.
  void stop() {
    if (!process_.running()) return;
    process_.signal(SIGTERM);
    if (process_.wait_for(std::chrono::seconds(10)) < 0) {
      process_.signal(SIGKILL);
      process_.wait_for(std::chrono::seconds(10));
    }
    if (log_reader_.joinable()) log_reader_.join();
  }

  /// Kills the server with SIGKILL (a crash: no shutdown), bounded wait. Data is gone.
  void kill() {
    if (!process_.running()) return;
    process_.signal(SIGKILL);
    process_.wait_for(std::chrono::seconds(10));
    if (log_reader_.joinable()) log_reader_.join();
  }

  /// Starts a stopped or killed server again on its port: an empty script cache, and an empty
  /// data set unless it once synced as a replica (Redis keeps the RDB file a full sync wrote,
  /// rdb-del-sync-files no, and loads it at start).
  void start_again() {
    if (process_.running()) throw std::runtime_error("redis_server: still running on port " + std::to_string(port_));
    if (!start()) throw std::runtime_error("redis_server: restart on port " + std::to_string(port_) + " failed");
  }

  /// Stops and starts again on the same port (the data set as start_again() says).
  void restart() {
    stop();
    start_again();
  }
  /// The same, with other additional arguments from now on (e.g. a new --replicaof).
  void restart(std::vector<std::string> extra) {
    stop();
    extra_ = std::move(extra);
    start_again();
  }
  bool running() const { return process_.running(); }

  /// The server's last few kilobytes of log, from whole lines (for a test's failure message).
  std::string recent_log() const {
    std::lock_guard<std::mutex> g(m_);
    const std::size_t first_line = log_tail_.find('\n');
    return log_tail_.size() < log_tail_bytes || first_line == std::string::npos ? log_tail_
                                                                                : log_tail_.substr(first_line + 1);
  }

  /// Suspends / resumes the server process (a stalled server for timeout tests).
  void pause() const { process_.signal(SIGSTOP); }
  void resume() const { process_.signal(SIGCONT); }

 private:
  bool start() {
    // A replica's full sync leaves dump.rdb here; a (re)started server begins empty.
    std::remove((dir_ + "/dump.rdb").c_str());
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    std::vector<std::string> argv = {redis_server_binary()};
    if (!config_file_.empty()) {
      if (!config_written_) {  // once: a restarted sentinel goes on from what it rewrote there
        FILE* f = std::fopen(config_file_.c_str(), "w");
        if (f == nullptr) throw std::runtime_error("redis_server: cannot write " + config_file_);
        std::fputs(config_text_.c_str(), f);
        std::fclose(f);
        config_written_ = true;
      }
      argv.push_back(config_file_);
    }
    if (sentinel_) argv.push_back("--sentinel");
    argv.insert(argv.end(), {"--port", std::to_string(port_), "--bind", "127.0.0.1", "--daemonize", "no", "--logfile",
                             "", "--loglevel", "notice", "--protected-mode", "no", "--dir", dir_});
    if (!sentinel_) argv.insert(argv.end(), {"--save", "", "--appendonly", "no"});
    argv.insert(argv.end(), extra_.begin(), extra_.end());
    // A sentinel never logs "Ready to accept connections" (Redis 7.0): its ID line comes once
    // it listens and has loaded its configuration.
    const std::string ready_line = sentinel_ ? "Sentinel ID is" : "Ready to accept connections";
    {
      std::lock_guard<std::mutex> g(m_);
      if (!log_tail_.empty()) log_tail_ += "--- started again ---\n";
    }
    process_ = child_process(argv, fds[1], true);
    ::close(fds[1]);
    ready_ = failed_ = false;
    // Reads the log to its end (the server's exit), so the pipe never fills up.
    log_reader_ = std::thread([this, ready_line, fd = fds[0]] {
      std::string pending;
      char buf[4096];
      for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) break;
        pending.append(buf, static_cast<std::size_t>(n));
        if (pending.find(ready_line) != std::string::npos) signal_state(true, false);
        keep_log_tail(buf, static_cast<std::size_t>(n));
        if (pending.size() > 8192) pending.erase(0, pending.size() - 64);
      }
      ::close(fd);
      signal_state(false, true);
    });
    std::unique_lock<std::mutex> g(m_);
    cv_.wait_for(g, std::chrono::seconds(20), [&] { return ready_ || failed_; });
    const bool ok = ready_;
    g.unlock();
    if (!ok) {
      stop();
      if (log_reader_.joinable()) log_reader_.join();
    }
    return ok;
  }

  // The last log_tail_bytes of the log, for recent_log().
  void keep_log_tail(const char* data, std::size_t n) {
    std::lock_guard<std::mutex> g(m_);
    log_tail_.append(data, n);
    if (log_tail_.size() > log_tail_bytes) log_tail_.erase(0, log_tail_.size() - log_tail_bytes);
  }

  void signal_state(bool ready, bool failed) {
    {
      std::lock_guard<std::mutex> g(m_);
      ready_ = ready_ || ready;
      failed_ = failed_ || failed;
    }
    cv_.notify_all();
  }

  void remove_dir() {
    if (dir_.empty()) return;
    if (DIR* d = ::opendir(dir_.c_str())) {  // the configuration, and whatever Sentinel left beside it
      while (dirent* e = ::readdir(d))
        if (std::string(e->d_name) != "." && std::string(e->d_name) != "..")
          std::remove((dir_ + "/" + e->d_name).c_str());
      ::closedir(d);
    }
    ::rmdir(dir_.c_str());
    dir_.clear();
  }

  std::vector<std::string> extra_;
  bool sentinel_ = false;
  std::string dir_, config_file_, config_text_;
  bool config_written_ = false;
  int port_ = 0;
  child_process process_;
  std::thread log_reader_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  bool ready_ = false, failed_ = false;
  static constexpr std::size_t log_tail_bytes = 6000;
  std::string log_tail_;  // under m_
};

/// Value of one counter in INFO commandstats ("evalsha" -> calls), 0 when absent.
inline long long command_calls(redislock::connection& admin, const std::string& command) {
  auto r = admin.command({"INFO", "commandstats"});
  std::string text(r->str, r->len);
  std::string needle = "cmdstat_" + command + ":calls=";
  auto pos = text.find(needle);
  if (pos == std::string::npos) return 0;
  return std::stoll(text.substr(pos + needle.size()));
}

}  // namespace redislock_test
