#pragma once
/// @file semaphore.hpp
/// @brief redislock::basic_semaphore — at most N holders of one name at a time, each with its
/// own owner token, lease on the server's clock and fencing token.
///
/// Shaped like std::counting_semaphore where it can be: acquire(), try_acquire(),
/// try_acquire_for(), try_acquire_until(), release(). It also models TimedLockable (lock(),
/// try_lock*(), unlock() are the same calls), so std::unique_lock and std::lock_guard are its
/// permit guards. Key layout and scripts: detail/semaphore_scripts.hpp.
///
/// - One object is one would-be holder of one permit (as a redislock::mutex object is of its
///   lock): take one object per worker that may hold a permit at the same time. Threads that
///   share one object queue locally first. Asking again while this object holds its permit
///   throws lock_error (it would wait for itself).
/// - Every permit held is an acquisition like a lock's: its own token, its own lease on the
///   server's clock (a holder that crashes or freezes gives its permit back when its lease
///   ends: the next script on the name counts it out), auto_renew by the watchdog, lost() /
///   on_lost, extend(), remaining_lease(), and fencing_token() (tokens strictly increase per
///   name across all holders and lock kinds, in the order they are drawn).
/// - The permit count N lives on the server with the holders, so all clients agree: the count
///   an object is made with only seeds an idle semaphore; set_permits() changes it for everyone
///   (shrinking never revokes a valid hold; growing admits queued waiters at once).
/// - Waiting does not poll: a waiter subscribes to its own channel, queues on the server and
///   sleeps; a release hands its permit to the longest waiting live waiter in the same script
///   (told on its channel, no round trip). A waiter also wakes when the earliest lease among
///   the holders may run out. lock_options::fair makes permits freed by a lapsed lease go to
///   the head of the queue too (detail/wake_wait.hpp).
/// - Cost: one EVALSHA per attempt, release or renewal (an uncontended acquire + release: two).

#include <redislock/client.hpp>
#include <redislock/detail/lease_keeper.hpp>
#include <redislock/detail/lock_core.hpp>
#include <redislock/detail/lockable.hpp>
#include <redislock/detail/random.hpp>
#include <redislock/detail/semaphore_scripts.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/detail/wake_wait.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/reply.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace redislock {

/// The largest permit count a semaphore accepts.
inline constexpr std::int64_t max_permits = 1000000;

