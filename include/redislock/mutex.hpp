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
/// Waiting does not poll: a waiter subscribes (through its client's shared pub/sub
/// connection) to the channel a release publishes on and sleeps until notified, or until the
/// holder's lease runs out (see detail/wake_wait.hpp). With lock_options::fair, waiters queue
/// on the server and a release hands the lock to the longest waiting one
/// (detail/fair_scripts.hpp).

#include <redislock/client.hpp>
#include <redislock/detail/fair_scripts.hpp>
#include <redislock/detail/lease_keeper.hpp>
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
#include <utility>

namespace redislock {

template <class Client>
class basic_mutex : public detail::timed_lockable<basic_mutex<Client>> {
 public:
  using client_type = Client;

  /// Throws invalid_argument for an empty name or a lease outside (0, max_lease]. Sends nothing.
  basic_mutex(Client& client, std::string name, lock_options options = {})
      : client_(client), name_(std::move(name)), options_(std::move(options)) {
    detail::validate(name_, options_);
    detail::require_watchdog_if_renewing<Client>(options_);
    key_ = detail::base_key(name_, options_);
    fence_key_ = key_ + ":fence";
    channel_ = key_ + ":released";
    queue_key_ = key_ + ":queue";
    waiters_key_ = key_ + ":waiters";
    waiter_prefix_ = key_ + ":w:";
    lease_ms_ = std::to_string(options_.lease.count());
    wait_lease_ms_ = std::to_string(options_.wait_lease.count());
    token_ = detail::random_token();
  }

  basic_mutex(const basic_mutex&) = delete;
  basic_mutex& operator=(const basic_mutex&) = delete;

  /// Releases the lock if this object still holds it (never throws).
  ~basic_mutex() {
    if (held_.load(std::memory_order_acquire)) this->unlock();
  }

  /// Like unlock(), but returns the outcome and throws when Redis could not be asked
  /// (connection_error, timeout_error, reply_error). The local hold is dropped either way.
  release_status release() {
    if (!held_.load(std::memory_order_acquire)) return record(release_status::not_held);
    lease_.stop();  // before the release is sent: waits for a renewal in flight (watchdog.hpp)
    release_status status = release_status::failed;
    try {
      const std::int64_t deleted = client_.run(key_, [&](connection& c) {
        if (options_.fair)
          return detail::as_integer(*detail::fair_scripts::release().run(
              c, {key_, fence_key_, queue_key_, waiters_key_}, {token_, channel_, waiter_prefix_}));
        return detail::as_integer(*detail::mutex_scripts::release().run(c, {key_}, {token_, channel_}));
      });
      status = lease_.outcome(deleted == 1);
    } catch (...) {
      drop_local_hold(release_status::failed);
      throw;
    }
    drop_local_hold(status);
    return status;
  }

  /// Outcome of the most recent release by this object (not_held before any).
  release_status last_release() const noexcept { return last_release_.load(std::memory_order_acquire); }

  /// Resets the lease to `lease` from now (server clock) if the lock is still ours.
  /// Returns false when the lease had already run out (the lock may be someone else's).
  /// Throws lock_error when this object does not hold the lock. false also marks it lost().
  /// With auto_renew the watchdog renews to options().lease again at its next turn.
  bool extend(std::chrono::milliseconds lease) {
    if (lease.count() <= 0 || lease > max_lease) throw invalid_argument("extend: lease must be in (0, max_lease]");
    require_held("extend");
    detail::check_extend_under_renewal(options_, lease);
    const std::string ms = std::to_string(lease.count()), token = current_token();
    const bool ours = client_.run(key_, [&](connection& c) {
      return detail::as_integer(*detail::mutex_scripts::extend().run(c, {key_}, {token, ms}));
    }) == 1;
    if (!ours) lease_.mark_lost();
    return ours;
  }
  bool extend() { return extend(options_.lease); }

