#pragma once
/// @file detail/object_hold.hpp
/// @brief What the kinds whose hold belongs to the lock object share (redislock::mutex and
/// redislock::semaphore): one owner token per acquisition, a local gate for the threads that
/// share the object, the queued wait with its hand-off notice, the renewal, and the members
/// every lock kind has (unlock_and_report, extend, remaining_lease, fencing_token, ...).
///
/// object_hold<Self, Client, Keys> is a CRTP base. Self provides (privately, with this base a
/// friend):
///   bool wait_for_hold(const deadline&)        the kind's attempts, built on wait_queued();
///   attempt_result attempt_leave()              its "leave" attempt (nullopt: it holds);
///   std::int64_t send_release()                 its release script for token_ (1 ours, 0 not);
///   std::int64_t release_token(token)           the same for another token of ours (a stale one);
///   std::int64_t run_extend(token, lease_ms)    its extend script (1 renewed, 0 not ours);
///   std::int64_t run_remaining(token)           ms left (-1 no expiry, -2 not ours);
///   std::int64_t run_fence(token)               a new fencing token, 0 when not ours;
///   renewal_target renewal_for(token) const     the watchdog's owner-checked extend;
///   std::string already_held_message() const    the lock_error of a holder asking again.
/// Tokens are "<object id>:<n>"; the object's hand-off channel is the waiter prefix followed
/// by the object id, and a hand-off notice names the token it is for.

#include <redislock/detail/lease_keeper.hpp>
#include <redislock/detail/lock_core.hpp>
#include <redislock/detail/lockable.hpp>
#include <redislock/detail/random.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/detail/wake_wait.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_options.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

namespace redislock::detail {

template <class Self, class Client, class Keys>
class object_hold : public lock_core<Client, Keys>, public timed_lockable<Self> {
  using core = lock_core<Client, Keys>;

 public:
  /// Like unlock(), but returns the outcome and throws when Redis could not be asked
  /// (connection_error, timeout_error, reply_error). The local hold is dropped either way.
  release_status unlock_and_report() {
    const auto observed = this->observe_release();
    if (!held_.load(std::memory_order_acquire)) return this->record(release_status::not_held);
    lease_.stop();  // before the release is sent: no renewal of this hold is sent after it (watchdog.hpp)
    release_status status = release_status::failed;
    try {
      status = lease_.outcome(self().send_release() == 1);
    } catch (...) {
      drop_local_hold(release_status::failed);
      throw;
    }
    drop_local_hold(status);
    return status;
  }

  /// Resets the lease to `lease` from now (server clock) if the hold is still ours; extend()
  /// without an argument, to the hold's lease (options().lease, or the acquiring call's).
  /// Returns false when the lease had already run out (the hold may be someone else's).
  /// Throws lock_error when this object holds nothing. false also marks it lost().
  /// With auto_renew the watchdog renews to `lease` from then on (no renewal of this hold is
  /// sent while the extend is), and lease_confirmed_until() counts from the extend.
  bool extend(std::chrono::milliseconds lease) {
    checked_lease(lease, "extend");  // bad input first, held or not (every kind alike)
    require_held("extend");          // then the hold's lease is this hold's (read after held_)
    const std::string ms = checked_extend_lease(lease, "extend", this->options_, hold_lease());
    const std::string token = current_token();
    const bool ours = lease_.extend(lease, [&] { return self().run_extend(token, ms) == 1; });
    if (!ours) mark_lost_if_current(token);
    return ours;
  }
  bool extend() {
    require_held("extend");
    return extend(hold_lease());
  }

  /// Asks the server how much of our lease is left: a positive duration while the hold is
  /// ours, zero when it is not (never acquired, released, or lost). One round trip.
  std::chrono::milliseconds remaining_lease() {
    if (!held_.load(std::memory_order_acquire)) return std::chrono::milliseconds(0);
    return to_remaining(self().run_remaining(current_token()));
  }

  /// True when the server confirms that this object's lease is still valid (one round trip).
  bool still_held() { return remaining_lease().count() > 0; }

  /// This object's local belief: its acquisition succeeded and it has not released since.
  /// The lease may have run out meanwhile; still_held() asks the server.
  bool owns_lock() const noexcept { return held_.load(std::memory_order_acquire); }

  /// True when the current (or most recent) acquisition's lease was found lost: by the clock
  /// (once lease_confirmed_until() has passed, renewed or not), by the watchdog (auto_renew), an
  /// extend() that returned false, or a fencing_token() that found it gone. Reset by the next
  /// acquisition. A lost hold is still released with unlock() (it reports
  /// release_status::lease_expired).
  bool lost() const noexcept { return lease_.lost(); }

