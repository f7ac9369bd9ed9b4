#pragma once
/// @file stats.hpp
/// @brief The counters a client reports: wait_stats (client::wait_stats(), how waiting locks
/// were woken) and watchdog_stats (watchdog::stats(), the renewals).

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace redislock {

/// Counters of how waiting locks of one client were woken (client::wait_stats()).
struct wait_stats {
  std::uint64_t subscriptions = 0;       ///< channels subscribed (SUBSCRIBE confirmed)
  std::uint64_t subscribe_failures = 0;  ///< SUBSCRIBE refused or connection lost/unavailable
  std::uint64_t wakeups = 0;             ///< waits ended by a release notification
  std::uint64_t fallback_waits = 0;      ///< acquisitions that waited with backoff instead
  std::uint64_t moved = 0;               ///< sharded subscriptions the server ended (slot moved) or MOVED

  wait_stats& operator+=(const wait_stats& o) noexcept {
    subscriptions += o.subscriptions;
    subscribe_failures += o.subscribe_failures;
    wakeups += o.wakeups;
    fallback_waits += o.fallback_waits;
    moved += o.moved;
    return *this;
  }
};

/// Counters of one watchdog (a snapshot; see watchdog::stats()).
struct watchdog_stats {
  std::uint64_t ticks = 0;                 ///< wake-ups that found renewals due (a tick drains all of them)
  std::uint64_t batches = 0;               ///< pipelines sent (one round trip each)
  std::uint64_t renewals = 0;              ///< leases renewed (the script answered 1)
  std::uint64_t failures = 0;              ///< renewals not answered 1 or 0 (connection errors, error replies)
  std::uint64_t lost = 0;                  ///< leases found lost
  std::size_t registered = 0;              ///< locks currently renewed
  std::size_t in_flight = 0;               ///< renewals sent (or about to be) and not yet answered
  std::chrono::microseconds last_tick{0};  ///< duration of the latest finished tick
  std::chrono::microseconds max_tick{0};   ///< longest tick so far
  std::chrono::microseconds max_late{0};   ///< worst delay of a renewal's send after its due time (lease/3)
};

}  // namespace redislock
