#pragma once
/// @file cancel.hpp
/// @brief redislock::cancel_source and cancel_token: ending a blocking wait from another thread.
///
/// Every lock kind's lock(), try_lock_for() and try_lock_until() (and the shared side's, and a
/// latch's wait) take a cancel_token. cancel() on its source ends every wait given one of its
/// tokens within milliseconds (the waiter wakes at once; a command already sent finishes
/// first): the call leaves the lock's queue, releases a hold that a hand-off raced onto it,
/// and returns false holding nothing. A token cancelled before the call returns false at once,
/// sending nothing. When compiled as C++20, std::stop_token overloads do the same.
///
///   redislock::cancel_source shutdown;
///   std::thread worker([&] {
///     if (!job.lock(shutdown.token())) return;  // cancelled: we hold nothing
///     std::lock_guard<redislock::mutex> held(job, std::adopt_lock);
///     run_job();
///   });
///   ...
///   shutdown.cancel();  // e.g. from a signal-handling thread
///
/// A source and its tokens are cheap to copy and safe to use from any thread; a source stays
/// cancelled for good (make a new one for the next round).

#include <redislock/detail/cancellation.hpp>

#include <memory>
#include <utility>
#if __cplusplus >= 202002L && __has_include(<stop_token>)
#include <stop_token>
#endif

namespace redislock {

class cancel_token;
namespace detail {
cancel_state* state_of(const cancel_token& token) noexcept;
}  // namespace detail

/// What a cancellable call is given: tells whether its source was cancelled.
class cancel_token {
 public:
  /// A token that is never cancelled.
  cancel_token() = default;
  bool cancelled() const noexcept { return state_ && state_->cancelled.load(std::memory_order_acquire); }

 private:
  friend class cancel_source;
  friend detail::cancel_state* detail::state_of(const cancel_token& token) noexcept;
  explicit cancel_token(std::shared_ptr<detail::cancel_state> s) noexcept : state_(std::move(s)) {}
  std::shared_ptr<detail::cancel_state> state_;
};

/// Cancels the waits given its tokens.
class cancel_source {
 public:
  cancel_source() : state_(std::make_shared<detail::cancel_state>()) {}
  /// Ends every wait under way with one of this source's tokens, and makes later calls given
  /// one return false at once. Never throws; idempotent.
  void cancel() noexcept { detail::cancel_state_cancel(*state_); }
  bool cancelled() const noexcept { return state_->cancelled.load(std::memory_order_acquire); }
  cancel_token token() const noexcept { return cancel_token(state_); }

 private:
  std::shared_ptr<detail::cancel_state> state_;
};

namespace detail {

/// The state a cancellable call puts in its cancel_scope (nullptr: a token that never cancels).
inline cancel_state* state_of(const cancel_token& token) noexcept { return token.state_.get(); }

#if defined(__cpp_lib_jthread)
/// Calls f(cancel_token) with a token cancelled when `stop` is stopped (the std::stop_token
/// overloads).
template <class F>
decltype(auto) with_stop_token(const std::stop_token& stop, F&& f) {
  cancel_source source;
  const std::stop_callback on_stop(stop, [&source]() noexcept { source.cancel(); });
  return std::forward<F>(f)(source.token());
}
#endif

}  // namespace detail
}  // namespace redislock
