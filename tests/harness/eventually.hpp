#pragma once
// Bounded waiting for state that has no event to block on (server-side counts, counters):
// checks every millisecond, never longer than the bound.

#include <chrono>
#include <thread>

namespace redislock_test {

/// Waits until pred() holds or `bound` passes; returns pred()'s last value.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds bound = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace redislock_test
