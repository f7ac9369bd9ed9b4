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
        record_(keys_.record(detail::random_token())),
        initial_(expected) {
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
    id_ = detail::as_string(detail::element(*r, 1));
    // Ours when it carries the id we proposed: a create sent again after its reply was lost
    // (here, or by the Client) finds the latch its first send made, and joins it.
    created_ = outcome == 1 || id_ == fresh;
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
  void count_down(std::int64_t n = 1) {
    const std::string amount = std::to_string(checked(n, "count_down: n", 1));
    const std::lock_guard<std::mutex> one_at_a_time(calls_);
    const std::string call = std::to_string(++last_call_);
    std::optional<detail::steady::time_point> first_sent;
    auto send = [&] {
      return run_on_lock([&](connection& c) {
        const detail::steady::time_point now = detail::steady::now();
        if (!first_sent) first_sent = now;
        else if (now - *first_sent >= detail::latch_scripts::resend_horizon)
          throw connection_error("count_down: latch '" + name_ +
                                 "': too late to send again (its call record may be gone); it may or may not have "
                                 "been applied");
        reply_ptr r = detail::latch_scripts::count_down().run(c, {keys_.lock, record_},
                                                              {id_, amount, lease_ms_, call, record_ms()});
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
    if (r.first == detail::latch_scripts::expired) throw expired_error("count_down");
    if (r.first == detail::latch_scripts::over_count)
      throw latch_error("count_down: latch '" + name_ + "' has " + std::to_string(r.second) + " left, not " + amount +
                        "; nothing was counted");
  }

  /// True when the count is zero (one EVALSHA). Throws latch_expired_error when the latch is gone.
  bool try_wait() { return read("try_wait").count == 0; }

  /// Blocks until the count is zero. Throws latch_expired_error when the latch's lease ends
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

  /// count_down(n), then wait().
  void arrive_and_wait(std::int64_t n = 1) {
    count_down(n);
    wait();
  }

  /// The count left on the server (one EVALSHA). Throws latch_expired_error when the latch is gone.
  std::int64_t count() { return read("count").count; }

  /// The count the latch was created with.
  std::int64_t initial() const noexcept { return initial_; }
  /// Whether this object created the latch (rather than joined it).
  bool created() const noexcept { return created_; }
  static constexpr std::int64_t max() noexcept { return max_latch_count; }

  const std::string& name() const noexcept { return name_; }
  const std::string& key() const noexcept { return keys_.lock; }
  const latch_options& options() const noexcept { return options_; }
  Client& client() const noexcept { return client_; }

 private:
  struct state {
    std::int64_t count;
    std::chrono::milliseconds pttl;
  };

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

  latch_expired_error expired_error(const char* what) const {
    return latch_expired_error(std::string(what) + ": latch '" + name_ +
                               "' is gone (its lease ended, or it was made anew); it was not seen open");
  }

  // client_.run for this latch: a WRONGTYPE refusal names it and the kind holding its name
  // (detail/kind_clash.hpp).
  template <class F>
  decltype(auto) run_on_lock(F&& f) {
    return detail::run_on_lock(client_, keys_.lock, name_, detail::latch_scripts::keys::kind, std::forward<F>(f));
  }

  state read(const char* what) {
    reply_ptr r = run_on_lock([&](connection& c) { return detail::latch_scripts::read().run(c, {keys_.lock}, {id_}); });
    const std::int64_t count = detail::as_integer(detail::element(*r, 0));
    if (count == detail::latch_scripts::expired) throw expired_error(what);
    return {count, std::chrono::milliseconds(detail::as_integer(detail::element(*r, 2)))};
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
  // (detail::wait_for_release). A read that finds the count zero ends the wait.
  bool wait_by(const detail::deadline& d) {
    detail::call_deadline bounded(d);
    auto attempt = [&]() -> std::optional<std::chrono::milliseconds> {
      const state s = read("wait");
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
  std::string record_;  // this object's call record (detail/latch_scripts.hpp)
  std::int64_t initial_;
  std::string id_;
  bool created_ = false;
  std::mutex calls_;             // one count_down at a time
  std::uint64_t last_call_ = 0;  // under calls_: the number of this object's last call
};

using latch = basic_latch<client>;

}  // namespace redislock
