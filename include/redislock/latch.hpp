#pragma once
/// @file latch.hpp
/// @brief redislock::basic_latch — a count-down latch shared by processes: std::latch across
/// machines. Key layout and scripts: detail/latch_scripts.hpp; the contract: docs/latch.md.
///
/// - Made with a count: the first object of a name creates the latch on the server, the next
///   ones join it (one round trip in the constructor). Joining a latch created with another
///   count throws latch_mismatch_error and changes nothing.
/// - count_down(n) takes n off the count, atomically on the server; the one that reaches zero
///   wakes every waiter. Counting past zero throws latch_error and changes nothing.
///   count_down is applied at most once per call: a call whose reply was lost is resent once
///   with the same call number (the server recognises it), so a lost reply never counts twice.
///   The server keeps one call record per object, for a minute after its last count_down
///   (detail/latch_scripts.hpp): a latch's state does not grow with its count.
/// - wait() / wait_for() / wait_until() do not poll: a waiter subscribes to the latch's
///   channel, reads the count (so a notice sent before it subscribed is not missed), then
///   sleeps until the notice, the end of the latch's lease or the deadline
///   (detail/wake_wait.hpp: the same waiting as every lock kind, with its fall-backs).
/// - The latch has a lease (latch_options::lease), restarted by each count_down and by each
///   join while it counts: an abandoned latch goes when its lease ends. Every call on a latch
///   whose lease ended (or that was made anew under the same name meanwhile) throws
///   latch_expired_error: a waiter is never told a latch opened when it did not. An open latch
///   stays readable as open for one lease after the count_down that opened it.
/// - Rounds: once open, try_set_count(n) / reset(n) start the latch again under the same name
///   with a new count. Each object is in one round (the one it created, joined or started;
///   join_current_round() moves it to the latest), and every call acts on that round: a waiter
///   of a round that opened is told so even after the next round started, and a count_down for
///   a round that opened changes nothing and throws latch_error.

#include <redislock/cancel.hpp>
#include <redislock/client.hpp>
#include <redislock/detail/call_deadline.hpp>
#include <redislock/detail/kind_clash.hpp>
#include <redislock/detail/latch_scripts.hpp>
#include <redislock/detail/random.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/detail/wake_wait.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/reply.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace redislock {

/// The largest count a latch accepts (std::latch::max()).
inline constexpr std::int64_t max_latch_count = 1000000000;

struct latch_options {
  /// How long the server keeps the latch after its creation, its last join while counting,
  /// or its last count_down. Must be in (0, max_lease].
  std::chrono::milliseconds lease{60000};
  /// Prepended to the key; the latch's name goes inside a {hash tag} after it.
  std::string key_prefix = "redislock:";
  /// A waiter sleeps until the notice, the end of the latch's lease (as it last read it) or its
  /// deadline, but never longer than this before it reads the count again (a notice that
  /// reached nobody: a failover, a cut subscription). Must be in [10 ms, max_lease].
  std::chrono::milliseconds recheck_interval{1000};
};

template <class Client>
class basic_latch {
 public:
  using client_type = Client;

  /// Creates the latch `name` with `expected`, or joins the one that exists (restarting its
  /// lease while it counts). A reply lost to a broken connection is asked for again once (as
  /// count_down), with the same new id, so created() stays right. Throws invalid_argument for
  /// an empty name, expected outside [0, max_latch_count] or bad options (sending nothing);
  /// latch_mismatch_error when the latch exists with another initial count; wrong_type_error
  /// when the name holds another kind; connection_error / timeout_error when Redis cannot be
  /// reached.
  basic_latch(Client& client, std::string name, std::int64_t expected, latch_options options = {})
      : client_(client),
        name_(std::move(name)),
        options_(std::move(options)),
        keys_((validate(name_, options_, expected), detail::latch_scripts::keys(name_, as_lock_options(options_)))),
        lease_ms_(std::to_string(options_.lease.count())),
        record_(keys_.record(detail::random_token())) {
    const std::string fresh = detail::random_token();
    auto send = [&] {
      return run_on_lock([&](connection& c) {
        return detail::latch_scripts::create().run(c, {keys_.lock}, {std::to_string(expected), lease_ms_, fresh});
      });
    };
    reply_ptr r;
    try {
      r = send();
    } catch (const timeout_error&) {
      throw;  // as count_down: asking again would double the time the caller was promised
    } catch (const connection_error&) {
      // A reply lost to a broken connection: asked again, with the same new id. Not with a
      // cluster / Sentinel client, as count_down: its call keeps to the client's own time bound.
      if constexpr (detail::has_routing_epoch<Client>::value) throw;
      r = send();
    }
    const long long outcome = detail::as_integer(detail::element(*r, 0));
    if (outcome == 2) {
      const long long theirs = detail::as_integer(detail::element(*r, 2));
      throw latch_mismatch_error("latch '" + name_ + "' exists with count " + std::to_string(theirs) + ", not the " +
                                     std::to_string(expected) + " asked for",
                                 theirs);
    }
    // Ours when it carries the id we proposed: a create sent again after its reply was lost
    // (here, or by the Client) finds the latch its first send made, and joins it.
    const std::string id(detail::as_string(detail::element(*r, 1)));
    move_to(where(),
            {id, detail::as_integer(detail::element(*r, 3)), std::string(detail::as_string(detail::element(*r, 4)))},
            expected, outcome == 1 || id == fresh);
  }