  /// Asks the server how much of our lease is left: a positive duration while the lock is
  /// ours, zero when it is not (never acquired, released, or lost). One round trip.
  std::chrono::milliseconds remaining_lease() {
    if (!held_.load(std::memory_order_acquire)) return std::chrono::milliseconds(0);
    const std::string token = current_token();
    const std::int64_t pttl = client_.run(key_, [&](connection& c) {
      return detail::as_integer(*detail::mutex_scripts::remaining().run(c, {key_}, {token}));
    });
    if (pttl == -1) return max_lease;  // ours, without expiry (someone PERSISTed it)
    return std::chrono::milliseconds(pttl > 0 ? pttl : 0);
  }

  /// True when the server confirms that this object's lease is still valid (one round trip).
  bool still_held() { return remaining_lease().count() > 0; }

  /// This object's local belief: lock() succeeded and unlock() has not been called.
  /// The lease may have run out meanwhile; still_held() asks the server.
  bool owns_lock() const noexcept { return held_.load(std::memory_order_acquire); }

  /// True when the current (or most recent) acquisition's lease was found lost: by the
  /// watchdog (auto_renew) or by an extend() that returned false. Reset by the next acquisition.
  /// A lost lock is still released with unlock() (it reports release_status::lease_expired).
  bool lost() const noexcept { return lease_.lost(); }

  /// The fencing token of the current (or most recent) acquisition: strictly increasing per
  /// lock name across all clients. Pass it to the storage you write to, which rejects any
  /// token lower than the highest it has seen. Zero before the first acquisition.
  std::uint64_t fencing_token() const noexcept { return fence_.load(std::memory_order_acquire); }

  const std::string& name() const noexcept { return name_; }
  /// The Redis key holding the lock (see detail/mutex_scripts.hpp for the layout).
  const std::string& key() const noexcept { return key_; }
  const lock_options& options() const noexcept { return options_; }
  Client& client() const noexcept { return client_; }

 private:
  friend class detail::timed_lockable<basic_mutex>;

  bool acquire(const detail::deadline& d) {
    if (!gate_.lock_until(d)) return false;
    bool acquired = false;
    try {
      acquired = options_.fair ? acquire_fair(d) : wait(channel_, d, max_lease, [&] { return attempt(); });
    } catch (...) {
      gate_.unlock();
      throw;
    }
    if (!acquired) {
      gate_.unlock();
      return false;
    }
    if (options_.auto_renew) {
      try {
        start_renewal();
      } catch (...) {
        this->unlock();  // do not keep a lock we promised to renew
        throw;
      }
    }
    return true;
  }

  template <class Attempt>
  bool wait(const std::string& channel, const detail::deadline& d, std::chrono::milliseconds max_sleep,
            Attempt&& attempt) {
    return detail::wait_for_release(client_, channel, d, options_, max_sleep, std::forward<Attempt>(attempt));
  }

  // Queue on the server, wait for the hand-off on our own channel, leave the queue when the
  // deadline passes (or the wait throws) so nobody hands us the lock after we gave up.
  bool acquire_fair(const detail::deadline& d) {
    if (d && detail::steady::now() >= *d) return !attempt_fair("try");  // try_lock never queues
    bool acquired = false;
    try {
      acquired = wait(waiter_prefix_ + token_, d, options_.wait_lease / 3, [&] { return attempt_fair("wait"); });
    } catch (...) {
      try {
        // "leave" claims a hand-off that reached us meanwhile; we are failing, so pass it on.
        if (!attempt_fair("leave")) pass_on_handoff();
      } catch (...) {
        // Our place (or a hand-off to us) expires with the wait lease.
      }
      throw;
    }
    return acquired || !attempt_fair("leave");  // a hand-off that just reached us is claimed
  }

