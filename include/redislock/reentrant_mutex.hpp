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
/// Waiting does not poll, exactly as for redislock::mutex: a waiting thread subscribes to its
/// own channel (kept between its waits), queues on the server and sleeps; the release that
/// brings the count to zero hands the lock straight to the longest waiting live waiter, which
/// alone is told (no race, no extra round trip). A waiter also wakes when the holder's lease
/// runs out; with lock_options::fair such a lock goes to the head of the queue too, and
/// try_lock() never jumps the queue (detail/reentrant_scripts.hpp, detail/wake_wait.hpp).
///
/// With lock_options::auto_renew the client's watchdog renews each owner's lease from its
/// outermost lock() (count 0 -> 1) until its last unlock() (count 1 -> 0): one renewal per
/// owner, whatever the nesting depth. lost() and on_lost report a lease found lost, exactly
/// as for redislock::mutex.

#include <redislock/client.hpp>
#include <redislock/detail/lease_keeper.hpp>
#include <redislock/detail/hold_watch.hpp>
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
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace redislock {

template <class Client>
class basic_reentrant_mutex : public detail::lock_core<Client, detail::reentrant_scripts::keys>,
                              public detail::timed_lockable<basic_reentrant_mutex<Client>> {
  using core = detail::lock_core<Client, detail::reentrant_scripts::keys>;

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
  // holds the lock succeeds at once: the count goes up and the lease is renewed. A re-entry
  // (any of them) after the thread's hold was lost (its lease ran out, or force_release)
  // throws lock_error and marks it lost(): the lock may have had another holder since, so it is
  // not quietly taken again; the outer holds still need their unlock() (lease_expired). A lock
  // kind clash on the name throws wrong_type_error.

  /// Like unlock(), but returns the outcome and throws when Redis could not be asked. The
  /// calling thread's local count drops by one either way. not_held: this thread held
  /// nothing (nothing is sent); lease_expired: its lease had run out (or was found lost()).
  /// The last release (count 1 -> 0) stops the renewal before it is sent.
  release_status unlock_and_report() {
    const auto observed = this->observe_release();
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
  /// lock_error when it holds nothing. With auto_renew the watchdog renews to `lease` from
  /// then on, as basic_mutex::extend(); extend() without an argument, to the hold's lease (that
  /// of the thread's latest acquisition: options().lease unless the call gave one).
  bool extend(std::chrono::milliseconds lease) {
    detail::checked_lease(lease, "extend");  // bad input first, held or not (every kind alike)
    require_held("extend");
    const hold h = owners_.mine();  // this thread's hold: no other thread releases it
    const std::string ms = detail::checked_extend_lease(lease, "extend", options_, h.leased);
    const auto keeper = h.lease;
    const bool ours = keeper->extend(lease, [&] {
      return run_integer(detail::reentrant_scripts::extend(), {owners_.owner_id(), ms}) == 1;
    });
    if (!ours) keeper->mark_lost();
    return ours;
  }
  bool extend() {
    require_held("extend");
    return extend(owners_.mine().leased);
  }

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
    const bool kept = owners_.mine().fence != 0;
    const std::uint64_t fence =
        this->draw_fence(owners_, detail::reentrant_scripts::fence(), [](hold& h) { h.lease->mark_lost(); });
    if (!kept) this->observe_fenced(fence);
    return fence;
  }
  /// True when the calling thread's current (or most recent) hold was found lost: by the
  /// watchdog (auto_renew), an extend() that returned false, or a fencing_token() that found it
  /// gone. Reset by its next outermost
  /// acquisition. A lost hold is still released with unlock() (it reports lease_expired).
  bool lost() const noexcept {
    const hold h = owners_.mine();
    return h.lease && h.lease->lost();
  }

  /// As basic_mutex::lease_confirmed_until(), for the calling thread's hold.
  std::optional<std::chrono::steady_clock::time_point> lease_confirmed_until() const noexcept {
    const hold h = owners_.mine();
    return h.lease ? h.lease->confirmed_until() : std::nullopt;
  }
  /// The calling thread's owner id, as stored in the lock's hash (a new one for each of its
  /// outermost acquisitions).
  std::string owner_id() const { return owners_.owner_id(); }

  // name(), key(), options(), client(), last_release(): detail::lock_core.

 private:
  friend class detail::timed_lockable<basic_reentrant_mutex>;
  friend struct detail::hold_watch_access;
  using core::client_;
  using core::keys_;
  using core::last_release_;
  using core::name_;
  using core::options_;
  using core::run_integer;

  struct hold {
    bool idle() const noexcept { return count == 0; }
    void stop_renewals() noexcept {
      if (lease) lease->stop();
    }
    std::int64_t count = 0;
    std::uint64_t fence = 0;
    std::chrono::milliseconds leased{0};  // the lease of its latest acquisition (each one sets it)
    // Made by the owner's first acquisition, then kept: the watchdog points into it.
    std::shared_ptr<detail::lease_keeper> lease;
  };

  // The calling thread's hold, readable from another thread (detail/hold_watch.hpp).
  detail::hold_watch watch_current_hold() const {
    std::shared_ptr<const detail::lease_keeper> lease = owners_.mine().lease;
    if (!lease) return {[] { return true; }, [] { return std::optional<std::chrono::steady_clock::time_point>(); }};
    return {[lease] { return lease->lost(); }, [lease] { return lease->confirmed_until(); }};
  }

  // Thrown by queue_attempt() when a re-entry finds the thread's hold gone (nothing changed).
  struct hold_gone {};

  bool acquire(const detail::deadline& d, std::chrono::milliseconds lease) {
    const std::string ms = detail::checked_hold_lease(lease, options_, "lock");
    hold h = owners_.mine();
    const std::string owner = owners_.owner_id();
    const std::string count = std::to_string(h.count + 1);
    detail::steady::time_point sent;  // the lease starts no earlier
    auto attempt = [&] { return wait_for_lock(d, owner, count, h.count == 0, lease, ms, sent); };
    try {
      // A re-entry sets the lease to its own again: as an extend() to it, so that the renewals
      // (auto_renew) send that lease and count from it, not a longer extend()'s.
      if (!(h.count > 0 && h.lease ? h.lease->extend(lease, attempt) : attempt())) return false;
    } catch (const hold_gone&) {
      // Someone else may have held the lock since: the outer hold's critical section was not
      // continuous, so the re-entry must not make it look so.
      h.lease->mark_lost();
      throw lock_error("redislock: re-entry into lock '" + name_ +
                       "' refused: this thread's hold was lost (its lease ran out or it was force-released)");
    }
    const bool outermost = ++h.count == 1;
    h.leased = lease;
    if (outermost) {
      h.fence = 0;  // drawn on demand (fencing_token())
      if (!h.lease) {
        h.lease = std::make_shared<detail::lease_keeper>();
        h.lease->describe(detail::describe(*this, lock_mode::exclusive));
      }
      h.lease->acquired(sent, lease);
    }
    owners_.set_mine(h);
    if (outermost) {
      const detail::renewal_target renewal{
          &detail::reentrant_scripts::extend(), {keys_.lock, keys_.fence}, {owner, ms}, 1};
      auto drop = [this]() noexcept { this->unlock(); };
      if (options_.auto_renew)
        this->start_or_drop([&] { sent = confirm_late_hand_off(owner, sent, lease, ms, *h.lease); }, drop);
      this->start_hold(*h.lease, lease, renewal, d, sent, drop);
    }
    return true;
  }

  // What one thread keeps between its waits on this object (only that thread touches it).
  struct waiting_thread {
    // Its hand-off channel, subscribed on its first contended wait and kept until the object goes.
    detail::subscriber::subscription channel;
    std::optional<detail::steady::time_point> first_wait_sent;  // of its current wait's first "wait"
    bool waited_last = false;                                   // its last acquisition did not succeed at once
  };

  waiting_thread& this_waiting_thread() {
    detail::thread_exits::instance().watch_this_thread();  // the entry is dropped at thread exit
    std::lock_guard<std::mutex> g(waiting_mutex_);
    return waiting_[detail::thread_serial()];  // elements of an unordered_map never move
  }
  // A thread's channel goes with the thread (an exited thread's leftover place is
  // then dead: a release counts no listener on its channel).
  struct waiting_exits : detail::thread_exits::listener {
    explicit waiting_exits(basic_reentrant_mutex& m) : m_(m) { detail::thread_exits::instance().add(this); }
    ~waiting_exits() { detail::thread_exits::instance().remove(this); }
    void thread_exited(std::uint64_t serial) noexcept override {
      std::lock_guard<std::mutex> g(m_.waiting_mutex_);
      m_.waiting_.erase(serial);
    }
    basic_reentrant_mutex& m_;
  };

  // As mutex::wait_for_lock: the cheapest attempt first; then, subscribed to the thread's own
  // channel, queue on the server and sleep until a release hands us the lock (the notice names
  // `owner`) or the holder's lease runs out. Leave the queue when the deadline passes or the
  // wait throws, so nobody hands us the lock after we gave up. `fresh`: an outermost
  // acquisition (the thread holds nothing), whose owner name may change when it gives up.
  // `lease` (`ms`: as a script argument) is the acquisition's.
  bool wait_for_lock(const detail::deadline& d, const std::string& owner, const std::string& count, bool fresh,
                     std::chrono::milliseconds lease, const std::string& ms, detail::steady::time_point& sent) {
    waiting_thread& w = this_waiting_thread();
    const std::string channel = keys_.waiter_prefix + owner.substr(0, owner.rfind(':'));
    // A notice for an earlier wait (read too late) names an earlier generation, and whatever is
    // still buffered on the channel is dropped now.
    w.channel.discard_pending();
    w.first_wait_sent.reset();
    bool first = true, queued = false, won_first = false;
    auto attempt = [&]() -> std::optional<std::chrono::milliseconds> {
      // Fair mode, or a thread whose last acquisition had to wait, queues at once when its
      // channel is still subscribed (and it may wait): the lock is likely held again.
      const bool may_queue_now = (options_.fair || w.waited_last) && w.channel.active() && !detail::passed(d);
      const bool queue_now = !std::exchange(first, false) || may_queue_now;
      queued = queued || queue_now;
      auto r = queue_attempt(owner, count, ms, queue_now ? "wait" : "try", w, sent);
      if (!queue_now) won_first = !r;
      return r;
    };
    auto handed_over = [&](detail::subscriber::subscription& sub) {
      if (!sub.take_message(owner)) return false;  // a late notice for an earlier acquisition
      // The release made us the holder, with a lease that runs at least from our first "wait";
      // read late, the notice is confirmed by the next attempt instead (wake_wait.hpp).
      if (detail::hand_off_needs_confirming(w.first_wait_sent, lease)) return false;
      sent = *w.first_wait_sent;
      return true;
    };
    bool acquired = false;
    try {
      acquired = detail::wait_for_release(
          client_, channel, d,
          detail::wait_plan{options_.retry_min, options_.retry_max, options_.recheck_interval, true}, attempt,
          handed_over, &w.channel);
    } catch (const hold_gone&) {
      throw;  // a re-entry's first attempt: nothing was queued or changed
    } catch (...) {
      if (queued) leave_after_failure(owner, count, ms, fresh, w);
      throw;
    }
    w.waited_last = !won_first;
    if (acquired || !queued) return acquired;
    // The last attempt: "leave" takes a free lock, keeps a hand-off that reached us meanwhile,
    // and otherwise leaves the queue. The deadline has passed: leaving has its own budget.
    {
      const detail::call_deadline::cleanup_budget cleanup;
      try {
        if (!queue_attempt(owner, count, ms, "leave", w, sent)) return true;
      } catch (...) {
        leave_after_failure(owner, count, ms, fresh, w);
        throw;
      }
    }
    // Out of the queue without the lock: a notice for this owner still on its way must match
    // nothing (a thread that still holds keeps its name: that hold was lost anyway).
    if (fresh) owners_.next_generation();
    return false;
  }

  void leave_after_failure(const std::string& owner, const std::string& count, const std::string& ms, bool fresh,
                           waiting_thread& w) noexcept {
    const detail::call_deadline::cleanup_budget cleanup;  // not cut by the failing call's deadline
    try {
      detail::steady::time_point sent;
      if (fresh) {
        // We are failing: a hand-off that reached us meanwhile is passed on.
        if (!queue_attempt(owner, count, ms, "leave", w, sent)) run_release(owner, 0);
      } else {
        // A re-entry (never queued: acquire() answers it at once): the thread still counts its
        // outer holds, so its hold, if the attempt ran, goes back to that count, never released;
        // a hold that is gone stays gone (a count > 0 release changes nothing then).
        (void)run_release(owner, std::stoll(count) - 1);
      }
    } catch (...) {
      // Redis could not be told: our place lapses on its own (and a lock handed to us
      // meanwhile, with our lease).
      w.channel.reset();  // and nobody listens for it: a release skips it
    }
    try {
      if (fresh) owners_.next_generation();  // keeps this thread clear of both
    } catch (...) {
    }
  }

  // mode: "wait", "try" or "leave" (reentrant_scripts::acquire). nullopt when acquired (then
  // `sent` is the attempt's send time), otherwise the holder's remaining lease (< 0: unknown).
  std::optional<std::chrono::milliseconds> queue_attempt(const std::string& owner, const std::string& count,
                                                         const std::string& ms, std::string_view mode,
                                                         waiting_thread& w, detail::steady::time_point& sent) {
    const detail::steady::time_point now = detail::steady::now();
    if (mode == "wait" && !w.first_wait_sent) w.first_wait_sent = now;  // a hand-off's lease starts after it
    const auto [ok, value] = this->run_on_lock([&](connection& c) {
      reply_ptr r = detail::reentrant_scripts::acquire().run(
          c, {keys_.lock, keys_.fence, keys_.queue, keys_.waiters},
          {owner, ms, count, mode, options_.fair ? "1" : "0", keys_.wait_lease_ms, keys_.waiter_prefix});
      return std::pair{detail::as_integer(detail::element(*r, 0)), detail::as_integer(detail::element(*r, 1))};
    });
    if (ok == 2) throw hold_gone{};
    if (ok != 1) return std::chrono::milliseconds(value);  // the holder's PTTL
    sent = now;
    return std::nullopt;
  }

  // As mutex::start_renewal: a hand-off counts its lease from our last "wait" attempt, which
  // can be up to recheck_interval old. When that leaves less than a third of the lease, the
  // watchdog (and lost(), by the clock) would count the fresh hold as about to run out, so one
  // owner-checked extend restarts the count from now. Returns when the lease now counts from.
  detail::steady::time_point confirm_late_hand_off(const std::string& owner, detail::steady::time_point sent,
                                                   std::chrono::milliseconds lease, const std::string& ms,
                                                   detail::lease_keeper& keeper) {
    const detail::steady::time_point now = detail::steady::now();
    if (sent + lease - lease / 3 > now) return sent;
    if (run_integer(detail::reentrant_scripts::extend(), {owner, ms}) == 1) return now;
    keeper.mark_lost();  // it ran out before we could renew it: the holder must know
    return sent;
  }

  std::int64_t run_release(const std::string& owner, std::int64_t count) {
    return this->run_on_lock([&](connection& c) {
      return detail::as_integer(
          *detail::reentrant_scripts::release().run(c, {keys_.lock, keys_.fence, keys_.queue, keys_.waiters},
                                                    {owner, keys_.waiter_prefix, std::to_string(count)}));
    });
  }

  void require_held(const char* what) const { detail::require_held(hold_count() > 0, what, name_, "this thread"); }

  detail::owner_table<hold> owners_;
  std::mutex waiting_mutex_;
  std::unordered_map<std::uint64_t, waiting_thread> waiting_;  // by thread serial
  waiting_exits waiting_exits_{*this};                         // declared last: it stops listening before the map goes
};

using reentrant_mutex = basic_reentrant_mutex<client>;

}  // namespace redislock
