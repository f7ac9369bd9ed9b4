#pragma once
// A gtest fixture: one redis-server per test suite, a fresh pool and an admin connection per
// test (FLUSHALL first), and small helpers shared by the lock tests.

#include "redis_keys.hpp"
#include "redis_server.hpp"
#include "server_version.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

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
  std::string get(const std::string& key) { return string_value(*admin, key); }
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
  /// The server's version (major * 10000 + minor * 100 + patch; see server_version.hpp).
  int version() { return server_version(*admin); }
  void reset_stats() { admin->command({"CONFIG", "RESETSTAT"}); }
  inline static redis_server* server = nullptr;
  std::unique_ptr<redislock::client> pool;
  std::unique_ptr<redislock::connection> admin;
};

}  // namespace redislock_test
