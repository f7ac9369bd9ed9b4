#pragma once
/// @file detail/fork_guard.hpp
/// @brief Tells an object that it was inherited by a child of fork().
///
/// A client owns sockets and threads, and its locks own tokens: after fork() the child holds
/// copies of the parent's sockets (sharing their streams), none of its threads, and would
/// repeat its tokens. So a client refuses to work in a child (redislock::error), and its
/// subscriber never reads, writes or unsubscribes there (see ~client for the teardown).

#include <pthread.h>

#include <atomic>

namespace redislock::detail {

/// Incremented in every child of fork() (a pthread_atfork handler, registered on first use,
/// which is before any fork that matters: a fork_guard is made when the object is).
inline std::atomic<unsigned>& fork_generation() noexcept {
  static std::atomic<unsigned> generation{0};
  static const bool registered = [] {
    ::pthread_atfork(nullptr, nullptr, [] { fork_generation().fetch_add(1, std::memory_order_relaxed); });
    return true;
  }();
  (void)registered;
  return generation;
}

class fork_guard {
 public:
  fork_guard() noexcept : generation_(fork_generation().load(std::memory_order_relaxed)) {}
  /// True in a child of fork() made after this object.
  bool inherited() const noexcept { return fork_generation().load(std::memory_order_relaxed) != generation_; }

 private:
  unsigned generation_;
};

}  // namespace redislock::detail
