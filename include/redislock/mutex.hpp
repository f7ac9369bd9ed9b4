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
#include <redislock/detail/lua_free_write.hpp>
#include <redislock/detail/mutex_scripts.hpp>
#include <redislock/detail/object_hold.hpp>
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
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace redislock {

namespace detail {
struct mutex_test_access;  // tests reach private state through it (tests/harness/mutex_access.hpp)
}

template <class Client>
class basic_mutex : public detail::object_hold<basic_mutex<Client>, Client, detail::mutex_scripts::keys> {
  using base = detail::object_hold<basic_mutex<Client>, Client, detail::mutex_scripts::keys>;

 public:
  /// Throws invalid_argument for an empty name or a lease outside (0, max_lease]. Sends nothing.
  basic_mutex(Client& client, std::string name, lock_options options = {})
      : base(client, std::move(name), std::move(options)) {
    this->describe_lease();
  }

  basic_mutex(const basic_mutex&) = delete;
  basic_mutex& operator=(const basic_mutex&) = delete;

  /// Releases the lock if this object still holds it (never throws).
  ~basic_mutex() {
    if (this->owns_lock()) this->unlock();
  }

  /// lock(), try_lock(), try_lock_for(), try_lock_until(), unlock() (detail::timed_lockable),
  /// and unlock_and_report(), extend(), remaining_lease(), still_held(), owns_lock(), lost(),
  /// lease_confirmed_until(), fencing_token() (detail/object_hold.hpp): the members of every
  /// lock kind, for this object's hold.

  /// The old name of unlock_and_report() (unlike std::unique_lock::release(), it unlocks).
  [[deprecated("use unlock_and_report()")]] release_status release() { return this->unlock_and_report(); }

  // name(), key(), options(), client(), last_release(): detail::lock_core.

 private:
  friend base;
  friend class detail::timed_lockable<basic_mutex>;
  using base::channel_subscription_;
  using base::client_;
  using base::keys_;
  using base::lease_ms_;
  using base::name_;
  using base::options_;
  using base::token_;
  using base::wait_lease_ms_;
  using typename base::attempt_result;

  friend struct detail::mutex_test_access;

  std::string already_held_message() const {
    return "lock: this thread already holds lock '" + name_ +
           "' (a mutex is not recursive: use reentrant_mutex); resource deadlock would occur";
  }

  // The cheapest attempt first; then the queued wait (detail::object_hold::wait_queued).
  bool wait_for_hold(const detail::deadline& d) {
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
    const bool acquired = this->wait_queued(d, attempt, queued);
    waited_last_ = !won_first;
    return acquired;
  }

  attempt_result attempt_leave() { return queue_attempt("leave"); }

  bool waits_without_script() const noexcept { return lua_free_.load(std::memory_order_relaxed); }

  // A wait on the Lua-free path ends without the lock. An attempt that failed unheard (its
  // SET NX ran, its reply was lost) may have taken the lock, and a wait that queued before its
  // scripts were refused may have been handed it: the key is deleted if it holds our token
  // (DELEX/DELIFEQ touch nothing else; errors are swallowed: the hold then lapses with its
  // lease). A new token keeps whatever is found later under the old one from counting as ours.
  void leave_unscripted_wait(bool queued) noexcept {
    const detail::call_deadline::cleanup_budget cleanup;  // not cut by the failing call's deadline
    std::string token;
    try {
      token = this->current_token();
    } catch (...) {
    }
    if (queued) this->leave_after_failure();  // "leave" where scripts run again; else a new token
    try {
      if (!token.empty()) {
        this->run_on_lock([&](connection& c) {
          return detail::mutex_scripts::release_without_script(c, c.features(), keys_.lock, token);
        });
      }
    } catch (...) {
    }
    if (!queued) this->rotate_token_noexcept();
  }

  // A script refused for want of scripting (the user's ACL changed since the connection looked)
  // ran nothing: the Lua-free release follows on the same connection.
  std::int64_t send_release() { return release_token(token_); }
  std::int64_t release_token(const std::string& token) {
    return this->run_on_lock([&](connection& c) {
      if (c.features().scripting) {
        try {
          return detail::as_integer(*detail::mutex_scripts::release().run(
              c, {keys_.lock, keys_.fence, keys_.queue, keys_.waiters}, {token, keys_.waiter_prefix}));
        } catch (const scripting_unavailable_error&) {
          if (c.features().scripting) throw;
        }
      }
      require_lua_free_path(c.features());
      return detail::mutex_scripts::release_without_script(c, c.features(), keys_.lock, token);
    });
  }

  std::int64_t run_extend(const std::string& token, const std::string& lease_ms) {
    const detail::renewal_target target = renewal_of(token, lease_ms);
    return this->run_on_lock([&](connection& c) { return detail::renew_once(c, target); });
  }

  std::int64_t run_remaining(const std::string& token) {
    return this->run_on_lock([&](connection& c) {
      if (!c.features().scripting) return detail::mutex_scripts::remaining_without_script(c, keys_.lock, token);
      return detail::as_integer(*detail::mutex_scripts::remaining().run(c, {keys_.lock}, {token}));
    });
  }

  std::int64_t run_fence(const std::string& token) {
    return this->run_on_lock([&](connection& c) {
      if (!c.features().scripting)
        throw scripting_unavailable_error("", "fencing_token: lock '" + name_ + "' is on " + c.features().describe() +
                                                  ", which runs no scripts for this connection; a fencing token "
                                                  "is drawn by a script (owner check, counter and clock floor in "
                                                  "one step), so there is none on the Lua-free path");
      return detail::as_integer(*detail::mutex_scripts::fence().run(c, {keys_.lock, keys_.fence},
                                                                    {token, detail::fence_lifetime_arg(options_)}));
    });
  }

  // The owner-checked extend of the acquisition `token` (for the watchdog and min_replicas).
  detail::renewal_target renewal_for(const std::string& token) const { return renewal_of(token, lease_ms_); }

  // mutex_scripts::extend() is GET == token, then PEXPIRE, and nothing else: no fencing floor
  // (fencing_token() draws from its own key), no queue upkeep (a waiter's place is refreshed by
  // its own attempts), no hand-off bookkeeping (a hand-off writes the waiter's token, so it is
  // no longer ours). `SET key token IFEQ token PX lease` does exactly that in one command
  // (rewriting the same value, never creating the key), so it replaces the script wherever the
  // server has it.
  detail::renewal_target renewal_of(std::string token, std::string lease_ms) const {
    return {&detail::mutex_scripts::extend(), {keys_.lock}, {std::move(token), std::move(lease_ms)}, 1, true};
  }

  // An attempt whose reply was lost (and that may have set the key) ends the wait with an
  // error: an owner-checked release deletes what it may have set and the token is replaced
  // (object_hold's release_unheard_attempt; leave_unscripted_wait on the Lua-free path).

  // The uncontended path: one plain command, `SET key token NX GET PX lease`. GET makes a
  // failure tell whose lock it is (ours after a lost reply; WRONGTYPE for a key of another
  // type). Redis before 7.0 refuses NX with GET: then SET NX PX, and the queue script when it fails.
  // Fair mode must not jump the queue, so it asks the queue script.
  // Without scripts (lua_free_), the same SET with GET (every server of the Lua-free path has
  // it), in a transaction that first checks that this user may release it (refused with
  // scripting_unavailable_error, writing nothing, when not: detail/lua_free_write.hpp); a key
  // already holding our token (an earlier attempt's lost reply) gets its lease restarted by
  // `SET IFEQ PX` from a send time taken now.
  attempt_result attempt_first() {
    enum class outcome { acquired, held, ours_already, ask_script };
    detail::steady::time_point sent = detail::steady::now();  // the lease starts no earlier
    const bool with_get = set_get_supported_.load(std::memory_order_relaxed);
    bool lua_free = false, no_get = false;
    const outcome o = this->run_on_lock([&](connection& c) {
      lua_free = !c.features().scripting;  // a round trip on a socket's first use only
      if (lua_free) require_lua_free_path(c.features());
      else if (options_.fair) return outcome::ask_script;  // fair mode must not jump the queue
      const bool get = with_get || lua_free;               // servers with a Lua-free path all take GET
      const detail::command_form set = detail::set_nx(keys_.lock, token_, lease_ms_, get);
      reply_ptr r;
      if (lua_free) {  // only where this user may release it, too (detail/lua_free_write.hpp)
        r = detail::write_if_releasable(c, c.features(), keys_.lock, set.views(), "lock '" + name_ + "'");
      } else {
        c.append(set.data(), set.size());
        r = c.read_reply();
      }
      switch (detail::classify_set_nx(*r, get, token_)) {
        case detail::set_nx_outcome::no_get: no_get = true; return outcome::held;
        case detail::set_nx_outcome::error: detail::checked(*r); return outcome::held;  // checked() throws
        case detail::set_nx_outcome::acquired: return outcome::acquired;
        case detail::set_nx_outcome::held: return outcome::held;
        case detail::set_nx_outcome::ours_or_unknown: break;
      }
      if (!lua_free) return outcome::ours_already;  // (or unknown, without GET): the queue script decides
      sent = detail::steady::now();                 // our own token, read by GET: restart its lease
      const detail::command_form restart = detail::set_ifeq(keys_.lock, token_, token_, lease_ms_);
      r = c.command(restart.data(), restart.size());
      return r->type == REDIS_REPLY_STATUS ? outcome::acquired : outcome::held;  // nil: it lapsed meanwhile
    });
    lua_free_.store(lua_free, std::memory_order_relaxed);
    if (no_get) {
      set_get_supported_.store(false, std::memory_order_relaxed);
      return attempt_first();
    }
    switch (o) {
      case outcome::acquired: return this->finish_attempt(sent);
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
      detail::sleep_unless_cancelled(pause.next(std::chrono::milliseconds(-1), d));
      if (detail::cancel_requested()) break;
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
    const detail::steady::time_point sent = this->attempt_sent(mode);
    reply_ptr r = this->run_on_lock([&](connection& c) {
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
    if (detail::as_integer(detail::element(*r, 0)) == 1) return this->finish_attempt(sent);
    return std::chrono::milliseconds(detail::as_integer(detail::element(*r, 1)));
  }

  std::atomic<bool> set_get_supported_{true};  // false once the server refused SET NX GET (Redis < 7)
  std::atomic<bool> lua_free_{false};          // the last attempt's server runs no scripts for us (the Lua-free path)
  bool waited_last_ = false;  // the last acquisition did not succeed at its first attempt (gate holder only)
};

using mutex = basic_mutex<client>;

}  // namespace redislock