  /// While held: the local steady_clock time until which the server certainly keeps the lease,
  /// i.e. the send time of the last acquisition, extend() or renewal the server confirmed, plus
  /// the lease it sent (the server set the lease when it ran that command, at or after the
  /// send; detail/lease_clock.hpp). Moves with each confirmed extend or renewal (earlier too,
  /// for a shorter lease), stays put while renewals fail; lost() turns true once it has passed,
  /// and on_lost runs then (without auto_renew too). Act before it (stop writing, stop a child
  /// process) to be done before the lease can run out. nullopt when nothing is held.
  std::optional<std::chrono::steady_clock::time_point> lease_confirmed_until() const noexcept {
    return lease_.confirmed_until();
  }

  /// The fencing token of the current acquisition: strictly increasing per lock name across all
  /// clients and lock kinds, in the order drawn (detail/fence_scripts.hpp). Drawn on the first
  /// call per hold with one round trip, only while the lease is valid, then cached: later calls
  /// return it without asking (holders that never ask pay nothing). Throws lock_error when this
  /// object holds nothing, or when its lease has run out (then lost() is true: write nothing).
  std::uint64_t fencing_token() {
    require_held("fencing_token");
    std::string token;
    {
      std::lock_guard<std::mutex> g(token_mutex_);
      if (fence_ != 0) return fence_;
      token = token_;
    }
    const std::int64_t fence = self().run_fence(token);
    if (fence <= 0) {
      mark_lost_if_current(token);
      throw lock_error("fencing_token: the lease on lock '" + this->name_ + "' has run out");
    }
    std::unique_lock<std::mutex> g(token_mutex_);
    if (token != token_) return static_cast<std::uint64_t>(fence);  // released meanwhile
    if (fence_ != 0) return fence_;  // two first calls at once: both return the one that was kept
    fence_ = static_cast<std::uint64_t>(fence);
    g.unlock();
    this->observe_fenced(static_cast<std::uint64_t>(fence));
    return static_cast<std::uint64_t>(fence);
  }

 protected:
  /// Throws invalid_argument for a bad name or options. Sends nothing.
  object_hold(Client& client, std::string name, lock_options options)
      : core(client, std::move(name), std::move(options)) {
    channel_ = this->keys_.waiter_prefix + tokens_.id();
    lease_ms_ = std::to_string(this->options_.lease.count());
    hold_lease_.store(this->options_.lease.count(), std::memory_order_relaxed);
    wait_lease_ms_ = std::to_string(this->options_.wait_lease.count());
    token_ = tokens_.next();
  }
  // The kind's destructor releases a hold still kept (its own members are needed to send it).
  ~object_hold() = default;

  // Names the holds in lease events (observe.hpp); called by the kind's constructor, once the
  // kind is made.
  void describe_lease() noexcept { lease_.describe(describe(self(), lock_mode::exclusive)); }

  // Attempts return nullopt when they acquired, else the holder's remaining lease (< 0: unknown).
  using attempt_result = std::optional<std::chrono::milliseconds>;

  friend class timed_lockable<Self>;

  bool acquire(const deadline& d, std::chrono::milliseconds lease) {
    std::string ms = checked_hold_lease(lease, this->options_, "lock");
    // The holder waiting for itself would wait forever (or out its whole timeout) on the gate.
    if (held_.load(std::memory_order_acquire) &&
        holder_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id())
      throw lock_error(self().already_held_message());
    if (!gate_.lock_until(d)) return false;
    // The gate holder's: every attempt, hand-off and renewal of this acquisition sends it.
    hold_lease_.store(lease.count(), std::memory_order_relaxed);
    lease_ms_.swap(ms);
    bool acquired = false;
    try {
      acquired = self().wait_for_hold(d);
    } catch (...) {
      gate_.unlock();
      throw;
    }
    if (!acquired) {
      gate_.unlock();
      return false;
    }
    holder_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    require_replicas(this->client_, this->options_, this->name_, this->keys_.lock, renewal(), d,
                     [this]() noexcept { this->unlock(); });
    if (this->options_.auto_renew || this->options_.on_lost)
      this->start_or_drop([&] { start_renewal(); }, [this]() noexcept { this->unlock(); });
    return true;
  }