  basic_latch(const basic_latch&) = delete;
  basic_latch& operator=(const basic_latch&) = delete;

  /// Takes n off the count (one EVALSHA); the call that reaches zero wakes every waiter. Also
  /// restarts the latch's lease. Throws invalid_argument for n outside [1, max_latch_count]
  /// (sending nothing), latch_error when n is more than the count left (nothing changes),
  /// latch_expired_error when the latch is gone (this call counted nothing). A reply lost to a
  /// broken connection is asked for again once with the same call number (applied at most
  /// once): when the first send was applied, the call returns, even if the latch expired before
  /// the second one came (the next call then reports the expiry). When the second send fails
  /// too, or would leave later than detail::latch_scripts::resend_horizon (30 s) after the
  /// first, the connection_error is thrown and the count_down may or may not have been applied.
  /// A timeout_error is not asked again (the call ends within the client's timeout) and leaves
  /// the same doubt: read count() before counting down again (a new call counts anew).
  /// Calls on one object run one at a time (threads that share it queue here): the server keeps
  /// only each object's last call.
  void count_down(std::int64_t n = 1) { count_down_in(n, nullptr); }

  /// True when this object's round is open: its count is zero, or a later round started (one
  /// EVALSHA). Throws latch_expired_error when the latch is gone.
  bool try_wait() { return read("try_wait", where()).count == 0; }

  /// Blocks until this object's round is open (as try_wait()). Throws latch_expired_error when the latch's lease ends
  /// first, connection_error / timeout_error when Redis cannot be reached.
  void wait() { uncancellable_wait(std::nullopt); }

  /// Waits at most `timeout` for the count to reach zero: true when it did, false at the
  /// deadline. Throws as wait().
  template <class Rep, class Period>
  bool wait_for(const std::chrono::duration<Rep, Period>& timeout) {
    return uncancellable_wait(detail::deadline_after(timeout));
  }
  template <class Clock, class Duration>
  bool wait_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return uncancellable_wait(detail::deadline_at(deadline));
  }

  /// wait(), wait_for() and wait_until() that another thread can end with `cancel`'s source
  /// (cancel.hpp): true when the count reached zero, false at the deadline or once cancelled
  /// (a token cancelled already: false at once, nothing sent). Throw as wait().
  [[nodiscard]] bool wait(const cancel_token& cancel) {
    return cancellable_wait(cancel, [] { return detail::deadline(); });
  }
  template <class Rep, class Period>
  bool wait_for(const std::chrono::duration<Rep, Period>& timeout, const cancel_token& cancel) {
    return cancellable_wait(cancel, [&] { return detail::deadline_after(timeout); });
  }
  template <class Clock, class Duration>
  bool wait_until(const std::chrono::time_point<Clock, Duration>& deadline, const cancel_token& cancel) {
    return cancellable_wait(cancel, [&] { return detail::deadline_at(deadline); });
  }
#if defined(__cpp_lib_jthread)
  /// The same with a std::stop_token (C++20).
  [[nodiscard]] bool wait(const std::stop_token& stop) {
    return detail::with_stop_token(stop, [&](const cancel_token& cancel) { return wait(cancel); });
  }
  template <class Rep, class Period>
  bool wait_for(const std::chrono::duration<Rep, Period>& timeout, const std::stop_token& stop) {
    return detail::with_stop_token(stop, [&](const cancel_token& cancel) { return wait_for(timeout, cancel); });
  }
  template <class Clock, class Duration>
  bool wait_until(const std::chrono::time_point<Clock, Duration>& deadline, const std::stop_token& stop) {
    return detail::with_stop_token(stop, [&](const cancel_token& cancel) { return wait_until(deadline, cancel); });
  }
