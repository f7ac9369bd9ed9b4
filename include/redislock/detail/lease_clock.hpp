#pragma once
/// @file detail/lease_clock.hpp
/// @brief The one rule for how long a hold's lease certainly lasts, counted on the client's
/// clock: used by the watchdog's renewals, by every blocking hold (detail/lease_keeper.hpp)
/// and by the async hold (asio.hpp).
///
/// The server sets a lease when it runs the command that carries it, at or after the client
/// sent that command, and may run it the moment it is sent. Commands of one hold may be in
/// flight together (an extend beside a renewal, extends on two threads, on two connections), and
/// their replies need not come back in the order the server ran them. So:
///  - a command that sets the lease to L, sent at S, may end it by S + L however it turns out:
///    while it is in flight, the end counts no further than that (a shorter extend shortens
///    the lease at once);
///  - a confirmed command that set L at S makes the lease last at least until S + L when no
///    later-sent command of the hold was confirmed before it: then the end is S + L, in either
///    direction (a shorter lease than before shortens it). One confirmed after a later-sent one
///    may have run after it on the server: it can only bring the end closer (to S + L);
///  - a command that got no answer may still run, now or after a later confirmed one, and set
///    its own lease from then: what is counted is never more than the shortest such lease,
///    and never past its send time plus that lease; one refused with an error reply did not
///    run and counts for nothing.
/// A client's belief is then never more optimistic than the server's state (the server's
/// clock may still run slower or faster: docs/leases-and-fencing.md says by how much).
/// Redlock follows the same rule with arithmetic of its own, per round and minus its drift
/// allowance (basic_redlock::extend_hold in redlock.hpp); merging it here is open work.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

namespace redislock::detail {

class lease_clock {
 public:
  using steady = std::chrono::steady_clock;
  using ms = std::chrono::milliseconds;
  /// Names one command in flight (0: none was recorded).
  using ticket = std::uint64_t;

  /// A command that sets the lease to `lease` is being sent at `sent` (call before the send);
  /// its answer names the returned ticket.
  ticket sending(steady::time_point sent, ms lease) {
    in_flight_.emplace_back(++last_ticket_, sent + lease);
    return last_ticket_;
  }

  /// A command that set the lease to `lease` was sent at `sent` and confirmed.
  void confirmed(steady::time_point sent, ms lease, ticket t = 0) noexcept {
    answered(t);
    const steady::time_point end = sent + std::min(lease, shortest_unanswered_);
    if (sent >= from_) {  // the latest-sent confirmed command: the end is its own
      from_ = sent;
      base_ = end;
    } else {
      base_ = std::min(base_, end);  // a later-sent one may have run before it
    }
    counted_ = base_ > from_ ? std::chrono::duration_cast<ms>(base_ - from_) : ms(0);
  }

  /// A command that sets the lease to `lease`, sent at `sent`, got no answer: it may still run.
  void unanswered(steady::time_point sent, ms lease, ticket t = 0) noexcept {
    answered(t);
    shortest_unanswered_ = std::min(shortest_unanswered_, lease);
    counted_ = std::min(counted_, shortest_unanswered_);
    base_ = std::min(base_, sent + lease);
  }

  /// A command was refused with an error reply: it did not run.
  void refused(ticket t) noexcept { answered(t); }

  /// The lease is certainly over by `t` (found lost meanwhile): it counts no further.
  void end_by(steady::time_point t) noexcept { base_ = std::min(base_, t); }

  /// Until when the server certainly keeps the lease.
  steady::time_point until() const noexcept {
    steady::time_point u = base_;
    for (const auto& f : in_flight_) u = std::min(u, f.second);
    return u;
  }
  /// The lease counted from the latest-sent confirmed command (never more than one still unanswered).
  ms counted() const noexcept { return counted_; }

  /// A renewal keeps a third of the lease in hand: due a third of the way in, and taken from a
  /// sixth on when a renewal of another hold goes to the same server (watchdog.hpp batches).
  steady::time_point renewal_due() const noexcept { return from_ + counted_ / 3; }
  steady::time_point renewal_eligible() const noexcept { return from_ + counted_ / 6; }
  /// How soon a failed renewal is tried again: ten tries before the lease can run out.
  steady::duration retry_interval() const noexcept { return std::max<steady::duration>(counted_ / 10, ms(1)); }

 private:
  void answered(ticket t) noexcept {
    if (t == 0) return;
    auto it = std::find_if(in_flight_.begin(), in_flight_.end(), [t](const auto& f) { return f.first == t; });
    if (it != in_flight_.end()) in_flight_.erase(it);
  }

  steady::time_point from_{steady::time_point::min()}, base_{steady::time_point::max()};
  ms counted_ = ms::max();
  ms shortest_unanswered_ = ms::max();                            // none: max
  std::vector<std::pair<ticket, steady::time_point>> in_flight_;  // each one's send time + lease
  ticket last_ticket_ = 0;
};

}  // namespace redislock::detail
