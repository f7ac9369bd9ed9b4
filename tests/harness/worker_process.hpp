#pragma once
// The worker program the process tests spawn (tests/worker.cpp, its path in
// REDISLOCK_TEST_WORKER): a child whose standard output the test reads line by line
// ("acquired <fence>", "lost 1", ...), and a count run over several workers.

#include "process.hpp"
#include "redis_server.hpp"

#include <redislock/connection.hpp>
#include <redislock/reply.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace redislock_test {

class worker_process {
 public:
  /// Spawns `worker` with `args`; its stdout comes back through a pipe (read_line()).
  worker_process(const std::string& worker, const std::vector<std::string>& args) {
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("worker_process: pipe failed");
    std::vector<std::string> argv{worker};
    argv.insert(argv.end(), args.begin(), args.end());
    try {
      process_ = child_process(argv, out[1]);
    } catch (...) {
      ::close(out[0]);
      ::close(out[1]);
      throw;
    }
    ::close(out[1]);
    out_ = out[0];
  }
  ~worker_process() {
    if (out_ >= 0) ::close(out_);
  }
  worker_process(const worker_process&) = delete;
  worker_process& operator=(const worker_process&) = delete;

  /// The next line of its output (what arrived so far after `timeout`, or at its exit).
  std::string read_line(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    return redislock_test::read_line(out_, timeout);
  }
  /// Reads the "acquired <what>" line a holding worker prints and returns <what> (its fence, or
  /// its owner id); "" (and a test failure) when the line is something else.
  std::string acquired() {
    const std::string line = read_line();
    const bool ok = line.rfind("acquired ", 0) == 0;
    EXPECT_TRUE(ok) << line;
    return ok ? line.substr(9) : std::string();
  }
  child_process& process() { return process_; }
  pid_t pid() const { return process_.pid(); }
  void signal(int sig) const { process_.signal(sig); }
  int wait_for(std::chrono::milliseconds timeout) { return process_.wait_for(timeout); }

 private:
  child_process process_;
  int out_ = -1;
};

/// Runs `workers` worker processes of `mode` ("count", "count-reentrant", ...) against a
/// fresh server, `rounds` each; returns the shared counter they incremented ("" on failure,
/// with the failing exit statuses added as test failures).
inline std::string count_in_processes(const std::string& worker, const std::string& mode, int workers, int rounds) {
  redis_server server;
  std::vector<child_process> children;
  for (int i = 0; i < workers; ++i)
    children.emplace_back(std::vector<std::string>{worker, mode, std::to_string(server.port()), "procs",
                                                   "procs:counter", std::to_string(rounds)});
  for (auto& c : children) EXPECT_EQ(c.wait_for(std::chrono::seconds(60)), 0) << "worker saw an overlap or failed";
  redislock::connection admin = server.admin();
  redislock::reply_ptr r = admin.command({"GET", "procs:counter"});
  return r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : std::string();
}

}  // namespace redislock_test
