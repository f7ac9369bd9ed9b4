#pragma once
/// @file detail/observe_hooks.hpp
/// @brief Where the lock code tells the installed observer (observe.hpp) what happened. Every
/// hook starts with one atomic load of the observer and does nothing more without one.
///
///  - acquisition_probe: one per observed acquisition (lockable.hpp), current on the acquiring
///    thread while it runs, so that the wait loops (wake_wait.hpp, wait.hpp) count attempts,
///    hand-offs and wake-ups without knowing which lock they serve;
///  - hold_clock: when the current exclusive hold of an object began and its number (for the
///    release's hold time); shared holds are per thread (shared_holds);
///  - notify(): calls the observer, swallowing what it throws.

#include <redislock/observe.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <unordered_map>
#include <utility>

namespace redislock {
template <class Client>
class basic_mutex;
template <class Client>
class basic_reentrant_mutex;
template <class Client>
class basic_shared_mutex;
template <class Client>
class basic_redlock;
template <class Client>
class basic_semaphore;
template <class Client>
class basic_election;
}  // namespace redislock

namespace redislock::detail {

/// Calls f(observer) when one is installed; an exception from the observer is dropped.
template <class F>
void notify(F&& f) noexcept {
  lock_observer* o = current_observer();
  if (o == nullptr) return;
  try {
    f(*o);
  } catch (...) {  // an observer never changes the lock's outcome
  }
}

template <class Lock>
struct kind_of;
template <class C>
struct kind_of<basic_mutex<C>> {
  static lock_type of(const basic_mutex<C>& m) noexcept {
    return m.options().fair ? lock_type::fair_mutex : lock_type::mutex;
  }
};
template <class C>
struct kind_of<basic_reentrant_mutex<C>> {
  static lock_type of(const basic_reentrant_mutex<C>&) noexcept { return lock_type::reentrant_mutex; }
};
template <class C>
struct kind_of<basic_shared_mutex<C>> {
  static lock_type of(const basic_shared_mutex<C>&) noexcept { return lock_type::shared_mutex; }
};
template <class C>
struct kind_of<basic_redlock<C>> {
  static lock_type of(const basic_redlock<C>&) noexcept { return lock_type::redlock; }
};
template <class C>
struct kind_of<basic_semaphore<C>> {
  static lock_type of(const basic_semaphore<C>&) noexcept { return lock_type::semaphore; }
};
template <class C>
struct kind_of<basic_election<C>> {
  static lock_type of(const basic_election<C>&) noexcept { return lock_type::election; }
};

/// The event fields that name `lock` and its side.
template <class Lock>
lock_event describe(const Lock& lock, lock_mode mode) noexcept {
  lock_event e;
  e.name = lock.name();
  e.kind = kind_of<Lock>::of(lock);
  e.mode = mode;
  return e;
}

/// One observed acquisition: current on its thread from the attempt_event to its outcome.
class acquisition_probe {
 public:
  acquisition_probe(lock_observer& o, const void* lock, lock_event what, bool may_wait)
      : observer_(o), lock_(lock), what_(what), started_(std::chrono::steady_clock::now()), outer_(current()) {
    current() = this;
    attempt_event e;
    static_cast<lock_event&>(e) = what_;
    e.may_wait = may_wait;
    call([&] { observer_.on_attempt(e); });
  }
  ~acquisition_probe() { current() = outer_; }
  acquisition_probe(const acquisition_probe&) = delete;
  acquisition_probe& operator=(const acquisition_probe&) = delete;

  /// The probe of the acquisition running on this thread, or nullptr.
  static acquisition_probe*& current() noexcept {
    thread_local acquisition_probe* p = nullptr;
    return p;
  }
  /// True while an acquisition of `lock` runs on this thread (a release it makes on failing is
  /// part of that acquisition, not a hold of the caller's).
  static bool acquiring(const void* lock) noexcept {
    for (acquisition_probe* p = current(); p != nullptr; p = p->outer_)
      if (p->lock_ == lock) return true;
    return false;
  }

  void attempted() noexcept { ++attempts_; }
  void handed_over() noexcept { handoff_ = true; }
  void woken(wake_cause cause) noexcept {
    woken_event e;
    static_cast<lock_event&>(e) = what_;
    e.cause = cause;
    call([&] { observer_.on_woken(e); });
  }