  // Releases a lock that a failing acquire_fair() claimed, keeping the gate (acquire() owns it).
  void pass_on_handoff() {
    held_.store(false, std::memory_order_release);
    lease_.stop();
    client_.run(key_, [&](connection& c) {
      return detail::fair_scripts::release().run(c, {key_, fence_key_, queue_key_, waiters_key_},
                                                 {token_, channel_, waiter_prefix_});
    });
    std::string fresh = detail::random_token();
    std::lock_guard<std::mutex> g(token_mutex_);
    token_.swap(fresh);
  }

  // extend() and remaining_lease() may run on any thread while the holder replaces the token.
  std::string current_token() const {
    std::lock_guard<std::mutex> g(token_mutex_);
    return token_;
  }

  // One round trip. nullopt: acquired; otherwise the holder's remaining lease.
  std::optional<std::chrono::milliseconds> attempt() {
    // The token is only replaced after a release, so an attempt whose reply was lost (and
    // that may have set the key) is recognised as ours by the next attempt.
    const detail::steady::time_point sent = detail::steady::now();  // the lease starts no earlier
    return finish_attempt(sent, client_.run(key_, [&](connection& c) {
      return pair_of(*detail::mutex_scripts::acquire().run(c, {key_, fence_key_}, {token_, lease_ms_}));
    }));
  }

  std::optional<std::chrono::milliseconds> attempt_fair(std::string_view mode) {
    const detail::steady::time_point sent = detail::steady::now();
    return finish_attempt(sent, client_.run(key_, [&](connection& c) {
      return pair_of(*detail::fair_scripts::acquire().run(c, {key_, fence_key_, queue_key_, waiters_key_},
                                                          {token_, lease_ms_, wait_lease_ms_, mode, waiter_prefix_}));
    }));
  }

  static std::pair<std::int64_t, std::int64_t> pair_of(const redisReply& r) {
    return {detail::as_integer(detail::element(r, 0)), detail::as_integer(detail::element(r, 1))};
  }

  std::optional<std::chrono::milliseconds> finish_attempt(detail::steady::time_point sent,
                                                          std::pair<std::int64_t, std::int64_t> reply) {
    auto [acquired, value] = reply;
    if (acquired == 1) {
      fence_.store(static_cast<std::uint64_t>(value), std::memory_order_release);
      acquired_at_ = sent;
      lease_.acquired();
      held_.store(true, std::memory_order_release);
      return std::nullopt;
    }
    return std::chrono::milliseconds(value);
  }

  // Hands this acquisition (its token) to the client's watchdog.
  void start_renewal() {
    lease_.start(client_, options_, name_, key_, {&detail::mutex_scripts::extend(), {key_}, {token_, lease_ms_}},
                 acquired_at_);
  }

  void require_held(const char* what) const {
    if (!held_.load(std::memory_order_acquire))
      throw lock_error(std::string(what) + ": lock '" + name_ + "' is not held by this object");
  }

  void drop_local_hold(release_status status) noexcept {
    try {
      std::string fresh = detail::random_token();  // 128 fresh bits for the next acquisition
      std::lock_guard<std::mutex> g(token_mutex_);
      token_.swap(fresh);
    } catch (...) {
    }
    held_.store(false, std::memory_order_release);
    record(status);
    gate_.unlock();
  }

  release_status record(release_status s) noexcept {
    last_release_.store(s, std::memory_order_release);
    return s;
  }

  Client& client_;
  std::string name_;
  lock_options options_;
  std::string key_, fence_key_, channel_, lease_ms_;
  std::string queue_key_, waiters_key_, waiter_prefix_, wait_lease_ms_;  // fair mode
  std::string token_;  // written only by the thread that holds gate_, under token_mutex_
  mutable std::mutex token_mutex_;
  detail::local_gate gate_;
  std::atomic<bool> held_{false};
  std::atomic<std::uint64_t> fence_{0};
  std::atomic<release_status> last_release_{release_status::not_held};
  detail::steady::time_point acquired_at_;  // send time of the acquiring attempt (gate holder only)
  detail::lease_keeper lease_;              // renewal and lost flag of the current acquisition
};

using mutex = basic_mutex<client>;

}  // namespace redislock
