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
#include <redislock/detail/object_hold.hpp>
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
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace redislock {

template <class Client>
class basic_semaphore : public detail::object_hold<basic_semaphore<Client>, Client, detail::semaphore_scripts::keys> {
  using base = detail::object_hold<basic_semaphore<Client>, Client, detail::semaphore_scripts::keys>;

 public:
  /// `permits`: N, used when the semaphore is idle on the server (see set_permits()).
  /// Throws invalid_argument for permits outside [1, max_permits], an empty name or a lease
  /// outside (0, max_lease]. Sends nothing.
  basic_semaphore(Client& client, std::string name, std::int64_t permits, lock_options options = {})
      : base(client, std::move(name), std::move(options)),
        permits_(detail::semaphore_scripts::checked_permits(permits, "semaphore")) {
    this->describe_lease();
  }

  basic_semaphore(const basic_semaphore&) = delete;
  basic_semaphore& operator=(const basic_semaphore&) = delete;

  /// Releases the permit if this object still holds it (never throws).
  ~basic_semaphore() {
    if (this->owns_lock()) this->unlock();
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
  /// The same with `lease` for this permit's hold instead of options().lease (lock(lease)).
  template <class Rep, class Period>
  void acquire(const std::chrono::duration<Rep, Period>& lease) {
    this->lock(lease);
  }
  template <class Rep, class Period, class LeaseRep, class LeasePeriod>
  bool try_acquire_for(const std::chrono::duration<Rep, Period>& timeout,
                       const std::chrono::duration<LeaseRep, LeasePeriod>& lease) {
    return this->try_lock_for(timeout, lease);
  }
  template <class Clock, class Duration, class LeaseRep, class LeasePeriod>
  bool try_acquire_until(const std::chrono::time_point<Clock, Duration>& deadline,
                         const std::chrono::duration<LeaseRep, LeasePeriod>& lease) {
    return this->try_lock_until(deadline, lease);
  }
  /// Gives the permit back (unlock()): never throws; the outcome is in last_release()
  /// (unlock_and_report() returns it, and throws when Redis could not be asked).
  void release() noexcept { this->unlock(); }

  // --- the permit count ---

  /// The permit count on the server (the one every holder is admitted by); this object's own
  /// while the semaphore is idle (nothing stored). One round trip.
  std::int64_t permits() { return counts().first; }
  /// Permits free right now: permits() minus the valid holds (0 while shrunk below them).
  std::int64_t available() {
    const auto [n, held] = counts();
    return n > held ? n - held : 0;
  }
  /// Sets the permit count for every client of this name while anyone holds (and this
  /// object's own, which seeds the semaphore when it is idle). The count is stored with the
  /// holders: once nobody holds it goes with them, and the next acquirer's own count applies.
  /// Growing hands the new permits to the longest waiting live waiters at once; shrinking
  /// revokes nothing: holders above the new count keep their permits until they release, and
  /// nobody is admitted until fewer than `permits` hold.
  /// Throws invalid_argument for permits outside [1, max_permits] (sending nothing).
  void set_permits(std::int64_t permits) {
    const std::string n = std::to_string(detail::semaphore_scripts::checked_permits(permits, "set_permits"));
    permits_.store(permits, std::memory_order_relaxed);
    // "#": no waiter's token, so a wait of this object on another thread keeps its place.
    run_integer(detail::semaphore_scripts::set_permits(), {"#", keys_.waiter_prefix, n});
  }

  // --- the hold ---

  /// unlock_and_report(), extend(), remaining_lease(), still_held(), owns_lock(), lost(),
  /// lease_confirmed_until() and fencing_token() (detail/object_hold.hpp) are the members of
  /// every lock kind, for this object's permit. Fencing tokens strictly increase per name in
  /// the order drawn; holders of a semaphore overlap, so a storage that checks them keeps one
  /// "highest seen" per resource a holder writes, not one per semaphore.

  /// This permit's owner token, as stored among the holders (a new one per acquisition).
  std::string owner_id() const { return this->current_token(); }

  // name(), key(), options(), client(), last_release(): detail::lock_core.

 private:
  friend base;
  friend class detail::timed_lockable<basic_semaphore>;
  using base::acquire;  // acquire(deadline), for timed_lockable (the public acquire() hides it)
  using base::channel_subscription_;
  using base::client_;
  using base::keys_;
  using base::lease_ms_;
  using base::name_;
  using base::options_;
  using base::token_;
  using base::wait_lease_ms_;
  using typename base::attempt_result;

  std::string already_held_message() const {
    return "acquire: this object already holds a permit of semaphore '" + name_ +
           "' (one permit per object: use another object); it would wait for itself";
  }

  // The first attempt only tries, unless our channel is still subscribed from an earlier wait
  // (and we may wait): then it queues at once; try_acquire() never queues.
  bool wait_for_hold(const detail::deadline& d) {
    bool first = true, queued = false;
    auto attempt = [&] {
      const bool queue = !std::exchange(first, false) || (channel_subscription_.active() && !detail::passed(d));
      queued = queued || queue;
      return attempt_once(queue ? "wait" : "try");
    };
    return this->wait_queued(d, attempt, queued);
  }

  attempt_result attempt_leave() { return attempt_once("leave"); }

  std::string permits_arg() const { return std::to_string(permits_.load(std::memory_order_relaxed)); }

  // Runs a script on the holders key with all four keys, or only holders and fence.
  std::int64_t run_integer(const script& s, std::initializer_list<std::string_view> args, bool all_keys = true) {
    return this->run_on_lock([&](connection& c) {
      if (all_keys) return detail::as_integer(*s.run(c, {keys_.lock, keys_.fence, keys_.queue, keys_.waiters}, args));
      return detail::as_integer(*s.run(c, {keys_.lock, keys_.fence}, args));
    });
  }

  std::pair<std::int64_t, std::int64_t> counts() {
    const std::int64_t own = permits_.load(std::memory_order_relaxed);
    return this->run_on_lock([&](connection& c) {
      reply_ptr r =
          detail::semaphore_scripts::count().run(c, {keys_.lock}, {"#", keys_.waiter_prefix, std::to_string(own)});
      const std::int64_t stored = detail::as_integer(detail::element(*r, 0));
      return std::pair{stored > 0 ? stored : own, detail::as_integer(detail::element(*r, 1))};
    });
  }

  std::int64_t send_release() { return release_token(token_); }
  std::int64_t release_token(const std::string& token) {
    return run_integer(detail::semaphore_scripts::release(), {token, keys_.waiter_prefix, permits_arg()});
  }
  std::int64_t run_extend(const std::string& token, const std::string& lease_ms) {
    return run_integer(detail::semaphore_scripts::extend(), {token, keys_.waiter_prefix, permits_arg(), lease_ms},
                       false);
  }
  std::int64_t run_remaining(const std::string& token) {
    return run_integer(detail::semaphore_scripts::remaining(), {token, keys_.waiter_prefix, permits_arg()}, false);
  }
  std::int64_t run_fence(const std::string& token) {
    return run_integer(detail::semaphore_scripts::fence(),
                       {token, keys_.waiter_prefix, permits_arg(), detail::fence_lifetime_arg(options_)}, false);
  }
  detail::renewal_target renewal_for(const std::string& token) const {
    return {&detail::semaphore_scripts::extend(),
            {keys_.lock, keys_.fence},
            {token, keys_.waiter_prefix, permits_arg(), lease_ms_},
            3};
  }

  // mode: "wait", "try" or "leave" (see semaphore_scripts::acquire). An attempt whose reply
  // was lost (and that may have taken a permit) ends the wait with an error: the permit is
  // released (owner-checked) and the token replaced (object_hold's release_unheard_attempt).
  attempt_result attempt_once(std::string_view mode) {
    const detail::steady::time_point sent = this->attempt_sent(mode);
    reply_ptr r = this->run_on_lock([&](connection& c) {
      return detail::semaphore_scripts::acquire().run(
          c, {keys_.lock, keys_.fence, keys_.queue, keys_.waiters},
          {token_, keys_.waiter_prefix, permits_arg(), lease_ms_, mode, options_.fair ? "1" : "0", wait_lease_ms_});
    });
    if (detail::as_integer(detail::element(*r, 0)) == 1) return this->finish_attempt(sent);
    return std::chrono::milliseconds(detail::as_integer(detail::element(*r, 1)));
  }

  std::atomic<std::int64_t> permits_;  // this object's count: seeds an idle semaphore
};

using semaphore = basic_semaphore<client>;

}  // namespace redislock
