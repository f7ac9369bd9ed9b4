#pragma once
/// @file detail/wait.hpp
/// @brief The pieces of waiting for a lock: a process-local gate, deadlines and backoff.

#include <redislock/detail/cancellation.hpp>
#include <redislock/detail/observe_hooks.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

namespace redislock::detail {

using steady = std::chrono::steady_clock;

/// An optional deadline on the steady clock (none = wait forever).
using deadline = std::optional<steady::time_point>;

/// Timeouts at least this long mean "wait indefinitely": adding them to now could overflow the
/// steady clock's representation (hours::max(), a far time_point), and nobody waits a century.
inline constexpr std::chrono::hours indefinitely{24 * 365 * 100};

/// The deadline `timeout` from now, saturated: a huge timeout gives none (wait forever), a
/// zero or negative one gives now (one attempt).
template <class Rep, class Period>
deadline deadline_after(const std::chrono::duration<Rep, Period>& timeout) {
  const steady::time_point now = steady::now();
  // Compared in floating-point seconds, which hold any duration type's range without overflow.
  const std::chrono::duration<double> seconds = timeout;
  if (seconds >= indefinitely) return std::nullopt;
  if (seconds <= seconds.zero()) return now;
  return now + std::chrono::ceil<steady::duration>(seconds);
}

/// The steady-clock deadline of a time point of any clock, saturated like deadline_after.
template <class Clock, class Duration>
deadline deadline_at(const std::chrono::time_point<Clock, Duration>& tp) {
  const typename Clock::time_point now = Clock::now();
  // tp - now in floating point first: a far time point minus now may not fit tp's own type.
  const std::chrono::duration<double> left =
      std::chrono::duration<double>(tp.time_since_epoch()) - std::chrono::duration<double>(now.time_since_epoch());
  if (left >= indefinitely) return std::nullopt;
  if (left <= left.zero()) return steady::now();  // passed (a far past may not fit either)
  if constexpr (std::is_same_v<Clock, steady>) {
    return std::chrono::time_point_cast<steady::duration>(tp);  // exact: in range, checked above
  } else {
    return deadline_after(tp - now);
  }
}

/// Threads of one process that share a lock object queue here first, so only one of them
/// talks to Redis at a time. First come, first served: unlock() hands the gate straight to
/// the longest waiting thread, so nobody starves (std::timed_mutex makes no such promise).
/// Unlike std::timed_mutex it may be released by another thread (a lock can be handed
/// across threads, as a lease can).
class local_gate {
 public:
  void lock() { lock_until(std::nullopt); }
  bool try_lock() {
    std::lock_guard<std::mutex> g(m_);
    if (busy_) return false;
    busy_ = true;
    return true;
  }
  /// Also ends (false) when this thread's cancellable call is cancelled (detail/cancellation.hpp).
  bool lock_until(const deadline& d) {
    waiter w;
    {
      std::lock_guard<std::mutex> g(m_);
      if (!busy_) {
        busy_ = true;
        return true;
      }
      if (cancel_requested()) return false;
      queue_.push_back(&w);
    }
    const cancel_hook cancelled([&] {
      std::lock_guard<std::mutex> g(m_);
      w.cv.notify_one();
    });
    std::unique_lock<std::mutex> g(m_);  // released before `cancelled` is removed
    const auto done = [&] { return w.granted || cancelled.fired(); };
    if (d) w.cv.wait_until(g, *d, done);
    else w.cv.wait(g, done);
    if (!w.granted) queue_.erase(std::find(queue_.begin(), queue_.end(), &w));
    return w.granted;
  }
  void unlock() noexcept {
    std::lock_guard<std::mutex> g(m_);
    if (queue_.empty()) {
      busy_ = false;
      return;
    }
    waiter* next = queue_.front();  // still busy: ownership passes directly
    queue_.pop_front();
    next->granted = true;
    next->cv.notify_one();  // under the lock: `next` lives on its thread's stack
  }
  /// Threads queued behind the current owner (for tests and diagnostics).
  std::size_t waiting() {
    std::lock_guard<std::mutex> g(m_);
    return queue_.size();
  }

 private:
  struct waiter {
    std::condition_variable cv;
    bool granted = false;
  };
  std::mutex m_;
  std::deque<waiter*> queue_;
  bool busy_ = false;
};

/// Jittered exponential backoff ("full jitter"), capped by the holder's remaining lease and
/// the caller's deadline.
class backoff {
 public:
  backoff(std::chrono::milliseconds min, std::chrono::milliseconds max) : min_(min), max_(max), ceiling_(min) {}

  /// How long to sleep before the next attempt. holder_pttl < 0 means "unknown/no expiry".
  std::chrono::microseconds next(std::chrono::milliseconds holder_pttl, const deadline& d) {
    using std::chrono::microseconds;
    thread_local std::minstd_rand rng{std::random_device{}()};
    const auto ceiling = std::chrono::duration_cast<microseconds>(ceiling_);
    std::uniform_int_distribution<long long> pick(std::chrono::duration_cast<microseconds>(min_).count() / 2,
                                                  ceiling.count());
    microseconds wait{pick(rng)};
    ceiling_ = std::min(max_, ceiling_ * 2);
    // +1 ms: the key is gone when its PTTL has run out on the server, not a moment before.
    if (holder_pttl.count() >= 0) wait = std::min<microseconds>(wait, holder_pttl + std::chrono::milliseconds(1));
    if (d)
      wait = std::min(wait, std::max(microseconds(0), std::chrono::duration_cast<microseconds>(*d - steady::now())));
    return wait;
  }

 private:
  std::chrono::milliseconds min_, max_, ceiling_;
};

/// Sleeps for `d`, or less when this thread's cancellable call is cancelled meanwhile.
inline void sleep_unless_cancelled(steady::duration d) {
  if (current_cancellation() == nullptr) {
    std::this_thread::sleep_for(d);
    return;
  }
  std::mutex m;
  std::condition_variable cv;
  const cancel_hook cancelled([&] {
    std::lock_guard<std::mutex> g(m);
    cv.notify_all();
  });
  std::unique_lock<std::mutex> g(m);
  cv.wait_for(g, d, [&] { return cancelled.fired(); });
}

/// Calls attempt() until it succeeds or the deadline passes (or, when given, `pause` passes:
/// the caller then tries something else). A cancelled call (detail/cancellation.hpp) counts as
/// one whose deadline passed. attempt() returns nullopt when it acquired,
/// otherwise the holder's remaining lease (negative when unknown).
template <class Attempt>
bool retry_until(const deadline& d, std::chrono::milliseconds retry_min, std::chrono::milliseconds retry_max,
                 Attempt&& attempt, std::optional<steady::time_point> pause = std::nullopt) {
  backoff b(retry_min, retry_max);
  for (;;) {
    probe_attempted();
    std::optional<std::chrono::milliseconds> holder_pttl = attempt();
    if (!holder_pttl) return true;
    const steady::time_point now = steady::now();
    if ((d && now >= *d) || (pause && now >= *pause) || cancel_requested()) return false;
    std::chrono::nanoseconds sleep = b.next(*holder_pttl, d);
    if (pause) sleep = std::min(sleep, std::chrono::nanoseconds(*pause - now));
    sleep_unless_cancelled(sleep);
    if (cancel_requested()) return false;
    probe_woken(wake_cause::fallback);
  }
}

}  // namespace redislock::detail
