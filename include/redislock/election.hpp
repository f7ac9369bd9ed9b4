#pragma once
/// @file election.hpp
/// @brief redislock::basic_election — one leader per name, and everyone can tell who: campaign
/// and resign (etcd's Campaign/Resign, Curator's LeaderLatch), leader() and wait_for_change()
/// (etcd's Observe). Key layout and scripts: detail/election_scripts.hpp; docs/election.md.
///
/// - One object is one campaigner (as a redislock::mutex object is one would-be holder).
///   Threads that share one object queue locally first; campaigning again while this object
///   leads throws lock_error.
/// - Leadership is a hold like a lock's: its own owner token, a lease on the server's clock
///   (a leader that crashes or freezes loses leadership when its lease ends), lost() /
///   on_lost, extend(), remaining_lease(), auto_renew by the client's watchdog (off by default,
///   as for every kind: set lock_options::auto_renew for a leader that leads longer than one
///   lease), unlock_and_report() / unlock() (resign_and_report() / resign()).
/// - The leader's term is a fencing token drawn by the script that grants leadership (from the
///   name's fencing counter, shared with the other kinds: terms strictly increase per name).
///   fencing_token() and term() return it; leader() shows it to everyone. A leader passes its
///   term to whatever it writes, and the storage rejects writes with an older term: a leader
///   that lost its lease without noticing (paused, partitioned) is fenced off there.
/// - Waiting does not poll: a campaigner subscribes to its object's channel, queues on the
///   server and sleeps; a resignation hands leadership to the longest waiting live campaigner
///   (told on its channel, no round trip), and a campaigner also wakes when the leader's lease
///   may run out. Observers (wait_for_change()) listen on the election's broadcast channel,
///   where every grant and every resignation is published, and also wake at the leader's lease
///   end (an expiry publishes nothing).
/// - Cost: one EVALSHA per attempt, resignation, renewal or leader() read.

#include <redislock/client.hpp>
#include <redislock/detail/call_deadline.hpp>
#include <redislock/detail/election_scripts.hpp>
#include <redislock/detail/lease_keeper.hpp>
#include <redislock/detail/lock_core.hpp>
#include <redislock/detail/lockable.hpp>
#include <redislock/detail/object_hold.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/detail/wake_wait.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/reply.hpp>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace redislock {

/// Who leads an election, as read in one atomic step (basic_election::leader()).
struct leader_info {
  std::string value;  ///< the value the leader campaigned with
  /// The leader's term: its fencing token, drawn when leadership was granted; a new grant
  /// (even to the same object) always has a higher one.
  std::uint64_t term = 0;
  std::string owner;  ///< the leader's owner token ("<object id>:<n>")
  /// What was left of the leader's lease when read (-1 ms: no expiry).
  std::chrono::milliseconds remaining{0};
};

/// Same leadership: the same grant (terms are unique per grant).
inline bool same_leadership(const std::optional<leader_info>& a, const std::optional<leader_info>& b) noexcept {
  if (!a || !b) return !a && !b;
  return a->term == b->term && a->owner == b->owner;
}

template <class Client>
class basic_election : public detail::object_hold<basic_election<Client>, Client, detail::election_scripts::keys> {
  using base = detail::object_hold<basic_election<Client>, Client, detail::election_scripts::keys>;

 public:
  /// Throws invalid_argument for an empty name, a lease outside (0, max_lease] or fair (an
  /// election's queue is always served in order by resignations). Sends nothing.
  basic_election(Client& client, std::string name, lock_options options = {})
      : base(client, std::move(name), std::move(options)) {
    this->refuse_option(this->options_.fair, "election", "fair",
                        "resignations already hand leadership to the longest waiting campaigner");
    this->describe_lease();
  }

  basic_election(const basic_election&) = delete;
  basic_election& operator=(const basic_election&) = delete;

  /// Resigns if this object still leads (never throws).
  ~basic_election() {
    if (this->owns_lock()) this->unlock();
  }

  // --- campaigning (lock() / try_lock*() are the same calls, with an empty value) ---

  /// Blocks until this object leads, with `value` shown to everyone by leader(). Throws
  /// lock_error when it already leads, connection_error / timeout_error when Redis cannot be
  /// reached (after giving back whatever the failed attempt may have been granted).
  void campaign(std::string value) {
    const value_scope scope(this, value);
    this->lock();
  }
  /// One attempt: true when this object leads now.
  bool try_campaign(std::string value) {
    const value_scope scope(this, value);
    return this->try_lock();
  }
  template <class Rep, class Period>
  bool try_campaign_for(std::string value, const std::chrono::duration<Rep, Period>& timeout) {
    const value_scope scope(this, value);
    return this->try_lock_for(timeout);
  }
  template <class Clock, class Duration>
  bool try_campaign_until(std::string value, const std::chrono::time_point<Clock, Duration>& deadline) {
    const value_scope scope(this, value);
    return this->try_lock_until(deadline);
  }

