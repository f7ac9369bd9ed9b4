#pragma once
// The async lock tests' fixture and helpers (redislock/asio.hpp): an io_context run by threads
// of its own, an async_client on it per test, and waiting for one completion's outcome.

#include "server_fixture.hpp"

#include <redislock/asio.hpp>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace redislock_test {

// An io_context run by `threads` threads until the fixture ends.
struct loop {
  explicit loop(int threads = 1) : work(asio::make_work_guard(io)) {
    for (int i = 0; i < threads; ++i) runners.emplace_back([this] { io.run(); });
  }
  ~loop() {
    work.reset();
    for (auto& t : runners) t.join();
  }
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::vector<std::thread> runners;
};

// server_test with an async_client (on a one-thread loop) per test.
struct async_server_test : server_test {
  void SetUp() override {
    server_test::SetUp();
    runner = std::make_unique<loop>();
    client = std::make_unique<redislock::async_client>(runner->io.get_executor(),
                                                       redislock::async_client_options{server->options()});
  }
  void TearDown() override {
    client.reset();
    runner.reset();  // runs until the client's connections are closed
  }
  bool exists(const std::string& key) { return admin->command({"EXISTS", key})->integer == 1; }

  std::unique_ptr<loop> runner;
  std::unique_ptr<redislock::async_client> client;
};

// Runs `start(callback)` and waits for its outcome. Errors are checked as error codes, not as
// exceptions through a future: libstdc++'s exception_ptr is not instrumented, so TSan reports
// its release on the completing thread as a race.
template <class T, class Start>
std::pair<std::error_code, T> outcome(Start start) {
  auto p = std::make_shared<std::promise<std::pair<std::error_code, T>>>();
  auto f = p->get_future();
  start([p](std::error_code e, T value) { p->set_value({e, std::move(value)}); });
  return f.get();
}

// Returns once `c` has handled every reply due on its command connection to the server of
// `name` (on a cluster, the master of its slot; on one server or with Sentinel, any name): one
// more command sent there (a semaphore's read-only count), whose reply comes after theirs.
// Used after seeing a waiter queued on the server: its "wait" was answered before, so the
// waiter has read that reply and sleeps until a notice. A release after this hands it the lock
// by the notice (async_stats::handed_over, the observer's handoff path and notice wake-up);
// without it, a notice that comes while the reply is still unread makes the waiter take the
// lock by one more attempt instead, and no hand-off is counted.
inline void replies_handled(redislock::async_client& c, const std::string& name = "replies-handled") {
  redislock::async_semaphore s(c, name, 1);
  outcome<std::int64_t>([&](auto cb) { s.async_permits(cb); });
}

inline std::error_code unlock_now(redislock::async_hold& h, redislock::release_status* status = nullptr) {
  std::promise<std::pair<std::error_code, redislock::release_status>> p;
  h.async_unlock([&](std::error_code e, redislock::release_status s) { p.set_value({e, s}); });
  auto r = p.get_future().get();
  if (status) *status = r.second;
  return r.first;
}

}  // namespace redislock_test
