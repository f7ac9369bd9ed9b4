#pragma once
/// @file lock_options.hpp
/// @brief Options shared by every lock kind, and the outcome of a release.

#include <redislock/errors.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

namespace redislock {

/// A kind refuses, with invalid_argument and before anything is sent, an option set to
/// something it cannot mean for it: basic_redlock (no wait queue, no release notice, masters
/// without replicas, a fencing register that never expires) refuses fair, wait_lease,
/// recheck_interval, fence_lifetime (any value but the default) and min_replicas.
struct lock_options {
  /// How long the server keeps the lock if its holder vanishes. Must be in (0, max_lease].
  std::chrono::milliseconds lease{30000};
  /// Prepended to every key; the lock's name goes inside a {hash tag} after it.
  std::string key_prefix = "redislock:";
  /// Bounds of the jittered exponential backoff between acquire attempts while waiting.
  /// The wait never exceeds the holder's remaining lease nor the caller's deadline.
  std::chrono::milliseconds retry_min{1};
  std::chrono::milliseconds retry_max{100};
  /// Renew the lease in the background while the lock is held (every lease/3, by the client's
  /// one watchdog thread), so a critical section may outlive the lease. Renewal stops when the
  /// lock is released or destroyed, or when the lease is found lost.
  bool auto_renew = false;
  /// Called once when the hold is found lost: with auto_renew, when a renewal finds the lock
  /// someone else's or renewals failed until the lease ran out; with or without it, when the
  /// lease clock's end (lease_confirmed_until()) passes, or an extend() finds the hold gone
  /// (without auto_renew the watchdog watches such a hold: no renewals, no thread of its own).
  /// Runs on the watchdog thread (async kinds: the client's strand): it must not block and must
  /// not call into the lock it reports (release waits for it); signal your worker instead. The
  /// lock's lost() is already true when it runs.
  std::function<void(const std::string& name)> on_lost;
  /// In both modes waiters queue on the server and a release hands the lock to the longest
  /// waiting one. Fair mode adds: try_lock() never jumps the queue, and a lock that fell free
  /// because its holder's lease ran out goes to the head of the queue too (without it, the
  /// first waiter to notice takes it). All objects of one lock name must agree on it.
  /// See detail/mutex_scripts.hpp (reentrant_mutex: detail/reentrant_scripts.hpp; shared_mutex:
  /// detail/shared_scripts.hpp).
  bool fair = false;
  /// basic_mutex and basic_reentrant_mutex: how long a waiter keeps its place in the queue after the lease of the
  /// holder it waits behind has run out (it refreshes its place when it wakes then). A waiter whose process died is
  /// skipped at once (its connection closed); one that vanished without closing it (power loss, partition), once its
  /// place lapsed. shared_mutex: the same, after the earliest lease among the holds that block the waiter. A queued
  /// writer that crashed holds new readers back only until the next attempt notices it (nobody listens for it); one
  /// paused or partitioned, until its place lapses (detail/shared_scripts.hpp).
  std::chrono::milliseconds wait_lease{2000};
  /// A waiter sleeps until a release notifies it or the holder's lease (as it last saw it)
  /// runs out, but never longer than this before it looks again: a lock that becomes free
  /// without a release (the holder shortened its lease with extend() and died, an operator
  /// deleted the key) is noticed within this bound plus one round trip, whatever the old
  /// lease. Each look is one command per waiter. Must be in [10 ms, max_lease].
  std::chrono::milliseconds recheck_interval{1000};
  /// Replica acknowledgement (every lock kind except redlock): after each new hold (not a
  /// nested one), renew it once and `WAIT min_replicas` on the same connection. When fewer
  /// replicas acknowledged within replica_timeout, the hold is released (owner-checked) and the
  /// acquisition throws replication_error: lock() and try_lock*() alike, the caller holds
  /// nothing. 0 (the default): no WAIT. Must be in [0, 100]. This narrows the window in which
  /// a failover loses the lock; it does not close it (README, "Topologies").
  int min_replicas = 0;
  /// With min_replicas: how long WAIT may take. Bounded further by the time left to the
  /// caller's deadline, but never below min(replica_timeout, 100 ms): try_lock(), or an
  /// acquisition made at the last moment, must be able to wait for the acknowledgement too, so
  /// such a call may return up to that long after its deadline. Also kept under 3/4 of the
  /// connection's command timeout (the reply must come back before it). Must be in [1 ms, lease).
  std::chrono::milliseconds replica_timeout{500};
  /// How long the name's fencing counter (detail/fence_scripts.hpp) lives at least after a
  /// token is drawn with these options (a draw never shortens it). Tokens stay increasing across
  /// its expiry unless the server's clock was set back, in total, by more than this (its lag
  /// behind the highest token). The default, one day, covers a clock that ran on a wrong time
  /// zone (an RTC kept in local time: up to 14 h) until a time daemon stepped it back. A service
  /// that fences each of many names once keeps about (names per second) x this many counters
  /// (docs/performance.md, "Server memory per lock"). Must be in [1 ms, max_lease].
  std::chrono::milliseconds fence_lifetime{std::chrono::hours(24)};
};

/// Leases longer than this are rejected as a likely unit mistake (30 days).
inline constexpr std::chrono::milliseconds max_lease{30LL * 24 * 3600 * 1000};

/// What a release found on the server.
enum class release_status {
  released,       ///< we held the lock and removed our hold
  lease_expired,  ///< we believed we held it, but our lease had run out (it may be someone else's now)
  not_held,       ///< this object did not hold the lock: nothing was sent
  failed,         ///< Redis could not be asked (or answered an error); our lease runs out on its own
};

inline const char* to_string(release_status s) noexcept {
  switch (s) {
    case release_status::released: return "released";
    case release_status::lease_expired: return "lease_expired";
    case release_status::not_held: return "not_held";
    case release_status::failed: return "failed";
  }
  return "?";
}

namespace detail {

/// The one check of a lease, whether options' (validate()), one acquisition's (checked_hold_lease)
/// or given to extend(): it must be in (floor, max_lease] (floor: 0, or redlock's
/// instance_timeout + drift), and a lease given to extend() on a hold that auto_renew renews
/// (`renewed`: that hold's lease, else 0) not shorter than the hold's (the renewals then go on
/// with the longer lease: watchdog::registration::hold_back). Returns the lease as a script
/// argument. Throws invalid_argument ("<what>: ...").
inline std::string checked_lease(std::chrono::milliseconds lease, const char* what,
                                 std::chrono::milliseconds renewed = std::chrono::milliseconds(0),
                                 std::chrono::milliseconds floor = std::chrono::milliseconds(0)) {
  if (lease <= floor || lease > max_lease)
    throw invalid_argument(std::string(what) + ": lease must be in (" +
                           (floor.count() == 0 ? std::string("0") : std::to_string(floor.count()) + " ms") +
                           ", max_lease] (max_lease: 30 days)");
  if (lease < renewed)
    throw invalid_argument(std::string(what) + ": with auto_renew the lease cannot be shorter than the hold's (" +
                           std::to_string(renewed.count()) + " ms)");
  return std::to_string(lease.count());
}

/// The check of the lease one acquisition asks for (lock(lease), try_lock_for(timeout, lease),
/// ...; options().lease by default): checked_lease's range, and with min_replicas longer than
/// replica_timeout (the replicas' WAIT must end while the lease runs). Returns it as a script
/// argument; throws invalid_argument before anything is sent.
inline std::string checked_hold_lease(std::chrono::milliseconds lease, const lock_options& o, const char* what,
                                      std::chrono::milliseconds floor = std::chrono::milliseconds(0)) {
  std::string ms = checked_lease(lease, what, std::chrono::milliseconds(0), floor);
  if (o.min_replicas > 0 && o.replica_timeout >= lease)
    throw invalid_argument(std::string(what) + ": with min_replicas the lease must be longer than replica_timeout");
  return ms;
}

/// The lease extend() renews to, as checked_lease: `renewed_lease` is the hold's when
/// o.auto_renew renews it.
inline std::string checked_extend_lease(std::chrono::milliseconds lease, const char* what, const lock_options& o,
                                        std::chrono::milliseconds hold_lease,
                                        std::chrono::milliseconds floor = std::chrono::milliseconds(0)) {
  return checked_lease(lease, what, o.auto_renew ? hold_lease : std::chrono::milliseconds(0), floor);
}

/// Checks a lock's name and options (every kind's constructor). Throws invalid_argument.
inline void validate(std::string_view name, const lock_options& o) {
  if (name.empty()) throw invalid_argument("lock name must not be empty");
  checked_lease(o.lease, "lock options");
  if (o.retry_min.count() <= 0 || o.retry_max < o.retry_min)
    throw invalid_argument("lock retry bounds must satisfy 0 < retry_min <= retry_max");
  if (o.wait_lease.count() < 3 || o.wait_lease > max_lease)
    throw invalid_argument("lock wait_lease must be in [3 ms, max_lease]");
  if (o.recheck_interval.count() < 10 || o.recheck_interval > max_lease)
    throw invalid_argument("lock recheck_interval must be in [10 ms, max_lease]");
  if (o.min_replicas < 0 || o.min_replicas > 100) throw invalid_argument("lock min_replicas must be in [0, 100]");
  if (o.min_replicas > 0 && (o.replica_timeout.count() < 1 || o.replica_timeout >= o.lease))
    throw invalid_argument("lock replica_timeout must be in [1 ms, lease) when min_replicas is set");
  if (o.fence_lifetime.count() < 1 || o.fence_lifetime > max_lease)
    throw invalid_argument("lock fence_lifetime must be in [1 ms, max_lease]");
}

/// The part of `key` that Redis Cluster hashes: the text between the first '{' and the first
/// '}' after it when that text is not empty, else the whole key.
inline std::string_view hash_tag(std::string_view key) noexcept {
  const auto open = key.find('{');
  if (open == std::string_view::npos) return key;
  const auto close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

/// "<prefix>{<name>}": every key of one lock starts with it, so they share one hash slot.
/// The tag is whatever hash_tag() finds in it, which must not be empty: then Redis would hash
/// each whole key and the lock's keys would land in different slots (CROSSSLOT on a cluster).
/// That happens only for a name that starts with '}' or a prefix holding "{}": both rejected
/// with invalid_argument. Any other brace is fine: a tag cut short by a '}' in the name
/// ("a}b" -> "a") still ends before the suffixes, so all keys of the lock share it.
inline std::string base_key(std::string_view name, const lock_options& o) {
  std::string key;
  key.reserve(o.key_prefix.size() + name.size() + 2);
  key.append(o.key_prefix).append("{").append(name).append("}");
  if (hash_tag(key).size() == key.size())
    throw invalid_argument("lock name and key_prefix give the key '" + key +
                           "' an empty {hash tag}: its keys would not share one cluster slot (a name must not start "
                           "with '}', a prefix must not contain \"{}\")");
  return key;
}

}  // namespace detail
}  // namespace redislock
