#pragma once
/// @file with_lock.hpp
/// @brief redislock::with_lock — run a function under a lock, with a scope that knows when the
/// lock may be lost.
///
///   redislock::mutex m(client, "nightly-report", renewed);  // lock_options::auto_renew
///   redislock::with_lock(m, [&](const redislock::hold_scope& s) {
///     for (const auto& part : parts) {
///       if (s.lost()) return;                 // stop writing: the lease may be gone
///       store.write(part, s.fencing_token()); // the token guards the write downstream
///     }
///   });
///
/// with_lock(lock, f) takes the lock as lock() does, runs f(scope) while the lock's renewal
/// (lock_options::auto_renew) keeps the lease, and releases it when f returns or throws (as
/// unlock(): the outcome is in lock.last_release()); it returns what f returns. The scope's
/// stop_token() is cancelled, and lost() turns true, the moment the hold may be gone: when a
/// renewal, an extend or a fencing_token() found it gone, or by the lease clock, stop_margin()
/// before the local time until which the server certainly keeps the lease
/// (lease_confirmed_until(): the send time of the last confirmed acquisition or renewal plus
/// its lease). The server can give the lock to someone else only after that time, so a
/// function that stops at the signal stops before anyone else can hold. Pass the token to the
/// blocking calls f makes (another lock's lock(token), a latch's wait(token)) so that they end
/// at the signal too.
///
/// The signal is conservative: it may come up to stop_margin() before the lock's own lost(),
/// and stays when a late renewal then keeps the lease (last_release() says what the server had).
///
/// Works with every blocking kind: mutex, reentrant_mutex, shared_mutex (its write side),
/// semaphore (one permit), election (leadership) and redlock, on every Client. A watcher
/// thread per call sleeps until the lease clock's end, and looks at least every
/// watch_interval() for a loss a reply found earlier; it sends nothing to Redis. Do not
/// release the lock yourself while the function runs: with_lock releases it.
///
/// try_with_lock_for(lock, timeout, f) waits at most `timeout` (f's result in a std::optional;
/// nullopt: not taken, f did not run); with_shared_lock(lock, f) takes a shared_mutex's read
/// side.

#include <redislock/cancel.hpp>
#include <redislock/detail/hold_watch.hpp>
#include <redislock/errors.hpp>

#include <string>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

namespace redislock {

/// What with_lock gives its function: the hold's loss signal and fencing token.
class hold_scope {
 public:
  hold_scope(const hold_scope&) = delete;
  hold_scope& operator=(const hold_scope&) = delete;

  /// True once the hold may be gone (see with_lock.hpp); stays true. Asks the hold itself too
  /// (its lost flag and the lease clock), so it is true as soon as the lock knows.
  bool lost() const noexcept {
    if (!signal_.cancelled() && may_be_gone()) signal_.cancel();
    return signal_.cancelled();
  }
  /// Cancelled when lost() turns true (by the watcher, or a lost() or fencing_token() call that
  /// found the hold gone), and when the scope ends: give it to the blocking calls the function
  /// makes.
  cancel_token stop_token() const noexcept { return signal_.token(); }
  /// The lock's fencing_token() for this hold (drawn on first use, one round trip): send it
  /// with every write the lock guards. Throws as the lock's fencing_token() (lock_error when
  /// the lease was found gone: lost() is true then). Call it from the thread that runs the
  /// function.
  std::uint64_t fencing_token() const {
    try {
      return fencing_token_();
    } catch (const lock_error&) {
      signal_.cancel();
      throw;
    }
  }

