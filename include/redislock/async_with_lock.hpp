#pragma once
/// @file async_with_lock.hpp
/// @brief redislock::async_with_lock — with_lock.hpp's scope for the async API, on C++20
/// coroutines (asio::awaitable).
///
///   auto [rows, released] = co_await redislock::async_with_lock(
///       orders,
///       [&](redislock::async_hold_scope& s) -> asio::awaitable<int> {
///         std::uint64_t token = co_await s.fencing_token();
///         co_await db.async_write(batch, token, asio::use_awaitable);  // cancelled if the lock may be lost
///         co_return batch.size();
///       },
///       asio::use_awaitable);
///
/// async_with_lock(lock, f, token) takes `lock` (async_lock(), or async_acquire() for a
/// semaphore), runs the coroutine f(scope) while the lock's renewal (lock_options::auto_renew)
/// keeps the lease, releases the hold when f returns or throws, and completes with f's result
/// and the release's outcome: void(std::exception_ptr, std::pair<R, release_status>) for an f
/// returning asio::awaitable<R> (R default-constructible: asio's co_spawn needs it),
/// void(std::exception_ptr, release_status) for asio::awaitable<void>. An exception from the
/// acquisition, or from f (after the hold is released; its release's outcome is then not
/// reported), arrives as the exception_ptr; a release that failed is release_status::failed.
/// The caller's cancellation (a slot bound to `token`) ends the wait for the lock; once f runs,
/// f's cancellation is the scope's alone: the operation finishes, and the release is made.
///
/// The scope's signal is with_lock's (with_lock.hpp): when a renewal, an extend or a fencing
/// token found the hold gone, or by the lease clock hold_scope::stop_margin() before the local
/// time until which the server certainly keeps the lease, lost() turns true and f is cancelled
/// (asio::cancellation_type::terminal): the operation it awaits ends with
/// asio::error::operation_aborted, and so does every later one (asio's throw_if_cancelled;
/// f may reset its cancellation state to clean up). f runs as a coroutine of its own on the
/// operation's strand, where a timer watches the hold: no thread, nothing sent to Redis.

#include <redislock/asio.hpp>
#include <redislock/with_lock.hpp>

#include <asio/detail/config.hpp>

// Where asio has co_await (ASIO_HAS_CO_AWAIT: C++20 coroutines the standard library supports;
// clang with libstdc++ before clang 14 has none): elsewhere this header declares nothing.
#if defined(ASIO_HAS_CO_AWAIT)

#include <asio/awaitable.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

namespace redislock {

namespace detail {

// The hold, its watcher's timer and the loss signal, shared by the scope and the watcher (one
// strand runs both).
struct async_scope_state {
  async_scope_state(async_hold h, const asio::any_io_executor& ex, std::chrono::milliseconds lease)
      : hold(std::move(h)),
        timer(ex),
        margin(hold_scope::stop_margin(lease)),
        interval(hold_scope::watch_interval(lease)) {}

  bool may_be_gone() const noexcept {
    if (hold.lost()) return true;
    const std::optional<std::chrono::steady_clock::time_point> until = hold.lease_confirmed_until();
    return !until || std::chrono::steady_clock::now() >= *until - margin;
  }
  void fire() {
    if (lost) return;
    lost = true;
    signal.emit(asio::cancellation_type::terminal);
  }

  async_hold hold;
  asio::steady_timer timer;
  asio::cancellation_signal signal;
  std::chrono::milliseconds margin, interval;
  bool lost = false, done = false;
};

// Until the scope ends: fires once the hold may be gone; looks every interval, and at the
// margin before the lease clock's end.
inline asio::awaitable<void> watch_async_hold(std::shared_ptr<async_scope_state> s) {
  while (!s->done) {
    if (s->may_be_gone()) {
      s->fire();
      co_return;
    }
    const auto until = s->hold.lease_confirmed_until();
    const auto now = std::chrono::steady_clock::now();
    s->timer.expires_at(until ? std::min(*until - s->margin, now + s->interval) : now);
    std::error_code cancelled;  // by the scope's end
    co_await s->timer.async_wait(asio::redirect_error(asio::use_awaitable, cancelled));
  }
}

template <class Lock>
auto take_async_hold(Lock& lock) {
  if constexpr (std::is_same_v<Lock, async_semaphore>) return lock.async_acquire(asio::use_awaitable);
  else return lock.async_lock(asio::use_awaitable);
}

template <class A>
struct awaitable_value;
template <class T, class E>
struct awaitable_value<asio::awaitable<T, E>> {
  using type = T;
};

}  // namespace detail

/// What async_with_lock gives its coroutine: the hold's loss signal (a flag; f is cancelled
/// then) and its fencing token. Used on the operation's strand only.
class async_hold_scope {
 public:
  explicit async_hold_scope(std::shared_ptr<detail::async_scope_state> s) noexcept : state_(std::move(s)) {}

