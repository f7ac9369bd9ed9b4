#pragma once
/// @file detail/call_deadline.hpp
/// @brief The deadline of the timed call running on this thread, as the clients see it.
///
/// A timed lock call (try_lock, try_lock_for, try_lock_until and their shared forms) sends
/// several commands, and each may retry and reconnect inside its client. So that the call as a
/// whole ends by its deadline, the deadline is set for the calling thread while the call runs
/// (detail/lockable.hpp), and every layer below reads it here instead of having it passed
/// through every signature:
///  - retry loops (cluster_client, sentinel_client) start no new try after it and sleep no
///    longer than up to it;
///  - each wait of one try (a pool's free connection, connect and handshake, a command's send
///    and reply) is cut to end by the deadline plus one connect timeout of that connection: the
///    slack a try begun before the deadline (or the clean-up that follows it: leaving the
///    queue, releasing what a lost reply may have taken) may use. A wait that would begin after
///    that gives timeout_error without sending anything.
/// So a timed call returns by its deadline plus one connect timeout. Calls without a deadline
/// (lock(), unlock(), the watchdog's renewals) keep the client's budget: none on one server
/// (each wait its own timeout); a cluster_client call sets its retry_timeout here as the
/// deadline of the call (cluster_client.hpp).

#include <redislock/detail/wait.hpp>

#include <chrono>
#include <optional>

namespace redislock::detail {

class call_deadline {
 public:
  /// Makes `d` the calling thread's call deadline until destroyed (the earlier one when a call
  /// with a deadline is already running on this thread); none leaves it as it is.
  explicit call_deadline(const deadline& d) noexcept : saved_(slot()) {
    if (d && (!saved_ || *d < *saved_)) slot() = d;
  }
  ~call_deadline() { slot() = saved_; }
  call_deadline(const call_deadline&) = delete;
  call_deadline& operator=(const call_deadline&) = delete;

  /// The calling thread's call deadline (none outside a timed call).
  static const deadline& current() noexcept { return slot(); }

  /// True when the call's deadline has passed (false outside a timed call).
  static bool passed() noexcept {
    const deadline& d = slot();
    return d && steady::now() >= *d;
  }

  /// `give_up`, or the call's deadline when that comes first: where a retry loop stops.
  static steady::time_point retries_until(steady::time_point give_up) noexcept {
    const deadline& d = slot();
    return d ? std::min(give_up, *d) : give_up;
  }

  /// How long one wait of a try may last: `timeout` (0: none), cut to end by the call's
  /// deadline plus `slack`. nullopt: nothing is left (give up without waiting).
  static std::optional<std::chrono::milliseconds> cut(std::chrono::milliseconds timeout,
                                                      std::chrono::milliseconds slack) noexcept {
    const deadline& d = slot();
    if (!d) return timeout;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*d + slack - steady::now());
    if (left.count() <= 0) return std::nullopt;
    return timeout.count() == 0 ? left : std::min(timeout, left);
  }

  /// A pool's wait for a free connection (`timeout`, 0: do not wait), cut like the others.
  static std::chrono::milliseconds cut_pool_wait(std::chrono::milliseconds timeout,
                                                 std::chrono::milliseconds slack) noexcept {
    if (timeout.count() == 0) return timeout;
    return cut(timeout, slack).value_or(std::chrono::milliseconds(0));
  }

 private:
  static deadline& slot() noexcept {
    thread_local deadline d;
    return d;
  }
  deadline saved_;
};

}  // namespace redislock::detail
