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
///
/// Observation (observe.hpp) is written here once too: every acquisition goes through
/// observed_acquire(), and each kind's unlock_and_report() starts with
/// `const auto observed = this->observe_release();` (observe_release_shared() for the read
/// side), which reports the release when the function returns or throws.

#include <redislock/cancel.hpp>
#include <redislock/detail/call_deadline.hpp>
#include <redislock/detail/cancellation.hpp>
#include <redislock/detail/observe_hooks.hpp>
#include <redislock/detail/wait.hpp>

#include <chrono>
#include <optional>

namespace redislock::detail {

/// A call given a cancel_token: false at once when it is cancelled already; else acquire()
/// with the token's state as this thread's cancellation (detail/cancellation.hpp: the waits
/// under it end as at a deadline). A hold that a hand-off raced onto the cancel is released
/// (release()) and the call returns false: a cancelled call holds nothing.
template <class Acquire, class Release>
bool run_cancellable(const cancel_token& cancel, Acquire&& acquire, Release&& release) {
  if (cancel.cancelled()) return false;
  bool acquired = false;
  {
    const cancel_scope scope(state_of(cancel));
    acquired = acquire();
  }
  if (acquired && cancel.cancelled()) {
    release();
    return false;
  }
  return acquired;
}

template <class Self>
class timed_lockable {
 public:
  /// Blocks until acquired. Throws connection_error / timeout_error when Redis cannot be
  /// reached (an attempt never hangs beyond the client's timeouts).
  void lock() {
    const cancel_scope uncancellable(nullptr);  // never cancelled, even within a cancellable call (an observer's)
    observed(true, [&] { return self().acquire(std::nullopt); });
  }

  /// One attempt, no waiting: true when acquired.
  /// The timed calls (try_lock, try_lock_for, try_lock_until) return by their deadline plus
  /// one connect timeout whatever the servers do: no retry of the client starts after the
  /// deadline, and each connect or command is cut to end by then (detail/call_deadline.hpp).
  /// A clean-up after the deadline (leaving the queue, releasing what the call may hold) has
  /// its own budget on top: call_deadline::cleanup_time plus one connect timeout.
  /// At the deadline they return false, or throw the error that kept them from finishing
  /// (connection_error, timeout_error).
  bool try_lock() { return uncancellable(steady::now(), false); }

  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return uncancellable(deadline_after(timeout), true);  // a huge timeout waits indefinitely
  }

  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& abs_time) {
    return uncancellable(deadline_at(abs_time), true);
  }

  /// As lock(), try_lock_for() and try_lock_until(), and another thread can end the wait with
  /// `cancel`'s source (cancel.hpp): then they leave the lock's queue, release a hold that a
  /// hand-off raced onto the cancel, and return false, holding nothing. A token cancelled
  /// already: false at once, nothing sent. true: acquired.
  [[nodiscard]] bool lock(const cancel_token& cancel) {
    return run_cancellable(
        cancel, [&] { return observed(true, [&] { return self().acquire(std::nullopt); }); }, [this] { unlock(); });
  }
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout, const cancel_token& cancel) {
    return run_cancellable(
        cancel, [&] { return timed_acquire(deadline_after(timeout), true); }, [this] { unlock(); });
  }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& abs_time, const cancel_token& cancel) {
    return run_cancellable(
        cancel, [&] { return timed_acquire(deadline_at(abs_time), true); }, [this] { unlock(); });
  }
#if defined(__cpp_lib_jthread)
  /// The same with a std::stop_token (C++20): a stop request cancels the wait.
  [[nodiscard]] bool lock(const std::stop_token& stop) {
    return with_stop_token(stop, [&](const cancel_token& cancel) { return lock(cancel); });
  }
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout, const std::stop_token& stop) {
    return with_stop_token(stop, [&](const cancel_token& cancel) { return try_lock_for(timeout, cancel); });
  }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& abs_time, const std::stop_token& stop) {
    return with_stop_token(stop, [&](const cancel_token& cancel) { return try_lock_until(abs_time, cancel); });
  }
#endif

  /// Releases the lock. Never throws (guards call it from destructors); the outcome is kept
  /// in last_release(): released, lease_expired (the critical section outlived its lease),
  /// not_held, or failed (Redis unreachable: the lease runs out on its own). Bounded by the
  /// client's budget of one call: client: pool_wait_timeout + connect_timeout +
  /// command_timeout; cluster_client: retry_timeout + connect_timeout (retry_timeout 0: as
  /// client); sentinel_client: its retries (sentinel_options::retries).
  /// Within a timed acquisition (min_replicas not met, a renewal that could not start) it is
  /// that call's clean-up: its own budget, not the call's deadline (detail/call_deadline.hpp).
  void unlock() noexcept {
    const call_deadline::cleanup_budget cleanup;
    try {
      self().unlock_and_report();
    } catch (...) {
      // unlock_and_report() has recorded release_status::failed and dropped the local hold.
    }
  }

 private:
  Self& self() { return static_cast<Self&>(*this); }
  const Self& self_const() const { return static_cast<const Self&>(*this); }
  // Every command of the call, its retries and reconnects included, ends by `d` plus one
  // connect timeout (detail/call_deadline.hpp).
  bool timed_acquire(const deadline& d, bool may_wait) {
    const call_deadline scope(d);
    return observed(may_wait, [&] { return self().acquire(d); });
  }
  // A call without a token, also within a cancellable one (an observer's): never cancelled.
  bool uncancellable(const deadline& d, bool may_wait) {
    const cancel_scope none(nullptr);
    return timed_acquire(d, may_wait);
  }
  template <class Acquire>
  bool observed(bool may_wait, Acquire&& acquire) {
    return observed_acquire(self(), lock_mode::exclusive, may_wait, acquire, [this] { return held_since_.began(); });
  }

 protected:
  /// The release probe of the exclusive side (see above).
  auto observe_release() noexcept {
    const Self& me = self();
    return release_probe(
        me, lock_mode::exclusive, current_observer() != nullptr || held_since_.running(),
        [](const Self& s) { return s.owns_lock(); }, [this](bool ended) { return held_since_.release(ended); });
  }
  /// Reports the current exclusive hold's newly drawn fencing token (observe.hpp: fenced_event).
  void observe_fenced(std::uint64_t token) const noexcept {
    if (current_observer() == nullptr) return;
    report_fenced(describe(self_const(), lock_mode::exclusive), token, held_since_.id());
  }

 private:
  hold_clock held_since_;
};