  /// True once the hold may be gone; asks the hold itself too (as hold_scope::lost()), and
  /// cancels f then.
  bool lost() {
    if (!state_->lost && state_->may_be_gone()) state_->fire();
    return state_->lost;
  }
  /// The hold's fencing token (drawn on first use, one round trip). Throws std::system_error
  /// (async_errc::lease_lost when the lease was found gone: lost() is true then).
  asio::awaitable<std::uint64_t> fencing_token() {
    std::error_code e;
    const std::uint64_t token = co_await state_->hold.async_fencing_token(asio::redirect_error(asio::use_awaitable, e));
    if (e) {
      if (e == std::error_code(async_errc::lease_lost)) state_->fire();
      throw std::system_error(e, "async_with_lock: fencing token");
    }
    co_return token;
  }
  /// The hold (its token(), lease_confirmed_until(), async_extend()).
  async_hold& hold() noexcept { return state_->hold; }

 private:
  std::shared_ptr<detail::async_scope_state> state_;
};

namespace detail {

// async_with_lock's body, on its strand. `lock` is a copy (the caller's may be gone by now).
template <class R, class Lock, class F>
asio::awaitable<std::conditional_t<std::is_void_v<R>, release_status, std::pair<R, release_status>>> run_async_scoped(
    Lock lock, F f) {
  async_hold taken = co_await take_async_hold(lock);
  const asio::any_io_executor ex = co_await asio::this_coro::executor;
  auto state = std::make_shared<async_scope_state>(std::move(taken), ex, lock.options().lease);
  asio::co_spawn(ex, watch_async_hold(state), asio::detached);
  async_hold_scope scope(state);
  std::exception_ptr failure;
  std::conditional_t<std::is_void_v<R>, bool, std::optional<R>> result{};
  try {
    // f runs as a coroutine of its own whose cancellation is the scope's signal: asio cancels
    // the operation it awaits, and clears each operation's handler once it completes.
    auto cancelled_by_the_scope = asio::bind_cancellation_slot(state->signal.slot(), asio::use_awaitable);
    if constexpr (std::is_void_v<R>) co_await asio::co_spawn(ex, f(scope), cancelled_by_the_scope);
    else result = co_await asio::co_spawn(ex, f(scope), cancelled_by_the_scope);
  } catch (...) {
    failure = std::current_exception();
  }
  state->done = true;
  state->timer.cancel();
  state->signal.slot().clear();  // f is over: nothing is left to cancel
  // The release runs even when the caller's operation was cancelled meanwhile (an await would
  // throw before it starts, and leave the lock held until its lease ends).
  co_await asio::this_coro::reset_cancellation_state();
  co_await asio::this_coro::throw_if_cancelled(false);
  std::error_code e;
  release_status released = co_await state->hold.async_unlock(asio::redirect_error(asio::use_awaitable, e));
  if (failure) std::rethrow_exception(failure);
  if (e) released = release_status::failed;  // async_errc::connection_failed
  if constexpr (std::is_void_v<R>) co_return released;
  else co_return std::pair<R, release_status>(std::move(*result), released);
}

}  // namespace detail

/// Takes `lock`, runs the coroutine f(scope) under it and releases it (also when f throws):
/// see the top of this file. Throws invalid_argument, sending nothing, when the lock is not
/// renewed (lock_options::auto_renew).
template <class Lock, class F, class Token>
auto async_with_lock(Lock& lock, F f, Token&& token) {
  detail::require_renewed(lock, "async_with_lock");
  using R = typename detail::awaitable_value<std::invoke_result_t<F&, async_hold_scope&>>::type;
  return asio::co_spawn(asio::make_strand(lock.get_executor()), detail::run_async_scoped<R>(Lock(lock), std::move(f)),
                        std::forward<Token>(token));
}

}  // namespace redislock

#endif
