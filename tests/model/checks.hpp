#pragma once
// What a model run records, and the invariants checked on it after the run.
//
// All times are one process's CLOCK_MONOTONIC (steady_clock, ns), which every thread shares and
// the servers' expiry runs at (same machine). A hold is *certainly valid* (the server certainly
// has it) during each interval [end of a call, start of that call + L - margin] where the call
// returned success and set the lease to L: the acquisition (L = the lease), each extend(L) that
// returned true, each nested acquisition (reentrant: it refreshes the lease). The server ran
// the call at some time in [start, end] and kept the key at least L from then. The intervals
// need not join: a hold whose lease ran out can be taken again by its own nested acquisition or
// extend, after someone else held the name in between. They are cut
//   - at the start of the call that released it (unlock, destruction),
//   - at the start of a force_release() of its name by anyone (the administrator revoked it),
//   - at start + L - margin of each later call that set the lease to L (an extend, a nested
//     acquisition): a shorter lease replaces a longer one; and of every extend whose outcome
//     is unknown (an error), also for the intervals after it: it may still run later.
// With auto_renew an extend's interval uses the configured lease, not L: the watchdog may renew
// to that lease right after it.
// Two certainly-valid intervals of one name that overlap (writers, or a writer and a reader)
// mean the server had two holders at once; for a semaphore of N permits, N + 1 of its holds
// certainly valid at one moment do (and any overlap with another kind's hold).

#include "history.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <string>
#include <vector>

