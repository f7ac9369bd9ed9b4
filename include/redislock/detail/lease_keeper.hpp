#pragma once
/// @file detail/lease_keeper.hpp
/// @brief One hold's renewal (lock_options::auto_renew) and its "lease found lost" flag,
/// shared by every lock kind.
///
/// Life of a hold: acquired() when the server granted it, start() to hand it to the client's
/// watchdog, stop() before the release is sent (see watchdog.hpp), outcome() to turn the
/// release script's answer into a release_status.
///
/// Renewed or not, the hold is lost by the clock alone once the lease may have run out (send
/// time of the last confirmed acquisition, extend or renewal + its lease: detail/lease_clock.hpp),
/// even when no reply ever comes to say so; a lease found lost stays lost. A hold that is not
/// renewed but has an on_lost is watched by the client's watchdog, so on_lost runs then too.
///
/// The watchdog keeps a pointer to the flag while registered: a keeper must not move while
/// it renews (it is neither copyable nor movable; owners keep it behind a stable pointer).

#include <redislock/errors.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/script.hpp>
#include <redislock/watchdog.hpp>

#include <redislock/connection.hpp>
#include <redislock/detail/lease_clock.hpp>
#include <redislock/detail/observe_hooks.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/reply.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace redislock::detail {

/// Throws invalid_argument when `o` asks for auto_renew, or for on_lost (a hold that is not
/// renewed is watched by the watchdog's thread), but Client has no watchdog.
template <class Client>
void require_watchdog_if_renewing(const lock_options& o) {
  if constexpr (!has_watchdog<Client>::value) {
    if (o.auto_renew) throw invalid_argument("auto_renew needs a Client with watchdog() (see client.hpp)");
    if (o.on_lost)
      throw invalid_argument("on_lost needs a Client with watchdog() (see client.hpp): it watches the lease");
  }
}

/// What the watchdog needs to renew one hold: its owner-checked extend script (replies 1
/// renewed, 0 not ours) with its KEYS and ARGV, and where in ARGV the lease goes (so that an
/// extend() to another lease changes what the renewals send). as_set_ifeq: see renewal_request.
struct renewal_target {
  const script* extend;
  std::vector<std::string> keys, args;
  std::size_t lease_arg;
  bool as_set_ifeq = false;
};

/// Runs `t` once on `c` (SET IFEQ where it is equivalent and the server has it, else the
/// script, loaded on NOSCRIPT; a SET IFEQ refused over maxmemory is sent again as the script,
/// see watchdog.hpp). Returns 1 renewed, 0 not ours; throws on an error reply. The caller's
/// lease count starts before this call, so it also covers a resent renewal.
inline std::int64_t renew_once(connection& c, const renewal_target& t) {
  bool set_ifeq = t.as_set_ifeq && c.features().set_ifeq;
  const std::vector<std::string_view> keys(t.keys.begin(), t.keys.end()), args(t.args.begin(), t.args.end());
  auto send = [&] {
    append_renewal(c, *t.extend, set_ifeq, keys.data(), keys.size(), args.data(), args.size());
    return c.read_reply();
  };
  reply_ptr r = send();
  if (set_ifeq && is_oom(*r) && c.features().scripting) {
    set_ifeq = false;
    r = send();
  }
  if (script::is_noscript(*r)) {
    t.extend->load(c);
    r = send();
  }
  const int answer = renewal_answer(*r);
  if (answer >= 0) return answer;
  checked(*r);  // throws for an error reply
  throw reply_error("unexpected reply to a renewal (type " + std::to_string(r->type) + ")");
}

/// lock_options::min_replicas, one contract for every lock kind: call right after a new hold
/// began (before its renewal starts). Renews the hold once with its own extend script (an
/// owner-checked write on this connection: a hold handed over by another client's release was
/// written on theirs, and WAIT counts only this connection's writes; replicated in order, the
/// renewal reaching a replica means the hold did too), then `WAIT n timeout` on the same
/// connection. When fewer replicas acknowledged (or the hold was already gone), calls release()
/// (the kind's owner-checked unlock, noexcept) and throws replication_error. An error on the
/// way releases too, then is rethrown.
/// The least time WAIT gets, whatever the caller's deadline (lock_options::replica_timeout):
/// 10 ms proved too short for a replica's acknowledgement on a loaded machine.
inline constexpr std::chrono::milliseconds replica_floor{100};