  /// Gives up leadership (unlock()): never throws. The next campaigner in line is handed it
  /// at once. The outcome is in last_release(): released, lease_expired (leadership had already
  /// run out: this object was not leading any more when it resigned), not_held or failed.
  void resign() noexcept { this->unlock(); }
  /// resign() that returns the outcome, and throws when Redis could not be asked (the local
  /// leadership is dropped either way) (unlock_and_report()).
  release_status resign_and_report() { return this->unlock_and_report(); }

  /// This object's term while it leads: its fencing token (fencing_token(): one round trip
  /// on the first call, then cached). Throws lock_error when it does not lead.
  std::uint64_t term() { return this->fencing_token(); }

  /// The value this object campaigns (or leads) with.
  std::string value() const {
    std::lock_guard<std::mutex> g(value_mutex_);
    return value_;
  }

  // --- observing ---

  /// The current leader, read with one script: nullopt when nobody leads. Throws
  /// wrong_type_error when the name is used by another lock kind.
  std::optional<leader_info> leader() {
    return this->run_on_lock(
        [&](connection& c) { return parse_leader(run_script(c, detail::election_scripts::leader(), "#")); });
  }

  /// Waits until the leadership differs from `seen` (another grant, or nobody leading where
  /// someone led, or the reverse) or `deadline` passes. On a change stores the new state in
  /// `seen` and returns true; at the deadline returns false (`seen` unchanged). Woken by the
  /// election's broadcast channel (grants and resignations) and at the leader's lease end (an
  /// expiry publishes nothing), never later than options().recheck_interval; the state is
  /// read again after subscribing, so a change made just before is not missed. Returns by
  /// the deadline plus one connect timeout (detail/call_deadline.hpp).
  template <class Clock, class Duration>
  bool wait_for_change(std::optional<leader_info>& seen, const std::chrono::time_point<Clock, Duration>& deadline) {
    return wait_for_change_by(seen, detail::deadline_at(deadline));
  }
  /// wait_for_change() for at most `timeout`. A timeout too long to add to the clock
  /// (hours::max(), milliseconds::max(), a century or more) waits for the change however long
  /// it takes; zero or less reads once (detail::deadline_after, as every timed member).
  template <class Rep, class Period>
  bool wait_for_change_for(std::optional<leader_info>& seen, const std::chrono::duration<Rep, Period>& timeout) {
    return wait_for_change_by(seen, detail::deadline_after(timeout));
  }

  /// unlock_and_report(), extend(), remaining_lease(), still_held(), owns_lock(), lost(),
  /// lease_confirmed_until() and fencing_token() (detail/object_hold.hpp) are the members of
  /// every lock kind, for this object's leadership.

  /// This leadership's owner token, as leader() reports it (a new one per campaign).
  std::string owner_id() const { return this->current_token(); }

  // name(), key(), options(), client(), last_release(): detail::lock_core.

 private:
  bool wait_for_change_by(std::optional<leader_info>& seen, const detail::deadline& d) {
    const detail::call_deadline scope(d);
    std::optional<leader_info> now;
    auto look = [&]() -> std::optional<std::chrono::milliseconds> {
      now = leader();
      if (!same_leadership(now, seen)) return std::nullopt;
      return now ? now->remaining : this->options_.recheck_interval;
    };
    const bool changed = detail::wait_for_release(
        this->client_, this->keys_.notices, d,
        detail::wait_plan{this->options_.retry_min, this->options_.retry_max, this->options_.recheck_interval, true},
        look, [](detail::subscriber::subscription&) { return false; });
    if (changed) seen = std::move(now);
    return changed;
  }

  friend base;
  friend class detail::timed_lockable<basic_election>;
  using base::channel_subscription_;
  using base::client_;
  using base::keys_;
  using base::lease_ms_;
  using base::name_;
  using base::token_;
  using base::wait_lease_ms_;
  using typename base::attempt_result;

  // The value of the campaign running on this thread (campaign() to wait_for_hold(), which
  // runs on the same thread once the object's local gate is ours).
  struct value_scope {
    value_scope(const basic_election* e, const std::string& v) : saved(current()) { current() = {e, &v}; }
    ~value_scope() { current() = saved; }
    value_scope(const value_scope&) = delete;
    value_scope& operator=(const value_scope&) = delete;
    using slot = std::pair<const basic_election*, const std::string*>;
    static slot& current() noexcept {
      thread_local slot s{nullptr, nullptr};
      return s;
    }
    slot saved;
  };

