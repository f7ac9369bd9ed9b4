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
/// - Writers are not starved: once a writer waits (queued on the server), readers that hold
///   nothing yet queue behind it; the readers inside finish and the writer gets in. A writer
///   that gives up leaves the queue (the readers behind it get in at once); one that crashes
///   holds them back only until the next attempt notices that nobody listens for it any more
///   (its connection closed); one that is paused or cut off from Redis, until its place lapses
///   (wait_lease after the holds it saw). (As with any writer-preferring rwlock, a thread that
///   holds a read hold through one object and asks for another through a second object of the
///   same name waits for the waiting writer, which waits for it: take nested reads through the
///   same object.)
/// - Fencing: fencing_token() draws a token for the calling thread's current holds (either
///   side) on its first call, like mutex::fencing_token(), and keeps it until they all end.
/// - Waiting does not poll, and nobody races: like redislock::mutex, a waiting thread
///   subscribes to its own channel (kept between its waits, dropped when the thread exits),
///   queues on the server with its side, and sleeps. A release that frees the lock for others
///   (the writer leaving, the last reader leaving) admits the head of the queue in the same
///   script: a writer alone, or the run of readers up to the first queued writer all at once,
///   each told on its channel. A waiter also wakes when the earliest lease among the holds that
///   block it may run out (an expiry publishes nothing). With lock_options::fair a lock that
///   fell free that way goes to the head of the queue too, and no new acquirer (try_lock*()
///   included) enters past a non-empty queue (detail/shared_scripts.hpp, detail/wake_wait.hpp).
/// - auto_renew: an owner's write hold and its read hold have separate leases on the server,
///   so each is renewed separately: the write hold from lock() to unlock(), the read hold from
///   the owner's outermost lock_shared() (0 -> 1) to its last unlock_shared() (1 -> 0).
///   lost() tells about the write hold, lost_shared() about the read hold; on_lost fires for
///   either, and each side's release reports lease_expired when that side was found lost.

