#pragma once
/// @file reentrant_mutex.hpp
/// @brief redislock::basic_reentrant_mutex — a recursive exclusive lock with a lease, like
/// std::recursive_timed_mutex across processes.
///
/// Models Lockable and TimedLockable. The owner that holds the lock may lock it again; each
/// lock() needs one unlock(), and the lock is free once the count is back to zero. Every
/// acquisition, nested ones included, renews the lease. Key layout and scripts:
/// detail/reentrant_scripts.hpp.
///
/// Owners are threads (a thread that exits while holding stops renewing: detail/owners.hpp):
/// each thread that uses an object is a distinct owner on the server
/// ("<object's random id>:<thread serial>:<generation>", a new name for each outermost
/// acquisition: detail/owners.hpp), so threads sharing one object exclude each other
/// through Redis exactly like threads sharing a std::recursive_mutex, and the hold count,
/// owns_lock(), fencing_token() and lost() are the calling thread's. (There is no local queue:
/// a waiting thread waits on Redis like a waiter in another process.) A thread that unlocks a
/// lock it does not hold changes nothing; unlock() records release_status::not_held.
///
/// Waiting does not poll: like redislock::mutex, a waiter sleeps on the release channel until
/// the last hold goes (published) or the holder's lease runs out (detail/wake_wait.hpp).
///
/// With lock_options::auto_renew the client's watchdog renews each owner's lease from its
/// outermost lock() (count 0 -> 1) until its last unlock() (count 1 -> 0): one renewal per
/// owner, whatever the nesting depth. lost() and on_lost report a lease found lost, exactly
/// as for redislock::mutex.

#include <redislock/client.hpp>
#include <redislock/detail/lease_keeper.hpp>
#include <redislock/detail/lock_core.hpp>
#include <redislock/detail/lockable.hpp>
#include <redislock/detail/owners.hpp>
#include <redislock/detail/reentrant_scripts.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/detail/wake_wait.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/reply.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace redislock {