template <class Client>
class basic_semaphore : public detail::lock_core<Client, detail::semaphore_scripts::keys>,
                        public detail::timed_lockable<basic_semaphore<Client>> {
  using core = detail::lock_core<Client, detail::semaphore_scripts::keys>;

 public:
  /// `permits`: N, used when the semaphore is idle on the server (see set_permits()).
  /// Throws invalid_argument for permits outside [1, max_permits], an empty name or a lease
  /// outside (0, max_lease]. Sends nothing.
  basic_semaphore(Client& client, std::string name, std::int64_t permits, lock_options options = {})
      : core(client, std::move(name), std::move(options)), permits_(checked_permits(permits, "semaphore")) {
    channel_ = keys_.waiter_prefix + tokens_.id();
    lease_ms_ = std::to_string(options_.lease.count());
    wait_lease_ms_ = std::to_string(options_.wait_lease.count());
    token_ = tokens_.next();
  }

  basic_semaphore(const basic_semaphore&) = delete;
  basic_semaphore& operator=(const basic_semaphore&) = delete;

  /// Releases the permit if this object still holds it (never throws).
  ~basic_semaphore() {
    if (held_.load(std::memory_order_acquire)) this->unlock();
  }

  // --- std::counting_semaphore's names (lock() / try_lock*() / unlock() are the same calls) ---

  /// Blocks until this object holds a permit. Throws lock_error when it already holds one,
  /// connection_error / timeout_error when Redis cannot be reached.
  void acquire() { this->lock(); }
  bool try_acquire() { return this->try_lock(); }
  template <class Rep, class Period>
  bool try_acquire_for(const std::chrono::duration<Rep, Period>& timeout) {
    return this->try_lock_for(timeout);
  }
  template <class Clock, class Duration>
  bool try_acquire_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return this->try_lock_until(deadline);
  }
  /// Gives the permit back (unlock()): never throws; the outcome is in last_release().
  void release() noexcept { this->unlock(); }

  /// Like release(), but returns the outcome and throws when Redis could not be asked. The
  /// local hold is dropped either way. lease_expired: the lease had run out (or was found lost()).
  release_status unlock_and_report() {
    if (!held_.load(std::memory_order_acquire)) return this->record(release_status::not_held);
    lease_.stop();  // before the release is sent: no renewal of this hold is sent after it
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

  // --- the permit count ---

  /// The permit count on the server (the one every holder is admitted by); this object's own
  /// while the semaphore is idle (nothing stored). One round trip.
  std::int64_t permits() { return counts().first; }
  /// Permits free right now: permits() minus the valid holds (0 while shrunk below them).
  std::int64_t available() {
    const auto [n, held] = counts();
    return n > held ? n - held : 0;
  }
  /// Sets the permit count for every client of this name, from now on (and this object's own,
  /// which seeds the semaphore when it is idle). Growing hands the new permits to the longest
  /// waiting live waiters at once; shrinking revokes nothing: holders above the new count keep
  /// their permits until they release, and nobody is admitted until fewer than `permits` hold.
  /// Throws invalid_argument for permits outside [1, max_permits] (sending nothing).
  void set_permits(std::int64_t permits) {
    const std::string n = std::to_string(checked_permits(permits, "set_permits"));
    permits_.store(permits, std::memory_order_relaxed);
    // "#": no waiter's token, so a wait of this object on another thread keeps its place.
    run_integer(detail::semaphore_scripts::set_permits(), {"#", keys_.waiter_prefix, n});
  }

  // --- the hold (the same members as every lock kind) ---

  /// Resets the lease to `lease` from now (server clock) if the permit is still ours; false
  /// when it had already run out (which also marks it lost()). Throws lock_error when this
  /// object holds no permit.
  bool extend(std::chrono::milliseconds lease) {
    const std::string ms = detail::checked_lease(lease, "extend", &options_);
    require_held("extend");
    const std::string token = current_token();
    const bool ours =
        run_integer(detail::semaphore_scripts::extend(), {token, keys_.waiter_prefix, permits_arg(), ms}, false) == 1;
    if (!ours) mark_lost_if_current(token);
    return ours;
  }
  bool extend() { return extend(options_.lease); }

  /// What is left of this permit's lease per the server; zero when not held. One round trip.
  std::chrono::milliseconds remaining_lease() {
    if (!held_.load(std::memory_order_acquire)) return std::chrono::milliseconds(0);
    return detail::to_remaining(run_integer(detail::semaphore_scripts::remaining(),
                                            {current_token(), keys_.waiter_prefix, permits_arg()}, false));
  }
  /// True when the server confirms that this object's permit is still valid (one round trip).
  bool still_held() { return remaining_lease().count() > 0; }

  /// This object's local belief: it acquired a permit and has not released it.
  bool owns_lock() const noexcept { return held_.load(std::memory_order_acquire); }
  /// True when the current (or most recent) permit's lease was found lost: by the watchdog
  /// (auto_renew), an extend() that returned false, or a fencing_token() that found it gone.
  /// Reset by the next acquisition. A lost permit is still released (lease_expired).
  bool lost() const noexcept { return lease_.lost(); }
  /// As basic_mutex::lease_confirmed_until(), for this object's permit.
  std::optional<std::chrono::steady_clock::time_point> lease_confirmed_until() const noexcept {
    return lease_.confirmed_until();
  }

  /// The fencing token of the current permit: strictly increasing per name across all holders,
  /// clients and lock kinds, in the order drawn (detail/fence_scripts.hpp). Holders of a
  /// semaphore overlap, so the storage must accept each holder's token (e.g. per holder slot),
  /// not only the highest. Drawn on the first call per hold with one round trip, only while the
  /// lease is valid, then cached. Throws lock_error when this object holds no permit, or when
  /// its lease has run out (then lost() is true).
  std::uint64_t fencing_token() {
    require_held("fencing_token");
    std::string token;
    {
      std::lock_guard<std::mutex> g(token_mutex_);
      if (fence_ != 0) return fence_;
      token = token_;
    }
    const std::int64_t fence =
        run_integer(detail::semaphore_scripts::fence(), {token, keys_.waiter_prefix, permits_arg()}, false);
    if (fence <= 0) {
      mark_lost_if_current(token);
      throw lock_error("fencing_token: the lease on a permit of semaphore '" + name_ + "' has run out");
    }
    std::lock_guard<std::mutex> g(token_mutex_);
    if (token != token_) return static_cast<std::uint64_t>(fence);  // released meanwhile
    if (fence_ == 0) fence_ = static_cast<std::uint64_t>(fence);
    return fence_;
  }

  /// This permit's owner token, as stored among the holders (a new one per acquisition).
  std::string owner_id() const { return current_token(); }

  // name(), key(), options(), client(), last_release(): detail::lock_core.

 private:
  friend class detail::timed_lockable<basic_semaphore>;
  using core::client_;
  using core::keys_;
  using core::name_;
  using core::options_;

  static std::int64_t checked_permits(std::int64_t n, const char* what) {
    if (n < 1 || n > max_permits)
      throw invalid_argument(std::string(what) + ": permits must be in [1, " + std::to_string(max_permits) + "], got " +
                             std::to_string(n));
    return n;
  }

  bool acquire(const detail::deadline& d) {
    if (held_.load(std::memory_order_acquire) &&
        holder_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id())
      throw lock_error("acquire: this object already holds a permit of semaphore '" + name_ +
                       "' (one permit per object: use another object); it would wait for itself");
    if (!gate_.lock_until(d)) return false;
    bool acquired = false;
    try {
      acquired = wait_for_permit(d);
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

  // As basic_mutex::wait_for_lock: the first attempt, then, subscribed to our own channel,
  // queue on the server and sleep until a release hands us a permit, or the earliest holder's
  // lease may run out. Leave the queue when the deadline passes or the wait throws.
  bool wait_for_permit(const detail::deadline& d) {
    channel_subscription_.discard_pending();  // a notice for an earlier wait completes nothing
    bool first = true, queued = false;
    auto attempt = [&] {
      // A first attempt queues at once when our channel is still subscribed from an earlier
      // wait (and we may wait); otherwise it only tries, and try_acquire() never queues.
      const bool queue = !std::exchange(first, false) || (channel_subscription_.active() && !detail::passed(d));
      queued = queued || queue;
      return attempt_once(queue ? "wait" : "try");
    };
    auto handed_over = [&](detail::subscriber::subscription& s) {
      if (!s.take_message(token_)) return false;  // a late notice for an earlier acquisition
      finish_attempt(queue_sent_);                // the release made us a holder
      return true;
    };
    bool acquired = false;
    try {
      acquired = detail::wait_for_release(
          client_, channel_, d,
          detail::wait_plan{options_.retry_min, options_.retry_max, options_.recheck_interval, true}, attempt,
          handed_over, &channel_subscription_);
    } catch (...) {
      if (queued) leave_after_failure();
      throw;
    }
    if (acquired || !queued) return acquired;
    try {
      if (!attempt_once("leave")) return true;  // a hand-off reached us meanwhile
    } catch (...) {
      leave_after_failure();
      throw;
    }
    rotate_token();  // out of the queue without a permit: a late notice must match nothing
    return false;
  }

  // As basic_mutex::leave_after_failure: leave (passing on a permit handed to us meanwhile);
  // when Redis cannot be told, stop listening (releases then skip our place) and take a new
  // token (a permit handed to the old one lapses with its lease).
  void leave_after_failure() noexcept {
    try {
      if (!attempt_once("leave")) pass_on_handoff();
      return;
    } catch (...) {
    }
    channel_subscription_.reset();
    try {
      rotate_token();
    } catch (...) {
    }
  }

  void pass_on_handoff() {
    held_.store(false, std::memory_order_release);
    lease_.stop();
    send_release();
    rotate_token();
  }

  void rotate_token() {
    std::string fresh = tokens_.next();
    std::lock_guard<std::mutex> g(token_mutex_);
    token_.swap(fresh);
    fence_ = 0;
  }

  void mark_lost_if_current(const std::string& token) {
    std::lock_guard<std::mutex> g(token_mutex_);
    if (token == token_) lease_.mark_lost();
  }

  std::string current_token() const {
    std::lock_guard<std::mutex> g(token_mutex_);
    return token_;
  }

  std::string permits_arg() const { return std::to_string(permits_.load(std::memory_order_relaxed)); }

  // Runs a script on the holders key (all four keys, or only holders and fence).
  std::int64_t run_integer(const script& s, std::initializer_list<std::string_view> args, bool all_keys = true) {
    return client_.run(keys_.lock, [&](connection& c) {
      if (all_keys) return detail::as_integer(*s.run(c, {keys_.lock, keys_.fence, keys_.queue, keys_.waiters}, args));
      return detail::as_integer(*s.run(c, {keys_.lock, keys_.fence}, args));
    });
  }

  std::pair<std::int64_t, std::int64_t> counts() {
    const std::int64_t own = permits_.load(std::memory_order_relaxed);
    return client_.run(keys_.lock, [&](connection& c) {
      reply_ptr r =
          detail::semaphore_scripts::count().run(c, {keys_.lock}, {"#", keys_.waiter_prefix, std::to_string(own)});
      const std::int64_t stored = detail::as_integer(detail::element(*r, 0));
      return std::pair{stored > 0 ? stored : own, detail::as_integer(detail::element(*r, 1))};
    });
  }

  std::int64_t send_release() {
    return run_integer(detail::semaphore_scripts::release(), {token_, keys_.waiter_prefix, permits_arg()});
  }

  using attempt_result = std::optional<std::chrono::milliseconds>;

  // mode: "wait", "try" or "leave" (see semaphore_scripts::acquire). The token is only
  // replaced after a release or a wait given up, so an attempt whose reply was lost (and that
  // may have taken a permit) is recognised as ours by the next attempt.
  attempt_result attempt_once(std::string_view mode) {
    const detail::steady::time_point sent = detail::steady::now();
    if (mode == "wait") queue_sent_ = sent;  // a hand-off's lease starts after our last "wait"
    reply_ptr r = client_.run(keys_.lock, [&](connection& c) {
      return detail::semaphore_scripts::acquire().run(
          c, {keys_.lock, keys_.fence, keys_.queue, keys_.waiters},
          {token_, keys_.waiter_prefix, permits_arg(), lease_ms_, mode, options_.fair ? "1" : "0", wait_lease_ms_});
    });
    if (detail::as_integer(detail::element(*r, 0)) == 1) return finish_attempt(sent);
    return std::chrono::milliseconds(detail::as_integer(detail::element(*r, 1)));
  }

  attempt_result finish_attempt(detail::steady::time_point sent) {
    {
      std::lock_guard<std::mutex> g(token_mutex_);
      fence_ = 0;  // drawn on demand (fencing_token())
    }
    acquired_at_ = sent;
    lease_.acquired();
    held_.store(true, std::memory_order_release);
    return std::nullopt;
  }

  // As basic_mutex::start_renewal: a hand-off's lease counts from our last "wait", which can
  // be up to recheck_interval old; when that leaves less than a third of the lease, one
  // owner-checked extend restarts the count from now.
  void start_renewal() {
    const detail::steady::time_point now = detail::steady::now();
    if (acquired_at_ + options_.lease - options_.lease / 3 <= now) {
      if (run_integer(detail::semaphore_scripts::extend(), {token_, keys_.waiter_prefix, permits_arg(), lease_ms_},
                      false) == 1)
        acquired_at_ = now;
      else lease_.mark_lost();  // it ran out before we could renew it: the holder must know
    }
    lease_.start(client_, options_, name_, keys_.lock, renewal(), acquired_at_);
  }

  // The current permit's owner-checked extend (for the watchdog and min_replicas).
  detail::renewal_target renewal() const {
    return {&detail::semaphore_scripts::extend(),
            {keys_.lock, keys_.fence},
            {current_token(), keys_.waiter_prefix, permits_arg(), lease_ms_}};
  }

  void require_held(const char* what) const {
    detail::require_held(held_.load(std::memory_order_acquire), what, name_, "this object");
  }

  void drop_local_hold(release_status status) noexcept {
    try {
      rotate_token();
    } catch (...) {
    }
    holder_thread_.store(std::thread::id(), std::memory_order_relaxed);
    held_.store(false, std::memory_order_release);
    this->record(status);
    gate_.unlock();
  }

  std::atomic<std::int64_t> permits_;  // this object's count: seeds an idle semaphore
  detail::token_sequence tokens_;      // used by the thread that holds gate_
  std::string channel_, lease_ms_, wait_lease_ms_;
  detail::subscriber::subscription channel_subscription_;  // kept between waits (gate holder only)
  std::string token_;        // written only by the thread that holds gate_, under token_mutex_
  std::uint64_t fence_ = 0;  // this permit's fencing token once asked for; under token_mutex_
  mutable std::mutex token_mutex_;
  detail::local_gate gate_;
  std::atomic<bool> held_{false};
  std::atomic<std::thread::id> holder_thread_{};
  detail::steady::time_point acquired_at_;  // send time of the acquiring attempt (gate holder only)
  detail::steady::time_point queue_sent_;   // send time of the last "wait" attempt (gate holder only)
  detail::lease_keeper lease_;              // renewal and lost flag of the current permit
};

using semaphore = basic_semaphore<client>;

}  // namespace redislock
