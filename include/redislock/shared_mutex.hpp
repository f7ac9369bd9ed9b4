#pragma once
/// @file shared_mutex.hpp
/// @brief redislock::basic_shared_mutex — a read/write lock with per-holder leases, like
/// std::shared_timed_mutex across processes.
///
/// Models TimedLockable (the write side: lock, try_lock, try_lock_for/until, unlock) and
/// SharedTimedLockable (the read side: lock_shared, ..., unlock_shared), so std::unique_lock,
/// std::lock_guard and std::shared_lock are its guards. Key layout and scripts:
/// detail/shared_scripts.hpp.
///
/// - Many readers or one writer. Every reader has its own lease on the server's clock: a reader
///   that crashes stops blocking writers when its own lease ends, even while other readers keep
///   renewing theirs.
/// - Owners are threads: each thread that uses an object is a distinct owner on the server (with
///   a new name once all its holds ended: detail/owners.hpp), so
///   threads sharing one object may read together and exclude each other when writing.
/// - Reads are reentrant per owner (each lock_shared() needs one unlock_shared()); an owner has
///   one read lease, renewed by each of its lock_shared() calls and by extend_shared().
/// - Cost: one EVALSHA per acquisition attempt, release or renewal; each script reads the whole
///   hash (O(number of holders)) to purge ended holds, which suits tens of readers, not
///   thousands. Refused attempts write nothing.
/// - Downgrade: the writer may take read holds (lock_shared() succeeds at once), then unlock()
///   the write side and keep reading. Upgrade is refused: lock() / try_lock*() throw
///   lock_error when the calling thread holds a read hold on this object (two readers
///   upgrading would wait for each other forever). lock() while already writing throws too
///   (the write side is not recursive).
/// - Writers are not starved: once a writer waits, readers that hold nothing yet queue behind
///   it; the readers inside finish and the writer gets in. A waiting writer refreshes its
///   "writer waiting" marker every wait_lease / 3 (the only attempts it makes while the lock
///   stays busy); one that crashes or gives up while waiting holds new readers back for at
///   most max(wait_lease, 3 x retry_max + 100 ms) (2 s by default); try_lock() never holds
///   them back. (As with any writer-preferring
///   rwlock, a thread that holds a read hold through one object and asks for another through a
///   second object of the same name waits for the waiting writer, which waits for it: take
///   nested reads through the same object.)
/// - Fencing: fencing_token() draws a token for the calling thread's current holds (either
///   side) on its first call, like mutex::fencing_token(), and keeps it until they all end.
/// - Waiting does not poll: waiters sleep on the release channel, which is published when the
///   writer leaves or the last hold goes, until notified or until the earliest lease among
///   the holds that block them may run out (an expiry publishes nothing; detail/wake_wait.hpp).
/// - auto_renew: an owner's write hold and its read hold have separate leases on the server,
///   so each is renewed separately: the write hold from lock() to unlock(), the read hold from
///   the owner's outermost lock_shared() (0 -> 1) to its last unlock_shared() (1 -> 0).
///   lost() tells about the write hold, lost_shared() about the read hold; on_lost fires for
///   either, and each side's release reports lease_expired when that side was found lost.

#include <redislock/client.hpp>
#include <redislock/detail/lease_keeper.hpp>
#include <redislock/detail/lock_core.hpp>
#include <redislock/detail/lockable.hpp>
#include <redislock/detail/owners.hpp>
#include <redislock/detail/shared_scripts.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/detail/wake_wait.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/reply.hpp>

