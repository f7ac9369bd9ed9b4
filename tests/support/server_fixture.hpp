#pragma once
// A gtest fixture: one redis-server per test suite, a fresh pool and an admin connection per
// test (FLUSHALL first), and small helpers shared by the lock tests.

#include "redis_server.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>
#include <utility>

namespace redislock_test {

struct server_test : ::testing::Test {
  static void SetUpTestSuite() { server = new redis_server(); }
  static void TearDownTestSuite() {
    delete server;
    server = nullptr;
  }
  void SetUp() override {
    pool = std::make_unique<redislock::client>(redislock::client_options{server->options()});
    admin = std::make_unique<redislock::connection>(server->options());
    admin->command({"FLUSHALL"});
  }
  std::string get(const std::string& key) {
    redislock::reply_ptr r = admin->command({"GET", key});
    return r->type == REDIS_REPLY_NIL ? std::string("(nil)") : std::string(r->str, r->len);
  }
  static redislock::lock_options lease(std::chrono::milliseconds ms) {
    redislock::lock_options o;
    o.lease = ms;
    return o;
  }
  static redislock::client_options options() { return redislock::client_options{server->options()}; }
  /// Clients subscribed to `channel` (waiters listening for a release).
  long long subscribers(const std::string& channel) {
    return admin->command({"PUBSUB", "NUMSUB", channel})->element[1]->integer;
  }
  long long evalsha() { return command_calls(*admin, "evalsha"); }
  void reset_stats() { admin->command({"CONFIG", "RESETSTAT"}); }
  inline static redis_server* server = nullptr;
  std::unique_ptr<redislock::client> pool;
  std::unique_ptr<redislock::connection> admin;
};

/// EVALSHA calls (and EVAL + SCRIPT LOAD calls, which must stay 0) made by `cycles` calls of
/// cycle(), after one warm-up call that loads the scripts.
template <class Cycle>
std::pair<long long, long long> script_calls_per(redislock::connection& admin, int cycles, Cycle&& cycle) {
  cycle();
  admin.command({"CONFIG", "RESETSTAT"});
  for (int i = 0; i < cycles; ++i) cycle();
  return {command_calls(admin, "evalsha"), command_calls(admin, "eval") + command_calls(admin, "script|load")};
}

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
