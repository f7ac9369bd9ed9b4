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
/// Owners are threads: each thread that uses an object is a distinct owner on the server
/// ("<object's random id>:<thread serial>"), so threads sharing one object exclude each other
/// through Redis exactly like threads sharing a std::recursive_mutex, and the hold count,
/// owns_lock() and fencing_token() are the calling thread's. (There is no local queue: a
/// waiting thread polls Redis like a waiter in another process.) A thread that unlocks a lock
/// it does not hold changes nothing; unlock() records release_status::not_held.

#include <redislock/client.hpp>
#include <redislock/detail/lockable.hpp>
#include <redislock/detail/owners.hpp>
#include <redislock/detail/reentrant_scripts.hpp>
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
class basic_reentrant_mutex : public detail::timed_lockable<basic_reentrant_mutex<Client>> {
 public:
  using client_type = Client;

  /// Throws invalid_argument for an empty name or a lease outside (0, max_lease]. Sends nothing.
  basic_reentrant_mutex(Client& client, std::string name, lock_options options = {})
      : client_(client), name_(std::move(name)), options_(std::move(options)), keys_(name_, options_) {}

  basic_reentrant_mutex(const basic_reentrant_mutex&) = delete;
  basic_reentrant_mutex& operator=(const basic_reentrant_mutex&) = delete;

  /// Releases every hold any thread still has through this object (never throws).
  ~basic_reentrant_mutex() {
    owners_.for_each([&](std::uint64_t serial, hold& h) {
      if (h.count == 0) return;
      try {
        run_release(owners_.owner_id(serial), 0);
      } catch (...) {  // the lease runs out on its own
      }
    });
  }

  // lock(), try_lock(), try_lock_for(), try_lock_until() and unlock() (noexcept; drops one
  // hold of the calling thread) come from detail::timed_lockable. lock() by the thread that
  // holds the lock succeeds at once: the count goes up and the lease is renewed. A lock kind
  // clash on the name throws wrong_type_error.

  /// Like unlock(), but returns the outcome and throws when Redis could not be asked. The
  /// calling thread's local count drops by one either way. not_held: this thread held
  /// nothing (nothing is sent); lease_expired: its lease had run out.
  release_status release() {
    return detail::release_one(
        owners_, last_release_,
        [](hold& h) {
          if (h.count == 0) return false;
          --h.count;
          return true;
        },
        [&](const std::string& owner, const hold& h) { return run_release(owner, h.count); });
  }

  /// Outcome of the most recent release through this object, by any thread (not_held before any).
  release_status last_release() const noexcept { return last_release_.load(std::memory_order_acquire); }

  /// Resets the lease to `lease` from now (server clock) if the calling thread still holds
  /// the lock; false when its lease had run out. Throws lock_error when it holds nothing.
  bool extend(std::chrono::milliseconds lease) {
    const std::string ms = detail::lease_arg(lease, "extend");
    require_held("extend");
    return run_integer(detail::reentrant_scripts::extend(), {owners_.owner_id(), ms}) == 1;
  }
  bool extend() { return extend(options_.lease); }

  /// The calling thread's remaining lease per the server; zero when it holds nothing.
  std::chrono::milliseconds remaining_lease() {
    if (hold_count() == 0) return std::chrono::milliseconds(0);
    return detail::to_remaining(run_integer(detail::reentrant_scripts::remaining(), {owners_.owner_id()}));
  }
  bool still_held() { return remaining_lease().count() > 0; }

  /// The calling thread's local belief (the lease may have run out; still_held() asks).
  bool owns_lock() const { return hold_count() > 0; }
  /// How many times the calling thread has locked without unlocking.
  std::int64_t hold_count() const { return owners_.mine().count; }
  /// The fencing token of the calling thread's current (or most recent) hold; nested
  /// acquisitions keep the token of the outermost one. Zero before any.
  std::uint64_t fencing_token() const { return owners_.mine().fence; }
  /// The calling thread's owner id, as stored in the lock's hash.
  std::string owner_id() const { return owners_.owner_id(); }

  const std::string& name() const noexcept { return name_; }
  const std::string& key() const noexcept { return keys_.lock; }
  const lock_options& options() const noexcept { return options_; }
  Client& client() const noexcept { return client_; }

 private:
  friend class detail::timed_lockable<basic_reentrant_mutex>;

  struct hold {
    std::int64_t count = 0;
    std::uint64_t fence = 0;
  };

  bool acquire(const detail::deadline& d) {
    hold h = owners_.mine();
    const std::string owner = owners_.owner_id();
    const std::string count = std::to_string(h.count + 1);
    return detail::retry_until(d, options_.retry_min, options_.retry_max,
                               [&]() -> std::optional<std::chrono::milliseconds> {
                                 auto [acquired, value] = detail::run_pair(client_, keys_, detail::reentrant_scripts::acquire(),
                                                                           {owner, keys_.lease_ms, count});
                                 if (acquired != 1) return std::chrono::milliseconds(value);
                                 h.fence = static_cast<std::uint64_t>(value);
                                 ++h.count;
                                 owners_.set_mine(h);
                                 return std::nullopt;
                               });
  }

  std::int64_t run_release(const std::string& owner, std::int64_t count) {
    return run_integer(detail::reentrant_scripts::release(), {owner, keys_.channel, std::to_string(count)});
  }

  std::int64_t run_integer(const script& s, std::initializer_list<std::string_view> args) {
    return detail::run_integer(client_, keys_, s, args);
  }

  void require_held(const char* what) const {
    if (hold_count() == 0)
      throw lock_error(std::string(what) + ": reentrant lock '" + name_ + "' is not held by this thread");
  }

  Client& client_;
  std::string name_;
  lock_options options_;
  detail::lock_keys keys_;
  detail::owner_table<hold> owners_;
  std::atomic<release_status> last_release_{release_status::not_held};
};

using reentrant_mutex = basic_reentrant_mutex<client>;

}  // namespace redislock
