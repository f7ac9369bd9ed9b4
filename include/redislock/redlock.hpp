#pragma once
/// @file redlock.hpp
/// @brief redislock::basic_redlock — Redlock: one exclusive lock over N independent Redis
/// masters, held while a majority (N/2 + 1) of them holds its key.
///
/// Models Lockable and TimedLockable (std::lock_guard, std::unique_lock, std::scoped_lock).
/// Each attempt draws a fresh random token and sends `SET key token NX PX lease` to every
/// master at once (one thread per master, detail/quorum.hpp), waiting for each at most the
/// per-instance timeout. It succeeds when a majority set the key and time is left:
///
///     validity = lease − (time the attempt took) − drift,   drift = lease × drift_factor + drift_floor
///
/// measured on the local steady clock from before the first command was sent. Every later round
/// that sets the lease (extend(), the renewal) restarts it the same way from its own lease and
/// drift, shorter leases included; a round no majority confirmed never lengthens it, and cuts
/// it to what that round may have set wherever it may have run. Those rounds are numbered per
/// hold and a master applies only a round later than the last it applied, so one that reaches
/// a master late (after it timed out, once a later round was applied) changes nothing there.
/// Once the validity has run out the hold is lost(). A failed attempt
/// deletes its token on every master that may hold it (compare-and-delete), the ones that did
/// not answer included, and the next attempt follows after a jittered, growing delay
/// (retry_min .. retry_max). Each master's connection decides how: with scripts where it
/// runs them, else (Redis 8.4+, Valkey 9.0+) with transactions of SET IFEQ, DELEX or DELIFEQ
/// naming each value of ours that may be there (docs/servers.md, "The Lua-free path"). Key
/// layout, scripts and commands: detail/redlock_scripts.hpp. Guarantees,
/// limits (timing assumptions, process pauses, restarts) and the fencing argument: README,
/// "Redlock".
///
/// One object is one would-be holder; threads sharing it queue locally first (as basic_mutex).

#include <redislock/client.hpp>
#include <redislock/detail/lock_core.hpp>
#include <redislock/detail/lockable.hpp>
#include <redislock/detail/lua_free_write.hpp>
#include <redislock/detail/quorum.hpp>
#include <redislock/detail/random.hpp>
#include <redislock/detail/redlock_scripts.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/reply.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace redislock {

/// What basic_redlock adds to lock_options.
struct redlock_options {
  /// How long an attempt (and every other round) waits for each master. Much smaller than the
  /// lease, so that a stalled master costs little of it. Zero: min(50 ms, lease / 10).
  std::chrono::milliseconds instance_timeout{0};
  /// Allowance for the masters' clocks running faster than ours, of the lease each round sends:
  /// drift = lease × drift_factor + drift_floor (1 % + 2 ms by default).
  double drift_factor = 0.01;
  std::chrono::milliseconds drift_floor{2};

  /// The drift allowance subtracted from the validity of a round that sends `lease`.
  std::chrono::milliseconds drift(std::chrono::milliseconds lease) const noexcept {
    return std::chrono::duration_cast<std::chrono::milliseconds>(lease * drift_factor) + drift_floor;
  }
};

