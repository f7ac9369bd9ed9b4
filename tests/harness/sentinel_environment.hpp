#pragma once
// One Sentinel set-up per test binary (sentinel_topology.hpp), started by a gtest Environment
// before the first test and stopped after the last: the tests share it, in the order written.
// A binary includes this once (it registers the Environment).

#include "sentinel_topology.hpp"

#include <redislock/observe.hpp>
#include <redislock/sentinel_client.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace redislock_test {

inline sentinel_topology* topology = nullptr;

struct sentinel_environment : ::testing::Environment {
  void SetUp() override {
    const auto t0 = std::chrono::steady_clock::now();
    topology = new sentinel_topology();
    std::printf(
        "[ sentinel ] set-up ready in %lld ms\n",
        static_cast<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()));
  }
  void TearDown() override {
    delete topology;
    topology = nullptr;
  }
};

inline const auto* const sentinel_environment_registered =
    ::testing::AddGlobalTestEnvironment(new sentinel_environment);

// The set-up's sentinels, service and both credentials, with 500 ms timeouts.
inline redislock::sentinel_options sentinel_test_options() {
  using namespace std::chrono_literals;
  redislock::sentinel_options o = redislock::parse_sentinel_uri(topology->uri());
  o.connection.connect_timeout = 500ms;
  o.connection.command_timeout = 500ms;
  return o;
}

// Counts the failovers told to the observer (observe.hpp) and keeps the last one's details.
struct failover_seen : redislock::lock_observer {
  void on_failover(const redislock::failover_event& e) override {
    std::lock_guard<std::mutex> g(m);
    ++count;
    from = std::string(e.from);
    to = std::string(e.to);
    recovered_in = e.recovered_in;
  }
  std::mutex m;
  int count = 0;
  std::string from, to;
  std::chrono::nanoseconds recovered_in{0};
};

}  // namespace redislock_test