#endif

  /// count_down(n), then wait(), both in the round this object is in when it is called.
  void arrive_and_wait(std::int64_t n = 1) {
    const position at = where();
    count_down_in(n, &at);
    const detail::cancel_scope none(nullptr);
    (void)wait_by(std::nullopt, &at);
  }

  /// The count left in this object's round on the server (0 once it opened; one EVALSHA).
  /// Throws latch_expired_error when the latch is gone.
  std::int64_t count() { return read("count", where()).count; }

  /// Starts the latch again with `count` when its current round is open, and moves this object
  /// to the new round: true. False, changing nothing, while the current round counts (this
  /// object stays in its round). A name whose latch is gone gets a new latch (round 1): true.
  /// One EVALSHA; a call sent again after its reply was lost finds the round its first send
  /// started and starts no other. Waiters of the round that opened are told it opened, never
  /// kept for the new one. Throws invalid_argument for a count outside [0, max_latch_count]
  /// (sending nothing), wrong_type_error when the name holds another kind, connection_error /
  /// timeout_error when Redis cannot be reached (the round may or may not have started: read
  /// count(), or call again: a new call may start one more round if this one opened meanwhile).
  bool try_set_count(std::int64_t count) { return start_round("try_set_count", count, nullptr); }

  /// try_set_count(count), throwing latch_error (nothing changed) while the current round counts.
  void reset(std::int64_t count) {
    std::pair<std::int64_t, std::int64_t> counting;  // the round that counts, and its count left
    if (!start_round("reset", count, &counting))
      throw latch_error("reset: latch '" + name_ + "' round " + std::to_string(counting.first) + " has " +
                        std::to_string(counting.second) + " left to count down; nothing changed");
  }

  /// Moves this object to the latch's current round (one EVALSHA) and returns its number: for an
  /// object kept across rounds, whose waits and count_downs act on the round it is in. Throws
  /// latch_expired_error when the latch is gone.
  std::int64_t join_current_round() {
    const position at = where();
    const state now = read("join_current_round", at, true);
    move_to(at, {at.id, now.round, now.round_id}, now.initial, created());
    return now.round;
  }

  /// The round this object is in: 1 from the latch's creation, one more per try_set_count()
  /// that started it again.
  std::int64_t round() const noexcept { return round_.load(std::memory_order_acquire); }
  /// The count this object's round started with (the latch's creation count in round 1).
  std::int64_t initial() const noexcept { return initial_.load(std::memory_order_acquire); }
  /// Whether this object created the latch (its constructor or a try_set_count() that found the
  /// name free) rather than joined it.
  bool created() const noexcept { return created_.load(std::memory_order_acquire); }
  static constexpr std::int64_t max() noexcept { return max_latch_count; }

  const std::string& name() const noexcept { return name_; }
  const std::string& key() const noexcept { return keys_.lock; }
  const latch_options& options() const noexcept { return options_; }
  Client& client() const noexcept { return client_; }

 private:
  // try_set_count(); a refusal's round and count left in *counting.
  bool start_round(const char* what, std::int64_t count, std::pair<std::int64_t, std::int64_t>* counting) {
    const std::string wanted = std::to_string(checked(count, (std::string(what) + ": count").c_str(), 0));
    const std::string call = detail::random_token();
    const position before = where();
    auto send = [&] {
      return run_on_lock([&](connection& c) {
        return detail::latch_scripts::set_count().run(c, {keys_.lock}, {wanted, lease_ms_, call});
      });
    };
    reply_ptr r;
    try {
      r = send();
    } catch (const timeout_error&) {
      throw;  // as the constructor
    } catch (const connection_error&) {
      if constexpr (detail::has_routing_epoch<Client>::value) throw;
      r = send();
    }
    if (detail::as_integer(detail::element(*r, 0)) != 1) {
      if (counting != nullptr)
        *counting = {detail::as_integer(detail::element(*r, 3)), detail::as_integer(detail::element(*r, 2))};
      return false;
    }
    const std::string id(detail::as_string(detail::element(*r, 1)));
    move_to(before,
            {id, detail::as_integer(detail::element(*r, 3)), std::string(detail::as_string(detail::element(*r, 4)))},
            count, id == call || (id == before.id && created()));
    return true;
  }

  // What read() found; count, initial and round are the current round's (`current`), or count
  // is the asked round's: 0 once a later round started.
  struct state {
    std::int64_t count;
    std::int64_t initial;
    std::chrono::milliseconds pttl;
    std::int64_t round;
    std::string round_id;
  };
  // The latch (its @id) and the round this object acts on: its number and id
  // (detail/latch_scripts.hpp: "Rounds").
  struct position {
    std::string id;
    std::int64_t round;
    std::string round_id;
  };

  position where() const {
    const std::lock_guard<std::mutex> g(position_mutex_);
    return {id_, round_.load(std::memory_order_relaxed), round_id_};
  }
  // Moves this object from `from` (where the call began) to `to`; not back to an earlier round
  // of the latch when another thread's call moved it on meanwhile (calls of threads sharing
  // this object may finish in any order). Back to an earlier round otherwise: the latch went
  // back (a failover), and this object follows it.
  void move_to(const position& from, position to, std::int64_t initial, bool created) {
    const std::lock_guard<std::mutex> g(position_mutex_);
    const std::int64_t now = round_.load(std::memory_order_relaxed);
    const bool moved_since = id_ != from.id || now != from.round || round_id_ != from.round_id;
    if (moved_since && to.id == id_ && to.round < now) return;
    id_ = std::move(to.id);
    round_id_ = std::move(to.round_id);
    round_.store(to.round, std::memory_order_release);
    initial_.store(initial, std::memory_order_release);
    created_.store(created, std::memory_order_release);
  }

  static lock_options as_lock_options(const latch_options& o) {
    lock_options l;
    l.key_prefix = o.key_prefix;
    l.lease = o.lease;
    return l;
  }

  static std::int64_t checked(std::int64_t n, const char* what, std::int64_t least) {
    if (n < least || n > max_latch_count)
      throw invalid_argument(std::string("latch ") + what + " must be in [" + std::to_string(least) + ", " +
                             std::to_string(max_latch_count) + "], got " + std::to_string(n));
    return n;
  }

  static void validate(const std::string& name, const latch_options& o, std::int64_t expected) {
    checked(expected, "count", 0);
    detail::validate(name, as_lock_options(o));
    if (o.recheck_interval.count() < 10 || o.recheck_interval > max_lease)
      throw invalid_argument("latch recheck_interval must be in [10 ms, max_lease]");
  }

  static const std::string& record_ms() {
    static const std::string ms = std::to_string(detail::latch_scripts::call_record_ms.count());
    return ms;
  }

  latch_expired_error expired_error(const char* what, const position& at) const {
    return latch_expired_error(std::string(what) + ": latch '" + name_ + "' round " + std::to_string(at.round) +
                               " is gone (its lease ended, it was made anew, or a failover lost the round); it was "
                               "not seen open");
  }

  // client_.run for this latch: a WRONGTYPE refusal names it and the kind holding its name
  // (detail/kind_clash.hpp).
  template <class F>
  decltype(auto) run_on_lock(F&& f) {
    return detail::run_on_lock(client_, keys_.lock, name_, detail::latch_scripts::keys::kind, std::forward<F>(f));
  }

  // count_down(n) in round `in` (nullptr: the one this object is in now).
  void count_down_in(std::int64_t n, const position* in) {
    const std::string amount = std::to_string(checked(n, "count_down: n", 1));
    const std::lock_guard<std::mutex> one_at_a_time(calls_);
    const std::string call = std::to_string(++last_call_);
    const position at = in != nullptr ? *in : where();
    const std::string round = std::to_string(at.round);
    std::optional<detail::steady::time_point> first_sent;
    auto send = [&] {
      return run_on_lock([&](connection& c) {
        const detail::steady::time_point now = detail::steady::now();
        if (!first_sent) first_sent = now;
        else if (now - *first_sent >= detail::latch_scripts::resend_horizon)
          throw connection_error("count_down: latch '" + name_ +
                                 "': too late to send again (its call record may be gone); it may or may not have "
                                 "been applied");
        reply_ptr r = detail::latch_scripts::count_down().run(
            c, {keys_.lock, record_}, {at.id, amount, lease_ms_, call, record_ms(), round, at.round_id});
        return std::pair{detail::as_integer(detail::element(*r, 0)), detail::as_integer(detail::element(*r, 1))};
      });
    };
    std::pair<long long, long long> r;
    try {
      r = send();
    } catch (const timeout_error&) {
      throw;  // asking again would double the time the caller was promised
    } catch (const connection_error&) {
      // cluster / Sentinel clients resend within their own retry budget already
      if constexpr (detail::has_routing_epoch<Client>::value) throw;
      r = send();
    }
    if (r.first == detail::latch_scripts::applied_then_expired) return;  // counted; the next call sees the expiry
    if (r.first == detail::latch_scripts::expired) throw expired_error("count_down", at);
    if (r.first == detail::latch_scripts::round_over)
      throw latch_error("count_down: latch '" + name_ + "': round " + round + " opened and round " +
                        std::to_string(r.second) + " started since; nothing was counted");
    if (r.first == detail::latch_scripts::over_count)
      throw latch_error("count_down: latch '" + name_ + "' has " + std::to_string(r.second) + " left, not " + amount +
                        "; nothing was counted");
  }

  // The state of this object's round `at` (0 once it opened), or with `current` of the latch's
  // current round (the latch at.id: its rounds after a lost one too). Throws
  // latch_expired_error when the latch is gone, or (not `current`) the round is lost.
  state read(const char* what, const position& at, bool current = false) {
    const std::string round = std::to_string(at.round);
    reply_ptr r = run_on_lock([&](connection& c) {
      return detail::latch_scripts::read().run(c, {keys_.lock}, {at.id, round, at.round_id});
    });
    const std::int64_t count = detail::as_integer(detail::element(*r, current ? 5 : 0));
    if (count == detail::latch_scripts::expired) throw expired_error(what, at);
    return {count, detail::as_integer(detail::element(*r, 1)),
            std::chrono::milliseconds(detail::as_integer(detail::element(*r, 2))),
            detail::as_integer(detail::element(*r, 3)), std::string(detail::as_string(detail::element(*r, 4)))};
  }

  // A wait without a token, also within a cancellable call (an observer's): never cancelled.
  bool uncancellable_wait(const detail::deadline& d) {
    const detail::cancel_scope none(nullptr);
    return wait_by(d);
  }
  // The deadline is made under the scope, as lockable.hpp's run_cancellable does: one made
  // before cancelled()'s atomic load and read after it makes GCC's -Wmaybe-uninitialized (-O2)
  // take a disengaged deadline's time as possibly read.
  template <class Deadline>
  bool cancellable_wait(const cancel_token& cancel, Deadline&& deadline) {
    if (cancel.cancelled()) return false;
    const detail::cancel_scope scope(detail::state_of(cancel));
    return wait_by(deadline());
  }

  // Reads, subscribes, reads again, then sleeps until the notice, the lease's end or d
  // (detail::wait_for_release). A read that finds the count zero ends the wait. For round `in`
  // (nullptr: the one this object is in now).
  bool wait_by(const detail::deadline& d, const position* in = nullptr) {
    detail::call_deadline bounded(d);
    const position at = in != nullptr ? *in : where();
    auto attempt = [&]() -> std::optional<std::chrono::milliseconds> {
      const state s = read("wait", at);
      if (s.count == 0) return std::nullopt;
      return s.pttl;
    };
    // A notice only says "read again": the count decides (it may be for an earlier latch).
    auto never_handed = [](detail::subscriber::subscription&) { return false; };
    return detail::wait_for_release(
        client_, keys_.channel, d,
        detail::wait_plan{std::chrono::milliseconds(10), std::chrono::milliseconds(200), options_.recheck_interval},
        attempt, never_handed);
  }

  Client& client_;
  std::string name_;
  latch_options options_;
  detail::latch_scripts::keys keys_;
  std::string lease_ms_;
  std::string record_;                 // this object's call record (detail/latch_scripts.hpp)
  mutable std::mutex position_mutex_;  // id_, round_id_ with round_: where()/move_to()
  std::string id_, round_id_;
  std::atomic<std::int64_t> round_{1}, initial_{0};
  std::atomic<bool> created_{false};
  std::mutex calls_;             // one count_down at a time
  std::uint64_t last_call_ = 0;  // under calls_: the number of this object's last call
};

using latch = basic_latch<client>;

}  // namespace redislock