#include <atomic>
#include <chrono>
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace redislock {

template <class Client>
class basic_shared_mutex : public detail::lock_core<Client, detail::lock_keys>,
                           public detail::timed_lockable<basic_shared_mutex<Client>>,
                           public detail::shared_timed_lockable<basic_shared_mutex<Client>> {
  using core = detail::lock_core<Client, detail::lock_keys>;

 public:
  /// Throws invalid_argument for an empty name or a lease outside (0, max_lease]. Sends nothing.
  basic_shared_mutex(Client& client, std::string name, lock_options options = {})
      : core(client, std::move(name), std::move(options)),
        // Outlasts the waiting writer's sleep between attempts comfortably: marker / 3 on a
        // subscription, at most retry_max when it falls back to backoff.
        marker_(std::max(options_.wait_lease, 3 * options_.retry_max + std::chrono::milliseconds(100))),
        marker_ms_(std::to_string(marker_.count())) {}

  basic_shared_mutex(const basic_shared_mutex&) = delete;
  basic_shared_mutex& operator=(const basic_shared_mutex&) = delete;

  /// Releases every hold any thread still has through this object (never throws).
  ~basic_shared_mutex() {
    detail::release_every_hold(owners_, [&](const std::string& owner, hold& h) {
      if (h.writing) run_integer(detail::shared_scripts::release(), {owner, keys_.channel});
      if (h.reads > 0) run_integer(detail::shared_scripts::release_shared(), {owner, keys_.channel, "0"});
    });
  }

  // --- write side (exclusive) ---

  /// lock(), try_lock(), try_lock_for(), try_lock_until() and unlock() (noexcept) come from
  /// detail::timed_lockable. lock() blocks until no other owner holds the lock. Throws
  /// lock_error when the calling thread holds a read hold (upgrade refused) or already
  /// writes; wrong_type_error when the name is used by another lock kind. unlock() releases
  /// the calling thread's write hold (its read holds, if it downgraded, stay).

  /// Like unlock(), but returns the outcome and throws when Redis could not be asked.
  /// lease_expired: the write hold's lease had run out (or was found lost()).
  release_status unlock_and_report() {
    return release_side(
        [](hold& h) {
          const bool had = h.writing;
          h.writing = false;
          return had;
        },
        [&](const std::string& owner, const hold& h) {
          h.lease->write.stop();  // before the release is sent
          return h.lease->write.outcome(run_integer(detail::shared_scripts::release(), {owner, keys_.channel}) == 1);
        });
  }
  /// The old name of unlock_and_report() (unlike std::unique_lock::release(), it unlocks).
  [[deprecated("use unlock_and_report()")]] release_status release() { return unlock_and_report(); }

  // --- read side (shared) ---

  /// lock_shared(), try_lock_shared(), try_lock_shared_for(), try_lock_shared_until() and
  /// unlock_shared() (noexcept; drops one read hold of the calling thread) come from
  /// detail::shared_timed_lockable. lock_shared() blocks until no other owner writes and no
  /// writer waits; a thread that already reads, or writes (downgrade), is admitted at once.

  /// Like unlock_shared(), but returns the outcome and throws when Redis could not be asked.
  /// lease_expired: the read hold's lease had run out (or was found lost_shared()).
  release_status unlock_shared_and_report() {
    return release_side(
        [](hold& h) {
          if (h.reads == 0) return false;
          --h.reads;
          return true;
        },
        [&](const std::string& owner, const hold& h) {
          if (h.reads == 0) h.lease->read.stop();  // the last read hold: before it is sent
          return h.lease->read.outcome(run_integer(detail::shared_scripts::release_shared(),
                                                   {owner, keys_.channel, std::to_string(h.reads)}) == 1);
        });
  }
  /// The old name of unlock_shared_and_report().
  [[deprecated("use unlock_shared_and_report()")]] release_status release_shared() {
    return unlock_shared_and_report();
  }

  // last_release() (detail::lock_core): the most recent release, either side, by any thread.

  // --- leases ---

  /// Renews the calling thread's write hold to `lease` from now (server clock); false when its
  /// lease had run out (which also marks it lost()). Throws lock_error when it does not write.
  bool extend(std::chrono::milliseconds lease) { return renew(lease, true); }
  bool extend() { return extend(options_.lease); }
  /// Renews the calling thread's read hold (all its nested reads: one lease per owner).
  bool extend_shared(std::chrono::milliseconds lease) { return renew(lease, false); }
  bool extend_shared() { return extend_shared(options_.lease); }

  /// What is left of the calling thread's write / read lease per the server; zero when none.
  std::chrono::milliseconds remaining_lease() { return remaining(owners_.mine().writing, "write"); }
  std::chrono::milliseconds remaining_shared_lease() { return remaining(owners_.mine().reads > 0, "read"); }
  bool still_held() { return remaining_lease().count() > 0; }
  bool still_held_shared() { return remaining_shared_lease().count() > 0; }

  // --- the calling thread's local view ---

  /// The calling thread writes (its local belief; still_held() asks the server).
  bool owns_lock() const noexcept { return owners_.mine().writing; }
  /// The calling thread holds at least one read hold.
  bool owns_shared() const noexcept { return owners_.mine().reads > 0; }
  /// The calling thread's nested read holds.
  std::int64_t shared_count() const noexcept { return owners_.mine().reads; }
  /// The fencing token of the calling thread's current holds (either side): strictly
  /// increasing per lock name across all clients and lock kinds, in the order of the holds
  /// (detail/fence_scripts.hpp). Drawn on the first call per hold with one round trip, only
  /// while one of its leases is valid, then cached until its holds all end. Throws lock_error
  /// when the thread holds nothing, or when its leases have run out (then lost() or
  /// lost_shared() is true: write nothing).
  std::uint64_t fencing_token() {
    return detail::draw_fence(client_, keys_, owners_, detail::shared_scripts::fence(), name_,
                              [](hold& h) { (h.writing ? h.lease->write : h.lease->read).mark_lost(); });
  }
  /// True when the calling thread's current (or most recent) write hold was found lost: by the
  /// watchdog (auto_renew), an extend() that returned false, or a fencing_token() that found it
  /// gone. Reset by its next write
  /// acquisition. A lost hold is still released with unlock() (it reports lease_expired).
  bool lost() const noexcept { return side_lost(&leases::write); }
  /// The same for the calling thread's read hold (extend_shared(); reset by its next
  /// outermost lock_shared()).
  bool lost_shared() const noexcept { return side_lost(&leases::read); }
  /// The calling thread's owner id, as stored in the lock's hash (a new one once all of its
  /// holds ended: detail/owners.hpp).
  std::string owner_id() const { return owners_.owner_id(); }

  // name(), key(), options(), client(), last_release(): detail::lock_core.

 private:
  friend class detail::timed_lockable<basic_shared_mutex>;
  friend class detail::shared_timed_lockable<basic_shared_mutex>;
  using core::client_;
  using core::keys_;
  using core::last_release_;
  using core::name_;
  using core::options_;

  // The renewal and lost flag of each side of one owner's holds (separate leases).
  struct leases {
    detail::lease_keeper write, read;
  };

  struct hold {
    bool idle() const noexcept { return reads == 0 && !writing; }
    void stop_renewals() noexcept {
      if (lease) lease->write.stop(), lease->read.stop();
    }
    std::int64_t reads = 0;
    bool writing = false;
    std::uint64_t fence = 0;
    // Made by the owner's first acquisition, then kept: the watchdog points into it.
    std::shared_ptr<leases> lease;
  };

  bool acquire(const detail::deadline& d) {
    if (owners_.mine().reads > 0)
      throw lock_error("lock: upgrade refused: this thread holds a read hold on shared lock '" + name_ + "'");
    if (owners_.mine().writing)
      throw lock_error("lock: this thread already holds the write lock on '" + name_ + "' (not recursive)");
    // A writer that will not try again (try_lock(), or a deadline reached) sends marker_ms 0:
    // one that does not wait must not hold readers back. One that waits re-attempts (and so
    // refreshes the marker) at least every marker / 3.
    return attempt_until(
        d, detail::shared_scripts::acquire(), marker_ / 3,
        [&](bool last_try) -> std::string_view { return last_try ? std::string_view("0") : marker_ms_; },
        [](hold& h) {
          h.writing = true;
          return &h.lease->write;
        },
        "write");
  }

  bool acquire_shared(const detail::deadline& d) {
    const std::string count = std::to_string(owners_.mine().reads + 1);
    return attempt_until(
        d, detail::shared_scripts::acquire_shared(), max_lease, [&](bool) -> std::string_view { return count; },
        [](hold& h) -> detail::lease_keeper* { return ++h.reads == 1 ? &h.lease->read : nullptr; }, "read");
  }

  // last_arg(last_try) is the script's fourth argument; last_try: no attempt follows this one.
  // on_acquired(hold&) updates the hold and returns the side's lease keeper when a new hold
  // on that side began (renewed from now on), nullptr for a nested read.
  template <class LastArg, class OnAcquired>
  bool attempt_until(const detail::deadline& d, const script& s, std::chrono::milliseconds max_sleep, LastArg last_arg,
                     OnAcquired on_acquired, const char* side) {
    const std::string owner = owners_.owner_id();
    detail::steady::time_point sent;  // the lease starts no earlier
    const bool acquired = detail::wait_for_release(
        client_, keys_.channel, d, options_, max_sleep, [&]() -> std::optional<std::chrono::milliseconds> {
          const std::string_view arg = last_arg(detail::passed(d));
          sent = detail::steady::now();
          auto [ok, value] = detail::run_pair(client_, keys_, s, {owner, keys_.channel, keys_.lease_ms, arg});
          if (ok == -1)
            throw lock_error("lock: upgrade refused: the server has a read hold of this thread on '" + name_ + "'");
          if (ok != 1) return std::chrono::milliseconds(value);  // until a blocking hold may lapse
          return std::nullopt;
        });
    if (!acquired) return false;
    hold h = owners_.mine();
    if (!h.lease) h.lease = std::make_shared<leases>();
    if (h.idle()) h.fence = 0;  // a new hold: its token is drawn on demand (fencing_token())
    detail::lease_keeper* began = on_acquired(h);
    if (began != nullptr) began->acquired();
    owners_.set_mine(h);
    if (began != nullptr) {
      const bool write = began == &h.lease->write;
      auto drop = [this, write]() noexcept {
        if (write) this->unlock();
        else this->unlock_shared();
      };
      const detail::renewal_target renewal{
          &detail::shared_scripts::extend(), {keys_.lock, keys_.fence}, {owner, keys_.channel, keys_.lease_ms, side}};
      this->start_hold(*began, renewal, d, sent, drop);
    }
    return true;
  }

  template <class Drop, class Send>
  release_status release_side(Drop&& drop, Send&& send) {
    return detail::release_one(owners_, last_release_, std::forward<Drop>(drop), std::forward<Send>(send));
  }

  bool renew(std::chrono::milliseconds lease, bool write) {
    const char* what = write ? "extend" : "extend_shared";
    const std::string ms = detail::checked_lease(lease, what, &options_);
    const hold h = owners_.mine();
    detail::require_held(write ? h.writing : h.reads > 0, what, name_, "this thread on that side");
    const bool ours = run_integer(detail::shared_scripts::extend(),
                                  {owners_.owner_id(), keys_.channel, ms, write ? "write" : "read"}) == 1;
    if (!ours) (write ? h.lease->write : h.lease->read).mark_lost();
    return ours;
  }

  bool side_lost(detail::lease_keeper leases::*side) const noexcept {
    const hold h = owners_.mine();
    return h.lease && (h.lease.get()->*side).lost();
  }

  std::chrono::milliseconds remaining(bool held, const char* side) {
    if (!held) return std::chrono::milliseconds(0);
    return detail::to_remaining(
        run_integer(detail::shared_scripts::remaining(), {owners_.owner_id(), keys_.channel, side}));
  }

  std::int64_t run_integer(const script& s, std::initializer_list<std::string_view> args) {
    return detail::run_integer(client_, keys_, s, args);
  }

  std::chrono::milliseconds marker_;  // how long a waiting writer's marker lasts (see the file comment)
  std::string marker_ms_;
  detail::owner_table<hold> owners_;
};

using shared_mutex = basic_shared_mutex<client>;

}  // namespace redislock
