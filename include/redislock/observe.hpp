#pragma once
/// @file observe.hpp
/// @brief Observing locks: an observer a program installs once per process, told of every
/// acquisition, release, renewal, lost lease, wake-up and reconnect of every lock kind.
///
///     struct my_observer : redislock::lock_observer {
///       void on_acquired(const redislock::acquired_event& e) override { ... }
///     };
///     redislock::set_observer(std::make_shared<my_observer>());
///
/// Nothing is measured while no observer is installed (each hook is one atomic load and a
/// null check). Ready-made observers: observe/prometheus.hpp (metrics in the Prometheus text
/// format); examples/observe_tracer.cpp forwards the events to a tracer (OpenTelemetry).
///
/// Contract (docs/observability.md lists each event with the thread it is called on):
///  - Events are called synchronously on the thread where they happen: the acquiring or
///    releasing thread, the client's watchdog thread (renewals, leases it finds lost), the
///    thread whose command found the connection broken (reconnects). Observers must be fast
///    (no I/O, no blocking) and thread-safe: events of different locks arrive concurrently.
///  - An exception thrown by an observer is caught and dropped: it never changes the lock's
///    outcome nor reaches the caller.
///  - The string_views in an event are valid only during the call: copy what you keep.
///  - An observer must not use the lock that calls it (no lock, unlock, extend from an event).

#include <redislock/lock_options.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

