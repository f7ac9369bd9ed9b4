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
///    slack a try begun before the deadline may use. A wait that would begin after that gives
///    timeout_error without sending anything.
/// So a timed call returns by its deadline plus one connect timeout, unless it must clean up.
/// Clean-up is what a failing or expiring call sends so that the server keeps nothing of it:
/// leaving the wait queue ("leave", and passing on a hand-off that reached it meanwhile), the
/// owner-checked release of what an attempt whose reply was lost may have taken, the release of
/// a hold whose min_replicas were not met or whose renewal could not start, the release of a
/// stale hand-off. Cut by the call's deadline, it would not be sent, and the server would keep
/// the key or the queue entry for a lease. So each clean-up runs under a cleanup_budget (below):
/// its waits end by cleanup_time after it began (or the call's deadline, when later) plus one
/// connect timeout. A timed call that cleans up returns by then.
/// Calls without a deadline (lock(), unlock(), the watchdog's renewals) keep the client's
/// budget: none on one server (each wait its own timeout); a cluster_client call sets its
/// retry_timeout here as the deadline of the call (cluster_client.hpp). Redlock's rounds run
/// on the masters' threads, outside any call deadline: each is bounded by instance_timeout,
/// and a release round is never skipped (detail/quorum.hpp).

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

  /// How long a clean-up may wait beyond a timed call's deadline (cleanup_budget), besides the
  /// one connect timeout of slack that each of its waits gets: a release or "leave" takes one
  /// round trip, or a reconnect and one round trip.
  static constexpr std::chrono::milliseconds cleanup_time{500};

  /// While a timed call cleans up (see the file comment), its deadline is `cleanup_time` from
  /// the start of the clean-up, or the call's own when that is later; outside a timed call
  /// nothing changes. The deadline the call had is back once the scope ends. Scopes nested in
  /// one (a clean-up that runs another) change nothing: they share its budget.
  class cleanup_budget {
   public:
    cleanup_budget() noexcept : saved_(slot()), outer_(cleaning()) {
      if (!saved_ || outer_) return;
      cleaning() = true;
      const steady::time_point until = steady::now() + cleanup_time;
      if (until > *saved_) slot() = until;
    }
    ~cleanup_budget() {
      slot() = saved_;
      cleaning() = outer_;
    }
    cleanup_budget(const cleanup_budget&) = delete;
    cleanup_budget& operator=(const cleanup_budget&) = delete;

   private:
    deadline saved_;
    bool outer_;
  };

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
  static bool& cleaning() noexcept {  // a cleanup_budget runs on this thread
    thread_local bool on = false;
    return on;
  }
  deadline saved_;
};

}  // namespace redislock::detail