  // The wait of both kinds: subscribed to our own channel, queue on the server (attempt()
  // sets `queued` when it sent a "wait") and sleep until a release hands us the hold (the
  // notice names our token: no attempt needed), or the holder's lease may run out. Leave the
  // queue when the deadline passes or the wait throws, so nobody hands us the hold after we
  // gave up. attempt() returns an attempt_result.
  template <class Attempt>
  bool wait_queued(const deadline& d, Attempt&& attempt, const bool& queued) {
    // Two guards keep a notice meant for an earlier wait (read too late, after that wait gave
    // up) from completing this one: such a notice names a token this object no longer uses
    // (a wait that left the queue without the hold rotates the token, below), and whatever is
    // still buffered on the channel is dropped now.
    release_stale_notices(channel_subscription_.discard_pending());
    first_wait_sent_.reset();
    auto handed_over = [&](subscriber::subscription& s) {
      if (!s.take_message(token_)) return false;  // a late notice for an earlier acquisition
      // The release made us the holder, with a lease that runs at least from our first "wait";
      // read late, the notice is confirmed by the next attempt instead (wake_wait.hpp).
      if (hand_off_needs_confirming(first_wait_sent_, hold_lease())) return false;
      finish_attempt(*first_wait_sent_);
      return true;
    };
    bool acquired = false;
    try {
      acquired = wait_for_release(
          this->client_, channel_, d,
          wait_plan{this->options_.retry_min, this->options_.retry_max, this->options_.recheck_interval, true}, attempt,
          [&](subscriber::subscription& s) {
            release_stale_notices(s.take_messages_except(token_));
            return handed_over(s);
          },
          &channel_subscription_);
    } catch (...) {
      if (self().waits_without_script()) self().leave_unscripted_wait(queued);
      else if (queued) leave_after_failure();
      else release_unheard_attempt();
      throw;
    }
    if (acquired || !queued) return acquired;
    if (self().waits_without_script()) {
      self().leave_unscripted_wait(queued);  // queued before the scripts were refused: "leave" is refused too
      return false;
    }
    // The last attempt: "leave" takes a free hold, keeps a hand-off that reached us meanwhile,
    // and otherwise leaves the queue. The deadline has passed: leaving has its own budget.
    {
      const call_deadline::cleanup_budget cleanup;
      try {
        if (!self().attempt_leave()) return true;  // a hand-off reached us meanwhile
      } catch (...) {
        leave_after_failure();
        throw;
      }
    }
    // Out of the queue without the hold: nothing can be handed to this token any more, and a
    // notice for it that is still on its way must match nothing.
    rotate_token();
    return false;
  }

  // A kind whose waits can go on without scripts (the mutex's Lua-free path) says so here, and
  // cleans up a wait that ends without the hold in leave_unscripted_wait() instead of the
  // queue's "leave" (which needs a script). These defaults are for kinds that always script.
  bool waits_without_script() const noexcept { return false; }
  void leave_unscripted_wait(bool /*queued*/) noexcept {}

  // The current send time, kept as the start of a hand-off's lease when mode is "wait".
  steady::time_point attempt_sent(std::string_view mode) {
    const steady::time_point sent = steady::now();
    if (mode == "wait" && !first_wait_sent_) first_wait_sent_ = sent;  // a hand-off's lease starts after it
    return sent;
  }

  attempt_result finish_attempt(steady::time_point sent) {
    {
      std::lock_guard<std::mutex> g(token_mutex_);
      fence_ = 0;  // assigned on demand (fencing_token())
    }
    acquired_at_ = sent;
    lease_.acquired(sent, hold_lease());
    held_.store(true, std::memory_order_release);
    return std::nullopt;
  }

  // extend() and remaining_lease() may run on any thread while the holder replaces the token.
  std::string current_token() const {
    std::lock_guard<std::mutex> g(token_mutex_);
    return token_;
  }

  // The current acquisition's owner-checked extend (for the watchdog and min_replicas).
  renewal_target renewal() const { return self().renewal_for(current_token()); }

  void require_held(const char* what) const {
    detail::require_held(held_.load(std::memory_order_acquire), what, this->name_, "this object");
  }

  // Hands this acquisition (its token) to the client's watchdog. A hand-off counts its lease
  // from our last "wait" attempt, which can be up to recheck_interval old: when that leaves
  // less than a third of the lease, the watchdog (and lost(), by the clock) would count the
  // fresh hold as about to run out, so one owner-checked extend restarts the count from now.
  void start_renewal() {
    const steady::time_point now = steady::now();
    const lock_options& o = this->options_;
    const std::chrono::milliseconds lease = hold_lease();
    if (o.auto_renew && acquired_at_ + lease - lease / 3 <= now) {
      if (self().run_extend(token_, lease_ms_) == 1) acquired_at_ = now;
      else lease_.mark_lost();  // it ran out before we could renew it: the holder must know
    }
    lease_.start(this->client_, o, lease, this->name_, this->keys_.lock, renewal(), acquired_at_);
  }

