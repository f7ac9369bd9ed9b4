#pragma once
// The safety checker's storage side: Lua scripts run on the same Redis, beside the lock.
//
// Every holder works in one *epoch*: a random id stored at E that a restart without
// persistence erases (and the next worker replaces). Each script first checks that E still holds
// the holder's epoch; if not, the server restarted under it, the lock it held is gone, and the
// step is skipped (reply -1): holders of different epochs are never compared.
//
// Keys (prefix "torture:" + run id, one hash tag, outside the library's "redislock:" prefix):
//   E  epoch id        M  overlap marker: "<holder>|<valid_until_ns>" of the holder inside
//   R  set of the markers of the readers inside (kinds with a read side: a reader meets M, a
//      writer meets M and R), or of a semaphore's holders inside (at most N certainly valid)
//   C  shared counter (GET, then SET+1: a non-atomic read-modify-write; writers only)
//   F  highest fencing token written to C       A  number of writes applied to C
//
// A holder's lease is *certainly valid* until valid_until = (steady time before the acquire
// attempt was sent) + lease - margin: the server set PX lease after receiving the attempt, and
// every process here reads the same CLOCK_MONOTONIC. Only overlaps where both holders were
// certainly valid are violations; everything else (a killed or stopped holder whose lease ran
// out) is expected and counted as "stale".
//
// Redlock mode (--kind redlock): the lock lives on N masters and these keys on one more server of
// their own (the record, never faulted), so the masters' crashes, restarts and stalls cannot touch
// the record. The same bound holds: a majority set PX lease after the attempt was sent, and any
// other majority shares one of those masters.
//
// Cluster mode (--cluster): the lock lives on a 3-master, 3-replica Redis Cluster under many lock
// names (each with its own M, C, F, A; E is shared) and the record again on a server of its own.
// Replication is asynchronous, so a failover may lose a lock the old master granted: the
// coordinator opens a *failover window* when it starts a failover fault and closes it a lease
// after the cluster serves again (every node up, agreeing on the slot map). What a certainly-valid
// holder meets at a moment inside a window (an overlap, a lease gone early, a fence token
// rejected) is counted apart, not a violation; the same outside every window is one. A slot
// migration opens no window: it must lose nothing.

#include <redislock/redislock.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <string>

namespace redislock_torture {

/// KEYS: E. ARGV: fresh epoch id. Reply: the current epoch (ARGV[1] when E was missing).
inline const redislock::script& epoch_script() {
  static const redislock::script s(R"lua(
local e = redis.call('GET', KEYS[1])
if not e then redis.call('SET', KEYS[1], ARGV[1]); e = ARGV[1] end
return e
)lua");
  return s;
}

/// KEYS: E, M. ARGV: epoch, my marker. Replaces M with my marker.
/// Reply: -1 epoch changed; "" M was empty; otherwise the previous marker (someone inside?).
inline const redislock::script& enter_script() {
  static const redislock::script s(R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local old = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[2], ARGV[2])
return old or ''
)lua");
  return s;
}

/// KEYS: E, R. ARGV: epoch. A writer's look at the readers inside, once its marker is in M.
/// Reply: -1 epoch changed; otherwise the markers in R (readers inside, or left behind stale).
inline const redislock::script& readers_script() {
  static const redislock::script s(R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
return redis.call('SMEMBERS', KEYS[2])
)lua");
  return s;
}

/// KEYS: E, M, R. ARGV: epoch, my marker, "enter" / "leave". A reader enters (adds its marker
/// to R) or leaves (removes it), and sees the writer inside, if any.
/// Reply: -1 epoch changed; "" no writer inside; otherwise M (someone inside?).
inline const redislock::script& reader_script() {
  static const redislock::script s(R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if ARGV[3] == 'enter' then redis.call('SADD', KEYS[3], ARGV[2]) else redis.call('SREM', KEYS[3], ARGV[2]) end
return redis.call('GET', KEYS[2]) or ''
)lua");
  return s;
}

/// KEYS: E, R. ARGV: epoch, my marker, "enter" / "leave". A semaphore holder enters (adds its
/// marker to R, the set of the holders inside) or leaves (removes it), and sees every holder
/// inside, itself included: more than N certainly-valid ones at once is a violation.
/// Reply: -1 epoch changed; otherwise the markers in R (before a leave removes ours).
inline const redislock::script& permit_script() {
  static const redislock::script s(R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if ARGV[3] == 'enter' then redis.call('SADD', KEYS[2], ARGV[2]) end
local inside = redis.call('SMEMBERS', KEYS[2])
if ARGV[3] == 'leave' then redis.call('SREM', KEYS[2], ARGV[2]) end
return inside
)lua");
  return s;
}

/// KEYS: E, C, F, A. ARGV: epoch, new value of C, fencing token.
/// Reply: 1 written (F = token, A += 1); 0 rejected: a higher token already wrote; -1 epoch changed.
inline const redislock::script& fenced_write_script() {
  static const redislock::script s(R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if tonumber(redis.call('GET', KEYS[3]) or '0') > tonumber(ARGV[3]) then return 0 end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('INCR', KEYS[4])
return 1
)lua");
  return s;
}