template <class Client, class Release>
void require_replicas(Client& client, const lock_options& o, const std::string& name, const std::string& route_key,
                      const renewal_target& t, const deadline& d, Release&& release) {
  if (o.min_replicas <= 0) return;
  using std::chrono::milliseconds;
  milliseconds wait = o.replica_timeout;
  if (d) {
    const auto left = std::chrono::ceil<milliseconds>(*d - steady::now());
    wait = std::clamp(left, std::min(o.replica_timeout, replica_floor), o.replica_timeout);
  }
  std::int64_t acknowledged = 0;
  try {
    acknowledged = client.run(route_key, [&](connection& c) -> std::int64_t {
      if (renew_once(c, t) != 1) return -1;  // the hold is gone already
      milliseconds w = wait;
      const milliseconds command_timeout = c.options().command_timeout;
      if (command_timeout.count() > 0) w = std::min(w, command_timeout * 3 / 4);
      w = std::max(w, milliseconds(1));  // WAIT 0 would block forever
      return as_integer(*c.command({"WAIT", std::to_string(o.min_replicas), std::to_string(w.count())}));
    });
  } catch (...) {
    release();
    throw;
  }
  if (acknowledged >= o.min_replicas) return;
  release();
  throw replication_error(acknowledged < 0
                              ? "lock '" + name + "': the hold was gone before replicas acknowledged it (released)"
                              : "lock '" + name + "': " + std::to_string(acknowledged) + " of " +
                                    std::to_string(o.min_replicas) + " replicas acknowledged the acquisition within " +
                                    std::to_string(wait.count()) + " ms (released)",
                          o.min_replicas, static_cast<int>(std::max<std::int64_t>(acknowledged, 0)));
}

class lease_keeper {
 public:
  lease_keeper() = default;
  lease_keeper(const lease_keeper&) = delete;
  lease_keeper& operator=(const lease_keeper&) = delete;

  /// Names the lock and side in lost_events (the lock outlives the keeper's holds). Called
  /// once, before the first hold.
  void describe(lock_event what) noexcept { what_ = what; }

  /// A new hold was granted with `lease` by the command sent at `sent` (the previous hold's
  /// registration is gone): it is not lost, and its lease counts from `sent`
  /// (detail/lease_clock.hpp), renewed or not.
  void acquired(std::chrono::steady_clock::time_point sent, std::chrono::milliseconds lease) noexcept {
    {
      std::lock_guard<std::mutex> g(clock_mutex_);
      ++hold_;  // an extend of an earlier hold answered late counts for nothing (count())
      clock_ = lease_clock();
      clock_.confirmed(sent, lease);
      lease_.store(lease.count(), std::memory_order_relaxed);
      valid_until_.store(clock_.until().time_since_epoch().count(), std::memory_order_release);
    }
    lost_.store(false, std::memory_order_release);
    lost_report_.reset();
    started_.store(current_observer() != nullptr ? std::chrono::steady_clock::now().time_since_epoch().count() : 0,
                   std::memory_order_relaxed);
  }

