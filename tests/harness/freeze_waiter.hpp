#pragma once
// Freezing a waiting thread at a chosen point, through the observer hooks (observe.hpp).

#include <redislock/observe.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>

namespace redislock_test {

// Freezes the thread waiting for lock `name` at its first wake-up by the timer (as a paused
// process, a GC stop or a descheduled thread would): on_woken runs on the waiting thread right
// before its next attempt. `frozen` is set once it stopped; it goes on when `go` is set (or
// after 20 s).
struct freeze_at_first_timer_wake : redislock::lock_observer {
  explicit freeze_at_first_timer_wake(std::string n) : name(std::move(n)), go_future(go.get_future().share()) {}
  void on_woken(const redislock::woken_event& e) override {
    if (e.name != name || e.cause != redislock::wake_cause::timer || done.exchange(true)) return;
    frozen.set_value();
    go_future.wait_for(std::chrono::seconds(20));
  }
  std::string name;
  std::atomic<bool> done{false};
  std::promise<void> frozen, go;
  std::shared_future<void> go_future;
};

// Installs an observer for one scope (every way out of it uninstalls it).
struct observer_installed {
  explicit observer_installed(std::shared_ptr<redislock::lock_observer> o) { redislock::set_observer(std::move(o)); }
  ~observer_installed() { redislock::set_observer(nullptr); }
  observer_installed(const observer_installed&) = delete;
  observer_installed& operator=(const observer_installed&) = delete;
};

}  // namespace redislock_test
