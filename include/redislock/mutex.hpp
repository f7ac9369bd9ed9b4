#pragma once
/// @file mutex.hpp
/// @brief redislock::basic_mutex — an exclusive lock with a lease, owner token and fencing token.
///
/// Models Lockable and TimedLockable, so std::lock_guard, std::unique_lock and
/// std::scoped_lock are its guards. Key layout and scripts: detail/mutex_scripts.hpp.
///
/// One object is one would-be holder. Threads that share an object queue locally first (it
/// behaves like a std::timed_mutex across them); separate objects, in this process or others,
/// compete through Redis.
///
/// With lock_options::auto_renew the client's watchdog (watchdog.hpp) renews the lease while
/// the lock is held; lost() tells when the lease was found lost, and fencing_token() lets the
/// storage reject a holder that lost its lease without noticing (examples/fencing.cpp).
///
/// An uncontended lock() is one command (SET NX GET PX) and unlock() one script. Waiting does
/// not poll: a waiter subscribes (through its client's shared pub/sub connection) to its own
/// channel, queues on the server and sleeps; a release hands the lock straight to the longest
/// waiting one, which is told on its channel (no race, no extra round trip). A waiter also
/// wakes when the holder's lease runs out. With lock_options::fair, a lock that fell free
/// that way also goes to the head of the queue (detail/mutex_scripts.hpp, detail/wake_wait.hpp).
/// The hand-off notice is trusted: whoever may (S)PUBLISH on the lock's channels is as trusted as
/// whoever may write its key (README, "Redis ACL").

#include <redislock/client.hpp>
#include <redislock/detail/lease_keeper.hpp>
#include <redislock/detail/lock_core.hpp>
#include <redislock/detail/lockable.hpp>
#include <redislock/detail/mutex_scripts.hpp>
#include <redislock/detail/random.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/detail/wake_wait.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/reply.hpp>
#include <redislock/watchdog.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace redislock {

namespace detail {
struct mutex_test_access;  // tests reach private state through it (defined by a test, if at all)
}