template <class Client>
class basic_reentrant_mutex : public detail::lock_core<Client, detail::lock_keys>,
                              public detail::timed_lockable<basic_reentrant_mutex<Client>> {
  using core = detail::lock_core<Client, detail::lock_keys>;

 public:
  /// Throws invalid_argument for an empty name or a lease outside (0, max_lease]. Sends nothing.
  basic_reentrant_mutex(Client& client, std::string name, lock_options options = {})
      : core(client, std::move(name), std::move(options)) {}

  basic_reentrant_mutex(const basic_reentrant_mutex&) = delete;
  basic_reentrant_mutex& operator=(const basic_reentrant_mutex&) = delete;

  /// Releases every hold any thread still has through this object (never throws).
  ~basic_reentrant_mutex() {
    detail::release_every_hold(owners_, [&](const std::string& owner, hold&) { run_release(owner, 0); });
  }

  // lock(), try_lock(), try_lock_for(), try_lock_until() and unlock() (noexcept; drops one
  // hold of the calling thread) come from detail::timed_lockable. lock() by the thread that
  // holds the lock succeeds at once: the count goes up and the lease is renewed. A lock kind
  // clash on the name throws wrong_type_error.

  /// Like unlock(), but returns the outcome and throws when Redis could not be asked. The
  /// calling thread's local count drops by one either way. not_held: this thread held
  /// nothing (nothing is sent); lease_expired: its lease had run out (or was found lost()).
  /// The last release (count 1 -> 0) stops the renewal before it is sent.
  release_status unlock_and_report() {
    return detail::release_one(
        owners_, last_release_,
        [](hold& h) {
          if (h.count == 0) return false;
          --h.count;
          return true;
        },
        [&](const std::string& owner, const hold& h) {
          if (h.count == 0) h.lease->stop();
          return h.lease->outcome(run_release(owner, h.count) == 1);
        });
  }
  /// The old name of unlock_and_report() (unlike std::unique_lock::release(), it unlocks).
  [[deprecated("use unlock_and_report()")]] release_status release() { return unlock_and_report(); }

  /// Resets the lease to `lease` from now (server clock) if the calling thread still holds
  /// the lock; false when its lease had run out (which also marks it lost()). Throws
  /// lock_error when it holds nothing.
  bool extend(std::chrono::milliseconds lease) {
    const std::string ms = detail::checked_lease(lease, "extend", &options_);
    require_held("extend");
    const bool ours = run_integer(detail::reentrant_scripts::extend(), {owners_.owner_id(), ms}) == 1;
    if (!ours) owners_.mine().lease->mark_lost();
    return ours;
  }
  bool extend() { return extend(options_.lease); }

  /// The calling thread's remaining lease per the server; zero when it holds nothing.
  std::chrono::milliseconds remaining_lease() {
    if (hold_count() == 0) return std::chrono::milliseconds(0);
    return detail::to_remaining(run_integer(detail::reentrant_scripts::remaining(), {owners_.owner_id()}));
  }
  bool still_held() { return remaining_lease().count() > 0; }

  /// The calling thread's local belief (the lease may have run out; still_held() asks).
  bool owns_lock() const noexcept { return hold_count() > 0; }
  /// How many times the calling thread has locked without unlocking.
  std::int64_t hold_count() const noexcept { return owners_.mine().count; }
  /// The fencing token of the calling thread's current hold: strictly increasing per lock
  /// name across all clients and lock kinds, in the order of the holds (detail/fence_scripts.hpp).
  /// Drawn on the first call per outermost hold with one round trip, only while its lease is
  /// valid, then cached: later calls (and the nested holds) return it without asking. Throws
  /// lock_error when the thread holds nothing, or when its lease has run out (then lost() is
  /// true: write nothing).
  std::uint64_t fencing_token() {
    return detail::draw_fence(client_, keys_, owners_, detail::reentrant_scripts::fence(), name_,
                              [](hold& h) { h.lease->mark_lost(); });
  }
  /// True when the calling thread's current (or most recent) hold was found lost: by the
  /// watchdog (auto_renew), an extend() that returned false, or a fencing_token() that found it
  /// gone. Reset by its next outermost
  /// acquisition. A lost hold is still released with unlock() (it reports lease_expired).
  bool lost() const noexcept {
    const hold h = owners_.mine();
    return h.lease && h.lease->lost();
  }
  /// The calling thread's owner id, as stored in the lock's hash (a new one for each of its
  /// outermost acquisitions).
  std::string owner_id() const { return owners_.owner_id(); }

  // name(), key(), options(), client(), last_release(): detail::lock_core.

 private:
  friend class detail::timed_lockable<basic_reentrant_mutex>;
  using core::client_;
  using core::keys_;
  using core::last_release_;
  using core::name_;
  using core::options_;

  struct hold {
    bool idle() const noexcept { return count == 0; }
    void stop_renewals() noexcept {
      if (lease) lease->stop();
    }
    std::int64_t count = 0;
    std::uint64_t fence = 0;
    // Made by the owner's first acquisition, then kept: the watchdog points into it.
    std::shared_ptr<detail::lease_keeper> lease;
  };

  bool acquire(const detail::deadline& d) {
    hold h = owners_.mine();
    const std::string owner = owners_.owner_id();
    const std::string count = std::to_string(h.count + 1);
    detail::steady::time_point sent;  // the lease starts no earlier
    const bool acquired = detail::wait_for_release(
        client_, keys_.channel, d, options_, max_lease, [&]() -> std::optional<std::chrono::milliseconds> {
          sent = detail::steady::now();
          auto [ok, value] =
              detail::run_pair(client_, keys_, detail::reentrant_scripts::acquire(), {owner, keys_.lease_ms, count});
          if (ok != 1) return std::chrono::milliseconds(value);  // the holder's PTTL
          return std::nullopt;
        });
    if (!acquired) return false;
    const bool outermost = ++h.count == 1;
    if (outermost) {
      h.fence = 0;  // drawn on demand (fencing_token())
      if (!h.lease) h.lease = std::make_shared<detail::lease_keeper>();
      h.lease->acquired();
    }
    owners_.set_mine(h);
    if (outermost) {
      const detail::renewal_target renewal{
          &detail::reentrant_scripts::extend(), {keys_.lock, keys_.fence}, {owner, keys_.lease_ms}};
      this->start_hold(*h.lease, renewal, d, sent, [this]() noexcept { this->unlock(); });
    }
    return true;
  }

  std::int64_t run_release(const std::string& owner, std::int64_t count) {
    return run_integer(detail::reentrant_scripts::release(), {owner, keys_.channel, std::to_string(count)});
  }

  std::int64_t run_integer(const script& s, std::initializer_list<std::string_view> args) {
    return detail::run_integer(client_, keys_, s, args);
  }

  void require_held(const char* what) const { detail::require_held(hold_count() > 0, what, name_, "this thread"); }

  detail::owner_table<hold> owners_;
};

using reentrant_mutex = basic_reentrant_mutex<client>;

}  // namespace redislock