#include <redislock/client.hpp>
#include <redislock/detail/lease_keeper.hpp>
#include <redislock/detail/hold_watch.hpp>
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
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace redislock {

template <class Client>
class basic_shared_mutex : public detail::lock_core<Client, detail::shared_scripts::keys>,
                           public detail::timed_lockable<basic_shared_mutex<Client>>,
                           public detail::shared_timed_lockable<basic_shared_mutex<Client>> {
  using core = detail::lock_core<Client, detail::shared_scripts::keys>;

 public:
  /// Throws invalid_argument for an empty name or a lease outside (0, max_lease]. Sends nothing.
  basic_shared_mutex(Client& client, std::string name, lock_options options = {})
      : core(client, std::move(name), std::move(options)) {}

  basic_shared_mutex(const basic_shared_mutex&) = delete;
  basic_shared_mutex& operator=(const basic_shared_mutex&) = delete;

  /// Releases every hold any thread still has through this object (never throws).
  ~basic_shared_mutex() {
    detail::release_every_hold(owners_, [&](const std::string& owner, hold& h) {
      // Each side on its own: a write release that fails does not keep a downgraded read.
      try {
        if (h.writing) run_integer(detail::shared_scripts::release(), {owner, keys_.channel});
      } catch (...) {  // the lease runs out on its own
      }
      if (h.reads > 0) run_integer(detail::shared_scripts::release_shared(), {owner, keys_.channel, "0", h.read_hold});
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
    const auto observed = this->observe_release();
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
    const auto observed = this->observe_release_shared();
    return release_side(
        [](hold& h) {
          if (h.reads == 0) return false;
          --h.reads;
          return true;
        },
        [&](const std::string& owner, const hold& h) {
          if (h.reads == 0) h.lease->read.stop();  // the last read hold: before it is sent
          return h.lease->read.outcome(run_integer(detail::shared_scripts::release_shared(),
                                                   {owner, keys_.channel, std::to_string(h.reads), h.read_hold}) == 1);
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
  bool extend() { return extend(side_lease(true)); }
  /// Renews the calling thread's read hold (all its nested reads: one lease per owner).
  bool extend_shared(std::chrono::milliseconds lease) { return renew(lease, false); }
  bool extend_shared() { return extend_shared(side_lease(false)); }

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
    const hold before = owners_.mine();
    const std::uint64_t fence = this->draw_fence(owners_, detail::shared_scripts::fence(), [](hold& h) {
      (h.writing ? h.lease->write : h.lease->read).mark_lost();
    });
    if (before.fence == 0 && before.writing) this->observe_fenced(fence);
    if (before.fence == 0 && !before.writing) this->observe_fenced_shared(fence);
    return fence;
  }
  /// True when the calling thread's current (or most recent) write hold was found lost: by the
  /// watchdog (auto_renew), an extend() that returned false, or a fencing_token() that found it
  /// gone. Reset by its next write
  /// acquisition. A lost hold is still released with unlock() (it reports lease_expired).
  bool lost() const noexcept { return side_lost(&leases::write); }
  /// The same for the calling thread's read hold (extend_shared(); reset by its next
  /// outermost lock_shared()).
  bool lost_shared() const noexcept { return side_lost(&leases::read); }

  /// As basic_mutex::lease_confirmed_until(), for the calling thread's write hold.
  std::optional<std::chrono::steady_clock::time_point> lease_confirmed_until() const noexcept {
    return side_confirmed_until(&leases::write);
  }
  /// The same for the calling thread's read hold (renewed with auto_renew too).
  std::optional<std::chrono::steady_clock::time_point> lease_confirmed_until_shared() const noexcept {
    return side_confirmed_until(&leases::read);
  }
  /// The calling thread's owner id, as stored in the lock's hash (a new one once all of its
  /// holds ended: detail/owners.hpp).
  std::string owner_id() const { return owners_.owner_id(); }

  // name(), key(), options(), client(), last_release(): detail::lock_core.

 private:
  friend class detail::timed_lockable<basic_shared_mutex>;
  friend class detail::shared_timed_lockable<basic_shared_mutex>;
  friend struct detail::hold_watch_access;
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
    // The lease of each side's latest acquisition (options().lease unless the call gave one).
    std::chrono::milliseconds write_lease{0}, read_lease{0};
    // The number of the wait that began the current read hold (the server's g:<owner>): its
    // releases name it, so a late release of an earlier read hold never ends this one.
    std::string read_hold;
    // Made by the owner's first acquisition, then kept: the watchdog points into it.
    std::shared_ptr<leases> lease;
    // The thread's hand-off channel: subscribed on its first wait, kept until the thread exits
    // (waiting_exits) or a wait fails unheard (leave_after_failure).
    std::shared_ptr<detail::subscriber::subscription> channel;
  };

  bool acquire(const detail::deadline& d, std::chrono::milliseconds lease) {
    const std::string ms = detail::checked_hold_lease(lease, options_, "lock");
    if (owners_.mine().reads > 0)
      throw lock_error("lock: upgrade refused: this thread holds a read hold on shared lock '" + name_ + "'");
    if (owners_.mine().writing)
      throw lock_error("lock: this thread already holds the write lock on '" + name_ + "' (not recursive)");
    return attempt_until(
        d, 'w', "1", lease, ms,
        [lease](hold& h) {
          h.writing = true;
          h.write_lease = lease;
          return &h.lease->write;
        },
        "write");
  }

  bool acquire_shared(const detail::deadline& d, std::chrono::milliseconds lease) {
    const std::string ms = detail::checked_hold_lease(lease, options_, "lock_shared");
    return attempt_until(
        d, 'r', std::to_string(owners_.mine().reads + 1), lease, ms,
        [lease](hold& h) -> detail::lease_keeper* {
          h.read_lease = lease;
          return ++h.reads == 1 ? &h.lease->read : nullptr;
        },
        "read");
  }

  // Attempts return nullopt when they acquired, else how long until a blocking hold may lapse.
  using attempt_result = std::optional<std::chrono::milliseconds>;
  // Thrown by send_attempt() when the hold an acquisition continues is gone (nothing changed).
  struct hold_gone {};

  // One acquisition of `side` ('w' or 'r'; count: the read count after it) by the calling
  // thread, modelled on basic_mutex::wait_for_lock: the first attempt, then, subscribed to the
  // thread's own channel, queue on the server and sleep until a release admits us (told on the
  // channel: no attempt needed) or a blocking hold may have lapsed. Leave the queue when the
  // deadline passes or the wait throws, so nobody admits us after we gave up.
  // on_acquired(hold&) updates the hold and returns the side's lease keeper when a new hold
  // on that side began (renewed from now on), nullptr for a nested read. `lease` (`ms`: as a
  // script argument) is the acquisition's.
  template <class OnAcquired>
  bool attempt_until(const detail::deadline& d, char side, const std::string& count, std::chrono::milliseconds lease,
                     const std::string& ms, OnAcquired on_acquired, const char* side_name) {
    const std::string owner = owners_.owner_id();
    hold mine = owners_.mine();
    // A nested read continues the thread's read hold, a downgrade its write hold: either must
    // still be there (shared_scripts::acquire). Any other acquisition begins a new hold.
    const std::string continues = side != 'r' ? "" : mine.reads > 0 ? "r" + mine.read_hold : mine.writing ? "w" : "";
    if (!mine.channel) {
      detail::thread_exits::instance().watch_this_thread();  // the channel goes with the thread
      mine.channel = std::make_shared<detail::subscriber::subscription>();
      owners_.set_mine(mine);  // the thread keeps its subscription between waits
    }
    detail::subscriber::subscription& sub = *mine.channel;
    // Two guards keep a notice meant for an earlier wait (read too late, after that wait gave
    // up) from completing this one: it names another wait number, and whatever is still
    // buffered on the channel is dropped now.
    const std::string wait = std::to_string(wait_serial_.fetch_add(1, std::memory_order_relaxed) + 1);
    const std::string notice = owner + " " + side + wait;
    const std::string channel = keys_.channel + owner.substr(0, owner.rfind(':'));
    sub.discard_pending();
    detail::steady::time_point sent;  // the lease starts no earlier (a hand-off's: our first "wait")
    std::optional<detail::steady::time_point> first_wait_sent;
    bool first = true, queued = false;
    auto attempt = [&]() -> attempt_result {
      // A first attempt queues at once when our channel is still subscribed from an earlier
      // wait (and we may wait); otherwise it only tries, and try_lock*() never queues.
      const bool queue = !std::exchange(first, false) || (sub.active() && !detail::passed(d));
      queued = queued || queue;
      sent = detail::steady::now();
      if (queue && !first_wait_sent) first_wait_sent = sent;
      return send_attempt(owner, ms, queue ? "wait" : "try", side, wait, count, continues);
    };
    auto handed_over = [&](detail::subscriber::subscription& s) {
      if (!s.take_message(notice)) return false;
      // The release admitted us, with a lease that runs at least from our first "wait"; read
      // late, the notice is confirmed by the next attempt instead (wake_wait.hpp).
      if (detail::hand_off_needs_confirming(first_wait_sent, lease)) return false;
      sent = *first_wait_sent;
      return true;
    };
    // The last attempt's budget (the deadline has passed), kept by leave_after_failure() below.
    std::optional<detail::call_deadline::cleanup_budget> leaving;
    auto acquire_now = [&] {
      bool got = detail::wait_for_release(
          client_, channel, d,
          detail::wait_plan{options_.retry_min, options_.retry_max, options_.recheck_interval, true}, attempt,
          handed_over, &sub);
      // The last attempt: "leave" takes a free lock, keeps a hand-off that reached us meanwhile,
      // and otherwise leaves the queue (admitting the readers we held back).
      if (!got && queued) {
        leaving.emplace();
        got = !send_attempt(owner, ms, "leave", side, wait, count, continues);
        leaving.reset();
      }
      return got;
    };
    bool acquired = false;
    try {
      // A nested read sets the read lease to its own again: as an extend_shared() to it, so
      // that the renewals (auto_renew) send that lease and count from it.
      acquired =
          side == 'r' && mine.reads > 0 && mine.lease ? mine.lease->read.extend(lease, acquire_now) : acquire_now();
    } catch (const hold_gone&) {
      // Someone else may have held the lock since: the critical section the continued hold
      // guards was not continuous, so this acquisition must not make it look so.
      hold h = owners_.mine();
      if (h.lease) (continues == "w" ? h.lease->write : h.lease->read).mark_lost();
      throw lock_error(std::string("redislock: ") + (continues == "w" ? "downgrade" : "nested read") + " on lock '" +
                       name_ + "' refused: this thread's " + (continues == "w" ? "write" : "read") +
                       " hold was lost (its lease ran out or it was force-released)");
    } catch (...) {
      if (queued || !continues.empty()) leave_after_failure(owner, ms, side, wait, count, continues);
      throw;
    }
    if (!acquired) return false;
    hold h = owners_.mine();
    if (!h.lease) {
      h.lease = std::make_shared<leases>();
      h.lease->write.describe(detail::describe(*this, lock_mode::exclusive));
      h.lease->read.describe(detail::describe(*this, lock_mode::shared));
    }
    if (h.idle()) h.fence = 0;  // a new hold: its token is drawn on demand (fencing_token())
    detail::lease_keeper* began = on_acquired(h);
    if (began == &h.lease->read) h.read_hold = wait;
    if (began != nullptr) began->acquired(sent, lease);
    owners_.set_mine(h);
    if (began != nullptr) {
      const bool write = began == &h.lease->write;
      auto drop = [this, write]() noexcept {
        if (write) this->unlock();
        else this->unlock_shared();
      };
      // A read hold's renewals name it: a late one never changes a later read hold of the owner.
      const std::string number = write ? "" : wait;
      const detail::renewal_target renewal{&detail::shared_scripts::extend(),
                                           {keys_.lock, keys_.fence},
                                           {owner, keys_.channel, ms, side_name, number},
                                           2};
      if (options_.auto_renew)
        this->start_or_drop([&] { sent = confirm_late_handoff(*began, owner, side_name, number, lease, ms, sent); },
                            drop);
      this->start_hold(*began, lease, renewal, d, sent, drop);
    }
    return true;
  }

  // mode: "wait", "try" or "leave" (see shared_scripts::acquire).
  attempt_result send_attempt(const std::string& owner, const std::string& ms, std::string_view mode, char side,
                              const std::string& wait, const std::string& count, const std::string& continues) {
    const std::string_view side_arg = side == 'w' ? "w" : "r";
    const auto [ok, value] = this->run_on_lock([&](connection& c) {
      reply_ptr r = detail::shared_scripts::acquire().run(c, {keys_.lock, keys_.fence, keys_.queue, keys_.waiters},
                                                          {owner, keys_.channel, ms, mode, options_.fair ? "1" : "0",
                                                           keys_.wait_lease_ms, side_arg, wait, count, continues});
      return std::pair{detail::as_integer(detail::element(*r, 0)), detail::as_integer(detail::element(*r, 1))};
    });
    if (ok == -1)
      throw lock_error("lock: upgrade refused: the server has a read hold of this thread on '" + name_ + "'");
    if (ok == 2) throw hold_gone{};
    if (ok == 1) return std::nullopt;
    return std::chrono::milliseconds(value);
  }

  // The wait is failing: leave the queue, and pass on a hand-off that reached us meanwhile.
  // When Redis cannot be told, our place stays queued under this owner name until it lapses:
  // the thread drops its channel (a release then skips the place: nobody listens) and, when
  // it holds nothing, takes a new owner name, so neither a hold handed to the place nor a
  // notice for it is ever taken for its own (a hold handed to it meanwhile lapses with its lease).
  // A nested read (never queued: the script answers it at once) instead puts the count back
  // to what the thread still holds, if its attempt ran: the outer read hold is never released.
  void leave_after_failure(const std::string& owner, const std::string& ms, char side, const std::string& wait,
                           const std::string& count, const std::string& continues) noexcept {
    const detail::call_deadline::cleanup_budget cleanup;  // not cut by the failing call's deadline
    try {
      if (continues.size() > 1) {
        run_integer(detail::shared_scripts::release_shared(),
                    {owner, keys_.channel, std::to_string(std::stoll(count) - 1), continues.substr(1)});
        return;
      }
      if (send_attempt(owner, ms, "leave", side, wait, count, continues)) return;
      if (side == 'w') run_integer(detail::shared_scripts::release(), {owner, keys_.channel});
      else run_integer(detail::shared_scripts::release_shared(), {owner, keys_.channel, "0", wait});
      return;
    } catch (...) {
    }
    try {
      hold h = owners_.mine();
      std::shared_ptr<detail::subscriber::subscription> channel = std::move(h.channel);
      owners_.set_mine(h);
      owners_.next_generation();  // only when the thread holds nothing
      channel.reset();            // outside the table's lock (the caller's copy unsubscribes on return)
    } catch (...) {
    }
  }

  // A thread's channel goes with the thread (an exited thread's leftover place is then dead:
  // notify() counts nobody on its channel). The shared_ptr is moved out under the owner
  // table's lock and released after it: the subscriber's lock is never taken under it.
  struct waiting_exits : detail::thread_exits::listener {
    explicit waiting_exits(basic_shared_mutex& m) : m_(m) { detail::thread_exits::instance().add(this); }
    ~waiting_exits() { detail::thread_exits::instance().remove(this); }
    void thread_exited(std::uint64_t serial) noexcept override {
      std::shared_ptr<detail::subscriber::subscription> channel;
      m_.owners_.update(serial, [&](hold& h) { channel = std::move(h.channel); });
      channel.reset();
    }
    basic_shared_mutex& m_;
  };

  // A hand-off's lease counts from our last "wait" attempt, which can be up to recheck_interval
  // old: when that leaves less than a third of the lease, the watchdog (and lost(), by the
  // clock) would count the fresh hold as about to run out, so one owner-checked extend restarts
  // the count from now (as basic_mutex::start_renewal). Returns the time the lease counts from.
  detail::steady::time_point confirm_late_handoff(detail::lease_keeper& keeper, const std::string& owner,
                                                  const char* side_name, const std::string& number,
                                                  std::chrono::milliseconds lease, const std::string& ms,
                                                  detail::steady::time_point sent) {
    const detail::steady::time_point now = detail::steady::now();
    if (sent + lease - lease / 3 > now) return sent;
    if (run_integer(detail::shared_scripts::extend(), {owner, keys_.channel, ms, side_name, number}) == 1) return now;
    keeper.mark_lost();  // it ran out before we could renew it: the holder must know
    return sent;
  }

  template <class Drop, class Send>
  release_status release_side(Drop&& drop, Send&& send) {
    return detail::release_one(owners_, last_release_, std::forward<Drop>(drop), std::forward<Send>(send));
  }

  bool renew(std::chrono::milliseconds lease, bool write) {
    const char* what = write ? "extend" : "extend_shared";
    detail::checked_lease(lease, what);  // bad input first, held or not (every kind alike)
    const hold h = owners_.mine();
    detail::require_held(write ? h.writing : h.reads > 0, what, name_, "this thread on that side");
    const std::string ms = detail::checked_extend_lease(lease, what, options_, write ? h.write_lease : h.read_lease);
    detail::lease_keeper& keeper = write ? h.lease->write : h.lease->read;
    const bool ours = keeper.extend(lease, [&] {
      return run_integer(detail::shared_scripts::extend(),
                         {owners_.owner_id(), keys_.channel, ms, write ? "write" : "read",
                          write ? std::string() : h.read_hold}) == 1;
    });
    if (!ours) keeper.mark_lost();
    return ours;
  }

  // The lease extend() (extend_shared()) renews to: that of the calling thread's latest
  // acquisition on the side, options().lease while it holds nothing there (renew() refuses).
  std::chrono::milliseconds side_lease(bool write) const {
    const hold h = owners_.mine();
    const std::chrono::milliseconds l = write ? h.write_lease : h.read_lease;
    return l.count() > 0 ? l : options_.lease;
  }

  // The calling thread's write (read) hold, readable from another thread (detail/hold_watch.hpp).
  detail::hold_watch watch_current_hold() const { return watch_side(&leases::write); }
  detail::hold_watch watch_current_shared_hold() const { return watch_side(&leases::read); }
  detail::hold_watch watch_side(detail::lease_keeper leases::*side) const {
    std::shared_ptr<const leases> lease = owners_.mine().lease;
    if (!lease) return {[] { return true; }, [] { return std::optional<std::chrono::steady_clock::time_point>(); }};
    return {[lease, side] { return (lease.get()->*side).lost(); },
            [lease, side] { return (lease.get()->*side).confirmed_until(); }};
  }

  bool side_lost(detail::lease_keeper leases::*side) const noexcept {
    const hold h = owners_.mine();
    return h.lease && (h.lease.get()->*side).lost();
  }

  std::optional<std::chrono::steady_clock::time_point> side_confirmed_until(
      detail::lease_keeper leases::*side) const noexcept {
    const hold h = owners_.mine();
    return h.lease ? (h.lease.get()->*side).confirmed_until() : std::nullopt;
  }

  std::chrono::milliseconds remaining(bool held, const char* side) {
    if (!held) return std::chrono::milliseconds(0);
    return detail::to_remaining(
        run_integer(detail::shared_scripts::remaining(), {owners_.owner_id(), keys_.channel, side}));
  }

  std::int64_t run_integer(const script& s, std::initializer_list<std::string_view> args) {
    return this->run_on_lock([&](connection& c) {
      return detail::as_integer(*s.run(c, {keys_.lock, keys_.fence, keys_.queue, keys_.waiters}, args));
    });
  }

  std::atomic<std::uint64_t> wait_serial_{0};  // numbers each wait: a notice names the wait it is for
  detail::owner_table<hold> owners_;
  waiting_exits waiting_exits_{*this};  // declared last: it stops listening before the table goes
};

using shared_mutex = basic_shared_mutex<client>;

}  // namespace redislock