  void acquired(std::uint64_t hold) noexcept {
    acquired_event e;
    static_cast<lock_event&>(e) = what_;
    e.hold = hold;
    e.wait = elapsed();
    e.attempts = attempts_;
    e.path = handoff_ ? acquire_path::handoff : acquire_path::direct;
    call([&] { observer_.on_acquired(e); });
  }
  void not_acquired(not_acquired_reason reason, const char* error) noexcept {
    not_acquired_event e;
    static_cast<lock_event&>(e) = what_;
    e.wait = elapsed();
    e.attempts = attempts_;
    e.reason = reason;
    if (error != nullptr) e.error = error;
    call([&] { observer_.on_not_acquired(e); });
  }

 private:
  std::chrono::nanoseconds elapsed() const noexcept { return std::chrono::steady_clock::now() - started_; }
  template <class F>
  static void call(F&& f) noexcept {
    try {
      f();
    } catch (...) {
    }
  }

  lock_observer& observer_;
  const void* lock_;
  lock_event what_;
  std::chrono::steady_clock::time_point started_;
  acquisition_probe* outer_;
  std::uint32_t attempts_ = 0;
  bool handoff_ = false;
};

// The wait loops' hooks: no-ops unless an observed acquisition runs on this thread.
inline void probe_attempted() noexcept {
  if (acquisition_probe* p = acquisition_probe::current()) p->attempted();
}
inline void probe_handed_over() noexcept {
  if (acquisition_probe* p = acquisition_probe::current()) p->handed_over();
}
inline void probe_woken(wake_cause cause) noexcept {
  if (acquisition_probe* p = acquisition_probe::current()) p->woken(cause);
}

/// Runs acquire() (returns bool) as one observed acquisition of `lock`'s `mode` side; on
/// success calls began() (starts the hold clock, returns the hold's number). Without an
/// observer just runs acquire().
template <class Lock, class Acquire, class Began>
bool observed_acquire(const Lock& lock, lock_mode mode, bool may_wait, Acquire&& acquire, Began&& began) {
  lock_observer* o = current_observer();
  if (o == nullptr) return acquire();
  acquisition_probe probe(*o, &lock, describe(lock, mode), may_wait);
  bool ok = false;
  try {
    ok = acquire();
  } catch (const std::exception& e) {
    probe.not_acquired(not_acquired_reason::error, e.what());
    throw;
  } catch (...) {
    probe.not_acquired(not_acquired_reason::error, "unknown exception");
    throw;
  }
  if (ok) {
    std::uint64_t hold = 0;
    try {
      hold = began();
    } catch (...) {  // no memory for the hold's clock: its release reports no hold time
    }
    probe.acquired(hold);
  } else {
    probe.not_acquired(not_acquired_reason::timeout, nullptr);
  }
  return ok;
}

using clock_ticks = std::chrono::steady_clock::rep;

/// Reports a hold's lost lease once per hold, whoever notices first. reset() when a hold begins.
class lost_reporter {
 public:
  void reset() noexcept { reported_.store(false, std::memory_order_relaxed); }
  /// `end`: the lease's end as the client knows it (nullopt: unknown, reported as 0).
  void note(const lock_event& what, std::optional<std::chrono::steady_clock::time_point> end) noexcept {
    if (current_observer() == nullptr || reported_.exchange(true)) return;
    const std::chrono::nanoseconds before_end =
        end ? *end - std::chrono::steady_clock::now() : std::chrono::nanoseconds(0);
    notify([&](lock_observer& o) {
      lost_event e;
      static_cast<lock_event&>(e) = what;
      e.before_end = before_end;
      o.on_lost(e);
    });
  }

