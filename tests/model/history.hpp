#pragma once
// What the model checker runs: a history generated from a seed. Each thread has a list of
// operations on a few lock names; the fault thread a list of faults at times from the start.
// A history is plain data: it can be printed, and cut down (keep()) for shrinking and replay.

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace redislock_model {

enum class op_kind {
  acquire,        // mode: try_lock, try_lock_for(arg ms) or lock(); write or read side
  extend,         // extend(arg ms): longer or shorter than the configured lease
  fencing_token,  //
  still_held,     //
  remaining,      // remaining_lease() / validity(): the optimism check follows
  unlock,         // one level (reentrant: the innermost)
  pause,          // sleep arg ms while holding whatever is held (a critical section)
  force_release,  // the administrator takes the name away from whoever holds it
  recreate,       // destroy the object (releasing it) and build a new one, auto_renew = write
};

enum class acquire_mode { try_once, try_for, block };

struct op {
  int thread = 0, index = 0;  // index within the thread's list (stable under shrinking)
  op_kind kind = op_kind::pause;
  int name = 0;
  acquire_mode mode = acquire_mode::try_once;
  bool write = true;  // acquire: the write side (shared kind); recreate: auto_renew
  long arg_ms = 0;
};

enum class fault_kind {
  delay,              // the thread's proxies: delay + jitter, both directions
  stall,              // the thread's proxies stop forwarding (dir), then resume: requests run late
  black_hole,         // the thread's proxies drop bytes one way (dir)
  cut,                // the thread's connections reset
  cut_after_request,  // requests run, replies lost
  refuse,             // new connections refused
  partition,          // the thread cut off from a subset of the servers (Redlock: masters in `subset`)
  client_kill,        // CLIENT KILL TYPE normal on a server (all its clients)
  debug_sleep,        // DEBUG SLEEP on a server (it stalls, then answers late)
  script_flush,       // SCRIPT FLUSH on a server (scripts reloaded on NOSCRIPT)
  master_restart,     // Redlock: kill -9 a master, restart it empty after the documented delay
  failover,           // Sentinel: SENTINEL FAILOVER; Cluster: CLUSTER FAILOVER on a master's replica
  master_kill,        // Sentinel, Cluster: kill -9 a master; its replica is promoted, it rejoins empty
  migrate,            // Cluster: the slot of a lock name moves to another master, live
  client_crash,       // kill -9 of a crash worker (another process on the names: crash_workers.hpp)
};

struct fault {
  int index = 0;
  fault_kind kind = fault_kind::delay;
  long at_ms = 0, duration_ms = 0;
  int thread = 0;       // proxy faults: whose proxies
  int dir = 3;          // 1 to_server, 2 to_client, 3 both
  unsigned subset = 0;  // Redlock, Cluster: masters (bit i = master i); one server, Sentinel: ignored
  long arg_ms = 0;      // delay / jitter / sleep
};

inline const char* to_string(op_kind k) {
  switch (k) {
    case op_kind::acquire: return "acquire";
    case op_kind::extend: return "extend";
    case op_kind::fencing_token: return "fencing_token";
    case op_kind::still_held: return "still_held";
    case op_kind::remaining: return "remaining";
    case op_kind::unlock: return "unlock";
    case op_kind::pause: return "pause";
    case op_kind::force_release: return "force_release";
    case op_kind::recreate: return "recreate";
  }
  return "?";
}

inline const char* to_string(fault_kind k) {
  switch (k) {
    case fault_kind::delay: return "delay";
    case fault_kind::stall: return "stall";
    case fault_kind::black_hole: return "black_hole";
    case fault_kind::cut: return "cut";
    case fault_kind::cut_after_request: return "cut_after_request";
    case fault_kind::refuse: return "refuse";
    case fault_kind::partition: return "partition";
    case fault_kind::client_kill: return "client_kill";
    case fault_kind::debug_sleep: return "debug_sleep";
    case fault_kind::script_flush: return "script_flush";
    case fault_kind::master_restart: return "master_restart";
    case fault_kind::failover: return "failover";
    case fault_kind::master_kill: return "master_kill";
    case fault_kind::migrate: return "migrate";
    case fault_kind::client_crash: return "client_crash";
  }
  return "?";
}

inline std::string describe(const op& o) {
  std::ostringstream s;
  if (o.index < 0) return "t" + std::to_string(o.thread) + ".end destroy n" + std::to_string(o.name);
  s << "t" << o.thread << "." << o.index << " " << to_string(o.kind) << " n" << o.name;
  if (o.kind == op_kind::acquire) {
    s << (o.mode == acquire_mode::try_once ? " try_lock"
          : o.mode == acquire_mode::block  ? " lock"
                                           : " try_lock_for")
      << (o.write ? " write" : " read");
    if (o.mode == acquire_mode::try_for) s << " " << o.arg_ms << "ms";
  } else if (o.kind == op_kind::recreate) {
    s << (o.write ? " auto_renew=on" : " auto_renew=off");
  } else if (o.kind == op_kind::extend || o.kind == op_kind::pause) {
    s << " " << o.arg_ms << "ms";
  }
  return s.str();
}

inline std::string describe(const fault& f) {
  std::ostringstream s;
  s << "f" << f.index << " " << to_string(f.kind) << " at=" << f.at_ms << "ms for=" << f.duration_ms << "ms";
  switch (f.kind) {
    case fault_kind::delay:
      s << " thread=" << f.thread << " delay=" << f.arg_ms << "ms jitter=" << f.arg_ms << "ms";
      break;
    case fault_kind::stall:
    case fault_kind::black_hole:
      s << " thread=" << f.thread << " dir=" << (f.dir == 1 ? "to_server" : f.dir == 2 ? "to_client" : "both");
      break;
    case fault_kind::cut:
    case fault_kind::cut_after_request:
    case fault_kind::refuse: s << " thread=" << f.thread; break;
    case fault_kind::partition: s << " thread=" << f.thread << " servers=0x" << std::hex << f.subset << std::dec; break;
    case fault_kind::migrate: s << " name=n" << f.thread << " to=" << f.dir; break;
    case fault_kind::client_crash: s << " worker=" << f.thread; break;
    case fault_kind::debug_sleep:
      s << " sleep=" << f.arg_ms << "ms servers=0x" << std::hex << f.subset << std::dec;
      break;
    default: s << " servers=0x" << std::hex << f.subset << std::dec;
  }
  return s.str();
}

/// Which kinds a history may put on a name.
enum class kind {
  mutex,
  fair_mutex,
  reentrant,
  shared,
  redlock,
  semaphore,    // semaphore_permits holders at most (subjects.hpp)
  async_mutex,  // the mutex through async_client on an io_context thread (async_subject.hpp)
  election,     // campaign and resign; the term is the fencing token
  broken_stealing,
  broken_optimistic,
  broken_deaf,
  broken_redlock_extend,
  broken_semaphore,    // admits one holder more than semaphore_permits
  broken_unrenewed,    // without auto_renew: no lease_confirmed_until(), never lost() by the clock
  broken_never_lost,   // without auto_renew: its lease_confirmed_until(), but never lost() by the clock
  broken_async_extend  // the async mutex keeping the later lease end when an extend shortens it
};

inline const char* to_string(kind k) {
  switch (k) {
    case kind::mutex: return "mutex";
    case kind::fair_mutex: return "fair_mutex";
    case kind::reentrant: return "reentrant";
    case kind::shared: return "shared";
    case kind::redlock: return "redlock";
    case kind::semaphore: return "semaphore";
    case kind::async_mutex: return "async_mutex";
    case kind::election: return "election";
    case kind::broken_stealing: return "broken_stealing";
    case kind::broken_optimistic: return "broken_optimistic";
    case kind::broken_deaf: return "broken_deaf";
    case kind::broken_redlock_extend: return "broken_redlock_extend";
    case kind::broken_semaphore: return "broken_semaphore";
    case kind::broken_unrenewed: return "broken_unrenewed";
    case kind::broken_never_lost: return "broken_never_lost";
    case kind::broken_async_extend: return "broken_async_extend";
  }
  return "?";
}

/// Where the locks live: one server, 3 Redlock masters, a Sentinel set-up (a master, its
/// replica, 3 sentinels) or a Cluster (3 masters, a replica each).
enum class topology { single, redlock, sentinel, cluster };

inline const char* to_string(topology t) {
  switch (t) {
    case topology::single: return "single";
    case topology::redlock: return "redlock";
    case topology::sentinel: return "sentinel";
    case topology::cluster: return "cluster";
  }
  return "?";
}

struct history_shape {
  int threads = 4, names = 2, ops = 30;
  long lease_ms = 500;
  topology where = topology::single;
  int masters = 3;    // Redlock and Cluster
  int processes = 0;  // crash workers (one server): client_crash faults kill them
  bool faults = true;
  long restart_delay_ms = 0;   // Redlock master restarts: at least the lease
  std::vector<kind> kinds;     // per name; mixed kinds: per thread and name (kind_at)
  bool extend_shorter = true;  // false: every extend uses the configured lease (never shortens a hold)
};

/// The kind thread `thread` uses on `name`: one per name, or with mixed kinds one per thread
/// and name (kinds[thread * names + name]).
inline kind kind_at(const std::vector<kind>& kinds, int names, int thread, int name) {
  const std::size_t i = kinds.size() > static_cast<std::size_t>(names) ? static_cast<std::size_t>(thread * names + name)
                                                                       : static_cast<std::size_t>(name);
  return kinds.at(i);
}

/// Kinds that share a name's key type (the mutex's string, which the async mutex shares; the
/// reentrant, shared or election hash, each with its own @kind; the semaphore's zset): another
/// family on a held name throws wrong_type_error.
inline int family_of(kind k) {
  switch (k) {
    case kind::reentrant: return 1;
    case kind::shared: return 2;
    case kind::semaphore:
    case kind::broken_semaphore: return 3;
    case kind::election: return 4;
    default: return 0;
  }
}

struct history {
  std::vector<std::vector<op>> threads;
  std::vector<fault> faults;

  std::size_t op_count() const {
    std::size_t n = 0;
    for (const auto& t : threads) n += t.size();
    return n;
  }
  /// Every operation and fault as "t<thread>.<index>" / "f<index>" (the shrinker's items).
  std::vector<std::string> items() const {
    std::vector<std::string> out;
    for (const auto& t : threads)
      for (const auto& o : t) out.push_back("t" + std::to_string(o.thread) + "." + std::to_string(o.index));
    for (const auto& f : faults) out.push_back("f" + std::to_string(f.index));
    return out;
  }
  /// The history restricted to `ids` (as items() names them).
  history keep(const std::set<std::string>& ids) const {
    history h;
    h.threads.resize(threads.size());
    for (std::size_t t = 0; t < threads.size(); ++t)
      for (const auto& o : threads[t])
        if (ids.count("t" + std::to_string(o.thread) + "." + std::to_string(o.index))) h.threads[t].push_back(o);
    for (const auto& f : faults)
      if (ids.count("f" + std::to_string(f.index))) h.faults.push_back(f);
    return h;
  }
  std::string text() const {
    std::string s;
    for (const auto& t : threads)
      for (const auto& o : t) s += "  " + describe(o) + "\n";
    for (const auto& f : faults) s += "  " + describe(f) + "\n";
    return s;
  }
};

/// The history of `seed`: each thread a random walk over acquire / use / release of its names,
/// the faults spread over the expected length of the run.
inline history generate(std::uint64_t seed, const history_shape& shape) {
  std::mt19937_64 rng(seed);
  auto pick = [&](long lo, long hi) { return std::uniform_int_distribution<long>(lo, hi)(rng); };
  auto chance = [&](int percent) { return pick(0, 99) < percent; };
  const long lease = shape.lease_ms;
  history h;
  h.threads.resize(static_cast<std::size_t>(shape.threads));
  long longest_ms = 0;  // a rough length of the run, to spread the faults over
  for (int t = 0; t < shape.threads; ++t) {
    std::vector<int> depth(static_cast<std::size_t>(shape.names), 0);  // what the generator expects held
    long expected_ms = 0;
    for (int i = 0; i < shape.ops; ++i) {
      op o;
      o.thread = t;
      o.index = i;
      o.name = static_cast<int>(pick(0, shape.names - 1));
      const kind k = kind_at(shape.kinds, shape.names, t, o.name);
      const bool nests = k == kind::reentrant;
      int& d = depth[static_cast<std::size_t>(o.name)];
      const long roll = pick(0, 99);
      if (d == 0 || (nests && d < 3 && roll < 10)) {
        if (roll < 4) {
          o.kind = op_kind::force_release;
        } else if (roll < 8 && d == 0) {
          o.kind = op_kind::recreate;
          o.write = chance(40);  // auto_renew
        } else {
          o.kind = op_kind::acquire;
          const long m = pick(0, 99);
          // lock() only when this thread holds nothing (no deadlock across names).
          const bool holds_any = std::any_of(depth.begin(), depth.end(), [](int x) { return x > 0; });
          o.mode = m < 40                  ? acquire_mode::try_once
                   : (m < 90 || holds_any) ? acquire_mode::try_for
                                           : acquire_mode::block;
          o.arg_ms = pick(0, 2 * lease);
          o.write = k != kind::shared || chance(40);
          ++d;
          expected_ms += o.mode == acquire_mode::try_once ? 2 : o.arg_ms / 3;
        }
      } else {
        if (roll < 25) {
          o.kind = op_kind::unlock;
          --d;
        } else if (roll < 40) {
          o.kind = op_kind::extend;
          // Longer and shorter than the lease (Redlock's floor is instance_timeout + drift);
          // without extend_shorter exactly the lease, which never shortens what is left.
          const bool shorter = chance(50);
          o.arg_ms = !shape.extend_shorter ? lease : shorter ? pick(lease / 5, lease - 1) : pick(lease, 3 * lease);
        } else if (roll < 52) {
          o.kind = op_kind::fencing_token;
        } else if (roll < 62) {
          o.kind = op_kind::still_held;
        } else if (roll < 82) {
          o.kind = op_kind::remaining;
        } else {
          o.kind = op_kind::pause;
          o.arg_ms = pick(0, lease / 2);
          expected_ms += o.arg_ms;
        }
      }
      h.threads[static_cast<std::size_t>(t)].push_back(o);
    }
    longest_ms = std::max(longest_ms, expected_ms);
  }
  if (!shape.faults) return h;
  // Faults: a new one every ~half a lease over the run, each lasting up to a lease (a stall,
  // partition or black hole then outlives command timeouts and, sometimes, leases).
  const bool redlock = shape.where == topology::redlock, cluster = shape.where == topology::cluster;
  const int servers = redlock || cluster ? shape.masters : 1;
  std::vector<fault_kind> menu = {fault_kind::delay,
                                  fault_kind::stall,
                                  fault_kind::black_hole,
                                  fault_kind::cut,
                                  fault_kind::cut_after_request,
                                  fault_kind::refuse,
                                  fault_kind::partition,
                                  fault_kind::client_kill,
                                  fault_kind::debug_sleep,
                                  fault_kind::script_flush};
  if (redlock) menu.push_back(fault_kind::master_restart);
  // Sentinel and Cluster clients reach the data nodes at the addresses the topology announces,
  // not through the proxies: their faults are the servers' (failovers, slot moves).
  if (shape.where == topology::sentinel || cluster)
    menu = {fault_kind::client_kill, fault_kind::debug_sleep, fault_kind::script_flush, fault_kind::failover,
            fault_kind::master_kill};
  if (cluster) menu.insert(menu.end(), {fault_kind::migrate, fault_kind::migrate});
  if (shape.processes > 0) menu.insert(menu.end(), {fault_kind::client_crash, fault_kind::client_crash});
  long at = pick(0, lease / 2);
  int failovers = 0;
  for (int i = 0; at < std::max(2 * longest_ms, 3 * lease); ++i) {
    fault f;
    f.index = i;
    f.kind = menu[static_cast<std::size_t>(pick(0, static_cast<long>(menu.size()) - 1))];
    f.at_ms = at;
    f.duration_ms = pick(lease / 10, lease);
    f.thread = static_cast<int>(pick(0, shape.threads - 1));
    f.dir = static_cast<int>(pick(1, 3));
    f.subset = static_cast<unsigned>(pick(1, (1L << servers) - 1));
    f.arg_ms = pick(1, lease / 5);
    if (f.kind == fault_kind::debug_sleep) f.arg_ms = pick(10, lease / 2);
    if (f.kind == fault_kind::client_crash) f.thread = static_cast<int>(pick(0, shape.processes - 1));
    if (f.kind == fault_kind::migrate) {
      f.thread = static_cast<int>(pick(0, shape.names - 1));  // the name whose slot moves
      f.dir = static_cast<int>(pick(1, servers - 1));         // to the master that many places on
    }
    if (f.kind == fault_kind::master_kill || f.kind == fault_kind::failover) {
      f.subset = 1u << pick(0, servers - 1);
      // One failover per run: each takes seconds (promotion, the old master's resync).
      if (failovers++ > 0) f.kind = fault_kind::script_flush;
    }
    if (f.kind == fault_kind::master_restart) {
      f.subset = 1u << pick(0, servers - 1);  // one master: a majority stays up
      f.duration_ms = shape.restart_delay_ms;
    }
    h.faults.push_back(f);
    at += f.duration_ms / 2 + pick(lease / 10, lease / 2);
  }
  return h;
}

}  // namespace redislock_model