  std::string already_held_message() const {
    return "campaign: this object already leads election '" + name_ + "'; it would wait for itself";
  }

  // The first attempt only tries, unless our channel is still subscribed from an earlier wait
  // (and we may wait): then it queues at once; try_campaign() never queues.
  bool wait_for_hold(const detail::deadline& d) {
    {
      const auto [who, v] = value_scope::current();
      std::lock_guard<std::mutex> g(value_mutex_);
      value_ = who == this && v != nullptr ? *v : std::string();
    }
    bool first = true, queued = false;
    auto attempt = [&] {
      const bool queue = !std::exchange(first, false) || (channel_subscription_.active() && !detail::passed(d));
      queued = queued || queue;
      return attempt_once(queue ? "wait" : "try");
    };
    return this->wait_queued(d, attempt, queued);
  }

  attempt_result attempt_leave() { return attempt_once("leave"); }

  // Every script gets all five keys and ARGV token, prefix, notices, up to four of its own
  // (unused ones are sent empty), then the fencing counter's lifetime (detail/election_scripts.hpp).
  struct script_args {
    explicit script_args(std::string_view x4 = {}, std::string_view x5 = {}, std::string_view x6 = {},
                         std::string_view x7 = {})
        : a4(x4), a5(x5), a6(x6), a7(x7) {}
    std::string_view a4, a5, a6, a7;
  };
  reply_ptr run_script(connection& c, const script& s, std::string_view token,
                       const script_args& more = script_args()) const {
    return s.run(c, {keys_.lock, keys_.fence, keys_.queue, keys_.waiters, keys_.values},
                 {token, keys_.waiter_prefix, keys_.notices, more.a4, more.a5, more.a6, more.a7,
                  detail::fence_lifetime_arg(this->options_)});
  }
  std::int64_t run_integer(const script& s, std::string_view token, const script_args& more = script_args()) {
    return this->run_on_lock([&](connection& c) { return detail::as_integer(*run_script(c, s, token, more)); });
  }

  static std::optional<leader_info> parse_leader(const reply_ptr& r) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 4) return std::nullopt;
    leader_info info;
    info.owner = std::string(detail::as_string(detail::element(*r, 0)));
    info.value = std::string(detail::as_string(detail::element(*r, 1)));
    info.term = static_cast<std::uint64_t>(detail::as_integer(detail::element(*r, 2)));
    info.remaining = std::chrono::milliseconds(detail::as_integer(detail::element(*r, 3)));
    return info;
  }

  std::int64_t send_release() { return release_token(token_); }
  std::int64_t release_token(const std::string& token) {
    return run_integer(detail::election_scripts::resign(), token);
  }
  std::int64_t run_extend(const std::string& token, const std::string& lease_ms) {
    return run_integer(detail::election_scripts::extend(), token, script_args(lease_ms));
  }
  std::int64_t run_remaining(const std::string& token) {
    return run_integer(detail::election_scripts::remaining(), token);
  }
  std::int64_t run_fence(const std::string& token) { return run_integer(detail::election_scripts::term(), token); }
  detail::renewal_target renewal_for(const std::string& token) const {
    return {&detail::election_scripts::extend(),
            {keys_.lock, keys_.fence, keys_.queue, keys_.waiters, keys_.values},
            {token, keys_.waiter_prefix, keys_.notices, lease_ms_},
            3};
  }

  // mode: "wait", "try" or "leave" (see election_scripts::attempt). An attempt whose reply was
  // lost (and that may have been granted leadership) ends the wait with an error: leadership
  // is given back (owner-checked) and the token replaced (object_hold's release_unheard_attempt).
  attempt_result attempt_once(std::string_view mode) {
    const detail::steady::time_point sent = this->attempt_sent(mode);
    const std::string value = this->value();
    reply_ptr r = this->run_on_lock([&](connection& c) {
      return run_script(c, detail::election_scripts::attempt(), token_,
                        script_args(lease_ms_, mode, wait_lease_ms_, value));
    });
    if (detail::as_integer(detail::element(*r, 0)) == 1) return this->finish_attempt(sent);
    return std::chrono::milliseconds(detail::as_integer(detail::element(*r, 1)));
  }

  mutable std::mutex value_mutex_;
  std::string value_;  // written by the gate holder; read by value() on any thread
};

using election = basic_election<client>;

}  // namespace redislock