/// KEYS: E, M. ARGV: epoch, my marker. Compare-and-delete of M.
/// Reply: -1 epoch changed; "" cleared (M was mine); otherwise M is someone else's (an intruder).
inline const redislock::script& leave_script() {
  static const redislock::script s(R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local m = redis.call('GET', KEYS[2])
if m == ARGV[2] then redis.call('DEL', KEYS[2]); return '' end
return m or ''
)lua");
  return s;
}

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// valid_until of a marker "<holder>|<valid_until_ns>" (0 when malformed).
inline std::int64_t marker_valid_until(const std::string& marker) {
  auto bar = marker.rfind('|');
  if (bar == std::string::npos) return 0;
  try {
    return std::stoll(marker.substr(bar + 1));
  } catch (...) {
    return 0;
  }
}

/// The pid a marker names ("<pid>.<thread>.<n>|..."), 0 when malformed.
inline long marker_pid(const std::string& marker) {
  try {
    return std::stol(marker.substr(0, marker.find('.')));
  } catch (...) {
    return 0;
  }
}

/// Per worker process counters, in a file mapped by the coordinator and every worker (so a
/// worker killed by SIGKILL keeps what it counted). Lock-free atomics work across processes.
struct worker_stats {
  std::atomic<std::uint64_t> acquisitions{0};
  std::atomic<std::uint64_t> reads{0};           ///< read holds that entered (kinds with a read side)
  std::atomic<std::uint64_t> writes{0};          ///< fenced writes the server confirmed
  std::atomic<std::uint64_t> writes_unknown{0};  ///< fenced writes whose reply was lost
  std::atomic<std::uint64_t> stale_rejected{0};  ///< late writes of an expired holder, rejected by F
  std::atomic<std::uint64_t> stale_overlaps{0};  ///< markers of holders whose lease had run out
  std::atomic<std::uint64_t> epoch_skips{0};     ///< steps skipped because the server restarted
  std::atomic<std::uint64_t> lease_expired{0};   ///< releases that found the lease gone
  std::atomic<std::uint64_t> errors{0};          ///< typed errors from the library or data path
  std::atomic<std::uint64_t> violations{0};      ///< two certainly-valid holders at once
  /// Redlock: releases (or fencing_token calls) that found the majority gone while the lease was
  /// certainly valid, when a master fault happened during the hold (a killed master takes our key
  /// with it; a stalled one cannot confirm). Without such a fault it is a violation.
  std::atomic<std::uint64_t> majority_lost{0};
  /// Redlock: fenced writes of certainly-valid holders rejected by a higher token after a master
  /// lost its data (README, "Fencing": a master restarted empty can let a token repeat). Without
  /// any data loss it is a violation.
  std::atomic<std::uint64_t> fence_regressions{0};
  /// Cluster: overlaps of two certainly-valid holders, and leases found gone before they could
  /// run out, at a moment inside a failover window (reported, not failing).
  std::atomic<std::uint64_t> window_violations{0};
  std::atomic<std::uint64_t> window_lost{0};
  /// Cluster: the fence_regressions met outside every failover window (after a master-kill9:
  /// the promoted replica had not received the last increments of a fence counter).
  std::atomic<std::uint64_t> late_fence_regressions{0};
  std::atomic<std::uint64_t> finished{0};  ///< 1 once the worker exited cleanly
};

/// Cluster mode: one failover fault's window [start_ns, end_ns] (steady clock); end_ns is
/// INT64_MAX while the fault is still under way.
struct failover_window {
  std::atomic<std::int64_t> start_ns{0}, end_ns{0};
};

/// Cluster mode: per lock name, written by its holders.
struct name_stats {
  std::atomic<std::uint64_t> acquisitions{0};
  /// Window violations, window losses and fence regressions met on this name: a lost update on
  /// it is then expected (two holders did overlap), not counted as one.
  std::atomic<std::uint64_t> window_events{0};
  /// The first acquisition since shared_state::recovery_mark_ns (0: none yet).
  std::atomic<std::int64_t> first_since_mark_ns{0};
};

struct shared_state {
  static constexpr std::size_t max_workers = 4096;
  std::atomic<std::uint64_t> stop{0};
  /// Redlock mode, written by the coordinator: +1 when a master fault starts and when it ends
  /// (a holder compares it at acquisition and release), and the number of masters that lost
  /// their data (killed or stopped, then started empty).
  std::atomic<std::uint64_t> master_fault_events{0};
  std::atomic<std::uint64_t> master_data_losses{0};
  worker_stats workers[max_workers];
  static constexpr std::size_t max_windows = 1024, max_names = 256;
  std::atomic<std::uint64_t> windows_opened{0};
  failover_window windows[max_windows];
  name_stats names[max_names];
  /// Set by the coordinator once a fault is over: recovery is each name acquired again since.
  std::atomic<std::int64_t> recovery_mark_ns{INT64_MAX};

  /// Whether `t` falls inside a failover window (an open one counts up to now and beyond).
  bool in_failover_window(std::int64_t t) const {
    const std::uint64_t n = std::min<std::uint64_t>(windows_opened.load(), max_windows);
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::int64_t start = windows[i].start_ns.load(), end = windows[i].end_ns.load();
      if (start != 0 && t >= start && t <= end) return true;
    }
    return false;
  }
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "cross-process counters need lock-free atomics");

}  // namespace redislock_torture
