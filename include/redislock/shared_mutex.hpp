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
/// - Owners are threads: each thread that uses an object is a distinct owner on the server, so
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
///   it; the readers inside finish and the writer gets in. A writer that crashes or gives up
///   while waiting holds new readers back for at most 3 x retry_max + 100 ms (400 ms by
///   default); try_lock() never holds them back. (As with any writer-preferring
///   rwlock, a thread that holds a read hold through one object and asks for another through a
///   second object of the same name waits for the waiting writer, which waits for it: take
///   nested reads through the same object.)
/// - Fencing: every write acquisition INCRs the lock's fence counter; fencing_token() is the
///   calling thread's token of its latest acquisition: for a write, the new value; for a read,
///   the counter's current value (the latest write it may observe), not incremented.

#include <redislock/client.hpp>
#include <redislock/detail/lockable.hpp>
#include <redislock/detail/owners.hpp>
#include <redislock/detail/shared_scripts.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/reply.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace redislock {

template <class Client>
class basic_shared_mutex : public detail::timed_lockable<basic_shared_mutex<Client>>,
                           public detail::shared_timed_lockable<basic_shared_mutex<Client>> {
 public:
  using client_type = Client;

  /// Throws invalid_argument for an empty name or a lease outside (0, max_lease]. Sends nothing.
  basic_shared_mutex(Client& client, std::string name, lock_options options = {})
      : client_(client),
        name_(std::move(name)),
        options_(std::move(options)),
        keys_(name_, options_),
        // Outlasts the waiting writer's longest sleep between attempts (retry_max) comfortably.
        marker_ms_(std::to_string((3 * options_.retry_max + std::chrono::milliseconds(100)).count())) {}

  basic_shared_mutex(const basic_shared_mutex&) = delete;
  basic_shared_mutex& operator=(const basic_shared_mutex&) = delete;

  /// Releases every hold any thread still has through this object (never throws).
  ~basic_shared_mutex() {
    owners_.for_each([&](std::uint64_t serial, hold& h) {
      const std::string owner = owners_.owner_id(serial);
      try {
        if (h.writing) run_integer(detail::shared_scripts::release(), {owner, keys_.channel});
        if (h.reads > 0) run_integer(detail::shared_scripts::release_shared(), {owner, keys_.channel, "0"});
      } catch (...) {  // the leases run out on their own
      }
    });
  }

  // --- write side (exclusive) ---

  /// lock(), try_lock(), try_lock_for(), try_lock_until() and unlock() (noexcept) come from
  /// detail::timed_lockable. lock() blocks until no other owner holds the lock. Throws
  /// lock_error when the calling thread holds a read hold (upgrade refused) or already
  /// writes; wrong_type_error when the name is used by another lock kind. unlock() releases
  /// the calling thread's write hold (its read holds, if it downgraded, stay).

  /// Like unlock(), but returns the outcome and throws when Redis could not be asked.
  release_status release() {
    return release_side(
        [](hold& h) {
          const bool had = h.writing;
          h.writing = false;
          return had;
        },
        [&](const std::string& owner, const hold&) {
          return run_integer(detail::shared_scripts::release(), {owner, keys_.channel});
        });
  }

  // --- read side (shared) ---

  /// lock_shared(), try_lock_shared(), try_lock_shared_for(), try_lock_shared_until() and
  /// unlock_shared() (noexcept; drops one read hold of the calling thread) come from
  /// detail::shared_timed_lockable. lock_shared() blocks until no other owner writes and no
  /// writer waits; a thread that already reads, or writes (downgrade), is admitted at once.

  /// Like unlock_shared(), but returns the outcome and throws when Redis could not be asked.
  release_status release_shared() {
    return release_side(
        [](hold& h) {
          if (h.reads == 0) return false;
          --h.reads;
          return true;
        },
        [&](const std::string& owner, const hold& h) {
          return run_integer(detail::shared_scripts::release_shared(), {owner, keys_.channel, std::to_string(h.reads)});
        });
  }

  /// Outcome of the most recent release (either side) through this object, by any thread.
  release_status last_release() const noexcept { return last_release_.load(std::memory_order_acquire); }

  // --- leases ---

  /// Renews the calling thread's write hold to `lease` from now (server clock); false when its
  /// lease had run out. Throws lock_error when it does not write.
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
  bool owns_lock() const { return owners_.mine().writing; }
  /// The calling thread holds at least one read hold.
  bool owns_shared() const { return owners_.mine().reads > 0; }
  /// The calling thread's nested read holds.
  std::int64_t shared_count() const { return owners_.mine().reads; }
  /// The fencing token of the calling thread's latest acquisition (see the file comment).
  std::uint64_t fencing_token() const { return owners_.mine().fence; }
  /// The calling thread's owner id, as stored in the lock's hash.
  std::string owner_id() const { return owners_.owner_id(); }

  const std::string& name() const noexcept { return name_; }
  const std::string& key() const noexcept { return keys_.lock; }
  const lock_options& options() const noexcept { return options_; }
  Client& client() const noexcept { return client_; }

 private:
  friend class detail::timed_lockable<basic_shared_mutex>;
  friend class detail::shared_timed_lockable<basic_shared_mutex>;

  struct hold {
    std::int64_t reads = 0;
    bool writing = false;
    std::uint64_t fence = 0;
  };

  bool acquire(const detail::deadline& d) {
    if (owners_.mine().reads > 0)
      throw lock_error("lock: upgrade refused: this thread holds a read hold on shared lock '" + name_ + "'");
    if (owners_.mine().writing)
      throw lock_error("lock: this thread already holds the write lock on '" + name_ + "' (not recursive)");
    // A writer that will not try again (try_lock(), or a deadline reached) sends marker_ms 0:
    // one that does not wait must not hold readers back.
    return attempt_until(
        d, detail::shared_scripts::acquire(),
        [&](bool last_try) -> std::string_view { return last_try ? std::string_view("0") : marker_ms_; },
        [](hold& h) { h.writing = true; });
  }

  bool acquire_shared(const detail::deadline& d) {
    const std::string count = std::to_string(owners_.mine().reads + 1);
    return attempt_until(
        d, detail::shared_scripts::acquire_shared(), [&](bool) -> std::string_view { return count; },
        [](hold& h) { ++h.reads; });
  }

  // last_arg(last_try) is the script's fourth argument; last_try: no attempt follows this one.
  template <class LastArg, class OnAcquired>
  bool attempt_until(const detail::deadline& d, const script& s, LastArg last_arg, OnAcquired on_acquired) {
    const std::string owner = owners_.owner_id();
    return detail::retry_until(d, options_.retry_min, options_.retry_max,
                               [&]() -> std::optional<std::chrono::milliseconds> {
                                 const std::string_view arg = last_arg(d && detail::steady::now() >= *d);
                                 auto [acquired, value] =
                                     detail::run_pair(client_, keys_, s, {owner, keys_.channel, keys_.lease_ms, arg});
                                 if (acquired == -1)
                                   throw lock_error("lock: upgrade refused: the server has a read hold of this thread on '" +
                                                    name_ + "'");
                                 if (acquired != 1) return std::chrono::milliseconds(value);
                                 hold h = owners_.mine();
                                 on_acquired(h);
                                 h.fence = static_cast<std::uint64_t>(value);
                                 owners_.set_mine(h);
                                 return std::nullopt;
                               });
  }

  template <class Drop, class Send>
  release_status release_side(Drop&& drop, Send&& send) {
    return detail::release_one(owners_, last_release_, std::forward<Drop>(drop), std::forward<Send>(send));
  }

  bool renew(std::chrono::milliseconds lease, bool write) {
    const std::string ms = detail::lease_arg(lease, write ? "extend" : "extend_shared");
    const hold h = owners_.mine();
    if (write ? !h.writing : h.reads == 0)
      throw lock_error(std::string(write ? "extend" : "extend_shared") + ": shared lock '" + name_ +
                       "' is not held on that side by this thread");
    return run_integer(detail::shared_scripts::extend(), {owners_.owner_id(), keys_.channel, ms, write ? "write" : "read"}) == 1;
  }

  std::chrono::milliseconds remaining(bool held, const char* side) {
    if (!held) return std::chrono::milliseconds(0);
    return detail::to_remaining(run_integer(detail::shared_scripts::remaining(), {owners_.owner_id(), keys_.channel, side}));
  }

  std::int64_t run_integer(const script& s, std::initializer_list<std::string_view> args) {
    return detail::run_integer(client_, keys_, s, args);
  }

  Client& client_;
  std::string name_;
  lock_options options_;
  detail::lock_keys keys_;
  std::string marker_ms_;
  detail::owner_table<hold> owners_;
  std::atomic<release_status> last_release_{release_status::not_held};
};

using shared_mutex = basic_shared_mutex<client>;

}  // namespace redislock