template <class Client>
class basic_redlock : public detail::lock_identity<detail::redlock_scripts::keys>,
                      public detail::timed_lockable<basic_redlock<Client>> {
  using core = detail::lock_identity<detail::redlock_scripts::keys>;

 public:
  using client_type = Client;
  using steady = std::chrono::steady_clock;

  /// `clients`: one per master, each a different object (N >= 1; 3 or 5 are typical). The
  /// clients must outlive the lock. Throws invalid_argument for no client, the same client
  /// twice, a bad name or lease, timeouts that leave no validity, or an option that means
  /// nothing here: fair, wait_lease and recheck_interval (there is no server-side queue nor
  /// release notice: waiters back off), min_replicas (masters are independent), fence_lifetime
  /// (its fencing register never expires). Sends nothing.
  basic_redlock(std::vector<std::reference_wrapper<Client>> clients, std::string name, lock_options options = {},
                redlock_options redlock = {})
      : core(std::move(name), std::move(options)), redlock_(redlock) {
    if (clients.empty()) throw invalid_argument("redlock: needs at least one client");
    std::vector<Client*> pointers;
    for (Client& c : clients) {
      if (std::find(pointers.begin(), pointers.end(), &c) != pointers.end())
        throw invalid_argument("redlock: the same client is given twice (each master needs its own)");
      pointers.push_back(&c);
    }
    const lock_options defaults;
    refuse_option(options_.fair, "redlock", "fair mode", "no wait queue: waiters back off");
    refuse_option(options_.wait_lease != defaults.wait_lease, "redlock", "wait_lease", "no wait queue");
    refuse_option(options_.recheck_interval != defaults.recheck_interval, "redlock", "recheck_interval",
                  "no release notice to wait for: waiters back off between retry_min and retry_max");
    refuse_option(options_.min_replicas > 0, "redlock", "min_replicas",
                  "its masters are independent, without replicas");
    refuse_option(options_.fence_lifetime != defaults.fence_lifetime, "redlock", "fence_lifetime",
                  "its fencing register on each master never expires (detail/redlock_scripts.hpp)");
    if (!(redlock_.drift_factor >= 0 && redlock_.drift_factor < 1) || redlock_.drift_floor.count() < 0)
      throw invalid_argument("redlock: drift_factor must be in [0, 1) and drift_floor >= 0");
    if (redlock_.instance_timeout.count() < 0) throw invalid_argument("redlock: instance_timeout must not be negative");
    if (redlock_.instance_timeout.count() == 0)
      redlock_.instance_timeout =
          std::max(std::chrono::milliseconds(1), std::min(std::chrono::milliseconds(50), options_.lease / 10));
    if (redlock_.instance_timeout + drift() >= options_.lease)
      throw invalid_argument("redlock: instance_timeout + drift must be shorter than the lease");
    if constexpr (!detail::has_watchdog<Client>::value) {
      if (options_.on_lost && !options_.auto_renew)
        throw invalid_argument(
            "redlock: on_lost without auto_renew needs a Client with watchdog() (it watches the validity)");
    }
    lease_ms_ = std::to_string(options_.lease.count());
    hold_lease_ms_.store(options_.lease.count(), std::memory_order_relaxed);
    first_client_ = pointers.front();
    quorum_ = std::make_unique<detail::quorum<Client>>(std::move(pointers), redlock_.instance_timeout);
  }

  basic_redlock(const basic_redlock&) = delete;
  basic_redlock& operator=(const basic_redlock&) = delete;

  /// Releases the lock if held (never throws), waits for the renewal thread (an on_lost
  /// callback still running on it included), then for the masters' threads to send what is
  /// queued (bounded by the clients' timeouts).
  ~basic_redlock() {
    if (held_.load(std::memory_order_acquire)) this->unlock();
    stop_renewal();
    detach_own_renewer();  // destroyed by a callback on the renewal thread: it cannot join itself
  }

  /// Like unlock(), but returns the outcome and throws when the answers cannot tell (the first
  /// error, typed). The local hold is dropped either way:
  ///   released       a majority confirmed deleting our key (it was ours there until then);
  ///   lease_expired  so many masters answered "not ours" that no majority can have held our
  ///                  key (or the hold was lost() before, its validity run out included,
  ///                  and a majority answered);
  ///   failed         neither: too few answers to tell (a master that did not answer may still
  ///                  hold our key); our keys run out with the lease.
  ///   not_held       not held, or another unlock released this hold meanwhile (a thread
  ///                  racing this one, or on_lost's unlock on the renewal thread): that one's
  ///                  outcome stays in last_release(). This call returns once that release
  ///                  has ended, except from on_lost or on the renewal thread, where it
  ///                  returns at once: the other unlock may be waiting for that thread.
  /// Safe to call from on_lost, while other threads unlock too.
  release_status unlock_and_report() {
    hold h;
    if (!claim_release(h)) return release_status::not_held;
    const auto observed = this->observe_release();
    stop_renewal();
    stop_watch();
    std::shared_ptr<detail::round> r;
    try {
      r = send_release(h);
    } catch (...) {  // nothing sent (out of memory): the keys run out with the lease
      drop_local_hold(release_status::failed);
      throw;
    }
    const detail::tally t =
        r->wait(steady::now() + quorum_->instance_timeout(), [](const detail::tally& c) { return c.pending == 0; });
    // A master our acquire never reached (skipped) or refused cannot hold our key: it counts as "not held".
    // One that did not answer may: with a bare majority, one stalled master leaves "cannot tell".
    const std::size_t deleted = t.yes, not_held = t.no + t.skipped, answered = deleted + not_held;
    release_status status = release_status::failed;
    if (deleted >= quorum_->needed()) status = lost() ? release_status::lease_expired : release_status::released;
    else if (not_held > quorum_->size() - quorum_->needed() || (lost() && answered >= quorum_->needed()))
      status = release_status::lease_expired;
    if (status == release_status::lease_expired) {
      std::lock_guard<std::mutex> g(state_mutex_);
      set_lost();  // found by the release, if not before
    }
    drop_local_hold(status);
    if (status == release_status::failed) throw_unreachable(*r, "release");
    return status;
  }
  /// The old name of unlock_and_report() (unlike std::unique_lock::release(), it unlocks).
  [[deprecated("use unlock_and_report()")]] release_status release() { return unlock_and_report(); }

  /// Resets the lease to `lease` on every master that still holds our key. True when a majority
  /// did within the validity window: the validity then restarts from this call, as
  /// lease − (time the round took) − drift(lease), shorter than before when `lease` is. False
  /// when the validity had run out or fewer than a majority still held our key (then lost() is
  /// true). Throws lock_error when not held, connection_error (or the error reply) when fewer
  /// than a majority answered: the masters that ran it may have the new lease, so the validity
  /// becomes at most lease − drift(lease) from this call, never longer than it was.
  /// With auto_renew the renewals send `lease` from then on (every lease/3), as every kind's do.
  bool extend(std::chrono::milliseconds lease) {
    // A lease within instance_timeout + drift would leave no validity.
    const std::chrono::milliseconds floor = drift(lease) + quorum_->instance_timeout();
    detail::checked_lease(lease, "redlock extend", std::chrono::milliseconds(0), floor);  // bad input first
    require_held("extend");  // then the hold's lease is this hold's (read after held_)
    detail::checked_extend_lease(lease, "redlock extend", options_, hold_lease(), floor);
    const hold h = current();
    renew_lease_ms_.store(lease.count(), std::memory_order_relaxed);  // rounds are numbered: order does not matter
    const steady::time_point sent = steady::now();
    const bool extended = extend_hold(h, lease);
    if (extended && options_.auto_renew) {
      // The renewer may sleep until a third of a longer lease after its last round: a shorter
      // lease must be renewed sooner, before the validity this round left runs out.
      {
        std::lock_guard<std::mutex> g(renew_mutex_);
        renew_by_ = std::min(renew_by_, sent + lease / 3);
      }
      renew_cv_.notify_all();
    }
    return extended;
  }
  bool extend() {
    require_held("extend");
    return extend(hold_lease());
  }

  /// The validity window left, computed locally: the time during which a majority certainly
  /// still holds our key (given the drift bound), from the last round that set the lease. Zero
  /// when not held, run out or lost().
  std::chrono::milliseconds validity() const {
    const ticks until = valid_until_.load(std::memory_order_acquire);  // `never` once released
    if (!held_.load(std::memory_order_acquire) || until == never || lost()) return std::chrono::milliseconds(0);
    const auto left = steady::time_point(steady::duration(until)) - steady::now();
    return left.count() > 0 ? std::chrono::ceil<std::chrono::milliseconds>(left) : std::chrono::milliseconds(0);
  }
  /// The same as validity(), under the name every kind has: the lease this lock can vouch for.
  /// Computed locally (no round trip): the masters' own PTTLs do not add up to one lease.
  std::chrono::milliseconds remaining_lease() const { return validity(); }

  /// Asks every master (one parallel round): true when a majority still holds our key, false
  /// when so many answered "not ours" that no majority can. Throws connection_error /
  /// timeout_error when the answers cannot tell.
  bool still_held() {
    if (!held_.load(std::memory_order_acquire)) return false;
    const hold h = current();
    auto r = quorum_->send(
        keys_.lock,
        [key = keys_.lock, token = h.token](std::size_t, connection& c, std::int64_t&) {
          const std::int64_t pttl = by_script_or_not(
              c, [&] { return detail::as_integer(*detail::redlock_scripts::remaining().run(c, {key}, {token})); },
              [&] { return detail::redlock_scripts::remaining_without_script(c, key, token); });
          return pttl > 0 || pttl == -1 ? detail::answer::yes : detail::answer::no;
        },
        true);
    const detail::tally t = r->wait(steady::now() + quorum_->instance_timeout(), decided(false));
    r->close();
    if (t.yes >= quorum_->needed()) return true;
    if (t.no > quorum_->size() - quorum_->needed()) return false;
    throw_unreachable(*r, "still_held");
  }

  /// This object's local belief: an acquisition succeeded and unlock() has not been called.
  bool owns_lock() const noexcept { return held_.load(std::memory_order_acquire); }

  /// True when the current (or most recent) hold was found lost: its validity ran out (by the
  /// clock alone, no round needed), or the renewal thread (auto_renew), an extend() that
  /// returned false or a fencing_token() found it gone. Stays true for that hold.
  bool lost() const noexcept {
    if (lost_.load(std::memory_order_acquire)) return true;
    return steady::now().time_since_epoch().count() >= valid_until_.load(std::memory_order_acquire);
  }

  /// As basic_mutex::lease_confirmed_until(): while held, renewed or not, the local time until
  /// which a majority of masters certainly keeps the key, the end of the validity() window
  /// (start of the last round a majority confirmed, plus the lease, minus the drift allowance).
  /// lost() turns true once it has passed, and on_lost runs then. nullopt when not held.
  std::optional<std::chrono::steady_clock::time_point> lease_confirmed_until() const noexcept {
    if (!held_.load(std::memory_order_acquire)) return std::nullopt;
    const ticks until = valid_until_.load(std::memory_order_acquire);  // `never` once released
    if (until == never) return std::nullopt;
    return steady::time_point(steady::duration(until));
  }

  /// A fencing token for the current hold: any token obtained after another was obtained is
  /// strictly greater, across all objects and processes, as long as no master loses its data
  /// (README, "Redlock" gives the argument). Drawn on the first call per hold, only while a
  /// majority holds our key, then cached; drawing takes two parallel rounds (read the register
  /// on a majority, raise it on a majority) where the other kinds take one round trip.
  /// Throws lock_error when the validity has run out or a majority no longer holds our key
  /// (then lost() is true), and connection_error when fewer than a majority answered.
  std::uint64_t fencing_token() {
    require_held("fencing_token");
    std::lock_guard<std::mutex> one_at_a_time(fence_mutex_);
    const hold h = current();
    if (h.fence != 0) return h.fence;
    if (lost()) throw lock_error("fencing_token: lock '" + name_ + "' is lost (its validity ran out)");
    std::int64_t floor = 0;  // registers seen at or above a refused proposal
    for (int tries = 0; tries < 5; ++tries) {
      auto read = quorum_->send(
          keys_.lock,
          [name = name_, key = keys_.lock, fence = keys_.fence, token = h.token](std::size_t, connection& c,
                                                                                 std::int64_t& v) {
            require_scripting_for_fencing(c, name);
            v = detail::as_integer(*detail::redlock_scripts::fence_read().run(c, {key, fence}, {token}));
            return v >= 0 ? detail::answer::yes : detail::answer::no;
          },
          true);
      const detail::tally tr = read->wait(steady::now() + quorum_->instance_timeout(), decided(false));
      read->close();
      check_majority(tr, *read, h, "fencing_token");
      std::int64_t highest = floor;
      for (std::size_t i = 0; i < quorum_->size(); ++i)
        if (read->answer_of(i) == detail::answer::yes) highest = std::max(highest, read->value_of(i));
      const std::string proposed = std::to_string(highest + 1);
      auto raise = quorum_->send(
          keys_.lock,
          [name = name_, key = keys_.lock, fence = keys_.fence, token = h.token, proposed](std::size_t, connection& c,
                                                                                           std::int64_t& v) {
            require_scripting_for_fencing(c, name);
            v = detail::as_integer(*detail::redlock_scripts::fence_raise().run(c, {key, fence}, {token, proposed}));
            if (v == 0) return detail::answer::yes;
            return v < 0 ? detail::answer::no : detail::answer::failed;  // failed: a register was higher
          },
          true);
      const detail::tally tw = raise->wait(steady::now() + quorum_->instance_timeout(), decided(false));
      raise->close();
      if (tw.yes >= quorum_->needed()) {
        const auto drawn = static_cast<std::uint64_t>(highest + 1);
        std::unique_lock<std::mutex> g(state_mutex_);
        if (hold_.token != h.token) return drawn;  // released meanwhile
        hold_.fence = drawn;
        g.unlock();
        this->observe_fenced(drawn);  // the first draw (fence_mutex_ makes the others wait, then return it)
        return drawn;
      }
      if (tw.no > quorum_->size() - quorum_->needed()) check_majority(tw, *raise, h, "fencing_token");
      // Refused proposals (a register already as high): try again above the highest seen.
      std::size_t refused = 0;
      for (std::size_t i = 0; i < quorum_->size(); ++i) {
        if (raise->answer_of(i) != detail::answer::failed || raise->value_of(i) <= 0) continue;
        ++refused;
        floor = std::max(floor, raise->value_of(i));
      }
      if (tw.answered() + refused < quorum_->needed()) throw_unreachable(*raise, "fencing_token");
    }
    throw lock_error("fencing_token: no majority agreed on a token for lock '" + name_ + "' (concurrent writers)");
  }

  // name(), key() (the key on every master), options(), last_release(): detail::lock_identity.
  const redlock_options& redlock() const noexcept { return redlock_; }
  /// Masters, and how many must agree (N/2 + 1).
  std::size_t instances() const noexcept { return quorum_->size(); }
  std::size_t quorum() const noexcept { return quorum_->needed(); }
  /// The drift allowance subtracted from a round's validity that sends `lease`:
  /// lease × drift_factor + drift_floor.
  std::chrono::milliseconds drift(std::chrono::milliseconds lease) const noexcept { return redlock_.drift(lease); }
  /// The same for options().lease (what an acquisition without a lease of its own sends).
  std::chrono::milliseconds drift() const noexcept { return drift(options_.lease); }
  /// The current hold's token (empty when not held).
  std::string token() const { return held_.load(std::memory_order_acquire) ? current().token : std::string(); }

 private:
  friend class detail::timed_lockable<basic_redlock>;

  // The lease of the current (or last) acquisition: options().lease unless the call gave one;
  // extend() without an argument extends to it.
  std::chrono::milliseconds hold_lease() const noexcept {
    return std::chrono::milliseconds(hold_lease_ms_.load(std::memory_order_relaxed));
  }

  struct hold {
    std::string token;
    std::shared_ptr<detail::round> acquired;  // the acquiring round: which masters may hold the key
    steady::time_point acquired_at{};         // when that round was sent
    std::uint64_t fence = 0;
    std::uint64_t rounds = 0;  // lease-setting rounds sent so far (the last one's number)
    // Per master, the values of ours that may be there (for the commands without scripting).
    std::shared_ptr<std::vector<detail::redlock_scripts::master_rounds>> masters;
  };

  // When a round is decided: a majority said yes, everyone answered, or (acquire only, to
  // return fast when the lock is held) too many cannot say yes any more.
  auto decided(bool early_failure = true) const {
    return [n = quorum_->size(), q = quorum_->needed(), early_failure](const detail::tally& t) {
      return t.yes >= q || t.pending == 0 || (early_failure && t.no + t.failed + t.skipped > n - q);
    };
  }

  bool acquire(const detail::deadline& d, std::chrono::milliseconds lease) {
    // A lease within instance_timeout + drift would leave no validity.
    std::string ms = detail::checked_lease(lease, "redlock lock", std::chrono::milliseconds(0),
                                           drift(lease) + quorum_->instance_timeout());
    if (!gate_.lock_until(d)) return false;
    hold_lease_ms_.store(lease.count(), std::memory_order_relaxed);  // the gate holder's: its attempts send it
    lease_ms_.swap(ms);
    bool acquired = false;
    try {
      acquired = detail::retry_until(d, options_.retry_min, options_.retry_max,
                                     [&]() -> std::optional<std::chrono::milliseconds> {
                                       if (attempt()) return std::nullopt;
                                       return std::chrono::milliseconds(-1);  // the holder's lease is not known
                                     });
    } catch (...) {
      gate_.unlock();
      throw;
    }
    if (!acquired) {
      gate_.unlock();
      return false;
    }
    if (options_.auto_renew) start_or_drop([&] { start_renewal(); }, [this]() noexcept { this->unlock(); });
    else if (options_.on_lost) start_or_drop([&] { start_watch(); }, [this]() noexcept { this->unlock(); });
    return true;
  }

  // One attempt on all masters. True: acquired with positive validity. False: not acquired
  // (cleaned up). Throws when fewer than a majority answered (after cleaning up).
  bool attempt() {
    if (!masters_checked_.load(std::memory_order_relaxed)) require_usable_everywhere();
    hold h;
    h.token = detail::random_token();
    h.masters = std::make_shared<std::vector<detail::redlock_scripts::master_rounds>>(quorum_->size());
    const steady::time_point start = steady::now();
    h.acquired_at = start;
    h.acquired = quorum_->send(
        keys_.lock,
        [name = name_, key = keys_.lock, token = h.token, lease = lease_ms_, masters = h.masters](
            std::size_t i, connection& c, std::int64_t&) {
          require_usable(c, name);  // nothing is written where the hold could be neither renewed nor released
          detail::redlock_scripts::master_rounds& m = (*masters)[i];
          m.acquire_sent();
          // Without scripts, only where this user may release it too (detail/lua_free_write.hpp).
          const detail::command_form set = detail::set_nx(key, token, lease, false);
          reply_ptr r = c.features().scripting
                            ? c.command(set.data(), set.size())
                            : detail::write_if_releasable(c, c.features(), key, set.views(), "redlock '" + name + "'");
          if (r->type == REDIS_REPLY_NIL) {
            m.candidates.clear();
            return detail::answer::no;
          }
          m.applied(0);
          return detail::answer::yes;
        },
        true);
    // Not closed when it succeeds: masters that answer late still get the key (more margin).
    const detail::tally t = h.acquired->wait(start + quorum_->instance_timeout(), decided());
    const std::chrono::milliseconds lease = hold_lease();
    const steady::time_point valid_until = start + lease - drift(lease);
    const bool refused = usable_refused(*h.acquired);  // a master we could not release on
    if (!refused && t.yes >= quorum_->needed() && steady::now() < valid_until) {
      {
        std::lock_guard<std::mutex> g(state_mutex_);
        renew_lease_ms_.store(lease.count(), std::memory_order_relaxed);
        hold_ = std::move(h);
        lost_.store(false, std::memory_order_release);  // before the new end: never lost by the old one
        lost_report_.reset();
        set_valid_until(valid_until);
      }
      held_.store(true, std::memory_order_release);
      return true;
    }
    // Delete our token wherever it may have been set: masters that said yes, and those whose
    // answer is unknown (the release is queued behind the acquire and checks it when it runs).
    h.acquired->close();
    auto cleanup = send_release(h);
    cleanup->wait(steady::now() + quorum_->instance_timeout(), [](const detail::tally& c) { return c.pending == 0; });
    // Unreachable: too many masters failed (or never answered) for any outcome; refused by a
    // holder otherwise (a round decided early may leave answers pending: they do not count).
    if (refused) std::rethrow_exception(h.acquired->first_error());
    const bool timed_out = !decided()(t);
    if (t.failed + (timed_out ? t.pending : 0) > quorum_->size() - quorum_->needed())
      throw_unreachable(*h.acquired, "lock");
    return false;
  }

  // `scripted()` where the connection runs scripts, else `plain()`. A script refused for want of
  // scripting (the user's ACL changed since the connection looked) ran nothing: `plain()`
  // follows on the same connection, which now counts as one without scripting.
  template <class Scripted, class Plain>
  static auto by_script_or_not(connection& c, Scripted scripted, Plain plain) -> decltype(plain()) {
    if (c.features().scripting) {
      try {
        return scripted();
      } catch (const scripting_unavailable_error&) {
        if (c.features().scripting) throw;
      }
    }
    return plain();
  }

  // Renewal and release need scripts, or without them SET IFEQ and DELEX/DELIFEQ (the Lua-free
  // path, docs/servers.md): a master with neither is refused before anything is written on it.
  static void require_usable(connection& c, const std::string& name) {
    const detail::server_features& f = c.features();
    if (f.scripting || (f.set_ifeq && f.compare_and_delete())) return;
    throw scripting_unavailable_error("", "redlock '" + name + "': " + f.describe() + " at " + c.options().endpoint() +
                                              " runs no scripts for this connection (an ACL user without "
                                              "@scripting, or Valkey without Lua), and without scripts redlock "
                                              "renews and releases with SET IFEQ and DELEX or DELIFEQ (Redis "
                                              "8.4+, Valkey 9.0+), which it lacks");
  }

  // A fencing token is drawn by scripts: each master's register is read, and raised, only while
  // our key is there, in one step; a register raised outside a script could be raised after our
  // key expired there. Masters without them fail the round; a majority must run them.
  static void require_scripting_for_fencing(connection& c, const std::string& name) {
    if (c.features().scripting) return;
    throw scripting_unavailable_error("", "fencing_token: redlock '" + name + "': " + c.features().describe() + " at " +
                                              c.options().endpoint() +
                                              " runs no scripts for this connection; the fencing register is read "
                                              "and raised by scripts that check our key in the same step, so a "
                                              "majority of masters must run them");
  }

  // Before this object's first acquisition: every master is asked what it offers (a round trip
  // per connection's first use), so that a master that could neither renew nor release is
  // refused before anything is written on any. Asked once (a master that does not answer costs
  // the first attempt one instance_timeout); after that each acquire checks its own connection
  // before its SET (a reconnect may reach another server), and an attempt refused so releases
  // what it wrote elsewhere and throws.
  void require_usable_everywhere() {
    auto r = quorum_->send(
        keys_.lock,
        [name = name_](std::size_t, connection& c, std::int64_t&) {
          require_usable(c, name);
          return detail::answer::yes;
        },
        false);
    r->wait(steady::now() + quorum_->instance_timeout(), [](const detail::tally& c) { return c.pending == 0; });
    if (usable_refused(*r)) std::rethrow_exception(r->first_error());
    masters_checked_.store(true, std::memory_order_relaxed);
  }

  // True when the round's (first) error is require_usable()'s refusal.
  static bool usable_refused(const detail::round& r) {
    const std::exception_ptr e = r.first_error();
    if (!e) return false;
    try {
      std::rethrow_exception(e);
    } catch (const scripting_unavailable_error&) {
      return true;
    } catch (...) {
      return false;
    }
  }

  // Compare-and-delete on every master the hold's acquire may have reached. Never skipped
  // once queued: it must reach a master that got the acquire late. Without scripting, of each
  // value that may be there (master_rounds).
  std::shared_ptr<detail::round> send_release(const hold& h) {
    return quorum_->send(
        keys_.lock,
        [name = name_, key = keys_.lock, token = h.token, masters = h.masters](std::size_t i, connection& c,
                                                                               std::int64_t&) {
          const std::vector<std::uint64_t>& candidates = (*masters)[i].candidates;
          const bool deleted = by_script_or_not(
              c,
              [&] { return detail::as_integer(*detail::redlock_scripts::release_owned().run(c, {key}, {token})) == 1; },
              [&] {
                const bool complete = (*masters)[i].complete;
                if (candidates.empty() && complete) return false;  // nothing of ours can be there
                require_usable(c, name);
                if (detail::redlock_scripts::release_without_script(c, c.features(), key, token, candidates))
                  return true;
                // Rounds whose replies were lost beyond the list's bound (scripts ran them, then
                // scripting went away) may have left a value not named: cannot tell.
                if (!complete)
                  throw connection_error("redlock release: " + c.options().endpoint() +
                                         " may hold a round of ours that the release cannot name");
                return false;
              });
          return deleted ? detail::answer::yes : detail::answer::no;
        },
        false,
        [acquired = h.acquired](std::size_t i) {
          return acquired->sent_to(i) && acquired->answer_of(i) != detail::answer::no;
        });
  }

  // One round that sets the lease to `lease` where our key is (redlock_scripts::extend_round).
  // Rounds are sent one at a time with increasing numbers, and a master ignores a round older
  // than one it applied (one that timed out may arrive after a later one, on its dropped
  // connection), so the validity always describes the last round that may have run. A master
  // may run it as soon as it is sent, shortening our key: the validity drops to what the
  // round may set before sending (never more optimistic than the masters, not even while the
  // answers are on the way). A confirmed round then restarts it from its start; one that no
  // majority confirmed leaves it at most that.
  bool extend_hold(const hold& h, std::chrono::milliseconds lease) {
    std::lock_guard<std::mutex> one_round_at_a_time(extend_mutex_);
    const steady::time_point start = steady::now();
    const steady::time_point round_until = start + lease - drift(lease);  // the masters set it at or after start
    std::uint64_t round = 0;
    {
      std::lock_guard<std::mutex> g(state_mutex_);
      // Released meanwhile: extend() may have read the hold just after a release dropped it
      // (an empty hold, without a token or its masters' values: nothing to send).
      if (h.token.empty() || hold_.token != h.token) return false;
      if (keep_lost()) return false;
      if (round_until < valid_until()) set_valid_until(round_until);
      round = ++hold_.rounds;
    }
    auto r = quorum_->send(
        keys_.lock,
        [name = name_, key = keys_.lock, token = h.token, ms = std::to_string(lease.count()), round,
         masters = h.masters](std::size_t i, connection& c, std::int64_t&) {
          return set_round(c, (*masters)[i], name, key, token, ms, round);
        },
        true);
    const detail::tally t = r->wait(start + quorum_->instance_timeout(), decided(false));
    {
      std::lock_guard<std::mutex> g(state_mutex_);
      if (hold_.token != h.token) return false;
      if (keep_lost()) return false;  // ran out during the round: lost() may have said so already
      if (t.yes >= quorum_->needed()) {
        set_valid_until(round_until);
        return true;
      }
      if (t.no > quorum_->size() - quorum_->needed()) {
        set_lost();
        return false;
      }
    }
    throw_unreachable(*r, "extend");
  }

  // Round `round` of a lease-setting round on one master, on its thread. With scripting the
  // extend_round() script; without, SET IFEQ of each value that may be there (master_rounds),
  // in one transaction. Either way the master's candidates follow what it answered: a round
  // whose answer is unknown (sent, no reply) may still be applied there, then or later.
  static detail::answer set_round(connection& c, detail::redlock_scripts::master_rounds& m, const std::string& name,
                                  const std::string& key, const std::string& token, const std::string& lease_ms,
                                  std::uint64_t round) {
    namespace scripts = detail::redlock_scripts;
    return by_script_or_not(
        c,
        [&] {
          std::int64_t ok = 0;
          try {
            ok = detail::as_integer(*scripts::extend_round().run(c, {key}, {token, lease_ms, std::to_string(round)}));
          } catch (const scripting_unavailable_error&) {
            throw;  // ran nothing
          } catch (...) {
            m.unanswered(round);
            throw;
          }
          if (ok == 1) m.applied(round);
          if (ok == 0) m.none_there();
          if (ok == 1) return detail::answer::yes;
          // -1: this round or a later one was applied there already. Only a round whose caller
          // has moved on can find that; not a confirmation of this one.
          return ok == 0 ? detail::answer::no : detail::answer::failed;
        },
        [&] { return set_round_without_script(c, m, name, key, token, lease_ms, round); });
  }

  static detail::answer set_round_without_script(connection& c, detail::redlock_scripts::master_rounds& m,
                                                 const std::string& name, const std::string& key,
                                                 const std::string& token, const std::string& lease_ms,
                                                 std::uint64_t round) {
    namespace scripts = detail::redlock_scripts;
    require_usable(c, name);
    if (m.candidates.empty() && m.complete) return detail::answer::no;  // nothing of ours is there
    if (!m.can_send_round())
      throw connection_error("redlock '" + name + "': " + c.options().endpoint() + " left " +
                             std::to_string(scripts::master_rounds::max_candidates) +
                             " rounds in a row unanswered: it takes no more rounds in this hold (without "
                             "scripts each round names every value of ours that may be there)");
    bool applied = false;
    try {
      applied = scripts::set_round_without_script(c, key, token, round, lease_ms, m.candidates);
    } catch (const reply_error&) {
      throw;  // EXEC answered (aborted, or refused each SET): nothing was applied
    } catch (...) {
      m.unanswered(round);
      throw;
    }
    if (!applied) {
      m.none_there();
      return detail::answer::no;
    }
    m.applied(round);
    return detail::answer::yes;
  }

  // After a round that needed a majority of "ours": lost when too many said "not ours",
  // unreachable when too few answered.
  void check_majority(const detail::tally& t, const detail::round& r, const hold& h, const char* what) {
    if (t.yes >= quorum_->needed()) return;
    if (t.no > quorum_->size() - quorum_->needed()) {
      mark_lost_if_current(h.token);
      throw lock_error(std::string(what) + ": lock '" + name_ + "' is no longer held by a majority");
    }
    throw_unreachable(r, what);
  }

  // What holds the name on the masters, for a WRONGTYPE refusal: the first master that names
  // another kind than ours (a string key) or none; throws when none could be asked.
  detail::held_by held_kind_anywhere() const {
    std::exception_ptr failed;
    for (std::size_t i = 0; i < quorum_->size(); ++i) {
      try {
        detail::held_by h = detail::held_kind(quorum_->client(i), keys_.lock);
        if (h.kind != lock_kind::none && h.kind != lock_kind::mutex) return h;
      } catch (...) {
        failed = std::current_exception();
      }
    }
    if (failed) std::rethrow_exception(failed);
    return {};
  }

  [[noreturn]] void throw_unreachable(const detail::round& r, const char* what) const {
    const std::exception_ptr e = r.first_error();
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const wrong_type_error& w) {
        detail::throw_kind_clash(w, name_, lock_kind::mutex, "redlock", [&] { return held_kind_anywhere(); });
      } catch (const reply_error&) {
        throw;  // an error reply (WRONGTYPE, NOPERM, ...) keeps its type
      } catch (const std::exception& x) {
        throw connection_error(std::string("redlock ") + what + ": too few of " + std::to_string(quorum_->size()) +
                               " masters answered to decide (majority " + std::to_string(quorum_->needed()) + ") (" +
                               x.what() + ")");
      }
    }
    throw timeout_error(std::string("redlock ") + what + ": too few of " + std::to_string(quorum_->size()) +
                        " masters answered within " + std::to_string(quorum_->instance_timeout().count()) +
                        " ms to decide (majority " + std::to_string(quorum_->needed()) + ")");
  }

  // ---- renewal (lock_options::auto_renew): one thread per held lock, every lease/3 ----
  //
  // The thread handles have one owner: they are taken under renew_mutex_ and joined outside it
  // by whichever thread takes them, never joined twice nor detached while another joins. A
  // thread never joins itself: an unlock() from on_lost (on the renewal thread) stops the
  // renewal and leaves that thread's handle, joined by the next acquisition's start, the next
  // unlock from another thread, or the destructor (once the callback returns, the thread ends).
  // Each thread runs while the generation it was started with is current.

  void start_renewal() {
    join_renewers();  // a previous hold's thread that stopped itself (on_lost unlocked)
    std::lock_guard<std::mutex> g(renew_mutex_);
    // Still joinable now: the calling thread's own (on_lost locks again). Kept until it ends.
    if (renewer_.joinable()) retired_ = std::move(renewer_);
    renew_by_ = steady::time_point::max();
    const std::uint64_t generation = ++renew_generation_;
    renewer_ = std::thread([this, h = current(), generation] {
      waited_on() = this;  // the unlock that stops this thread joins it
      renew(h, generation);
    });
  }

  void stop_renewal() noexcept {
    {
      std::lock_guard<std::mutex> g(renew_mutex_);
      ++renew_generation_;
    }
    renew_cv_.notify_all();
    join_renewers();
  }

  // Joins every renewal thread but the calling thread's own.
  void join_renewers() noexcept {
    std::thread current, retired;
    {
      std::lock_guard<std::mutex> g(renew_mutex_);
      const std::thread::id me = std::this_thread::get_id();
      if (renewer_.joinable() && renewer_.get_id() != me) current = std::move(renewer_);
      if (retired_.joinable() && retired_.get_id() != me) retired = std::move(retired_);
    }
    join_or_detach(current);
    join_or_detach(retired);
  }

  // The destructor, run by a callback on a renewal thread: that thread returns from the
  // callback into nothing of this object's.
  void detach_own_renewer() noexcept {
    std::lock_guard<std::mutex> g(renew_mutex_);
    join_or_detach(renewer_);  // only the calling thread's own is left: detached
    join_or_detach(retired_);
  }

  static void join_or_detach(std::thread& t) noexcept {
    if (!t.joinable()) return;
    try {
      if (t.get_id() != std::this_thread::get_id()) {
        t.join();
        return;
      }
    } catch (...) {  // a deadlock the system noticed: never std::terminate
    }
    try {
      if (t.joinable()) t.detach();
    } catch (...) {
    }
  }

  // Extends to the renewal lease (the hold's, or what extend() set last) at a third of it
  // after each confirmed extension; retries every lease/10 on failure until the validity
  // (whatever round set it last) runs out, then declares the hold lost.
  void renew(hold h, std::uint64_t generation) {
    steady::time_point next = h.acquired_at + hold_lease() / 3;
    std::unique_lock<std::mutex> g(renew_mutex_);
    for (;;) {
      // An extend() may bring the next turn forward (renew_by_) while we wait.
      for (;;) {
        next = std::min(next, std::exchange(renew_by_, steady::time_point::max()));
        if (renew_cv_.wait_until(g, next, [&] { return renew_generation_ != generation || renew_by_ < next; })) {
          if (renew_generation_ != generation) return;
          continue;
        }
        break;
      }
      g.unlock();
      const steady::time_point sent = steady::now();
      const std::chrono::milliseconds lease(renew_lease_ms_.load(std::memory_order_relaxed));
      bool renewed = false;
      try {
        renewed = extend_hold(h, lease);
      } catch (...) {  // too few answered: try again while the validity lasts
      }
      detail::notify([&](lock_observer& o) {
        renewed_event e;
        e.batch = 1;
        e.renewed = renewed ? 1 : 0;
        e.latency = steady::now() - sent;
        o.on_renewed(e);
      });
      const steady::time_point now = steady::now(), valid = valid_until();
      if (!renewed && lost()) {
        mark_lost_if_current(h.token);
        run_on_lost();
        return;
      }
      next = renewed ? sent + lease / 3 : now + std::max<steady::duration>(lease / 10, std::chrono::milliseconds(1));
      next = std::min(next, valid);  // on_lost no later than the validity ends
      g.lock();
    }
  }

  // ---- on_lost without auto_renew: the first master's client's watchdog watches the validity's
  // end (watchdog.hpp; no thread per hold) and runs on_lost once it has passed ----

  void start_watch() {
    if constexpr (detail::has_watchdog<Client>::value) {
      renewal_request r;
      r.name = name_;
      r.route_key = keys_.lock;
      r.lease = hold_lease();
      r.lost_flag = &lost_;
      r.on_lost = [this, token = current().token](const std::string&) {
        mark_lost_if_current(token);  // the observer hears of it too
        run_on_lost();                // it may unlock() while another thread's unlock ends the watch
      };
      watchdog::registration w = first_client_->watchdog().add(std::move(r));
      std::lock_guard<std::mutex> g(watch_mutex_);
      watch_ = std::move(w);
      watch_.lasts_until(valid_until());
    }
  }
  // Not under state_mutex_: ending the watch waits for its on_lost, which takes that.
  void stop_watch() noexcept {
    watchdog::registration ended;
    std::lock_guard<std::mutex> g(watch_mutex_);
    ended = std::move(watch_);
  }
  void tell_watch(steady::time_point end) noexcept {
    std::lock_guard<std::mutex> g(watch_mutex_);
    watch_.lasts_until(end);
  }

  // ---- local state ----

  hold current() const {
    std::lock_guard<std::mutex> g(state_mutex_);
    return hold_;
  }

  // Turns a loss by the clock into the flag, so that nothing that moves or clears the validity
  // end undoes it. Under state_mutex_. Returns lost().
  bool keep_lost() noexcept {
    if (!lost()) return false;
    set_lost();
    return true;
  }

  void mark_lost_if_current(const std::string& token) {
    std::lock_guard<std::mutex> g(state_mutex_);
    if (hold_.token == token) set_lost();
  }

  // Under state_mutex_, for a hold found lost (by whatever noticed first: the observer hears once).
  void set_lost() noexcept {
    lost_.store(true, std::memory_order_release);
    lost_report_.note(detail::describe(*this, lock_mode::exclusive), valid_until());
    tell_watch(steady::now());  // a watched hold's on_lost runs now
  }

  void require_held(const char* what) const {
    detail::require_held(held_.load(std::memory_order_acquire), what, name_, "this object");
  }

  // Makes the calling unlock the one that releases the current hold (a copy in `h`). False
  // when not held (recorded), or when another unlock is releasing it: waited for (it records
  // the outcome), except on this lock's renewal thread, which that unlock may be joining.
  bool claim_release(hold& h) {
    std::unique_lock<std::mutex> g(state_mutex_);
    if (releasing_) {
      if (waited_on() != this) released_cv_.wait(g, [&] { return !releasing_; });
      return false;
    }
    if (!held_.load(std::memory_order_acquire) || hold_.token.empty()) {
      record(release_status::not_held);
      return false;
    }
    releasing_ = true;
    h = hold_;
    return true;
  }

  // The lock whose release may wait for the calling thread: this thread is its renewal thread,
  // or runs its on_lost (run_on_lost); null elsewhere. An unlock() there never waits for
  // another unlock's release (claim_release), which may be waiting for it.
  static const void*& waited_on() noexcept {
    thread_local const void* lock = nullptr;
    return lock;
  }

  // Runs on_lost (set) on the calling thread, marked for claim_release (waited_on()): the
  // callback may unlock() while another thread's unlock waits for the callback to end.
  void run_on_lost() noexcept {
    if (!options_.on_lost) return;
    const void* const outer = std::exchange(waited_on(), this);
    try {
      options_.on_lost(name_);
    } catch (...) {
    }
    waited_on() = outer;
  }

  void drop_local_hold(release_status status) noexcept {
    {
      std::lock_guard<std::mutex> g(state_mutex_);
      hold_ = hold{};
      keep_lost();  // whether it had run out: lost() does not change after this
      valid_until_.store(never, std::memory_order_release);
      held_.store(false, std::memory_order_release);
      record(status);
      releasing_ = false;  // unlocks waiting in claim_release() return now
    }
    released_cv_.notify_all();
    gate_.unlock();
  }

  // The current hold's validity end (steady ticks; written under state_mutex_), `never` when
  // not held: lost() and validity() read it without locking.
  using ticks = steady::rep;
  static constexpr ticks never = std::numeric_limits<ticks>::max();
  steady::time_point valid_until() const noexcept {
    return steady::time_point(steady::duration(valid_until_.load(std::memory_order_acquire)));
  }
  void set_valid_until(steady::time_point t) noexcept {
    valid_until_.store(t.time_since_epoch().count(), std::memory_order_release);
    tell_watch(t);
  }

  redlock_options redlock_;
  std::string lease_ms_;                         // hold_lease() as an argument (the gate holder's)
  std::atomic<std::int64_t> hold_lease_ms_{0};   // the current (or last) acquisition's: options().lease unless given
  std::atomic<std::int64_t> renew_lease_ms_{0};  // what the renewals send (ms): the hold's lease, or extend()'s last
  mutable std::mutex state_mutex_;
  hold hold_;                            // under state_mutex_
  bool releasing_ = false;               // under state_mutex_: an unlock claimed hold_ (claim_release)
  std::condition_variable released_cv_;  // releasing_ became false
  std::atomic<ticks> valid_until_{never};
  std::mutex extend_mutex_;  // one lease-setting round at a time (extend() and the renewal)
  std::mutex fence_mutex_;
  detail::local_gate gate_;
  std::atomic<bool> held_{false}, lost_{false};
  detail::lost_reporter lost_report_;         // the observer's lost_event, once per hold
  std::atomic<bool> masters_checked_{false};  // require_usable_everywhere() passed
  std::mutex renew_mutex_;
  std::condition_variable renew_cv_;
  std::uint64_t renew_generation_ = 0;                       // under renew_mutex_: the running thread's
  steady::time_point renew_by_ = steady::time_point::max();  // under renew_mutex_: an extend()'s next turn
  std::thread renewer_, retired_;                            // under renew_mutex_ (see start_renewal)
  Client* first_client_ = nullptr;                           // whose watchdog watches a hold that is not renewed
  std::mutex watch_mutex_;                                   // after state_mutex_, never before it
  watchdog::registration watch_;                             // under watch_mutex_
  std::unique_ptr<detail::quorum<Client>> quorum_;           // last: its threads are joined first
};

using redlock = basic_redlock<client>;

}  // namespace redislock
