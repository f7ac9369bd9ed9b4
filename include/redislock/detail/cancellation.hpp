#pragma once
/// @file detail/cancellation.hpp
/// @brief How a blocking wait learns that its caller's cancel_token (cancel.hpp) was cancelled.
///
/// A cancellable call puts its token's state in a thread-local for its duration
/// (cancel_scope), so every wait under it, however deep, sees the request without a parameter
/// threaded through every kind: passed() (detail/wake_wait.hpp) and retry_until() count a
/// cancelled call as one whose deadline has passed, so each kind leaves its queue and passes on
/// a raced hand-off exactly as at a deadline. Each place that sleeps registers a cancel_hook
/// for the length of its sleep: cancel() runs the hooks, each of which wakes its sleeper (a
/// condition variable, the subscriber's reader poll).
///
/// Lock order: cancel() runs the hooks under the state's mutex, and a hook takes its sleeper's
/// mutex. So a hook is registered and removed with no sleeper's mutex held (declare it before
/// the lock it wakes: it is then destroyed after that lock is released).

#include <atomic>
#include <functional>
#include <mutex>
#include <vector>

namespace redislock::detail {

class cancel_hook;

/// What a cancel_source and its tokens share.
struct cancel_state {
  std::atomic<bool> cancelled{false};
  std::mutex mutex;                 // guards hooks; held while cancel() runs them
  std::vector<cancel_hook*> hooks;  // the sleeps under way in calls given this state's token
};

/// The state of the cancellable call running on this thread (nullptr: none).
inline cancel_state*& current_cancellation() noexcept {
  thread_local cancel_state* state = nullptr;
  return state;
}

/// True when the cancellable call running on this thread has been cancelled.
inline bool cancel_requested() noexcept {
  const cancel_state* s = current_cancellation();
  return s != nullptr && s->cancelled.load(std::memory_order_acquire);
}

/// Makes `state` this thread's cancellation while it lives (a nested scope shadows it).
class cancel_scope {
 public:
  explicit cancel_scope(cancel_state* state) noexcept : previous_(current_cancellation()) {
    current_cancellation() = state;
  }
  ~cancel_scope() { current_cancellation() = previous_; }
  cancel_scope(const cancel_scope&) = delete;
  cancel_scope& operator=(const cancel_scope&) = delete;

 private:
  cancel_state* previous_;
};

/// While it lives, cancelling this thread's call runs `wake` once (on the cancelling thread,
/// under the state's mutex). Without a cancellable call it does nothing and costs nothing.
/// fired(): the call has been cancelled (check it in the sleep's predicate, after registering).
class cancel_hook {
 public:
  template <class Wake>
  explicit cancel_hook(Wake&& wake) : state_(current_cancellation()) {
    if (state_ == nullptr) return;
    wake_ = std::forward<Wake>(wake);
    std::lock_guard<std::mutex> g(state_->mutex);
    state_->hooks.push_back(this);
  }
  ~cancel_hook() {
    if (state_ == nullptr) return;
    std::lock_guard<std::mutex> g(state_->mutex);  // waits for a cancel() running our wake
    auto& hooks = state_->hooks;
    for (auto it = hooks.begin(); it != hooks.end(); ++it)
      if (*it == this) {
        hooks.erase(it);
        break;
      }
  }
  cancel_hook(const cancel_hook&) = delete;
  cancel_hook& operator=(const cancel_hook&) = delete;

  bool fired() const noexcept { return state_ != nullptr && state_->cancelled.load(std::memory_order_acquire); }

  /// Called by cancel_state_cancel() only.
  void wake() noexcept {
    try {
      wake_();
    } catch (...) {
    }
  }

 private:
  cancel_state* state_;
  std::function<void()> wake_;
};

/// Marks `s` cancelled and wakes every sleep under way. Idempotent.
inline void cancel_state_cancel(cancel_state& s) noexcept {
  if (s.cancelled.exchange(true, std::memory_order_acq_rel)) return;
  std::lock_guard<std::mutex> g(s.mutex);
  for (cancel_hook* h : s.hooks) h->wake();
}

}  // namespace redislock::detail