namespace redislock {

/// The lock kinds, as observers tell them apart (fair_mutex: a mutex with lock_options::fair).
enum class lock_type { mutex, fair_mutex, reentrant_mutex, shared_mutex, redlock, semaphore, election };
/// How many lock_type values there are.
inline constexpr std::size_t kLockTypes = 7;
static_assert(static_cast<std::size_t>(lock_type::election) + 1 == kLockTypes, "kLockTypes counts every lock_type");
/// Which side of a lock an event is about: every kind but shared_mutex's read side is exclusive.
enum class lock_mode { exclusive, shared };
/// How an acquisition got the lock: its own attempt found it free (direct), or a release
/// handed it over and told the waiter on its channel (handoff: no attempt needed).
enum class acquire_path { direct, handoff };
/// Why an acquisition ended without the lock: its deadline passed (timeout, including a
/// try_lock() that found the lock held) or it threw (error; the exception reached the caller).
enum class not_acquired_reason { timeout, error };
/// What ended a waiter's sleep: a release notice on its channel (notice), the end of the
/// holder's lease or the re-check interval (timer), or the jittered backoff used when it could
/// not subscribe (fallback; redlock always waits this way).
enum class wake_cause { notice, timer, fallback };

inline const char* to_string(lock_type k) noexcept {
  switch (k) {
    case lock_type::mutex: return "mutex";
    case lock_type::fair_mutex: return "fair_mutex";
    case lock_type::reentrant_mutex: return "reentrant_mutex";
    case lock_type::shared_mutex: return "shared_mutex";
    case lock_type::redlock: return "redlock";
    case lock_type::semaphore: return "semaphore";
    case lock_type::election: return "election";
  }
  return "unknown";
}
inline const char* to_string(lock_mode m) noexcept { return m == lock_mode::shared ? "shared" : "exclusive"; }
inline const char* to_string(acquire_path p) noexcept { return p == acquire_path::handoff ? "handoff" : "direct"; }
inline const char* to_string(not_acquired_reason r) noexcept {
  return r == not_acquired_reason::error ? "error" : "timeout";
}
inline const char* to_string(wake_cause c) noexcept {
  switch (c) {
    case wake_cause::notice: return "notice";
    case wake_cause::timer: return "timer";
    case wake_cause::fallback: return "fallback";
  }
  return "unknown";
}

/// What every lock event names: the lock (its name as given to the constructor), its kind and
/// the side.
struct lock_event {
  std::string_view name;
  lock_type kind = lock_type::mutex;
  lock_mode mode = lock_mode::exclusive;
};

/// An acquisition began: lock(), try_lock*(), lock_shared(), try_lock_shared*().
struct attempt_event : lock_event {
  bool may_wait = true;  ///< false for try_lock() / try_lock_shared() (one attempt, no waiting)
};

/// An acquisition got the lock. Paired with the attempt_event of the same call.
struct acquired_event : lock_event {
  std::chrono::nanoseconds wait{0};  ///< from the call to the lock being ours
  std::uint32_t attempts = 0;        ///< commands or scripts sent to try (a hand-off needs none after it)
  acquire_path path = acquire_path::direct;
  /// The hold's number, unique in the process: its released_event carries the same (a nested
  /// hold gets its owner's outermost hold's). Pairs the two even when another holder's
  /// acquisition is reported between them (a hand-off may be reported before the release).
  std::uint64_t hold = 0;
};

/// An acquisition ended without the lock. Paired with the attempt_event of the same call.
struct not_acquired_event : lock_event {
  std::chrono::nanoseconds wait{0};
  std::uint32_t attempts = 0;
  not_acquired_reason reason = not_acquired_reason::timeout;
  std::string_view error;  ///< the exception's what() when reason is error
};

/// A release: unlock(), unlock_shared() or their _and_report forms, the destructor's too.
/// Not sent when the object held nothing (release_status::not_held).
struct released_event : lock_event {
  std::chrono::nanoseconds held{0};  ///< since the acquisition this release ends (the owner's
                                     ///< outermost one for nested holds); 0 when unknown
  release_status status = release_status::released;
  bool nested = false;     ///< a nested hold ended; the owner still holds the lock
  std::uint64_t hold = 0;  ///< the acquired_event's hold number (0: acquired while no observer was installed)
};

/// A hold drew its fencing token: the first fencing_token() of the hold,
/// once per hold (later calls return the kept token and send nothing). The token that guards
/// the hold's writes downstream, so that a log can tie a rejected write to the hold behind it.
struct fenced_event : lock_event {
  std::uint64_t token = 0;
  std::uint64_t hold = 0;  ///< the acquired_event's hold number (0: acquired while no observer was installed)
};

/// A waiter's sleep ended (it attempts again, or the notice itself handed it the lock).
struct woken_event : lock_event {
  wake_cause cause = wake_cause::notice;
};

/// The client's watchdog renewed a batch of leases (one tick's pipelines), or a redlock renewed
/// its lease on its masters (batch of 1).
struct renewed_event {
  std::size_t batch = 0;                ///< renewals sent
  std::size_t renewed = 0;              ///< of those, confirmed (the rest failed or found the lease gone)
  std::chrono::nanoseconds latency{0};  ///< from the first send to the last reply
};

/// A hold's lease was found lost (once per hold), by whoever noticed first: the watchdog, an
/// extend() or fencing_token() that found it gone, the clock (lost()), or the release.
struct lost_event : lock_event {
  /// How long before the lease's end (as the client knew it: the last confirmed send plus the
  /// lease) the loss was noticed; negative when noticed after it; 0 when the hold was granted
  /// while no observer was installed (its start was not taken).
  std::chrono::nanoseconds before_end{0};
};

/// A connection that had failed was established again.
struct reconnected_event {
  std::string_view endpoint;             ///< host:port (or unix socket path)
  std::chrono::nanoseconds down_for{0};  ///< from the failure (or the first reconnect try) to now
};

/// A Sentinel client moved to a new master, or a Cluster client's slot map shows a master's
/// slots all taken over by a node that had none (its replica, promoted): a failover.
struct failover_event {
  std::string_view topology;                 ///< "sentinel" or "cluster"
  std::string_view from, to;                 ///< the old and the new master (host:port)
  std::chrono::nanoseconds recovered_in{0};  ///< from the first failure seen on the old master to now
                                             ///< (0 when the switch came without one)
};

/// Receives lock events. Every member has an empty default: override what you need.
class lock_observer {
 public:
  virtual ~lock_observer() = default;
  virtual void on_attempt(const attempt_event&) {}
  virtual void on_acquired(const acquired_event&) {}
  virtual void on_not_acquired(const not_acquired_event&) {}
  virtual void on_released(const released_event&) {}
  virtual void on_fenced(const fenced_event&) {}
  virtual void on_woken(const woken_event&) {}
  virtual void on_renewed(const renewed_event&) {}
  virtual void on_lost(const lost_event&) {}
  virtual void on_reconnected(const reconnected_event&) {}
  virtual void on_failover(const failover_event&) {}
};

namespace detail {
/// The installed observer (nullptr: none). Read by every hook: one atomic load.
inline std::atomic<lock_observer*> installed_observer{nullptr};
}  // namespace detail

/// Installs `o` for the whole process (nullptr: none); returns the one it replaces. An observer
/// once installed is kept alive until the process exits, so an event in flight on another
/// thread while it is replaced still reaches a live object.
inline std::shared_ptr<lock_observer> set_observer(std::shared_ptr<lock_observer> o) {
  static std::mutex m;
  static std::vector<std::shared_ptr<lock_observer>> kept;  // every observer ever installed
  std::lock_guard<std::mutex> g(m);
  std::shared_ptr<lock_observer> previous;
  for (const auto& k : kept)
    if (k.get() == detail::installed_observer.load()) previous = k;
  if (o && std::find(kept.begin(), kept.end(), o) == kept.end()) kept.push_back(o);
  detail::installed_observer.store(o.get(), std::memory_order_release);
  return previous;
}

/// The installed observer, or nullptr.
inline lock_observer* current_observer() noexcept { return detail::installed_observer.load(std::memory_order_acquire); }

}  // namespace redislock
