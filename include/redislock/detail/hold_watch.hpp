#pragma once
/// @file detail/hold_watch.hpp
/// @brief One hold's loss state, readable from another thread (with_lock.hpp's watcher).
///
/// lost() and lease_confirmed_until() of the mutex, semaphore, election and Redlock describe
/// the object's one hold, whatever thread asks; those of the reentrant and shared mutexes
/// describe the calling thread's hold. A kind of the second sort gives, through a private
/// watch_current_hold() (befriending hold_watch_access), a hold_watch bound to the calling
/// thread's current hold, which its watcher may then read from any thread.

#include <chrono>
#include <functional>
#include <optional>
#include <utility>

namespace redislock::detail {

struct hold_watch {
  /// Whether the hold was found lost (by the clock, a renewal, an extend or a fencing_token()).
  std::function<bool()> lost;
  /// The local time until which the server certainly keeps the hold (the lease clock's end:
  /// detail/lease_clock.hpp); nullopt once nothing is held.
  std::function<std::optional<std::chrono::steady_clock::time_point>()> confirmed_until;
};

struct hold_watch_access {
  /// The watch of `lock`'s current hold (for the reentrant and shared mutexes: the calling
  /// thread's). `lock` must outlive the watch.
  template <class Lock>
  static hold_watch of(const Lock& lock) {
    return of(lock, 0);
  }
  /// The watch of the calling thread's read hold of a shared mutex.
  template <class Lock>
  static hold_watch of_shared(const Lock& lock) {
    return lock.watch_current_shared_hold();
  }

 private:
  // A kind with watch_current_hold() (found here, where its private members are accessible).
  template <class Lock>
  static auto of(const Lock& lock, int) -> decltype(lock.watch_current_hold()) {
    return lock.watch_current_hold();
  }
  template <class Lock>
  static hold_watch of(const Lock& lock, long) {
    const Lock* l = &lock;
    return {[l] { return l->lost(); }, [l] { return l->lease_confirmed_until(); }};
  }
};

}  // namespace redislock::detail