  void leave_after_failure() noexcept {
    const call_deadline::cleanup_budget cleanup;  // not cut by the failing call's deadline
    try {
      // We are failing: a hand-off that reached us meanwhile is passed on.
      if (!self().attempt_leave()) pass_on_handoff();
      return;
    } catch (...) {
    }
    // Redis could not be told. Our place lapses on its own (and a hold handed to us meanwhile
    // with our lease); a new token keeps this object clear of both, and nobody listening on our
    // channel any more makes a release skip that place (it counts no listener on our channel)
    // instead of handing the hold to a token nobody will use.
    channel_subscription_.reset();
    rotate_token_noexcept();
  }

  // Hand-off notices on our channel for a token of ours that is not the current one: a "wait"
  // of an earlier wait that arrived after that wait left the queue (delayed in the network)
  // queued a token we no longer use, and a release handed the hold to it. Nobody else would
  // release it before its lease ends, so an owner-checked release of that token (best effort:
  // errors are swallowed) hands it on now, to the longest waiting live waiter (maybe us).
  template <class Notices>
  void release_stale_notices(const Notices& notices) noexcept {
    const call_deadline::cleanup_budget cleanup;
    const std::string ours = tokens_.id() + ":";
    for (const std::string& token : notices) {
      if (token == token_ || token.compare(0, ours.size(), ours) != 0) continue;
      try {
        self().release_token(token);
      } catch (...) {
      }
    }
  }

  // A wait that never queued failed: its last attempt may have run with its reply lost, and
  // taken the hold. An owner-checked release of our token (best effort: errors are swallowed,
  // the hold then lapses with its lease) hands such a hold on now rather than leaving it on a
  // token the object may never use again (it may be destroyed by the unwinding); a new token
  // keeps a late reply or notice about the old one from counting as ours.
  void release_unheard_attempt() noexcept {
    const call_deadline::cleanup_budget cleanup;
    try {
      self().send_release();
    } catch (...) {
    }
    rotate_token_noexcept();
  }

  void rotate_token() {
    std::string fresh = tokens_.next();
    std::lock_guard<std::mutex> g(token_mutex_);
    token_.swap(fresh);
    fence_ = 0;
  }
  void rotate_token_noexcept() noexcept {
    try {
      rotate_token();
    } catch (...) {
    }
  }

  // A reply about `token` says the lease is gone: that is news only while it is still ours.
  void mark_lost_if_current(const std::string& token) {
    std::lock_guard<std::mutex> g(token_mutex_);
    if (token == token_) lease_.mark_lost();
  }

  // Releases a hold that a failing wait claimed, keeping the gate (acquire() owns it).
  void pass_on_handoff() {
    const call_deadline::cleanup_budget cleanup;
    held_.store(false, std::memory_order_release);
    lease_.stop();
    self().send_release();
    rotate_token();
  }

  void drop_local_hold(release_status status) noexcept {
    rotate_token_noexcept();  // a new token for the next acquisition
    holder_thread_.store(std::thread::id(), std::memory_order_relaxed);
    held_.store(false, std::memory_order_release);
    this->record(status);
    gate_.unlock();
  }

  Self& self() noexcept { return static_cast<Self&>(*this); }
  const Self& self() const noexcept { return static_cast<const Self&>(*this); }

  // The current (or last) acquisition's lease: options().lease unless the call gave one.
  std::chrono::milliseconds hold_lease() const noexcept {
    return std::chrono::milliseconds(hold_lease_.load(std::memory_order_relaxed));
  }

  token_sequence tokens_;  // used by the thread that holds gate_
  // lease_ms_: hold_lease() as a script argument (gate holder only).
  std::string channel_, lease_ms_, wait_lease_ms_;
  std::atomic<std::chrono::milliseconds::rep> hold_lease_;
  // Our hand-off channel, subscribed on the first contended wait and kept until destruction
  // (gate holder only).
  subscriber::subscription channel_subscription_;
  std::string token_;        // written only by the thread that holds gate_, under token_mutex_
  std::uint64_t fence_ = 0;  // this acquisition's fencing token once asked for; under token_mutex_
  mutable std::mutex token_mutex_;
  local_gate gate_;
  std::atomic<bool> held_{false};
  std::atomic<std::thread::id> holder_thread_{};       // the thread whose acquire succeeded; none once released
  steady::time_point acquired_at_;                     // send time of the acquiring attempt (gate holder only)
  std::optional<steady::time_point> first_wait_sent_;  // of the current wait's first "wait" (gate holder only)
  lease_keeper lease_;                                 // renewal and lost flag of the current acquisition
};

}  // namespace redislock::detail