  /// How long before the lease clock's end the scope reports the loss: a tenth of the lease,
  /// at most 100 ms, at least 1 ms (room for the watcher's wake-up).
  static std::chrono::milliseconds stop_margin(std::chrono::milliseconds lease) noexcept {
    return std::clamp(lease / 10, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
  }
  /// The watcher looks at the hold at least this often (and at stop_margin() before the lease
  /// clock's end): at most 50 ms, at most the margin.
  static std::chrono::milliseconds watch_interval(std::chrono::milliseconds lease) noexcept {
    return std::min(stop_margin(lease), std::chrono::milliseconds(50));
  }

  /// Made by with_lock and its forms (detail::run_scoped): watches `hold` from a thread of its
  /// own until destroyed.
  hold_scope(detail::hold_watch hold, std::function<std::uint64_t()> fencing_token, std::chrono::milliseconds lease)
      : watch_(std::move(hold)),
        fencing_token_(std::move(fencing_token)),
        margin_(stop_margin(lease)),
        interval_(watch_interval(lease)) {
    watcher_ = std::thread([this] { watch(); });
  }
  ~hold_scope() {
    {
      const std::lock_guard<std::mutex> g(mutex_);
      done_ = true;
    }
    wake_.notify_one();
    watcher_.join();
    signal_.cancel();  // the hold ends with the scope: a token kept past it says so
  }

 private:
  // The hold was found lost, nothing is held, or the lease clock's end is margin_ away.
  bool may_be_gone() const noexcept {
    if (watch_.lost()) return true;
    const std::optional<std::chrono::steady_clock::time_point> until = watch_.confirmed_until();
    return !until || std::chrono::steady_clock::now() >= *until - margin_;
  }

  // Until the scope ends: cancels signal_ once may_be_gone(); looks every interval_, and at
  // margin_ before the lease clock's end (which renewals move on). The hold and the signal are
  // asked outside mutex_ (an observer's lost_event, the cancellation's wake-ups run there).
  void watch() {
    for (;;) {
      if (may_be_gone()) {
        signal_.cancel();
        return;
      }
      const std::optional<std::chrono::steady_clock::time_point> until = watch_.confirmed_until();
      const std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
      const std::chrono::steady_clock::time_point wake = until ? std::min(*until - margin_, now + interval_) : now;
      std::unique_lock<std::mutex> g(mutex_);
      if (wake_.wait_until(g, wake, [this] { return done_; })) return;
    }
  }

  detail::hold_watch watch_;
  std::function<std::uint64_t()> fencing_token_;
  std::chrono::milliseconds margin_, interval_;
  mutable cancel_source signal_;  // cancelled by the const lost() and fencing_token() too
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread watcher_;  // last: started once the members it reads are made
};

namespace detail {

template <class Lock>
void require_renewed(const Lock& lock, const char* what) {
  if (!lock.options().auto_renew)
    throw invalid_argument(std::string(what) + ": '" + lock.name() +
                           "' is not renewed while the function runs: make it with lock_options::auto_renew");
}

// Takes the hold (take() returns whether it did), runs f(scope) under it, watched through
// watch() (a hold_watch), and releases it (release(), also when f throws): f's result; nullopt
// (void f: false) when take() did not.
template <class Lock, class F, class Take, class Release, class Watch>
auto run_scoped(Lock& lock, F&& f, Take&& take, Release&& release, Watch&& watch) {
  using result = std::invoke_result_t<F, const hold_scope&>;
  using outcome = std::conditional_t<std::is_void_v<result>, bool, std::optional<result>>;
  if (!take()) return outcome{};
  struct releaser {
    Release& release;
    ~releaser() { release(); }
  } const released{release};  // declared first: the scope (and its watcher) ends before it
  const hold_scope scope(
      watch(), [&lock] { return lock.fencing_token(); }, lock.options().lease);
  if constexpr (std::is_void_v<result>) {
    std::forward<F>(f)(scope);
    return outcome{true};
  } else {
    return outcome{std::forward<F>(f)(scope)};
  }
}

}  // namespace detail

/// Takes `lock` (as lock()), runs f(scope) under it and releases it (as unlock(), also when f
/// throws; the outcome is in lock.last_release()); returns f's result. The scope's loss
/// signal: see with_lock.hpp. Throws invalid_argument, sending nothing, when the lock is not
/// renewed (lock_options::auto_renew): a hold that is not renewed ends with its lease, however
/// long f runs. Throws what lock() throws. Do not release the lock yourself while f runs
/// (unlock() from another thread, an on_lost that releases it): with_lock releases it.
template <class Lock, class F>
auto with_lock(Lock& lock, F&& f) -> std::invoke_result_t<F, const hold_scope&> {
  detail::require_renewed(lock, "with_lock");
  [[maybe_unused]] auto ran = detail::run_scoped(
      lock, std::forward<F>(f), [&lock] { return lock.lock(), true; }, [&lock] { lock.unlock(); },
      [&lock] { return detail::hold_watch_access::of(lock); });
  if constexpr (!std::is_void_v<std::invoke_result_t<F, const hold_scope&>>) return std::move(*ran);
}

/// As with_lock, waiting at most `timeout` for the lock (as try_lock_for()): f's result in a
/// std::optional, nullopt when the lock was not taken in time and f did not run (for a void
/// f: true when it ran).
template <class Lock, class Rep, class Period, class F>
auto try_with_lock_for(Lock& lock, const std::chrono::duration<Rep, Period>& timeout, F&& f) {
  detail::require_renewed(lock, "try_with_lock_for");
  return detail::run_scoped(
      lock, std::forward<F>(f), [&] { return lock.try_lock_for(timeout); }, [&lock] { lock.unlock(); },
      [&lock] { return detail::hold_watch_access::of(lock); });
}

/// As with_lock, on the read side of a shared_mutex (lock_shared(), unlock_shared()): the
/// scope watches the calling thread's read hold.
template <class Lock, class F>
auto with_shared_lock(Lock& lock, F&& f) -> std::invoke_result_t<F, const hold_scope&> {
  detail::require_renewed(lock, "with_shared_lock");
  [[maybe_unused]] auto ran = detail::run_scoped(
      lock, std::forward<F>(f), [&lock] { return lock.lock_shared(), true; }, [&lock] { lock.unlock_shared(); },
      [&lock] { return detail::hold_watch_access::of_shared(lock); });
  if constexpr (!std::is_void_v<std::invoke_result_t<F, const hold_scope&>>) return std::move(*ran);
}

}  // namespace redislock
