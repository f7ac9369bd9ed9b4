#pragma once
// Options (auto_renew, or a hold that is only watched) whose on_lost is observed: how often it ran, with which name and
// when it first ran, and a bounded wait for that first call.

#include <redislock/lock_options.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <string>

namespace redislock_test {

struct lost_signal {
  std::atomic<int> calls{0};
  std::string name;                          // the lock's name, as on_lost got it first
  std::chrono::steady_clock::time_point at;  // when on_lost first ran
  lost_signal() = default;
  lost_signal(const lost_signal&) = delete;
  lost_signal& operator=(const lost_signal&) = delete;

  /// `o` with auto_renew (unless `renew` is false) and this on_lost (the options must not
  /// outlive the signal).
  redislock::lock_options options(redislock::lock_options o, bool renew = true) {
    o.auto_renew = renew;
    o.on_lost = [this](const std::string& n) {
      if (calls.fetch_add(1) != 0) return;
      name = n;
      at = std::chrono::steady_clock::now();
      fired_.set_value();
    };
    return o;
  }
  redislock::lock_options options(std::chrono::milliseconds lease) {
    redislock::lock_options o;
    o.lease = lease;
    return options(o);
  }
  /// Waits (bounded) for the first call; name and at are set once it returns true.
  bool wait(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    return seen_.wait_for(timeout) == std::future_status::ready;
  }

 private:
  std::promise<void> fired_;
  std::future<void> seen_ = fired_.get_future();
};

}  // namespace redislock_test