 private:
  std::atomic<bool> reported_{false};
};

/// A new hold's number (released_event::hold), unique in the process.
inline std::uint64_t next_hold_id() noexcept {
  static std::atomic<std::uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

/// What a release reports of its hold: how long it lasted and its number (0: not observed).
struct hold_report {
  std::chrono::nanoseconds held{0};
  std::uint64_t id = 0;
};

inline std::chrono::nanoseconds elapsed_since(clock_ticks since) noexcept {
  return std::chrono::steady_clock::now() -
         std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(since));
}

/// When the current exclusive hold of one lock object began, and its number (0: not
/// observed). One owner at a time holds the exclusive side, so one value serves nested holds
/// (the outermost's).
class hold_clock {
 public:
  /// Starts the clock unless it runs (a nested hold); returns the hold's number.
  std::uint64_t began() noexcept {
    clock_ticks none = 0;
    if (since_.compare_exchange_strong(none, std::chrono::steady_clock::now().time_since_epoch().count()))
      id_.store(next_hold_id(), std::memory_order_relaxed);
    return id_.load(std::memory_order_relaxed);
  }
  /// The report of a release; `ended`: the owner holds nothing any more (the clock stops).
  hold_report release(bool ended) noexcept {
    hold_report r;
    r.id = id_.load(std::memory_order_relaxed);
    const clock_ticks since = ended ? since_.exchange(0) : since_.load();
    if (since != 0) r.held = elapsed_since(since);
    else r.id = 0;
    return r;
  }
  bool running() const noexcept { return since_.load(std::memory_order_relaxed) != 0; }
  /// The running hold's number (0: none, or not observed).
  std::uint64_t id() const noexcept { return running() ? id_.load(std::memory_order_relaxed) : 0; }

 private:
  std::atomic<clock_ticks> since_{0};
  std::atomic<std::uint64_t> id_{0};
};

/// The calling thread's shared holds of each lock object: when each began and its number
/// (per thread: a read hold is its thread's).
struct shared_hold {
  clock_ticks since = 0;
  std::uint64_t id = 0;
};
inline std::unordered_map<const void*, shared_hold>& shared_holds() {
  thread_local std::unordered_map<const void*, shared_hold> holds;
  return holds;
}

/// Reports a hold's newly drawn fencing token.
inline void report_fenced(const lock_event& what, std::uint64_t token, std::uint64_t hold) noexcept {
  notify([&](lock_observer& o) {
    fenced_event e;
    static_cast<lock_event&>(e) = what;
    e.token = token;
    e.hold = hold;
    o.on_fenced(e);
  });
}

/// The release status this thread recorded last (lock_core's record()): the outcome of the
/// release running on it, whatever other threads release meanwhile.
inline release_status& release_recorded_here() noexcept {
  thread_local release_status s = release_status::not_held;
  return s;
}

/// One observed release, made at the start of a kind's unlock_and_report(): reports the
/// outcome when it goes out of scope (the kind recorded it with record(), on this thread, also
/// when it throws). Nothing without an observer, when nothing was held, or during an acquisition of
/// the same lock (a hold it could not keep is part of that acquisition's outcome).
/// still_held(lock) tells whether the caller still holds this side afterwards (nested);
/// hold_time(ended) returns the hold_report and stops the clock when ended.
template <class Lock, class StillHeld, class HoldTime>
class release_probe {
 public:
  /// watched: an observer is installed or a hold clock of this side runs (it must stop).
  release_probe(const Lock& lock, lock_mode mode, bool watched, StillHeld still_held, HoldTime hold_time) noexcept
      : lock_(lock), mode_(mode), still_held_(std::move(still_held)), hold_time_(std::move(hold_time)) {
    active_ = watched && still_held_(lock) && !acquisition_probe::acquiring(&lock);
    if (active_) release_recorded_here() = release_status::failed;  // until the kind records its outcome
  }
  ~release_probe() {
    if (!active_) return;
    const bool nested = still_held_(lock_);
    const hold_report hold = hold_time_(!nested);
    notify([&](lock_observer& o) {
      released_event e;
      static_cast<lock_event&>(e) = describe(lock_, mode_);
      e.held = hold.held;
      e.hold = hold.id;
      e.status = release_recorded_here();
      e.nested = nested;
      o.on_released(e);
    });
  }
  release_probe(const release_probe&) = delete;
  release_probe& operator=(const release_probe&) = delete;

 private:
  const Lock& lock_;
  lock_mode mode_;
  StillHeld still_held_;
  HoldTime hold_time_;
  bool active_ = false;
};

}  // namespace redislock::detail