namespace redislock_model {

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct record {
  op o;
  std::int64_t start_ns = 0, end_ns = 0;
  std::string outcome;   // "true", "false", "skip", "error:<type>", a release status
  long long value = -1;  // remaining ms, fencing token
  int hold = -1;         // the hold this op ran in (or began / ended)
};

struct hold {
  int id = 0, thread = 0, name = 0;
  bool write = true, auto_renew = false;
  int permits = 0;  // a semaphore's hold: how many of them may overlap (0: any other kind)
  std::int64_t acquire_start_ns = 0, acquired_ns = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> certain;  // see above, before the cuts
  // Every call that set the lease to L (extend, nested acquisition) lowers the expiry of what was
  // certain before it to start + L - margin; one of unknown outcome may run later: it caps
  // every interval that ends after its start.
  struct cap {
    std::int64_t start_ns = 0, end_ns = 0, bound_ns = 0;
    bool later_too = false;  // the outcome is unknown
  };
  std::vector<cap> caps;
  std::int64_t end_ns = LLONG_MAX;  // start of the call that ended it
  // Until when the server may still have had it: the end of a release that answered
  // "released", else the end of the call that ended it + the longest lease it was given.
  std::int64_t busy_until_ns = LLONG_MAX;
  long longest_lease_ms = 0;
  std::string owner;
  int first_op = -1, last_op = -1;  // op indices in the thread's list
};

struct fence_record {
  int hold = 0, thread = 0, index = 0;
  std::uint64_t token = 0;
  std::int64_t start_ns = 0, end_ns = 0;
};

/// A window in which a fault may take keys away: force_release (on one name), a Redlock
/// master's data loss (until a lease after its restart), or a failover that may lose what the
/// master had not replicated (until a lease after the new master serves).
struct revocation {
  int name = -1;  // -1: every name
  std::int64_t from_ns = 0, until_ns = LLONG_MAX;
  bool failover = false;  // a Sentinel or Cluster failover that may lose unreplicated writes
};

struct finding {
  std::string invariant;  // overlap, optimism, fence, deadline, early_loss, liveness, contract, leak, crash
  std::string detail;
  std::int64_t from_ns = 0, to_ns = 0;  // deadline: the call (the faults active in it are listed)
};

struct applied_fault {
  std::string what;  // describe(fault)
  std::int64_t from_ns = 0, to_ns = 0;
};

/// A time during which the name may be taken or blocked without any recorded hold: after a
/// fault (a late request may take it, a lost release leaves it until the lease runs out), or
/// an acquire or release whose outcome is unknown.
struct busy_window {
  int name = -1;  // -1: every name
  std::int64_t from_ns = 0, until_ns = 0;
  int thread = -1;              // whose call it is (-1: a fault)
  bool writer_waiting = false;  // a write acquire in progress: blocks new readers of a shared lock
};

struct run_log {
  std::vector<record> records;
  std::vector<hold> holds;
  std::vector<fence_record> fences;
  std::vector<revocation> revocations;
  std::vector<busy_window> busy;
  std::vector<applied_fault> applied;
  std::vector<finding> findings;
  std::map<std::string, int> faults_by_kind;
  long long max_overrun_ms = 0;  // the largest call time beyond its deadline
  std::string max_overrun_op;    // which call that was
  int waits_checked = 0;         // waits the liveness check looked at (free stretches in them)
  int failover_overlaps = 0;     // overlaps only a failover explains (not findings: see below)
  int wrong_types = 0;           // mixed kinds: calls that met another kind on the name
  int unplanned_failovers = 0;   // Sentinel: failovers no fault asked for (model.cpp)
  struct worker_call {
    std::int64_t start_ns, end_ns;
    std::string what;
  };
  std::vector<worker_call> worker_calls;  // crash workers' calls (crash_workers.hpp), for the print
};

inline double ms_of(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

/// Whether a revocation of `name` touched [from, to].
inline bool revoked(const run_log& log, int name, std::int64_t from, std::int64_t to) {
  for (const auto& r : log.revocations)
    if ((r.name < 0 || r.name == name) && r.from_ns <= to && r.until_ns >= from) return true;
  return false;
}

/// A hold's certainly-valid intervals, cut as described at the top.
inline std::vector<std::pair<std::int64_t, std::int64_t>> certain_intervals(const run_log& log, const hold& h) {
  std::int64_t end = h.end_ns;
  for (const auto& r : log.revocations)
    if ((r.name < 0 || r.name == h.name) && r.until_ns >= h.acquire_start_ns) end = std::min(end, r.from_ns);
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (auto [from, to] : h.certain) {
    to = std::min(to, end);
    for (const auto& c : h.caps)
      if (c.start_ns < to && (c.later_too || from <= c.end_ns)) to = std::min(to, c.bound_ns);
    if (from < to) out.emplace_back(from, to);
  }
  return out;
}

/// The end of the certainly-valid interval of a call that started at `start` and set the lease
/// to `lease_ms`: start + L - margin(L), margin(L) = L / 100 + 2 ms. The margin is at least
/// Redlock's drift allowance for that lease (redlock_options' defaults: 1 % + 2 ms), so that a
/// Redlock hold's validity, which ends at its round's start + L - drift(L), never ends before
/// the interval does: lost() by the clock is then no early loss (model --check-certain-bound).
inline std::int64_t certain_until(std::int64_t start, long lease_ms) {
  const std::int64_t lease_ns = lease_ms * 1000000LL;
  return start + lease_ns - (lease_ns / 100 + 2000000LL);
}

/// Whether [from, to] lies inside one certainly-valid interval of `h`.
inline bool certainly_held(const run_log& log, const hold& h, std::int64_t from, std::int64_t to) {
  for (const auto& [a, b] : certain_intervals(log, h))
    if (a <= from && to <= b) return true;
  return false;
}

inline std::string describe_hold(const run_log& log, const hold& h, std::int64_t t0) {
  std::string spans;
  for (const auto& [a, b] : certain_intervals(log, h)) {
    char s[64];
    std::snprintf(s, sizeof s, "%s%.1f..%.1f", spans.empty() ? "" : ", ", ms_of(a - t0), ms_of(b - t0));
    spans += s;
  }
  char b[320];
  std::snprintf(b, sizeof b, "hold#%d t%d n%d %s ops %d..%d acquired %.1f..%.1f ms, certainly valid in [%s] ms%s", h.id,
                h.thread, h.name, h.write ? "write" : "read", h.first_op, h.last_op, ms_of(h.acquire_start_ns - t0),
                ms_of(h.acquired_ns - t0), spans.c_str(), h.auto_renew ? " (auto_renew)" : "");
  return b;
}

/// A hold's certainly-valid intervals, merged (an extend's interval may overlap the one before).
inline std::vector<std::pair<std::int64_t, std::int64_t>> merged_certain(const run_log& log, const hold& h) {
  auto in = certain_intervals(log, h);
  std::sort(in.begin(), in.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& i : in) {
    if (!out.empty() && i.first <= out.back().second) out.back().second = std::max(out.back().second, i.second);
    else out.push_back(i);
  }
  return out;
}

/// Invariant 1 for semaphores: never more than N certainly-valid holds of one name at once.
inline void check_permits(run_log& log, std::int64_t t0) {
  std::map<int, std::vector<std::pair<std::int64_t, int>>> events;  // name -> (time, +1 start / -1 end)
  std::map<int, int> permits;
  for (const auto& h : log.holds) {
    if (h.permits <= 0) continue;
    permits[h.name] = h.permits;
    for (const auto& [from, to] : merged_certain(log, h)) {
      events[h.name].emplace_back(from, +1);
      events[h.name].emplace_back(to, -1);
    }
  }
  for (auto& [name, e] : events) {
    std::sort(e.begin(), e.end());  // an end before a start at the same time
    int held = 0;
    std::int64_t over_from = 0;
    for (const auto& [at, d] : e) {
      const int before = held;
      held += d;
      if (before <= permits[name] && held > permits[name]) over_from = at;
      if (before <= permits[name] || held > permits[name]) continue;
      // The stretch [over_from, at] had more than N: name the holds certainly valid at its start.
      std::string who;
      for (const auto& h : log.holds)
        if (h.name == name && h.permits > 0 && certainly_held(log, h, over_from, over_from))
          who += (who.empty() ? "" : " and ") + describe_hold(log, h, t0);
      char b[96];
      std::snprintf(b, sizeof b, " (more than %d permits for %.1f ms)", permits[name], ms_of(at - over_from));
      log.findings.push_back({"overlap", who + b});
    }
  }
}

/// Invariant 1: no two certainly-valid holds of one name overlap (one of them writing; two
/// semaphore holds are counted by check_permits).
inline void check_overlaps(run_log& log, std::int64_t t0) {
  check_permits(log, t0);
  for (std::size_t i = 0; i < log.holds.size(); ++i)
    for (std::size_t j = i + 1; j < log.holds.size(); ++j) {
      const hold &a = log.holds[i], &b = log.holds[j];
      if (a.name != b.name || (!a.write && !b.write) || (a.permits > 0 && b.permits > 0)) continue;
      std::int64_t longest = 0;
      for (const auto& [a1, a2] : certain_intervals(log, a))
        for (const auto& [b1, b2] : certain_intervals(log, b))
          longest = std::max(longest, std::min(a2, b2) - std::max(a1, b1));
      if (longest <= 0) continue;
      char b2[64];
      std::snprintf(b2, sizeof b2, " overlap %.1f ms", ms_of(longest));
      log.findings.push_back({"overlap", describe_hold(log, a, t0) + " and " + describe_hold(log, b, t0) + b2});
    }
}

/// Failover-caused overlaps: the overlaps that appear when the failovers' revocations are
/// ignored. Replication is asynchronous, so a failover may lose a hold and these are allowed
/// (counted, not findings); check_overlaps() finds every other overlap.
inline int count_failover_overlaps(const run_log& log) {
  run_log with, without;
  with.holds = without.holds = log.holds;
  with.revocations = log.revocations;
  for (const auto& r : log.revocations)
    if (!r.failover) without.revocations.push_back(r);
  check_overlaps(with, 0);
  check_overlaps(without, 0);
  return static_cast<int>(without.findings.size() - with.findings.size());
}

/// Invariant 3: fencing tokens drawn in certainly-valid holds increase with time. A hold draws
/// its token on its first fencing_token() call and returns that one again after (cached): only
/// the draws are ordered (two overlapping read holds may draw in either order), and a hold's
/// later calls must return its draw.
inline void check_fences(run_log& log, std::int64_t t0, bool data_loss) {
  std::map<int, fence_record> draws;  // hold -> its first call
  for (const auto& f : log.fences) {
    auto it = draws.find(f.hold);
    if (it == draws.end() || f.start_ns < it->second.start_ns) draws[f.hold] = f;
  }
  for (const auto& f : log.fences) {
    const fence_record& d = draws[f.hold];
    if (f.token == d.token) continue;
    char b[200];
    std::snprintf(b, sizeof b, "t%d.%d got token %llu in the hold that drew %llu (t%d.%d)", f.thread, f.index,
                  (unsigned long long)f.token, (unsigned long long)d.token, d.thread, d.index);
    log.findings.push_back({"fence", b});
  }
  if (data_loss) return;  // Redlock: tokens are promised only while no master loses its data
  for (const auto& [h1id, f1] : draws)
    for (const auto& [h2id, f2] : draws) {
      if (f1.hold == f2.hold || f1.end_ns >= f2.start_ns) continue;
      const hold &h1 = log.holds[static_cast<std::size_t>(f1.hold)], &h2 = log.holds[static_cast<std::size_t>(f2.hold)];
      if (h1.name != h2.name || !certainly_held(log, h1, f1.start_ns, f1.end_ns) ||
          !certainly_held(log, h2, f2.start_ns, f2.end_ns))
        continue;
      if (f2.token > f1.token) continue;
      char b[256];
      std::snprintf(b, sizeof b, "t%d.%d got token %llu at %.1f ms after t%d.%d got %llu at %.1f ms (name n%d)",
                    f2.thread, f2.index, (unsigned long long)f2.token, ms_of(f2.start_ns - t0), f1.thread, f1.index,
                    (unsigned long long)f1.token, ms_of(f1.end_ns - t0), h1.name);
      log.findings.push_back({"fence", b});
    }
}

/// Invariant 5 (liveness): a waiter (try_lock_for that returned false, or a lock() call) is
/// never kept waiting longer than `bound_ns` while the name was free: no other hold could be on
/// the server (see hold::busy_until_ns), no acquire or release of unknown outcome was pending,
/// no writer was waiting ahead of a reader, and no fault was active or recent (busy_window).
/// The stretches in which at least `n` of `spans` overlap.
inline std::vector<std::pair<std::int64_t, std::int64_t>> covered_by_at_least(
    const std::vector<std::pair<std::int64_t, std::int64_t>>& spans, int n) {
  std::vector<std::pair<std::int64_t, int>> events;
  for (const auto& [from, until] : spans) events.emplace_back(from, +1), events.emplace_back(until, -1);
  std::sort(events.begin(), events.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  int count = 0;
  std::int64_t since = 0;
  for (const auto& [at, d] : events) {
    if (count < n && count + d >= n) since = at;
    if (count >= n && count + d < n) out.emplace_back(since, at);
    count += d;
  }
  return out;
}

/// `permits_of(thread, name)`: the permits of the semaphore that thread waits for there (0:
/// another kind). A semaphore's name is busy while that many of its holds may be on the server.
inline void check_liveness(run_log& log, std::int64_t t0, std::int64_t bound_ns,
                           const std::function<int(int, int)>& permits_of = {}) {
  for (const auto& r : log.records) {
    if (r.o.kind != op_kind::acquire || r.o.mode == acquire_mode::try_once || r.outcome == "skip") continue;
    if (r.o.mode == acquire_mode::try_for && r.outcome != "false") continue;
    const int permits = permits_of ? permits_of(r.o.thread, r.o.name) : 0;
    std::vector<std::pair<std::int64_t, std::int64_t>> busy, permits_held;
    for (const auto& h : log.holds)
      if (h.name == r.o.name && (h.thread != r.o.thread || h.end_ns <= r.start_ns) && (h.write || r.o.write))
        (permits > 0 && h.permits > 0 ? permits_held : busy).emplace_back(h.acquire_start_ns, h.busy_until_ns);
    for (const auto& stretch : covered_by_at_least(permits_held, permits)) busy.push_back(stretch);
    for (const auto& b : log.busy)
      if ((b.name < 0 || b.name == r.o.name) && (!b.writer_waiting || (!r.o.write && b.thread != r.o.thread)))
        busy.emplace_back(b.from_ns, b.until_ns);
    std::sort(busy.begin(), busy.end());
    std::int64_t free_from = r.start_ns, longest = 0, longest_at = 0;
    for (const auto& [from, until] : busy) {
      if (from > free_from && from - free_from > longest)
        longest = std::min(from, r.end_ns) - free_from, longest_at = free_from;
      free_from = std::max(free_from, until);
      if (free_from >= r.end_ns) break;
    }
    if (free_from < r.end_ns && r.end_ns - free_from > longest) longest = r.end_ns - free_from, longest_at = free_from;
    if (longest > 0) ++log.waits_checked;
    if (longest <= bound_ns) continue;
    char b[320];
    std::snprintf(
        b, sizeof b,
        "%s ran %.1f..%.1f ms (%s): the name was free for %.1f ms from %.1f ms, no fault active, bound %.1f ms",
        describe(r.o).c_str(), ms_of(r.start_ns - t0), ms_of(r.end_ns - t0), r.outcome.c_str(), ms_of(longest),
        ms_of(longest_at - t0), ms_of(bound_ns));
    log.findings.push_back({"liveness", b});
  }
}

}  // namespace redislock_model