template <class Client>
class basic_mutex : public detail::lock_core<Client, detail::mutex_scripts::keys>,
                    public detail::timed_lockable<basic_mutex<Client>> {
  using core = detail::lock_core<Client, detail::mutex_scripts::keys>;

 public:
  /// Throws invalid_argument for an empty name or a lease outside (0, max_lease]. Sends nothing.
  basic_mutex(Client& client, std::string name, lock_options options = {})
      : core(client, std::move(name), std::move(options)) {
    channel_ = keys_.waiter_prefix + tokens_.id();
    lease_ms_ = std::to_string(options_.lease.count());
    wait_lease_ms_ = std::to_string(options_.wait_lease.count());
    token_ = tokens_.next();
  }

  basic_mutex(const basic_mutex&) = delete;
  basic_mutex& operator=(const basic_mutex&) = delete;

  /// Releases the lock if this object still holds it (never throws).
  ~basic_mutex() {
    if (held_.load(std::memory_order_acquire)) this->unlock();
  }

  /// Like unlock(), but returns the outcome and throws when Redis could not be asked
  /// (connection_error, timeout_error, reply_error). The local hold is dropped either way.
  release_status unlock_and_report() {
    if (!held_.load(std::memory_order_acquire)) return this->record(release_status::not_held);
    lease_.stop();  // before the release is sent: no renewal of this hold is sent after it (watchdog.hpp)
    release_status status = release_status::failed;
    try {
      status = lease_.outcome(send_release() == 1);
    } catch (...) {
      drop_local_hold(release_status::failed);
      throw;
    }
    drop_local_hold(status);
    return status;
  }
  /// The old name of unlock_and_report() (unlike std::unique_lock::release(), it unlocks).
  [[deprecated("use unlock_and_report()")]] release_status release() { return unlock_and_report(); }

  /// Resets the lease to `lease` from now (server clock) if the lock is still ours.
  /// Returns false when the lease had already run out (the lock may be someone else's).
  /// Throws lock_error when this object does not hold the lock. false also marks it lost().
  /// With auto_renew the watchdog renews to options().lease again at its next turn.
  bool extend(std::chrono::milliseconds lease) {
    const std::string ms = detail::checked_lease(lease, "extend", &options_);
    require_held("extend");
    const std::string token = current_token();
    const detail::renewal_target target = renewal_of(token, ms);
    const bool ours = client_.run(keys_.lock, [&](connection& c) { return detail::renew_once(c, target); }) == 1;
    if (!ours) mark_lost_if_current(token);
    return ours;
  }
  bool extend() { return extend(options_.lease); }

  /// Asks the server how much of our lease is left: a positive duration while the lock is
  /// ours, zero when it is not (never acquired, released, or lost). One round trip.
  std::chrono::milliseconds remaining_lease() {
    if (!held_.load(std::memory_order_acquire)) return std::chrono::milliseconds(0);
    const std::string token = current_token();
    return detail::to_remaining(client_.run(keys_.lock, [&](connection& c) {
      if (!c.features().scripting) return detail::mutex_scripts::remaining_without_script(c, keys_.lock, token);
      return detail::as_integer(*detail::mutex_scripts::remaining().run(c, {keys_.lock}, {token}));
    }));
  }

  /// True when the server confirms that this object's lease is still valid (one round trip).
  bool still_held() { return remaining_lease().count() > 0; }

  /// This object's local belief: lock() succeeded and unlock() has not been called.
  /// The lease may have run out meanwhile; still_held() asks the server.
  bool owns_lock() const noexcept { return held_.load(std::memory_order_acquire); }

  /// True when the current (or most recent) acquisition's lease was found lost: by the
  /// watchdog (auto_renew), an extend() that returned false, or a fencing_token() that found it
  /// gone. Reset by the next acquisition.
  /// A lost lock is still released with unlock() (it reports release_status::lease_expired).
  bool lost() const noexcept { return lease_.lost(); }

  /// While this holder's lease is renewed (auto_renew): the local steady_clock time until which
  /// the server certainly keeps it, i.e. the send time of the last acquisition or renewal the
  /// server confirmed, plus the lease (the server set the lease when it ran that command, at or
  /// after the send). Moves forward with each confirmed renewal, stays put while renewals fail;
  /// lost() turns true once it has passed. Act before it (stop writing, stop a child process)
  /// to be done before the lease can run out. nullopt when nothing is held or without
  /// auto_renew.
  std::optional<std::chrono::steady_clock::time_point> lease_confirmed_until() const noexcept {
    return lease_.confirmed_until();
  }

  /// The fencing token of the current acquisition: strictly increasing per lock name across all
  /// clients and lock kinds, in the order of the holds (detail/fence_scripts.hpp). Pass it to the
  /// storage you write to, which rejects any token lower than the highest it has seen. Drawn on
  /// the first call per hold with one round trip, only while the lease is valid, then cached:
  /// later calls return it without asking (holders that never ask pay nothing).
  /// Throws lock_error when this object does not hold the lock, or when its lease has run out
  /// (then lost() is true: write nothing).
  std::uint64_t fencing_token() {
    require_held("fencing_token");
    std::string token;
    {
      std::lock_guard<std::mutex> g(token_mutex_);
      if (fence_ != 0) return fence_;
      token = token_;
    }
    const std::int64_t fence = client_.run(keys_.lock, [&](connection& c) {
      if (!c.features().scripting)
        throw scripting_unavailable_error("", "fencing_token: lock '" + name_ + "' is on " + c.features().describe() +
                                                  ", which runs no scripts for this connection; a fencing token "
                                                  "is drawn by a script (owner check, counter and clock floor in "
                                                  "one step), so there is none on the Lua-free path");
      return detail::as_integer(*detail::mutex_scripts::fence().run(c, {keys_.lock, keys_.fence}, {token}));
    });
    if (fence <= 0) {
      mark_lost_if_current(token);
      throw lock_error("fencing_token: the lease on lock '" + name_ + "' has run out");
    }
    std::lock_guard<std::mutex> g(token_mutex_);
    if (token != token_) return static_cast<std::uint64_t>(fence);  // released meanwhile
    if (fence_ == 0) fence_ = static_cast<std::uint64_t>(fence);
    return fence_;  // two first calls at once: both return the one that was kept
  }

  // name(), key(), options(), client(), last_release(): detail::lock_core.

 private:
  friend class detail::timed_lockable<basic_mutex>;
  using core::client_;
  using core::keys_;
  using core::name_;
  using core::options_;

  friend struct detail::mutex_test_access;

  bool acquire(const detail::deadline& d) {
    // The holder waiting for itself would wait forever (or out its whole timeout) on the gate.
    if (held_.load(std::memory_order_acquire) &&
        holder_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id())
      throw lock_error("lock: this thread already holds lock '" + name_ +
                       "' (a mutex is not recursive: use reentrant_mutex); resource deadlock would occur");
    if (!gate_.lock_until(d)) return false;
    bool acquired = false;
    try {
      acquired = wait_for_lock(d);
    } catch (...) {
      gate_.unlock();
      throw;
    }
    if (!acquired) {
      gate_.unlock();
      return false;
    }
    holder_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    detail::require_replicas(client_, options_, name_, keys_.lock, renewal(), d, [this]() noexcept { this->unlock(); });
    if (options_.auto_renew) this->start_or_drop([&] { start_renewal(); }, [this]() noexcept { this->unlock(); });
    return true;
  }

  // The cheapest attempt first; then, subscribed to our own channel, queue on the server and
  // sleep until a release hands us the lock, or the holder's lease runs out (our place lasts
  // until wait_lease after that: the attempt then refreshes it). Leave the queue when the
  // deadline passes or the wait throws, so nobody hands us the lock after we gave up.
  bool wait_for_lock(const detail::deadline& d) {
    // Two guards keep a notice meant for an earlier wait (read too late, after that wait gave
    // up) from completing this one: such a notice names a token this object no longer uses
    // (a wait that left the queue without the lock rotates the token, below), and whatever is
    // still buffered on the channel is dropped now.
    channel_subscription_.discard_pending();
    bool first = true, queued = false, won_first = false;
    auto scripted_attempt = [&]() -> attempt_result {
      // Fair mode's first attempt is a script anyway; so is that of an object whose last
      // acquisition had to wait (the lock is likely held again: a SET that fails would be one
      // more command on the server). When our channel is still subscribed from an earlier wait
      // (and we may wait), such a first attempt queues at once.
      const bool may_queue_now =
          (options_.fair || waited_last_) && channel_subscription_.active() && !detail::passed(d);
      if (std::exchange(first, false)) {
        attempt_result r = may_queue_now ? (queued = true, queue_attempt("wait")) : attempt_first();
        won_first = !r;
        // Without scripts there is no queue and no hand-off: back off and try again until the
        // deadline (passed when this returns not acquired, which ends the wait below).
        if (r && lua_free_.load(std::memory_order_relaxed)) r = wait_without_script(d);
        return r;
      }
      queued = true;
      return queue_attempt("wait");
    };
    auto attempt = [&]() -> attempt_result {
      const bool was_queued = queued;
      try {
        return scripted_attempt();
      } catch (const scripting_unavailable_error&) {
        // A script refused on a connection that now counts as one without scripting (the
        // user's ACL changed; the refused script wrote nothing): the Lua-free wait goes on
        // within the same deadline. queue_attempt checked that the Lua-free path is there.
        if (!lua_free_.load(std::memory_order_relaxed)) throw;
        queued = was_queued;
        return wait_without_script(d);
      }
    };
    auto handed_over = [&](detail::subscriber::subscription& s) {
      if (!s.take_message(token_)) return false;  // a late notice for an earlier acquisition
      finish_attempt(queue_sent_);                // the release made us the holder
      return true;
    };
    bool acquired = false;
    try {
      acquired = detail::wait_for_release(
          client_, channel_, d,
          detail::wait_plan{options_.retry_min, options_.retry_max, options_.recheck_interval, true}, attempt,
          handed_over, &channel_subscription_);
    } catch (...) {
      if (lua_free_.load(std::memory_order_relaxed)) leave_lua_free_wait(queued);
      else if (queued) leave_after_failure();
      throw;
    }
    waited_last_ = !won_first;
    if (acquired || !queued) return acquired;
    if (lua_free_.load(std::memory_order_relaxed)) {
      leave_lua_free_wait(queued);  // queued before the scripts were refused: "leave" is refused too
      return false;
    }
    // The last attempt: "leave" takes a free lock, keeps a hand-off that reached us meanwhile,
    // and otherwise leaves the queue.
    try {
      if (!queue_attempt("leave")) return true;  // a hand-off reached us meanwhile
    } catch (...) {
      leave_after_failure();
      throw;
    }
    // Out of the queue without the lock: nothing can be handed to this token any more, and a
    // notice for it that is still on its way must match nothing.
    rotate_token();
    return false;
  }

  void leave_after_failure() noexcept {
    try {
      // We are failing: a hand-off that reached us meanwhile is passed on.
      if (!queue_attempt("leave")) pass_on_handoff();
      return;
    } catch (...) {
    }
    // Redis could not be told. Our place lapses on its own (and a lock handed to us meanwhile
    // with our lease); a new token keeps this object clear of both, and nobody listening on our
    // channel any more makes a release skip that place (it counts no listener on our channel) instead of
    // handing the lock to a token nobody will use.
    channel_subscription_.reset();
    rotate_token_noexcept();
  }

  // A wait on the Lua-free path ends without the lock. An attempt that failed unheard (its
  // SET NX ran, its reply was lost) may have taken the lock, and a wait that queued before its
  // scripts were refused may have been handed it: the key is deleted if it holds our token
  // (DELEX/DELIFEQ touch nothing else; errors are swallowed: the hold then lapses with its
  // lease). A new token keeps whatever is found later under the old one from counting as ours.
  void leave_lua_free_wait(bool queued) noexcept {
    std::string token;
    try {
      token = current_token();
    } catch (...) {
    }
    if (queued) leave_after_failure();  // "leave" where scripts run again; else a new token
    try {
      if (!token.empty()) {
        client_.run(keys_.lock, [&](connection& c) {
          return detail::mutex_scripts::release_without_script(c, c.features(), keys_.lock, token);
        });
      }
    } catch (...) {
    }
    if (!queued) rotate_token_noexcept();
  }

  void rotate_token_noexcept() noexcept {
    try {
      rotate_token();
    } catch (...) {
    }
  }

  void rotate_token() {
    std::string fresh = tokens_.next();
    std::lock_guard<std::mutex> g(token_mutex_);
    token_.swap(fresh);
    fence_ = 0;
  }

  // A reply about `token` says the lease is gone: that is news only while it is still ours.
  void mark_lost_if_current(const std::string& token) {
    std::lock_guard<std::mutex> g(token_mutex_);
    if (token == token_) lease_.mark_lost();
  }

  // Releases a lock that a failing wait claimed, keeping the gate (acquire() owns it).
  void pass_on_handoff() {
    held_.store(false, std::memory_order_release);
    lease_.stop();
    send_release();
    rotate_token();
  }

  // A script refused for want of scripting (the user's ACL changed since the connection looked)
  // ran nothing: the Lua-free release follows on the same connection.
  std::int64_t send_release() {
    return client_.run(keys_.lock, [&](connection& c) {
      if (c.features().scripting) {
        try {
          return detail::as_integer(*detail::mutex_scripts::release().run(
              c, {keys_.lock, keys_.fence, keys_.queue, keys_.waiters}, {token_, keys_.waiter_prefix}));
        } catch (const scripting_unavailable_error&) {
          if (c.features().scripting) throw;
        }
      }
      require_lua_free_path(c.features());
      return detail::mutex_scripts::release_without_script(c, c.features(), keys_.lock, token_);
    });
  }

  // extend() and remaining_lease() may run on any thread while the holder replaces the token.
  std::string current_token() const {
    std::lock_guard<std::mutex> g(token_mutex_);
    return token_;
  }

  // Attempts return nullopt when they acquired, else the holder's remaining lease (< 0: unknown).
  // The token is only replaced after a release, so an attempt whose reply was lost (and that
  // may have set the key) is recognised as ours by the next attempt.
  using attempt_result = std::optional<std::chrono::milliseconds>;

  // The uncontended path: one plain command, `SET key token NX GET PX lease`. GET makes a
  // failure tell whose lock it is (ours after a lost reply; WRONGTYPE for a key of another
  // type). Redis before 7.0 refuses NX with GET: then SET NX PX, and the queue script when it fails.
  // Fair mode must not jump the queue, so it asks the queue script.
  // Without scripts (lua_free_), the same SET; a key already holding our token (an earlier
  // attempt's lost reply) gets its lease restarted by `SET IFEQ PX` from a send time taken now.
  attempt_result attempt_first() {
    enum class outcome { acquired, held, ours_already, ask_script };
    detail::steady::time_point sent = detail::steady::now();  // the lease starts no earlier
    const bool with_get = set_get_supported_.load(std::memory_order_relaxed);
    bool lua_free = false, no_get = false;
    const outcome o = client_.run(keys_.lock, [&](connection& c) {
      lua_free = !c.features().scripting;  // a round trip on a socket's first use only
      if (lua_free) require_lua_free_path(c.features());
      else if (options_.fair) return outcome::ask_script;  // fair mode must not jump the queue
      if (with_get) {
        c.append({"SET", keys_.lock, token_, "NX", "GET", "PX", lease_ms_});
      } else {
        c.append({"SET", keys_.lock, token_, "NX", "PX", lease_ms_});
      }
      reply_ptr r = c.read_reply();
      if (r->type == REDIS_REPLY_ERROR && with_get &&
          std::string_view(r->str, r->len).find("syntax") != std::string_view::npos) {
        no_get = true;
        return outcome::held;
      }
      detail::checked(*r);
      if (with_get ? r->type == REDIS_REPLY_NIL : r->type == REDIS_REPLY_STATUS) return outcome::acquired;
      if (with_get && std::string_view(r->str, r->len) != token_) return outcome::held;
      if (!lua_free) return outcome::ours_already;  // (or unknown, without GET): the queue script decides
      if (!with_get) return outcome::held;
      sent = detail::steady::now();
      r = c.command({"SET", keys_.lock, token_, "IFEQ", token_, "PX", lease_ms_});
      return r->type == REDIS_REPLY_STATUS ? outcome::acquired : outcome::held;  // nil: it lapsed meanwhile
    });
    lua_free_.store(lua_free, std::memory_order_relaxed);
    if (no_get) {
      set_get_supported_.store(false, std::memory_order_relaxed);
      return attempt_first();
    }
    switch (o) {
      case outcome::acquired: return finish_attempt(sent);
      case outcome::ours_already:
      case outcome::ask_script: return queue_attempt("try");
      case outcome::held: break;
    }
    return detail::unknown_pttl;  // held by someone else; their lease is not known
  }

  // The Lua-free wait: plain attempts with jittered exponential backoff (retry_min ..
  // retry_max) until the deadline. nullopt: acquired.
  attempt_result wait_without_script(const detail::deadline& d) {
    detail::backoff pause(options_.retry_min, options_.retry_max);
    while (!detail::passed(d)) {
      std::this_thread::sleep_for(pause.next(std::chrono::milliseconds(-1), d));
      if (!attempt_first()) return std::nullopt;
    }
    return detail::unknown_pttl;
  }

  // What the Lua-free path needs of the server, and what it cannot do, refused before anything
  // is written (first use: constructing a lock sends nothing).
  void require_lua_free_path(const detail::server_features& f) const {
    const std::string where = "lock '" + name_ + "': " + f.describe() + " runs no scripts for this connection (";
    if (options_.fair)
      throw scripting_unavailable_error("", where +
                                                "an ACL user without @scripting, or Valkey without Lua), and "
                                                "fair mode queues its waiters in a script");
    if (!f.set_ifeq || !f.compare_and_delete())
      throw scripting_unavailable_error("", where +
                                                "an ACL user without @scripting, or Valkey without Lua), and "
                                                "the Lua-free path needs SET IFEQ with DELEX or DELIFEQ "
                                                "(Redis 8.4+, Valkey 9.0+) to renew and release safely");
  }

  // mode: "wait" (join or keep our place), "try", "leave" (see mutex_scripts::queue_attempt).
  attempt_result queue_attempt(std::string_view mode) {
    const detail::steady::time_point sent = detail::steady::now();
    if (mode == "wait") queue_sent_ = sent;  // a hand-off's lease starts after our last "wait"
    reply_ptr r = client_.run(keys_.lock, [&](connection& c) {
      try {
        return detail::mutex_scripts::queue_attempt().run(
            c, {keys_.lock, keys_.fence, keys_.queue, keys_.waiters},
            {token_, lease_ms_, mode, options_.fair ? "1" : "0", wait_lease_ms_, keys_.waiter_prefix});
      } catch (const scripting_unavailable_error&) {
        // Refused for want of scripting (the user's ACL changed): ran nothing. The next
        // attempts take the Lua-free path where there is one (else that is refused here).
        if (!c.features().scripting) {
          require_lua_free_path(c.features());
          lua_free_.store(true, std::memory_order_relaxed);
        }
        throw;
      }
    });
    if (detail::as_integer(detail::element(*r, 0)) == 1) return finish_attempt(sent);
    return std::chrono::milliseconds(detail::as_integer(detail::element(*r, 1)));
  }

  attempt_result finish_attempt(detail::steady::time_point sent) {
    {
      std::lock_guard<std::mutex> g(token_mutex_);
      fence_ = 0;  // assigned on demand (fencing_token())
    }
    acquired_at_ = sent;
    lease_.acquired();
    held_.store(true, std::memory_order_release);
    return std::nullopt;
  }

  // Hands this acquisition (its token) to the client's watchdog. A hand-off counts its lease
  // from our last "wait" attempt, which can be up to recheck_interval old: when that leaves
  // less than a third of the lease, the watchdog (and lost(), by the clock) would count the
  // fresh hold as about to run out, so one owner-checked extend restarts the count from now.
  void start_renewal() {
    const detail::steady::time_point now = detail::steady::now();
    if (acquired_at_ + options_.lease - options_.lease / 3 <= now) {
      const detail::renewal_target target = renewal();
      const bool ours = client_.run(keys_.lock, [&](connection& c) { return detail::renew_once(c, target); }) == 1;
      if (ours) acquired_at_ = now;
      else lease_.mark_lost();  // it ran out before we could renew it: the holder must know
    }
    lease_.start(client_, options_, name_, keys_.lock, renewal(), acquired_at_);
  }

  // The current acquisition's owner-checked extend (for the watchdog and min_replicas).
  detail::renewal_target renewal() const { return renewal_of(current_token(), lease_ms_); }

  // mutex_scripts::extend() is GET == token, then PEXPIRE, and nothing else: no fencing floor
  // (fencing_token() draws from its own key), no queue upkeep (a waiter's place is refreshed by
  // its own attempts), no hand-off bookkeeping (a hand-off writes the waiter's token, so it is
  // no longer ours). `SET key token IFEQ token PX lease` does exactly that in one command
  // (rewriting the same value, never creating the key), so it replaces the script wherever the
  // server has it.
  detail::renewal_target renewal_of(std::string token, std::string lease_ms) const {
    return {&detail::mutex_scripts::extend(), {keys_.lock}, {std::move(token), std::move(lease_ms)}, true};
  }

  void require_held(const char* what) const {
    detail::require_held(held_.load(std::memory_order_acquire), what, name_, "this object");
  }

  void drop_local_hold(release_status status) noexcept {
    rotate_token_noexcept();  // a new token for the next acquisition
    holder_thread_.store(std::thread::id(), std::memory_order_relaxed);
    held_.store(false, std::memory_order_release);
    this->record(status);
    gate_.unlock();
  }

  detail::token_sequence tokens_;  // used by the thread that holds gate_
  std::string channel_, lease_ms_, wait_lease_ms_;
  // Our hand-off channel, subscribed on the first contended wait and kept until destruction
  // (gate holder only).
  detail::subscriber::subscription channel_subscription_;
  std::string token_;        // written only by the thread that holds gate_, under token_mutex_
  std::uint64_t fence_ = 0;  // this acquisition's fencing token once asked for; under token_mutex_
  mutable std::mutex token_mutex_;
  detail::local_gate gate_;
  std::atomic<bool> held_{false};
  std::atomic<std::thread::id> holder_thread_{};  // the thread whose acquire succeeded; none once released
  std::atomic<bool> set_get_supported_{true};     // false once the server refused SET NX GET (Redis < 7)
  std::atomic<bool> lua_free_{false};  // the last attempt's server runs no scripts for us (the Lua-free path)
  bool waited_last_ = false;           // the last acquisition did not succeed at its first attempt (gate holder only)
  detail::steady::time_point acquired_at_;  // send time of the acquiring attempt (gate holder only)
  detail::steady::time_point queue_sent_;   // send time of the last "wait" attempt (gate holder only)
  detail::lease_keeper lease_;              // renewal and lost flag of the current acquisition
};

using mutex = basic_mutex<client>;

}  // namespace redislock
