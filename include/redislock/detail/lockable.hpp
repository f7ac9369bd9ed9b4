#pragma once
/// @file detail/lockable.hpp
/// @brief The standard Lockable / TimedLockable (and shared) member functions, written once.
///
/// A lock class derives from timed_lockable<Self> (and shared_timed_lockable<Self>) and
/// provides acquire(deadline) / unlock_and_report() (and acquire_shared /
/// unlock_shared_and_report()): acquire returns true when it got the lock before the deadline
/// (none: wait forever), unlock_and_report returns a release_status and may throw. acquire
/// may be private if the mixin is a friend. unlock() and unlock_shared() are the noexcept
/// wrappers of the reporting ones, written here once for every kind.

#include <redislock/detail/call_deadline.hpp>
#include <redislock/detail/wait.hpp>

#include <chrono>
#include <optional>

namespace redislock::detail {

template <class Self>
class timed_lockable {
 public:
  /// Blocks until acquired. Throws connection_error / timeout_error when Redis cannot be
  /// reached (an attempt never hangs beyond the client's timeouts).
  void lock() { self().acquire(std::nullopt); }

  /// One attempt, no waiting: true when acquired.
  /// The timed calls (try_lock, try_lock_for, try_lock_until) return by their deadline plus
  /// one connect timeout whatever the servers do: no retry of the client starts after the
  /// deadline, and each connect or command is cut to end by then (detail/call_deadline.hpp).
  /// At the deadline they return false, or throw the error that kept them from finishing
  /// (connection_error, timeout_error).
  bool try_lock() { return timed_acquire(steady::now()); }

  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return timed_acquire(deadline_after(timeout));  // a huge timeout waits indefinitely
  }

  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return timed_acquire(deadline_at(deadline));
  }

  /// Releases the lock. Never throws (guards call it from destructors); the outcome is kept
  /// in last_release(): released, lease_expired (the critical section outlived its lease),
  /// not_held, or failed (Redis unreachable: the lease runs out on its own). Bounded by the
  /// client's budget of one call: client: pool_wait_timeout + connect_timeout +
  /// command_timeout; cluster_client: retry_timeout + connect_timeout (retry_timeout 0: as
  /// client); sentinel_client: its retries (sentinel_options::retries).
  void unlock() noexcept {
    try {
      self().unlock_and_report();
    } catch (...) {
      // unlock_and_report() has recorded release_status::failed and dropped the local hold.
    }
  }

 private:
  Self& self() { return static_cast<Self&>(*this); }
  // Every command of the call, its retries and reconnects included, ends by `d` plus one
  // connect timeout (detail/call_deadline.hpp).
  bool timed_acquire(const deadline& d) {
    const call_deadline scope(d);
    return self().acquire(d);
  }
};

template <class Self>
class shared_timed_lockable {
 public:
  void lock_shared() { self().acquire_shared(std::nullopt); }
  bool try_lock_shared() { return timed_acquire_shared(steady::now()); }

  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout) {
    return timed_acquire_shared(deadline_after(timeout));
  }

  template <class Clock, class Duration>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return timed_acquire_shared(deadline_at(deadline));
  }

  /// Drops one shared hold. Never throws; the outcome is kept in last_release().
  void unlock_shared() noexcept {
    try {
      self().unlock_shared_and_report();
    } catch (...) {
    }
  }

 private:
  Self& self() { return static_cast<Self&>(*this); }
  bool timed_acquire_shared(const deadline& d) {  // as timed_lockable::timed_acquire
    const call_deadline scope(d);
    return self().acquire_shared(d);
  }
};

}  // namespace redislock::detail
