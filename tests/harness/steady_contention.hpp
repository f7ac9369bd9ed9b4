#pragma once
// Steady contention on one lock: threads, each with its own lock object (and, through the
// factory, its own client), loop acquire / hold / release until stopped, so that the lock is
// handed from holder to waiter and never free for long. Errors (a call during a failover) are
// counted and the loop goes on. The destructor stops and joins the threads (each loop round
// ends within its acquisition bound).

#include <redislock/errors.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace redislock_test {

class steady_contention {
 public:
  /// One round of a contender: acquire within its bound, hold, release. True when it acquired.
  using round = std::function<bool()>;

  /// Starts one thread per element of `rounds`.
  explicit steady_contention(std::vector<round> rounds) {
    for (auto& r : rounds)
      threads_.emplace_back([this, r = std::move(r)] {
        while (!stop_.load()) {
          try {
            if (r()) acquired_.fetch_add(1);
          } catch (const redislock::error&) {
            errors_.fetch_add(1);
          }
        }
      });
  }
  steady_contention(const steady_contention&) = delete;
  steady_contention& operator=(const steady_contention&) = delete;
  ~steady_contention() { stop(); }

  /// Acquisitions so far, all contenders together.
  std::uint64_t acquired() const { return acquired_.load(); }
  std::uint64_t errors() const { return errors_.load(); }

  void stop() {
    stop_.store(true);
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  /// A round on `lock` (an object of one of the exclusive lock kinds): try_lock_for(bound), hold
  /// for `hold`, unlock.
  template <class Lock>
  static round exclusive_round(std::shared_ptr<Lock> lock, std::chrono::milliseconds bound,
                               std::chrono::milliseconds hold) {
    return [lock = std::move(lock), bound, hold] {
      if (!lock->try_lock_for(bound)) return false;
      std::this_thread::sleep_for(hold);  // the holder's work
      lock->unlock();
      return true;
    };
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> acquired_{0}, errors_{0};
  std::vector<std::thread> threads_;  // last: started once the counters exist
};

}  // namespace redislock_test