  /// Hands the hold to the client's watchdog: with o.auto_renew to be renewed to `lease` (the
  /// hold's: options().lease unless its acquisition gave one); else, when o.on_lost is set, to
  /// be watched (on_lost once the lease has run out by the clock; no thread per hold: the
  /// client's watchdog thread). `confirmed` is the local send time of the command that set the
  /// lease. Throws what watchdog::add throws.
  template <class Client>
  void start(Client& client, const lock_options& o, std::chrono::milliseconds lease, const std::string& name,
             const std::string& route_key, renewal_target target, std::chrono::steady_clock::time_point confirmed) {
    if constexpr (has_watchdog<Client>::value) {
      if (!o.auto_renew && !o.on_lost) return;
      renewal_request r;
      r.name = name;
      r.route_key = route_key;
      r.lease = lease;
      r.confirmed = confirmed;
      r.lost_flag = &lost_;
      r.on_lost = o.on_lost;
      if (o.auto_renew) {
        r.extend = target.extend;
        r.keys = std::move(target.keys);
        r.args = std::move(target.args);
        r.lease_arg = target.lease_arg;
        r.as_set_ifeq = target.as_set_ifeq;
        r.valid_until = &valid_until_;
      }  // else a watch: this hold counts its lease (clock_) and tells the watch its end
      if (current_observer() != nullptr) {  // the watchdog found it lost: tell the observer first
        r.on_lost = [this, user = std::move(r.on_lost)](const std::string& n) {
          note_lost();
          if (user) user(n);
        };
      }
      if (o.auto_renew) valid_until_.store((confirmed + lease).time_since_epoch().count(), std::memory_order_release);
      try {
        watchdog::registration added = client.watchdog().add(std::move(r));
        std::lock_guard<std::mutex> g(renewal_mutex_);
        renewal_ = std::move(added);
        renews_ = o.auto_renew;
        if (!renews_) {
          const ticks until = valid_until_.load();
          if (until != never)
            renewal_.lasts_until(std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(until)));
        }
      } catch (...) {
        valid_until_.store(never, std::memory_order_release);
        throw;
      }
    }
  }

  /// Stops renewing or watching (waits for this hold's on_lost if it is running). Call before
  /// releasing. Whether the lease had run out by then is kept: lost() does not change after this.
  void stop() noexcept {
    {
      std::lock_guard<std::mutex> g(renewal_mutex_);
      renewal_.reset();
      renews_ = false;
    }
    (void)lost();
    std::lock_guard<std::mutex> g(clock_mutex_);  // an extend being counted sees it released
    valid_until_.store(never, std::memory_order_release);
  }

  /// One extend() of this hold to `lease`: `send()` sends the owner-checked extend and returns
  /// whether it renewed the lease (false: the hold is not ours; it may throw). Counted by the
  /// lease clock: a confirmed extend restarts the count from its send time, shorter or longer,
  /// and one without an answer can only bring the end closer. While renewed, the watchdog sends
  /// no renewal of this hold meanwhile (one in flight is answered first), then renews with
  /// `lease` from then on. The caller marks the hold lost when it was not ours (if it is still
  /// the same hold).
  template <class Send>
  bool extend(std::chrono::milliseconds lease, Send&& send) {
    watchdog::pause paused = hold_back();                                                 // empty unless renewed
    const std::chrono::steady_clock::time_point sent = std::chrono::steady_clock::now();  // before: conservative
    // The server may run it at once: it counts from now. A renewed hold whose renewals could not
    // be held back (found lost, or an on_lost asking while another extend holds them) counts
    // nothing here: the watchdog's count stands.
    std::optional<counting> own;
    if (paused) paused.sending(sent, lease);
    else own = begin_count(sent, lease);
    bool ours = false;
    try {
      ours = send();
    } catch (...) {
      if (paused) paused.resume(sent, lease, -1);
      else if (own) count(*own, sent, lease, -1);
      throw;
    }
    if (paused) paused.resume(sent, lease, ours ? 1 : 0);
    else if (own) count(*own, sent, lease, ours ? 1 : 0);
    return ours;
  }

  /// An owner-checked command (extend) found the hold gone. A watched hold's on_lost runs now.
  void mark_lost() noexcept {
    lost_.store(true, std::memory_order_release);
    note_lost();
    std::lock_guard<std::mutex> g(renewal_mutex_);
    if (!renews_) renewal_.lasts_until(std::chrono::steady_clock::now());
  }
  bool lost() const noexcept {
    if (lost_.load()) return true;
    const ticks until = valid_until_.load();
    if (until == never || std::chrono::steady_clock::now().time_since_epoch().count() < until) return false;
    // Sticky: a renewal confirmed later does not undo it. seq_cst (with the watchdog's store
    // of valid_until and its load of this flag) so that the watchdog then reports the loss.
    lost_.store(true);
    note_lost();
    return true;
  }

  /// While held: the send time of the last command that set the lease and was confirmed (the
  /// acquisition, an extend or a renewal), plus its lease (detail/lease_clock.hpp). nullopt
  /// when nothing is held.
  std::optional<std::chrono::steady_clock::time_point> confirmed_until() const noexcept {
    const ticks until = valid_until_.load();
    if (until == never) return std::nullopt;
    return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(until));
  }

  /// The release's outcome: `ours` is the release script's verdict. Once found lost, never
  /// a clean release: the lease may have lapsed (and been taken) meanwhile.
  release_status outcome(bool ours) const noexcept {
    if (!ours) note_lost();  // the release found it gone: noticed now, if not before
    return ours && !lost() ? release_status::released : release_status::lease_expired;
  }

 private:
  using ticks = std::chrono::steady_clock::rep;
  static constexpr ticks never = std::numeric_limits<ticks>::max();

  // An extend of a hold that is not renewed, counted by this hold's own clock (clock_): which
  // hold it was sent for, and its place among the commands in flight.
  struct counting {
    std::uint64_t hold;
    lease_clock::ticket ticket;
  };
  std::optional<counting> begin_count(std::chrono::steady_clock::time_point sent,
                                      std::chrono::milliseconds lease) noexcept {
    std::lock_guard<std::mutex> r(renewal_mutex_);
    std::lock_guard<std::mutex> g(clock_mutex_);
    if (renews_ || valid_until_.load() == never) return std::nullopt;
    lease_clock::ticket t = 0;
    try {
      t = clock_.sending(sent, lease);
    } catch (...) {  // out of memory: count it as if it ran at once
      clock_.end_by(sent + lease);
    }
    publish();
    return counting{hold_, t};
  }
  // Its answer: 1 confirmed, 0 not ours (the caller marks the hold lost), -1 no answer. A watch
  // learns the new end.
  void count(const counting& c, std::chrono::steady_clock::time_point sent, std::chrono::milliseconds lease,
             int answer) noexcept {
    bool ran_out = false;
    {
      std::lock_guard<std::mutex> r(renewal_mutex_);
      std::lock_guard<std::mutex> g(clock_mutex_);
      if (c.hold != hold_ || valid_until_.load() == never || renews_) return;  // another hold by now
      if (answer == 1 && std::chrono::steady_clock::now() >= clock_.until()) {
        // Confirmed only after the lease could have run out: lost() may have said so already,
        // and a lost lease stays lost (as the watchdog's renewals count it).
        clock_.refused(c.ticket);
        ran_out = true;
      } else if (answer == 1) {
        clock_.confirmed(sent, lease, c.ticket);
      } else if (answer < 0) {
        clock_.unanswered(sent, lease, c.ticket);
      } else {
        clock_.refused(c.ticket);
      }
      publish();
    }
    if (ran_out) mark_lost();
  }
  // Under renewal_mutex_ and clock_mutex_: lost() and a watch see clock_'s end.
  void publish() noexcept {
    const std::chrono::steady_clock::time_point until = clock_.until();
    valid_until_.store(until.time_since_epoch().count());
    if (!renews_) renewal_.lasts_until(until);
  }

  // The observer's lost_event, once per hold (observe.hpp).
  void note_lost() const noexcept {
    if (what_.name.empty()) return;  // not described
    const ticks until = valid_until_.load(), started = started_.load(std::memory_order_relaxed);
    std::optional<std::chrono::steady_clock::time_point> end;  // unknown: granted while nobody observed
    if (until != never) end = std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(until));
    else if (started != 0)
      end = std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(started)) +
            std::chrono::milliseconds(lease_.load(std::memory_order_relaxed));
    lost_report_.note(what_, end);
  }

  mutable std::atomic<bool> lost_{false};
  lock_event what_;
  std::atomic<std::chrono::milliseconds::rep> lease_{0};  // the current hold's (acquired())
  std::atomic<ticks> started_{0};                         // when the hold was granted, if observed
  mutable lost_reporter lost_report_;
  // The lease's end by the clock while held (the watchdog's while renewed, else clock_'s);
  // never otherwise.
  std::atomic<ticks> valid_until_{never};
  std::mutex clock_mutex_;  // after renewal_mutex_, never before it
  lease_clock clock_;       // of a hold that is not renewed (the watchdog counts a renewed one)
  std::uint64_t hold_ = 0;  // which hold clock_ counts (acquired() starts the next); under clock_mutex_
  // Between stop() and an extend() on other threads (reading renewal_ only: hold_back() waits
  // without it, since an on_lost that releases this lock runs while the batch is in flight).
  std::mutex renewal_mutex_;
  watchdog::registration renewal_;  // after the flags: it points there until reset
  bool renews_ = false;             // renewal_ renews (else it watches, or is empty); under renewal_mutex_

  watchdog::pause hold_back() {
    watchdog::registration::ref r;
    {
      std::lock_guard<std::mutex> g(renewal_mutex_);
      if (!renews_) return {};
      r = renewal_.share();
    }
    return r.hold_back();
  }
};

}  // namespace redislock::detail
