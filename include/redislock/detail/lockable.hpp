#pragma once
/// @file detail/lockable.hpp
/// @brief The standard Lockable / TimedLockable (and shared) member functions, written once.
///
/// A lock class derives from timed_lockable<Self> (and shared_timed_lockable<Self>) and
/// provides options(), acquire(deadline, lease) / unlock_and_report() (and acquire_shared /
/// unlock_shared_and_report()): acquire returns true when it got the lock before the deadline
/// (none: wait forever) for a hold of `lease` (options().lease unless the call gave one; the
/// kind checks it with checked_hold_lease), unlock_and_report returns a release_status and may
/// throw. acquire may be private if the mixin is a friend. unlock() and unlock_shared() are
/// the noexcept wrappers of the reporting ones, written here once for every kind.
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
  void lock() { lock(default_lease()); }

  /// As lock(), try_lock_for() and try_lock_until(), with `lease` for this hold instead of
  /// options().lease: the acquisition (a hand-off too) sets it, auto_renew renews to it and
  /// extend() without an argument extends to it, until the release; the next acquisition
  /// starts from options().lease again. Checked as options().lease is (in (0, max_lease];
  /// longer than replica_timeout with min_replicas; a Redlock's longer than instance_timeout +
  /// drift): invalid_argument before anything is sent. Whole milliseconds: a finer duration
  /// does not compile.
  template <class Rep, class Period>
  void lock(const std::chrono::duration<Rep, Period>& lease) {
    const cancel_scope uncancellable(nullptr);  // never cancelled, even within a cancellable call (an observer's)
    observed(true, [&] { return self().acquire(std::nullopt, std::chrono::milliseconds(lease)); });
  }
  template <class Rep, class Period, class LeaseRep, class LeasePeriod>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout,
                    const std::chrono::duration<LeaseRep, LeasePeriod>& lease) {
    return uncancellable(deadline_after(timeout), true, std::chrono::milliseconds(lease));
  }
  template <class Clock, class Duration, class LeaseRep, class LeasePeriod>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& abs_time,
                      const std::chrono::duration<LeaseRep, LeasePeriod>& lease) {
    return uncancellable(deadline_at(abs_time), true, std::chrono::milliseconds(lease));
  }

  /// One attempt, no waiting: true when acquired.
  /// The timed calls (try_lock, try_lock_for, try_lock_until) return by their deadline plus
  /// one connect timeout whatever the servers do: no retry of the client starts after the
  /// deadline, and each connect or command is cut to end by then (detail/call_deadline.hpp).
  /// A clean-up after the deadline (leaving the queue, releasing what the call may hold) has
  /// its own budget on top: call_deadline::cleanup_time plus one connect timeout.
  /// At the deadline they return false, or throw the error that kept them from finishing
  /// (connection_error, timeout_error).
  bool try_lock() { return uncancellable(steady::now(), false, default_lease()); }

  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return uncancellable(deadline_after(timeout), true, default_lease());  // a huge timeout waits indefinitely
  }

  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& abs_time) {
    return uncancellable(deadline_at(abs_time), true, default_lease());
  }

  /// As lock(), try_lock_for() and try_lock_until(), and another thread can end the wait with
  /// `cancel`'s source (cancel.hpp): then they leave the lock's queue, release a hold that a
  /// hand-off raced onto the cancel, and return false, holding nothing. A token cancelled
  /// already: false at once, nothing sent. true: acquired.
  [[nodiscard]] bool lock(const cancel_token& cancel) {
    return run_cancellable(
        cancel, [&] { return observed(true, [&] { return self().acquire(std::nullopt, default_lease()); }); },
        [this] { unlock(); });
  }
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout, const cancel_token& cancel) {
    return run_cancellable(
        cancel, [&] { return timed_acquire(deadline_after(timeout), true, default_lease()); }, [this] { unlock(); });
  }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& abs_time, const cancel_token& cancel) {
    return run_cancellable(
        cancel, [&] { return timed_acquire(deadline_at(abs_time), true, default_lease()); }, [this] { unlock(); });
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
  std::chrono::milliseconds default_lease() const { return self_const().options().lease; }
  // Every command of the call, its retries and reconnects included, ends by `d` plus one
  // connect timeout (detail/call_deadline.hpp).
  bool timed_acquire(const deadline& d, bool may_wait, std::chrono::milliseconds lease) {
    const call_deadline scope(d);
    return observed(may_wait, [&] { return self().acquire(d, lease); });
  }
  // A call without a token, also within a cancellable one (an observer's): never cancelled.
  bool uncancellable(const deadline& d, bool may_wait, std::chrono::milliseconds lease) {
    const cancel_scope none(nullptr);
    return timed_acquire(d, may_wait, lease);
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
  void lock_shared() { lock_shared(default_lease()); }
  bool try_lock_shared() { return uncancellable_shared(steady::now(), false, default_lease()); }

  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout) {
    return uncancellable_shared(deadline_after(timeout), true, default_lease());
  }

  template <class Clock, class Duration>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& abs_time) {
    return uncancellable_shared(deadline_at(abs_time), true, default_lease());
  }

  /// The shared side's calls with a lease for this hold, as timed_lockable's.
  template <class Rep, class Period>
  void lock_shared(const std::chrono::duration<Rep, Period>& lease) {
    const cancel_scope uncancellable(nullptr);  // as timed_lockable::lock()
    observed(true, [&] { return self().acquire_shared(std::nullopt, std::chrono::milliseconds(lease)); });
  }
  template <class Rep, class Period, class LeaseRep, class LeasePeriod>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout,
                           const std::chrono::duration<LeaseRep, LeasePeriod>& lease) {
    return uncancellable_shared(deadline_after(timeout), true, std::chrono::milliseconds(lease));
  }
  template <class Clock, class Duration, class LeaseRep, class LeasePeriod>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& abs_time,
                             const std::chrono::duration<LeaseRep, LeasePeriod>& lease) {
    return uncancellable_shared(deadline_at(abs_time), true, std::chrono::milliseconds(lease));
  }

  /// The shared side's cancellable calls, as timed_lockable's.
  [[nodiscard]] bool lock_shared(const cancel_token& cancel) {
    return run_cancellable(
        cancel, [&] { return observed(true, [&] { return self().acquire_shared(std::nullopt, default_lease()); }); },
        [this] { unlock_shared(); });
  }
  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout, const cancel_token& cancel) {
    return run_cancellable(
        cancel, [&] { return timed_acquire_shared(deadline_after(timeout), true, default_lease()); },
        [this] { unlock_shared(); });
  }
  template <class Clock, class Duration>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& abs_time, const cancel_token& cancel) {
    return run_cancellable(
        cancel, [&] { return timed_acquire_shared(deadline_at(abs_time), true, default_lease()); },
        [this] { unlock_shared(); });
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
  std::chrono::milliseconds default_lease() const { return static_cast<const Self&>(*this).options().lease; }
  // As timed_lockable::timed_acquire.
  bool timed_acquire_shared(const deadline& d, bool may_wait, std::chrono::milliseconds lease) {
    const call_deadline scope(d);
    return observed(may_wait, [&] { return self().acquire_shared(d, lease); });
  }
  bool uncancellable_shared(const deadline& d, bool may_wait, std::chrono::milliseconds lease) {
    const cancel_scope none(nullptr);
    return timed_acquire_shared(d, may_wait, lease);
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
