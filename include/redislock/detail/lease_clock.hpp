#pragma once
/// @file detail/lease_clock.hpp
/// @brief The one rule for how long a hold's lease certainly lasts, counted on the client's
/// clock: used by the watchdog's renewals, by every blocking hold (detail/lease_keeper.hpp)
/// and by the async hold (asio.hpp).
///
/// The server sets a lease when it runs the command that carries it, at or after the client
/// sent that command, and may run it the moment it is sent. So:
///  - a command that sets the lease to L, sent at S, may end it by S + L however it turns out:
///    the count drops to that as it is sent (a shorter extend shortens the lease at once);
///  - a command that set the lease to L, sent at S and confirmed, makes the lease last at
///    least until S + L, in either direction: a shorter lease than before shortens it;
///  - a command of the same hold that got no answer may still run, now or after a later
///    confirmed one, and set its own lease from then: while one is unanswered, what is
///    counted is never more than the shortest such lease, and never past its send time plus
///    that lease.
/// A client's belief is then never more optimistic than the server's state (the server's
/// clock may still run slower or faster: docs/leases-and-fencing.md says by how much).
/// Redlock subtracts its drift allowance from what this counts (redlock.hpp).

#include <algorithm>
#include <chrono>

namespace redislock::detail {

class lease_clock {
 public:
  using steady = std::chrono::steady_clock;
  using ms = std::chrono::milliseconds;

  /// A command that sets the lease to `lease` is being sent at `sent` (before the send).
  void sending(steady::time_point sent, ms lease) noexcept { until_ = std::min(until_, sent + lease); }

  /// A command that set the lease to `lease` was sent at `sent` and confirmed.
  void confirmed(steady::time_point sent, ms lease) noexcept {
    from_ = sent;
    counted_ = std::min(lease, shortest_unanswered_);
    until_ = sent + counted_;
  }

  /// A command that sets the lease to `lease`, sent at `sent`, got no answer: it may still run.
  void unanswered(steady::time_point sent, ms lease) noexcept {
    shortest_unanswered_ = std::min(shortest_unanswered_, lease);
    counted_ = std::min(counted_, shortest_unanswered_);
    until_ = std::min(until_, sent + lease);
  }

  /// The lease is certainly over by `t` (found lost meanwhile): it counts no further.
  void end_by(steady::time_point t) noexcept { until_ = std::min(until_, t); }

  /// Until when the server certainly keeps the lease.
  steady::time_point until() const noexcept { return until_; }
  /// The lease counted from the last confirmed command (never more than one still unanswered).
  ms counted() const noexcept { return counted_; }

  /// A renewal keeps a third of the lease in hand: due a third of the way in, and taken from a
  /// sixth on when a renewal of another hold goes to the same server (watchdog.hpp batches).
  steady::time_point renewal_due() const noexcept { return from_ + counted_ / 3; }
  steady::time_point renewal_eligible() const noexcept { return from_ + counted_ / 6; }
  /// How soon a failed renewal is tried again: ten tries before the lease can run out.
  steady::duration retry_interval() const noexcept { return std::max<steady::duration>(counted_ / 10, ms(1)); }

 private:
  steady::time_point from_{}, until_{steady::time_point::max()};
  ms counted_ = ms::max();
  ms shortest_unanswered_ = ms::max();  // none: max
};

}  // namespace redislock::detail
