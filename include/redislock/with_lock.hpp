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
/// thread per call sleeps until the lease clock's end (and wakes at most every
/// watch_interval() to see a loss a reply found earlier); it sends nothing to Redis.

#include <redislock/cancel.hpp>
#include <redislock/detail/hold_watch.hpp>
#include <redislock/errors.hpp>

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

  /// True once the hold may be gone (see with_lock.hpp); stays true.
  bool lost() const noexcept { return signal_.cancelled(); }
  /// Cancelled the moment lost() turns true: give it to the blocking calls the function makes.
  cancel_token stop_token() const noexcept { return signal_.token(); }
  /// The lock's fencing_token() for this hold (drawn on first use, one round trip): send it
  /// with every write the lock guards. Throws as the lock's fencing_token() (lock_error when
  /// the lease was found gone). Call it from the thread that runs the function.
  std::uint64_t fencing_token() const { return fencing_token_(); }

  /// How long before the lease clock's end the scope reports the loss: a tenth of the lease,
  /// at most 100 ms (room for the watcher's wake-up).
  static std::chrono::milliseconds stop_margin(std::chrono::milliseconds lease) noexcept {
    return std::min(lease / 10, std::chrono::milliseconds(100));
  }
  /// The longest the watcher sleeps before it looks at the hold's lost flag again.
  static constexpr std::chrono::milliseconds watch_interval() noexcept { return std::chrono::milliseconds(50); }

 private:
  template <class Lock, class F>
  friend auto with_lock(Lock& lock, F&& f) -> std::invoke_result_t<F, const hold_scope&>;

  hold_scope(detail::hold_watch hold, std::function<std::uint64_t()> fencing_token, std::chrono::milliseconds margin)
      : watch_(std::move(hold)), fencing_token_(std::move(fencing_token)), margin_(margin) {
    watcher_ = std::thread([this] { watch(); });
  }
  ~hold_scope() {
    {
      const std::lock_guard<std::mutex> g(mutex_);
      done_ = true;
    }
    wake_.notify_one();
    watcher_.join();
  }

  // Until the scope ends: cancels signal_ once the hold is found lost, once nothing is held,
  // or at margin_ before the lease clock's end (which renewals move on).
  void watch() {
    std::unique_lock<std::mutex> g(mutex_);
    while (!done_) {
      const std::optional<std::chrono::steady_clock::time_point> until = watch_.confirmed_until();
      const std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
      if (watch_.lost() || !until || now >= *until - margin_) {
        signal_.cancel();
        return;
      }
      wake_.wait_until(g, std::min(*until - margin_, now + watch_interval()), [this] { return done_; });
    }
  }

  detail::hold_watch watch_;
  std::function<std::uint64_t()> fencing_token_;
  std::chrono::milliseconds margin_;
  cancel_source signal_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread watcher_;  // last: started once the members it reads are made
};

/// Takes `lock` (as lock()), runs f(scope) under it and releases it (as unlock(), also when f
/// throws; the outcome is in lock.last_release()); returns f's result. The scope's loss
/// signal: see with_lock.hpp. Throws invalid_argument, sending nothing, when the lock is not
/// renewed (lock_options::auto_renew): a hold that is not renewed ends with its lease, however
/// long f runs. Throws what lock() throws.
template <class Lock, class F>
auto with_lock(Lock& lock, F&& f) -> std::invoke_result_t<F, const hold_scope&> {
  if (!lock.options().auto_renew)
    throw invalid_argument("with_lock: '" + lock.name() +
                           "' is not renewed while the function runs: make it with lock_options::auto_renew");
  lock.lock();
  struct release {
    Lock& lock;
    ~release() { lock.unlock(); }
  } const released{lock};
  const hold_scope scope(detail::hold_watch_access::of(lock), [&lock] { return lock.fencing_token(); },
                         hold_scope::stop_margin(lock.options().lease));
  return std::forward<F>(f)(scope);
}

}  // namespace redislock