template <class Self>
class shared_timed_lockable {
 public:
  void lock_shared() {
    const cancel_scope uncancellable(nullptr);  // as timed_lockable::lock()
    observed(true, [&] { return self().acquire_shared(std::nullopt); });
  }
  bool try_lock_shared() { return uncancellable_shared(steady::now(), false); }

  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout) {
    return uncancellable_shared(deadline_after(timeout), true);
  }

  template <class Clock, class Duration>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& abs_time) {
    return uncancellable_shared(deadline_at(abs_time), true);
  }

  /// The shared side's cancellable calls, as timed_lockable's.
  [[nodiscard]] bool lock_shared(const cancel_token& cancel) {
    return run_cancellable(
        cancel, [&] { return observed(true, [&] { return self().acquire_shared(std::nullopt); }); },
        [this] { unlock_shared(); });
  }
  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout, const cancel_token& cancel) {
    return run_cancellable(
        cancel, [&] { return timed_acquire_shared(deadline_after(timeout), true); }, [this] { unlock_shared(); });
  }
  template <class Clock, class Duration>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& abs_time, const cancel_token& cancel) {
    return run_cancellable(
        cancel, [&] { return timed_acquire_shared(deadline_at(abs_time), true); }, [this] { unlock_shared(); });
  }
#if defined(__cpp_lib_jthread)
  [[nodiscard]] bool lock_shared(const std::stop_token& stop) {
    return with_stop_token(stop, [&](const cancel_token& cancel) { return lock_shared(cancel); });
  }
  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout, const std::stop_token& stop) {
    return with_stop_token(stop, [&](const cancel_token& cancel) { return try_lock_shared_for(timeout, cancel); });
  }
  template <class Clock, class Duration>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& abs_time, const std::stop_token& stop) {
    return with_stop_token(stop, [&](const cancel_token& cancel) { return try_lock_shared_until(abs_time, cancel); });
  }
#endif

  /// Drops one shared hold. Never throws; the outcome is kept in last_release(). Within a
  /// timed acquisition it is that call's clean-up, as unlock().
  void unlock_shared() noexcept {
    const call_deadline::cleanup_budget cleanup;
    try {
      self().unlock_shared_and_report();
    } catch (...) {
    }
  }

 private:
  Self& self() { return static_cast<Self&>(*this); }
  bool timed_acquire_shared(const deadline& d, bool may_wait) {  // as timed_lockable::timed_acquire
    const call_deadline scope(d);
    return observed(may_wait, [&] { return self().acquire_shared(d); });
  }
  bool uncancellable_shared(const deadline& d, bool may_wait) {
    const cancel_scope none(nullptr);
    return timed_acquire_shared(d, may_wait);
  }
  template <class Acquire>
  bool observed(bool may_wait, Acquire&& acquire) {
    return observed_acquire(self(), lock_mode::shared, may_wait, acquire, [this] {
      auto [it, fresh] = shared_holds().try_emplace(this);  // a nested read keeps the outermost's
      if (fresh) it->second = {std::chrono::steady_clock::now().time_since_epoch().count(), next_hold_id()};
      return it->second.id;
    });
  }

 protected:
  /// The release probe of the shared side: read holds are per thread, so is their clock.
  auto observe_release_shared() noexcept {
    const Self& me = self();
    return release_probe(
        me, lock_mode::shared, current_observer() != nullptr || !shared_holds().empty(),
        [](const Self& s) { return s.owns_shared(); },
        [this](bool ended) {
          auto& holds = shared_holds();
          const auto it = holds.find(this);
          if (it == holds.end()) return hold_report{};
          const hold_report r{elapsed_since(it->second.since), it->second.id};
          if (ended) holds.erase(it);
          return r;
        });
  }
  /// Reports the calling thread's read hold's newly drawn fencing token.
  void observe_fenced_shared(std::uint64_t token) const noexcept {
    if (current_observer() == nullptr) return;
    const auto& holds = shared_holds();
    const auto it = holds.find(this);
    report_fenced(describe(static_cast<const Self&>(*this), lock_mode::shared), token,
                  it == holds.end() ? 0 : it->second.id);
  }
};

}  // namespace redislock::detail
