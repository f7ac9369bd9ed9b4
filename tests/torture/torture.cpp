// redislock_torture — a safety checker for redislock's locks under faults.
//
//   redislock_torture [--kind mutex] [--processes 8] [--threads 4] [--seconds 20]
//                     [--acquisitions N] [--lease-ms 1000] [--fault-every-ms 1500]
//                     [--faults none|kill9,restart,client-kill,sigstop,proxy]
//                     [--min-faults N]
//   redislock_torture --kind redlock [--masters 3] [--restart-delay-ms lease*1.1]
//                     [--faults kill9,sigstop,master-kill9,master-kill9x2,master-restart,master-sigstop]
//                     [other options as above]
//   redislock_torture --cluster --kind mutex[,mutex-waiting,...] [--names 12]
//                     [--faults failover,master-kill9,migrate,kill9,sigstop] [--max-recovery-ms 15000]
//                     [other options as above]
//
// Starts its own redis-server (no persistence, free loopback port), then --processes worker
// processes (this program with --worker) of --threads threads each; every thread owns one lock
// object of kind --kind (mutex: try_lock; mutex-waiting / mutex-fair / reentrant-waiting /
// shared-waiting (the write side): try_lock_for(200 ms), through the server-side queue and the
// release's hand-off; shared-mixed: the read side or the write side at random, both waiting;
// semaphore: one of 3 permits, waiting; election: campaign by waiting, resign; broken-stealing,
// broken-readers-ignoring-writers and
// broken-semaphore-overcount: the checker's self-tests) and loops:
// take the lock, enter (overlap marker), GET counter, fenced SET counter+1, leave
// (compare-and-delete marker), unlock. A reader (shared-mixed) instead adds its marker to a set
// of readers, meets the writer's marker, reads, and leaves the set; a semaphore holder adds its
// marker to the set of holders inside and counts the certainly-valid ones (more than N is a
// violation), reads, and leaves the set. See checker.hpp for what
// counts as a violation. Meanwhile the coordinator injects the listed faults in turn, and
// checks after each that the workers make progress again. It ends after --seconds or
// --acquisitions (whichever first), stops the workers and prints one summary line:
//
//   torture: kind=mutex ... acquisitions=N writes=N faults=N (...) violations=0 lost_updates=0 PASS
//
// Redlock mode (--kind redlock: basic_redlock with try_lock; broken-redlock-minority: its
// self-test, each object on one master only) starts --masters more servers for the lock; the
// first server then holds only the checker's record and is never faulted. Master faults, each
// on randomly chosen masters: master-kill9 (kill -9 one), master-kill9x2 (kill -9 two at once),
// master-restart (stop one); each comes back empty after --restart-delay-ms, which must be at
// least the lease (README, "Redlock": a master that lost its data rejoins only after a lease,
// or its forgotten keys let a second majority form); master-sigstop stalls one for 1.5 leases
// (far longer than the per-instance timeout), then SIGCONT. kill9 and sigstop hit holders, as
// in single-server mode.
//
// Cluster mode (--cluster; --kind may list several single-server kinds, e.g.
// mutex,mutex-fair,shared-mixed) runs the lock on a 3-master, 3-replica Redis Cluster through
// redislock::cluster_client, under --names lock names (default 12) spread over the masters
// (name i on master i % 3, kind number (i / 3) % kinds; thread t of worker w takes name
// (w * threads + t) % names, w counting the --processes workers; a worker that replaces a
// killed one takes its names); the first server then holds only the record (per name) and is
// never faulted. Cluster faults (cluster_faults.hpp): failover (CLUSTER FAILOVER on a replica),
// master-kill9 (kill -9 of a master, promoted replica, the victim back as a replica), migrate
// (a lock name's slot moved to another master); kill9 and sigstop hit holders. Failover faults
// open a failover window (checker.hpp): what a certainly-valid holder meets inside one is
// reported (window_violations, window_lost, fence_regressions, window_lost_updates), not
// failed; outside, it is a violation, except a fence token refused after a master-kill9 lost
// increments (fence_regressions_after_window, reported). After each cluster fault every name must be acquired
// again within --max-recovery-ms (default 15000) of the fault's start, or it is a stall.
//
// Exit status 0 only when there was no violation, no lost update, no stall, no unexpected
// worker exit, at least one acquisition and at least --min-faults faults.
#include "checker.hpp"
#include "cluster_faults.hpp"
#include "lock_kinds.hpp"
#include "process.hpp"
#include "redis_server.hpp"
#include "tcp_proxy.hpp"

#include <redislock/redislock.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace redislock;
using namespace redislock_torture;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

namespace {

struct config {
  std::string kind = "mutex";
  int processes = 8, threads = 4;
  double seconds = 20;
  unsigned long long acquisitions = 0;
  long lease_ms = 1000;
  long fault_every_ms = 1500;
  std::vector<std::string> faults;
  unsigned long long min_faults = 0;
  int masters = 0;             // Redlock kinds: lock servers (default 3)
  long restart_delay_ms = -1;  // master faults: downtime before an empty restart (default lease * 1.1)
  bool cluster = false;        // the lock on a Redis Cluster (cluster_client)
  int names = 0;               // cluster: lock names (default 12)
  long max_recovery_ms = 15000;
  std::vector<std::string> kinds;       // --kind split at commas (several only in cluster mode)
  std::vector<std::string> lock_names;  // cluster worker mode: the names, from the coordinator
  // worker mode
  int slot = -1;
  int position = 0;  // cluster: which of the --processes workers this one is (a replacement keeps it)
  std::string shm, run_id;
  std::vector<int> lock_ports;  // one per lock server (a Redlock master each)
  int data_port = 0;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "redislock_torture: %s\nsee the comment at the top of tests/torture/torture.cpp\n", why.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    auto comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty() && item != "none") out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

config parse(int argc, char** argv) {
  config c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value for " + a);
      return argv[++i];
    };
    if (a == "--kind") c.kind = value();
    else if (a == "--processes") c.processes = std::stoi(value());
    else if (a == "--threads") c.threads = std::stoi(value());
    else if (a == "--seconds") c.seconds = std::stod(value());
    else if (a == "--acquisitions") c.acquisitions = std::stoull(value());
    else if (a == "--lease-ms") c.lease_ms = std::stol(value());
    else if (a == "--fault-every-ms") c.fault_every_ms = std::stol(value());
    else if (a == "--faults") c.faults = split(value());
    else if (a == "--min-faults") c.min_faults = std::stoull(value());
    else if (a == "--worker") c.slot = std::stoi(value());
    else if (a == "--position") c.position = std::stoi(value());
    else if (a == "--shm") c.shm = value();
    else if (a == "--run-id") c.run_id = value();
    else if (a == "--lock-ports")
      for (const auto& p : split(value())) c.lock_ports.push_back(std::stoi(p));
    else if (a == "--masters") c.masters = std::stoi(value());
    else if (a == "--restart-delay-ms") c.restart_delay_ms = std::stol(value());
    else if (a == "--data-port") c.data_port = std::stoi(value());
    else if (a == "--cluster") c.cluster = true;
    else if (a == "--names") c.names = std::stoi(value());
    else if (a == "--lock-names") c.lock_names = split(value());
    else if (a == "--max-recovery-ms") c.max_recovery_ms = std::stol(value());
    else usage("unknown argument " + a);
  }
  // Holder faults apply to every kind; server faults to the single server; master faults to Redlock.
  static const std::set<std::string> holder = {"kill9", "sigstop"}, server = {"restart", "client-kill", "proxy"},
                                     master = {"master-kill9", "master-kill9x2", "master-restart", "master-sigstop"},
                                     cluster = {"failover", "master-kill9", "migrate"};
  c.kinds = split(c.kind);
  if (c.kinds.empty()) usage("missing --kind");
  if (c.kinds.size() > 1 && !c.cluster) usage("several kinds need --cluster");
  if (c.cluster) {
    for (const auto& k : c.kinds)
      if (multi_master(k)) usage("--cluster runs single-server kinds, not " + k);
    for (const auto& f : c.faults)
      if (!holder.count(f) && !cluster.count(f)) usage("fault " + f + " is not a cluster fault");
    if (c.masters != 0) usage("--masters needs a Redlock kind, not --cluster");
    if (c.names == 0) c.names = 12;
    if (c.names < 1 || c.names > static_cast<int>(shared_state::max_names)) usage("bad --names");
    if (c.restart_delay_ms < 0) c.restart_delay_ms = 0;
    if (c.processes < 1 || c.threads < 1 || c.lease_ms < 50) usage("bad --processes/--threads/--lease-ms");
    if (c.processes * c.threads < c.names) usage("fewer threads than --names: some name would have no holder");
    return c;
  }
  if (c.names != 0) usage("--names needs --cluster");
  const bool redlock_mode = multi_master(c.kind);
  for (const auto& f : c.faults) {
    if (!holder.count(f) && !server.count(f) && !master.count(f)) usage("unknown fault " + f);
    if (server.count(f) && redlock_mode) usage("fault " + f + " needs a single-server kind");
    if (master.count(f) && !redlock_mode) usage("fault " + f + " needs a Redlock kind (--kind redlock)");
  }
  if (redlock_mode && c.masters == 0) c.masters = 3;
  if (!redlock_mode && c.masters != 0) usage("--masters needs a Redlock kind (--kind redlock)");
  if (c.masters < 0 || c.masters > 15) usage("bad --masters");
  for (const auto& f : c.faults)
    if (f == "master-kill9x2" && c.masters < 3) usage("master-kill9x2 needs --masters 3 or more");
  if (c.restart_delay_ms < 0) c.restart_delay_ms = c.lease_ms + c.lease_ms / 10;
  if (c.processes < 1 || c.threads < 1 || c.lease_ms < 50) usage("bad --processes/--threads/--lease-ms");
  return c;
}

shared_state* map_state(const std::string& path, bool create) {
  int fd = ::open(path.c_str(), create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
  if (fd < 0 || (create && ::ftruncate(fd, sizeof(shared_state)) != 0)) throw std::runtime_error("cannot open " + path);
  void* p = ::mmap(nullptr, sizeof(shared_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw std::runtime_error("cannot map " + path);
  return create ? new (p) shared_state() : static_cast<shared_state*>(p);
}

std::string text(const redisReply& r) { return std::string(r.str, r.len); }

// Details of the first few violations of a process go to stderr; the summary has the count.
bool report_violation() {
  static std::atomic<int> printed{0};
  return printed.fetch_add(1) < 10;
}

// ---------------------------------------------------------------------------------------------
// Worker: one thread = one lock object = one would-be holder.

// Cluster mode: one record per lock name (`name` its index), one epoch for all.
struct keys {
  std::string epoch, marker, readers, counter, fence, applied;
  explicit keys(const std::string& run, const std::string& name = "") {
    epoch = "torture:{" + run + "}:epoch";
    const std::string base = "torture:{" + run + "}:" + (name.empty() ? "" : name + ":");
    marker = base + "marker";
    readers = base + "readers";
    counter = base + "counter";
    fence = base + "fence";
    applied = base + "applied";
  }
};

class holder_thread {
 public:
  // `name`: cluster mode, the index of the lock name in cfg.lock_names (else -1).
  holder_thread(const config& cfg, std::unique_ptr<torture_lock> lock, int name, shared_state& shared,
                worker_stats& stats, int index)
      : cfg_(cfg),
        shared_(shared),
        stats_(stats),
        keys_(cfg.run_id, name < 0 ? "" : std::to_string(name)),
        index_(index),
        name_(name),
        lease_ns_(cfg.lease_ms * 1000000LL),
        margin_ns_(lease_ns_ / 20 + 2000000LL),
        lock_(std::move(lock)) {
    data_options_.port = cfg.data_port;
    data_options_.connect_timeout = milliseconds(1000);
    data_options_.command_timeout = milliseconds(2000);
  }

  void run(const std::atomic<std::uint64_t>& stop) {
    std::minstd_rand rng(static_cast<unsigned>(::getpid() * 131 + index_));
    std::uniform_int_distribution<int> jitter_us(100, 2000);
    while (stop.load() == 0) {
      try {
        if (!data_) data_ = std::make_unique<connection>(data_options_);
        const std::string epoch(
            detail::as_string(*epoch_script().run(*data_, {keys_.epoch}, {detail::random_token()})));
        fault_events_at_ = shared_.master_fault_events.load();
        const std::int64_t sent_at = now_ns();  // before the attempt is sent: the lease starts later
        if (!lock_->try_lock()) {
          std::this_thread::sleep_for(std::chrono::microseconds(jitter_us(rng)));
          continue;
        }
        stats_.acquisitions.fetch_add(1);
        if (name_ >= 0) count_name_acquisition();
        critical_section(epoch, sent_at + lease_ns_ - margin_ns_);
      } catch (const redislock::error&) {
        stats_.errors.fetch_add(1);
        std::this_thread::sleep_for(milliseconds(5));  // Redis is down or cut: do not spin
      }
    }
  }

 private:
  void count_name_acquisition() {
    name_stats& n = shared_.names[name_];
    n.acquisitions.fetch_add(1);
    const std::int64_t t = now_ns();
    std::int64_t none = 0;
    if (t >= shared_.recovery_mark_ns.load()) n.first_since_mark_ns.compare_exchange_strong(none, t);
  }

  // Cluster mode: what a certainly-valid holder meets at `now` inside a failover window is
  // counted in `field` and on its name (checker.hpp), not as a violation.
  bool in_window(std::int64_t now, std::atomic<std::uint64_t> worker_stats::*field) {
    if (name_ < 0 || !shared_.in_failover_window(now)) return false;
    (stats_.*field).fetch_add(1);
    shared_.names[name_].window_events.fetch_add(1);
    return true;
  }

  // Both holders were certainly valid at `now` when now < both valid_until: a violation.
  void compare(const std::string& other, std::int64_t my_valid_until, const char* where) {
    const std::int64_t now = now_ns();
    const std::int64_t other_valid_until = marker_valid_until(other);
    if (now < my_valid_until && now < other_valid_until) {
      if (in_window(now, &worker_stats::window_violations)) return;
      stats_.violations.fetch_add(1);
      if (report_violation())
        std::fprintf(stderr, "torture: VIOLATION (%s) pid %d thread %d met %s, %lld ns before its lease end\n", where,
                     ::getpid(), index_, other.c_str(), static_cast<long long>(other_valid_until - now));
    } else {
      stats_.stale_overlaps.fetch_add(1);
    }
  }

  void critical_section(const std::string& epoch, std::int64_t valid_until) {
    const std::string me = std::to_string(::getpid()) + "." + std::to_string(index_) + "." + std::to_string(++seq_) +
                           "|" + std::to_string(valid_until);
    std::uint64_t fence = 0;
    try {
      fence = lock_->fencing_token();  // asks the server(s): the lease must still be valid
    } catch (const redislock::error&) {
      stats_.errors.fetch_add(1);
      release(epoch, valid_until);  // not entered; the object must not stay held (it would refuse every later try)
      return;
    }
    if (lock_->permits() > 0) {
      permit_section(epoch, me, valid_until);
      release(epoch, valid_until);
      return;
    }
    if (!lock_->exclusive()) {
      read_section(epoch, me, valid_until);
      release(epoch, valid_until);
      return;
    }
    // True from before the enter call: if its reply is lost, the marker may be set all the same.
    bool inside = true;
    try {
      reply_ptr r = enter_script().run(*data_, {keys_.epoch, keys_.marker}, {epoch, me});
      if (r->type == REDIS_REPLY_INTEGER) {
        stats_.epoch_skips.fetch_add(1);
        inside = false;
      } else {
        if (r->len != 0) compare(text(*r), valid_until, "enter");
        if (lock_->has_read_side()) meet_readers(epoch, valid_until);
        reply_ptr v = data_->command({"GET", keys_.counter});
        const long long value = v->type == REDIS_REPLY_NIL ? 0 : std::stoll(text(*v));
        const std::string next = std::to_string(value + 1), token = std::to_string(fence);
        std::int64_t written = 0;
        try {
          written = detail::as_integer(*fenced_write_script().run(
              *data_, {keys_.epoch, keys_.counter, keys_.fence, keys_.applied}, {epoch, next, token}));
        } catch (const connection_error&) {
          stats_.writes_unknown.fetch_add(1);  // applied or not: the reply was lost
          throw;
        }
        if (written == 1) stats_.writes.fetch_add(1);
        if (written == -1) stats_.epoch_skips.fetch_add(1);
        if (written == 0) {
          const std::int64_t now = now_ns();
          if (now >= valid_until) {
            stats_.stale_rejected.fetch_add(1);
          } else if (in_window(now, &worker_stats::fence_regressions)) {
            // cluster: counted by in_window()
          } else if ((cfg_.masters > 0 || cfg_.cluster) && shared_.master_data_losses.load() > 0) {
            // A token may repeat after a master lost its data (Redlock: restarted empty; cluster:
            // a failover lost increments not yet replicated), until it passes the lost ones.
            stats_.fence_regressions.fetch_add(1);
            if (name_ >= 0) {
              stats_.late_fence_regressions.fetch_add(1);
              shared_.names[name_].window_events.fetch_add(1);
            }
          } else {
            stats_.violations.fetch_add(1);
            if (report_violation())
              std::fprintf(stderr, "torture: VIOLATION (fence) token %llu rejected while its lease was valid\n",
                           static_cast<unsigned long long>(fence));
          }
        }
        leave(epoch, me, valid_until);
        inside = false;
      }
    } catch (const redislock::error&) {
      stats_.errors.fetch_add(1);
    }
    // Never unlock with our marker left behind while our lease is valid: the next holder would
    // take it for an overlap. Retry the leave until it works or our lease is over anyway.
    while (inside && now_ns() < valid_until) {
      try {
        leave(epoch, me, valid_until);
        inside = false;
      } catch (const redislock::error&) {
        std::this_thread::sleep_for(milliseconds(5));
      }
    }
    release(epoch, valid_until);
  }

  // A read hold: our marker joins R, we meet the writer inside (if any), read, leave R, and meet
  // the writer that entered meanwhile (if any). Readers write nothing.
  void read_section(const std::string& epoch, const std::string& me, std::int64_t valid_until) {
    bool inside = true;  // from before the enter call: if its reply is lost, the marker may be in R
    try {
      if (reader_step(epoch, me, valid_until, "enter")) {
        stats_.reads.fetch_add(1);
        data_->command({"GET", keys_.counter});
      }
      reader_step(epoch, me, valid_until, "leave");
      inside = false;
    } catch (const redislock::error&) {
      stats_.errors.fetch_add(1);
    }
    // As for a writer's marker: never leave ours behind while our lease is valid.
    while (inside && now_ns() < valid_until) {
      try {
        reader_step(epoch, me, valid_until, "leave");
        inside = false;
      } catch (const redislock::error&) {
        std::this_thread::sleep_for(milliseconds(5));
      }
    }
  }

  // A semaphore's permit: our marker joins R with the other holders inside; at entering and
  // at leaving we count the certainly-valid ones (ourselves included): more than N is a
  // violation. Semaphore holders write nothing (they overlap by design); each reads C.
  void permit_section(const std::string& epoch, const std::string& me, std::int64_t valid_until) {
    bool inside = true;  // from before the enter call: if its reply is lost, the marker may be in R
    try {
      if (permit_step(epoch, me, "enter")) {
        stats_.reads.fetch_add(1);
        data_->command({"GET", keys_.counter});
      }
      permit_step(epoch, me, "leave");
      inside = false;
    } catch (const redislock::error&) {
      stats_.errors.fetch_add(1);
    }
    while (inside && now_ns() < valid_until) {
      try {
        permit_step(epoch, me, "leave");
        inside = false;
      } catch (const redislock::error&) {
        std::this_thread::sleep_for(milliseconds(5));
      }
    }
  }

  // One permit_script() step; false when the epoch changed. A marker whose lease is over is
  // not inside any more (killed, or stopped past it): removed, so R stays small.
  bool permit_step(const std::string& epoch, const std::string& me, const char* step) {
    reply_ptr r = permit_script().run(*data_, {keys_.epoch, keys_.readers}, {epoch, me, step});
    if (r->type != REDIS_REPLY_ARRAY) {
      stats_.epoch_skips.fetch_add(1);
      return false;
    }
    // Every holder counted was certainly valid at `now` (ourselves only while our lease is).
    const std::int64_t now = now_ns();
    std::int64_t valid = 0;
    std::string others;
    for (std::size_t i = 0; i < r->elements; ++i) {
      const std::string holder = text(*r->element[i]);
      if (marker_valid_until(holder) > now) {
        ++valid;
        if (holder != me) others += " " + holder;
      } else if (holder != me) {
        stats_.stale_overlaps.fetch_add(1);
        data_->command({"SREM", keys_.readers, holder});
      }
    }
    if (valid <= lock_->permits()) return true;
    if (in_window(now, &worker_stats::window_violations)) return true;
    stats_.violations.fetch_add(1);
    if (report_violation())
      std::fprintf(
          stderr, "torture: VIOLATION (%s) pid %d thread %d: %lld certainly-valid holders of %lld permits:%s\n", step,
          ::getpid(), index_, static_cast<long long>(valid), static_cast<long long>(lock_->permits()), others.c_str());
    return true;
  }

  // One reader_script() step; false when the epoch changed (the record was reset under us).
  bool reader_step(const std::string& epoch, const std::string& me, std::int64_t valid_until, const char* step) {
    reply_ptr r = reader_script().run(*data_, {keys_.epoch, keys_.marker, keys_.readers}, {epoch, me, step});
    if (r->type == REDIS_REPLY_INTEGER) {
      stats_.epoch_skips.fetch_add(1);
      return false;
    }
    if (r->len != 0) compare(text(*r), valid_until, step[0] == 'e' ? "reader enter" : "reader leave");
    return true;
  }

  // A writer inside (its marker in M) meets every reader in R. A reader whose lease is over is
  // not inside any more (killed, or stopped past it): its marker is removed, so R stays small.
  void meet_readers(const std::string& epoch, std::int64_t valid_until) {
    reply_ptr r = readers_script().run(*data_, {keys_.epoch, keys_.readers}, {epoch});
    if (r->type != REDIS_REPLY_ARRAY) {
      stats_.epoch_skips.fetch_add(1);
      return;
    }
    for (std::size_t i = 0; i < r->elements; ++i) {
      const std::string reader = text(*r->element[i]);
      compare(reader, valid_until, "enter (a reader inside)");
      if (marker_valid_until(reader) <= now_ns()) data_->command({"SREM", keys_.readers, reader});
    }
  }

  // Afterwards the marker is not ours: cleared, taken over by an intruder, or gone with its epoch.
  void leave(const std::string& epoch, const std::string& me, std::int64_t valid_until) {
    // Once more before M is cleared: a reader that entered before our marker was set and is
    // still inside has not met us (and meets nobody once M is gone), whatever the look after
    // our enter saw or lost.
    if (lock_->has_read_side()) meet_readers(epoch, valid_until);
    reply_ptr r = leave_script().run(*data_, {keys_.epoch, keys_.marker}, {epoch, me});
    if (r->type == REDIS_REPLY_INTEGER) stats_.epoch_skips.fetch_add(1);
    else if (r->len != 0) compare(text(*r), valid_until, "leave");
  }

  void release(const std::string& epoch, std::int64_t valid_until) {
    const release_status s = lock_->unlock();
    if (s == release_status::failed) stats_.errors.fetch_add(1);
    if (s != release_status::lease_expired) return;
    stats_.lease_expired.fetch_add(1);
    if (now_ns() >= valid_until) return;
    // The server says our lease is gone although it cannot have run out: a violation, unless
    // the server restarted (a new epoch) and forgot it.
    try {
      reply_ptr e = data_->command({"GET", keys_.epoch});
      if (e->type == REDIS_REPLY_STRING && text(*e) == epoch) {
        if (cfg_.masters > 0 && shared_.master_fault_events.load() != fault_events_at_) {
          stats_.majority_lost.fetch_add(1);  // a master crashed, stalled or came back during the hold
          return;
        }
        if (in_window(now_ns(), &worker_stats::window_lost)) return;
        stats_.violations.fetch_add(1);
        if (report_violation())
          std::fprintf(stderr, "torture: VIOLATION (release) lease lost before it could run out\n");
      }
    } catch (const redislock::error&) {
      stats_.errors.fetch_add(1);
    }
  }

  const config& cfg_;
  shared_state& shared_;
  worker_stats& stats_;
  keys keys_;
  int index_, name_;
  std::int64_t lease_ns_, margin_ns_;
  std::unique_ptr<torture_lock> lock_;
  connection_options data_options_;
  std::unique_ptr<connection> data_;
  unsigned long seq_ = 0;
  std::uint64_t fault_events_at_ = 0;  // master fault events seen at the current acquisition
};

int run_worker(const config& cfg) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the coordinator
  if (::getppid() == 1) return 1;
  shared_state* state = map_state(cfg.shm, false);
  worker_stats& stats = state->workers[cfg.slot];
  connection_options server;
  server.connect_timeout = milliseconds(1000);
  server.command_timeout = milliseconds(1000);
  lock_options o;
  o.lease = milliseconds(cfg.lease_ms);
  std::vector<std::unique_ptr<client>> servers;  // one per lock server (Redlock: per master)
  std::unique_ptr<cluster_client> cluster;
  std::vector<std::unique_ptr<holder_thread>> holders;  // after the clients: destroyed first
  if (cfg.cluster) {
    cluster_options co;
    for (int port : cfg.lock_ports) {  // every node a seed: any of them may be down
      co.seeds.push_back(server);
      co.seeds.back().port = port;
    }
    co.pool_size = static_cast<std::size_t>(cfg.threads);
    co.pool_wait_timeout = milliseconds(5000);
    cluster = std::make_unique<cluster_client>(co);
    if (cfg.lock_names.empty()) usage("--cluster worker without --lock-names");
    for (int i = 0; i < cfg.threads; ++i) {
      const int name = (cfg.position * cfg.threads + i) % static_cast<int>(cfg.lock_names.size());
      const std::string& kind = cfg.kinds[static_cast<std::size_t>(name / cluster_faults::masters) % cfg.kinds.size()];
      holders.push_back(std::make_unique<holder_thread>(cfg, make_single_lock(kind, *cluster, cfg.lock_names[name], o),
                                                        name, *state, stats, i));
    }
  } else {
    clients locks;
    for (int port : cfg.lock_ports) {
      client_options co;
      co.connection = server;
      co.connection.port = port;
      co.pool_size = static_cast<std::size_t>(cfg.threads);
      co.pool_wait_timeout = milliseconds(5000);
      servers.push_back(std::make_unique<client>(co));
      locks.emplace_back(*servers.back());
    }
    for (int i = 0; i < cfg.threads; ++i)
      holders.push_back(std::make_unique<holder_thread>(cfg, make_lock(cfg.kind, locks, "torture-" + cfg.run_id, o), -1,
                                                        *state, stats, i));
  }
  std::vector<std::thread> threads;
  for (auto& h : holders) threads.emplace_back([&, hp = h.get()] { hp->run(state->stop); });
  for (auto& t : threads) t.join();
  stats.finished.store(1);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Coordinator.

class coordinator {
 public:
  explicit coordinator(config cfg) : cfg_(std::move(cfg)), rng_(std::random_device{}()) {
    cfg_.run_id = detail::random_token().substr(0, 12);
    char path[] = "/tmp/redislock-torture-XXXXXX";
    int fd = ::mkstemp(path);
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    ::close(fd);
    ::unlink(path);
    cfg_.shm = path;
    state_ = map_state(cfg_.shm, true);
    server_ = std::make_unique<redislock_test::redis_server>();  // Redlock mode: the record only
    for (int i = 0; i < cfg_.masters; ++i) masters_.push_back(std::make_unique<redislock_test::redis_server>());
    if (has("proxy")) proxy_ = std::make_unique<redislock_test::tcp_proxy>(server_->port());
    cfg_.data_port = server_->port();
    for (const auto& m : masters_) cfg_.lock_ports.push_back(m->port());
    if (cfg_.cluster) {
      cluster_ = std::make_unique<cluster_faults>(*state_, milliseconds(cfg_.lease_ms), rng_);
      cfg_.lock_ports = cluster_->ports();
      cfg_.lock_names = cluster_->spread_names("t" + cfg_.run_id + "-", cfg_.names);
    } else if (masters_.empty()) {
      cfg_.lock_ports.push_back(proxy_ ? proxy_->port() : server_->port());
    }
    admin_options_ = server_->options();
  }
  ~coordinator() {
    ::munmap(state_, sizeof(shared_state));
    ::unlink(cfg_.shm.c_str());
  }

  int run() {
    const auto start = steady::now();
    const auto end = start + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(cfg_.seconds));
    for (int i = 0; i < cfg_.processes; ++i) spawn(i);
    std::size_t next_fault = 0;
    auto next_fault_at = start + milliseconds(cfg_.fault_every_ms);
    while (steady::now() < end && !target_reached()) {
      reap_unexpected_exits();
      if (!cfg_.faults.empty() && steady::now() >= next_fault_at) {
        const std::string& fault = cfg_.faults[next_fault++ % cfg_.faults.size()];
        inject(fault);
        if (cluster_ && fault != "kill9" && fault != "sigstop") await_cluster_recovery(fault);
        else await_progress();
        next_fault_at = steady::now() + milliseconds(cfg_.fault_every_ms);
      }
      std::this_thread::sleep_for(milliseconds(20));  // pacing of the coordinator only
    }
    if (proxy_) proxy_->set_delay(milliseconds(0));
    state_->stop.store(1);
    for (auto& w : workers_) {
      if (!w.alive) continue;
      const int status = w.process.wait_for(std::chrono::seconds(60));
      if (status != 0) {
        ++unexpected_exits_;
        std::fprintf(stderr, "torture: worker %d ended with status %d at shutdown\n", w.slot, status);
      }
      w.alive = false;
    }
    return report(std::chrono::duration<double>(steady::now() - start).count());
  }

 private:
  struct worker {
    int slot, position;
    redislock_test::child_process process;
    bool alive = true;
  };

  bool has(const std::string& f) const {
    for (const auto& x : cfg_.faults)
      if (x == f) return true;
    return false;
  }

  std::uint64_t total(std::atomic<std::uint64_t> worker_stats::*field) const {
    std::uint64_t sum = 0;
    for (int i = 0; i < next_slot_; ++i) sum += (state_->workers[i].*field).load();
    return sum;
  }
  bool target_reached() const {
    return cfg_.acquisitions != 0 && total(&worker_stats::acquisitions) >= cfg_.acquisitions;
  }

  void spawn(int position) {
    if (next_slot_ >= static_cast<int>(shared_state::max_workers)) throw std::runtime_error("too many workers");
    const int slot = next_slot_++;
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) throw std::runtime_error("readlink /proc/self/exe failed");
    self[n] = 0;
    std::string ports;
    for (int p : cfg_.lock_ports) ports += (ports.empty() ? "" : ",") + std::to_string(p);
    std::vector<std::string> argv = {self,
                                     "--worker",
                                     std::to_string(slot),
                                     "--shm",
                                     cfg_.shm,
                                     "--run-id",
                                     cfg_.run_id,
                                     "--lock-ports",
                                     ports,
                                     "--data-port",
                                     std::to_string(cfg_.data_port),
                                     "--kind",
                                     cfg_.kind,
                                     "--threads",
                                     std::to_string(cfg_.threads),
                                     "--lease-ms",
                                     std::to_string(cfg_.lease_ms),
                                     "--masters",
                                     std::to_string(cfg_.masters)};
    if (cfg_.cluster) {
      std::string names;
      for (const auto& n : cfg_.lock_names) names += (names.empty() ? "" : ",") + n;
      argv.insert(argv.end(), {"--cluster", "--lock-names", names, "--position", std::to_string(position)});
    }
    workers_.push_back(worker{slot, position, redislock_test::child_process(argv)});
  }

  void reap_unexpected_exits() {
    for (auto& w : workers_) {
      if (!w.alive) continue;
      const int status = w.process.wait_for(milliseconds(0));
      if (status < 0) continue;
      w.alive = false;
      ++unexpected_exits_;
      std::fprintf(stderr, "torture: worker %d exited early with status %d\n", w.slot, status);
    }
  }

  // The worker named by the overlap marker, i.e. one inside its critical section right now.
  // The section is short, so look a bounded number of times (no sleeping: the marker is hot).
  worker* current_holder() {
    try {
      if (!admin_) admin_ = std::make_unique<connection>(admin_options_);
      // Cluster mode: any name's marker.
      std::vector<std::string> argv = {"MGET", keys(cfg_.run_id).marker};
      if (cfg_.cluster) {
        argv.resize(1);
        for (std::size_t n = 0; n < cfg_.lock_names.size(); ++n)
          argv.push_back(keys(cfg_.run_id, std::to_string(n)).marker);
      }
      const std::vector<std::string_view> mget(argv.begin(), argv.end());
      // Kinds with a read side: every other look is for a reader inside (single server).
      const bool readers = !cfg_.cluster && std::any_of(cfg_.kinds.begin(), cfg_.kinds.end(), read_side_kind);
      const std::string readers_key = keys(cfg_.run_id).readers;
      for (int i = 0; i < 2000; ++i) {
        reply_ptr r =
            readers && i % 2 == 1 ? admin_->command({"SRANDMEMBER", readers_key, "1"}) : admin_->command(mget);
        for (std::size_t m = 0; m < r->elements; ++m) {
          if (r->element[m]->type != REDIS_REPLY_STRING) continue;
          const long pid = marker_pid(text(*r->element[m]));
          for (auto& w : workers_)
            if (w.alive && w.process.pid() == pid) return &w;
        }
      }
    } catch (const redislock::error&) {
    }
    return nullptr;
  }

  worker& random_worker() {
    std::vector<worker*> alive;
    for (auto& w : workers_)
      if (w.alive) alive.push_back(&w);
    if (alive.empty()) throw std::runtime_error("no worker left");
    return *alive[std::uniform_int_distribution<std::size_t>(0, alive.size() - 1)(rng_)];
  }

  void inject(const std::string& fault) {
    const milliseconds lease(cfg_.lease_ms);
    if (cluster_ && (fault == "failover" || fault == "master-kill9" || fault == "migrate")) {
      bool recovered = false;
      try {
        recovered = cluster_->inject(fault);
      } catch (const redislock::error& e) {
        std::fprintf(stderr, "torture: %s failed: %s\n", fault.c_str(), e.what());
      }
      if (!recovered) {
        ++stalls_;
        std::fprintf(stderr, "torture: the cluster did not recover from %s\n", fault.c_str());
      }
    } else if (fault == "kill9") {
      worker* w = current_holder();
      if (!w) w = &random_worker();
      w->process.signal(SIGKILL);
      w->process.wait_for(std::chrono::seconds(10));
      w->alive = false;
      spawn(w->position);  // keep --processes workers running, on the same names
    } else if (fault == "restart") {
      server_->restart();
    } else if (fault == "client-kill") {
      connection admin(admin_options_);
      admin.command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
    } else if (fault == "sigstop") {
      worker* w = current_holder();
      if (!w) w = &random_worker();
      w->process.signal(SIGSTOP);
      std::this_thread::sleep_for(lease + lease / 2);  // past its lease
      w->process.signal(SIGCONT);
    } else if (fault == "master-kill9" || fault == "master-kill9x2" || fault == "master-restart") {
      master_outage(random_masters(fault == "master-kill9x2" ? 2 : 1), fault != "master-restart");
    } else if (fault == "master-sigstop") {
      redislock_test::redis_server& m = *masters_[random_masters(1).front()];
      state_->master_fault_events.fetch_add(1);
      m.pause();
      std::this_thread::sleep_for(lease + lease / 2);  // far past the per-instance timeout, and the lease
      m.resume();
      state_->master_fault_events.fetch_add(1);
    } else if (fault == "proxy") {
      // In turn: latency for a while, all connections cut, new connections refused for a while.
      const std::uint64_t step = counts_[fault] % 3;
      if (step == 0) {
        proxy_->set_delay(milliseconds(std::uniform_int_distribution<int>(2, 30)(rng_)));
        std::this_thread::sleep_for(milliseconds(cfg_.fault_every_ms / 2));
        proxy_->set_delay(milliseconds(0));
      } else if (step == 1) {
        proxy_->cut_all();
      } else {
        proxy_->set_refusing(true);
        std::this_thread::sleep_for(milliseconds(200));
        proxy_->set_refusing(false);
      }
    }
    ++counts_[fault];
    ++faults_;
  }

  std::vector<std::size_t> random_masters(std::size_t n) {
    std::vector<std::size_t> all(masters_.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    std::shuffle(all.begin(), all.end(), rng_);
    all.resize(n);
    return all;
  }

  // Masters crash (kill -9) or stop, stay down for --restart-delay-ms and come back empty. The
  // delay is the restart rule of README "Redlock": a master that lost its keys may rejoin only
  // after a lease has passed, when every key it held has run out anyway (with a shorter delay a
  // holder's majority can lose a member that then votes for a second holder). While down, the
  // others must carry on when they are a majority (counted in outage_acquisitions).
  void master_outage(const std::vector<std::size_t>& which, bool crash) {
    state_->master_fault_events.fetch_add(1);
    state_->master_data_losses.fetch_add(which.size());
    for (std::size_t i : which) crash ? masters_[i]->kill() : masters_[i]->stop();
    const std::uint64_t before = total(&worker_stats::acquisitions);
    std::this_thread::sleep_for(milliseconds(cfg_.restart_delay_ms));
    if (masters_.size() - which.size() >= masters_.size() / 2 + 1)
      outage_acquisitions_ += total(&worker_stats::acquisitions) - before;
    for (std::size_t i : which) masters_[i]->start_again();
    state_->master_fault_events.fetch_add(1);
  }

  // Cluster mode, after a cluster fault: every lock name must be acquired again within
  // --max-recovery-ms of the fault's start.
  void await_cluster_recovery(const std::string& fault) {
    const long long ms = cluster_->await_recovery(milliseconds(cfg_.max_recovery_ms));
    if (ms < 0 || ms > cfg_.max_recovery_ms) {
      ++stalls_;
      std::fprintf(stderr, "torture: some lock name not acquired within %ld ms of a %s\n", cfg_.max_recovery_ms,
                   fault.c_str());
      return;
    }
    recovery_ms_[fault].push_back(ms);
    if (fault != "migrate") promotion_ms_[fault].push_back(cluster_->last_promotion_ms());
  }

  // After a fault, the survivors must acquire again within a few leases.
  void await_progress() {
    const std::uint64_t before = total(&worker_stats::acquisitions);
    const auto deadline = steady::now() + milliseconds(cfg_.lease_ms * 3) + std::chrono::seconds(20);
    while (steady::now() < deadline) {
      if (total(&worker_stats::acquisitions) > before) return;
      std::this_thread::sleep_for(milliseconds(5));
    }
    ++stalls_;
    std::fprintf(stderr, "torture: no progress after a fault\n");
  }

  int report(double seconds) {
    long long counter = 0, applied = 0, lost = 0, window_lost_updates = 0;
    bool read_ok = true;
    try {
      connection admin(admin_options_);
      auto number = [&](const std::string& key) {
        reply_ptr r = admin.command({"GET", key});
        return r->type == REDIS_REPLY_NIL ? 0LL : std::stoll(text(*r));
      };
      // Lost updates: each counter must equal the writes the server applied to it in the final
      // epoch. Cluster mode: on a name where holders met inside a failover window, the overlap
      // may have lost updates: counted apart.
      const std::size_t records = cfg_.cluster ? cfg_.lock_names.size() : 1;
      for (std::size_t n = 0; n < records; ++n) {
        const keys k(cfg_.run_id, cfg_.cluster ? std::to_string(n) : "");
        const long long c = number(k.counter), a = number(k.applied);
        counter += c;
        applied += a;
        (cfg_.cluster && state_->names[n].window_events.load() > 0 ? window_lost_updates : lost) += std::llabs(a - c);
      }
    } catch (const std::exception& e) {
      read_ok = false;
      std::fprintf(stderr, "torture: cannot read the final state: %s\n", e.what());
    }
    const std::uint64_t reads = total(&worker_stats::reads);
    const bool read_side = std::any_of(cfg_.kinds.begin(), cfg_.kinds.end(), read_side_kind);
    const std::uint64_t acquisitions = total(&worker_stats::acquisitions), writes = total(&worker_stats::writes),
                        unknown = total(&worker_stats::writes_unknown), violations = total(&worker_stats::violations);
    // Without a restart, every confirmed write is among the applied ones (killed workers may have
    // had one write in flight per thread; a lost reply may or may not have applied).
    auto count = [&](const char* f) { return counts_.count(f) ? static_cast<long long>(counts_.at(f)) : 0LL; };
    const bool restarted = count("restart") > 0;
    const long long in_flight = count("kill9") * cfg_.threads + static_cast<long long>(unknown);
    if (!restarted && read_ok) {
      if (applied < static_cast<long long>(writes)) lost += static_cast<long long>(writes) - applied;
      if (applied > static_cast<long long>(writes) + in_flight)
        lost += applied - static_cast<long long>(writes) - in_flight;
    }
    std::string fault_list;
    for (const auto& [name, n] : counts_)
      fault_list += (fault_list.empty() ? "" : " ") + name + "=" + std::to_string(n);
    const bool pass = read_ok && violations == 0 && lost == 0 && stalls_ == 0 && unexpected_exits_ == 0 &&
                      acquisitions > 0 && faults_ >= cfg_.min_faults && (reads > 0 || !read_side);
    std::string redlock_fields;  // Redlock mode: the masters and what their faults cost
    if (!masters_.empty())
      redlock_fields = " masters=" + std::to_string(masters_.size()) +
                       " restart_delay_ms=" + std::to_string(cfg_.restart_delay_ms) +
                       " outage_acquisitions=" + std::to_string(outage_acquisitions_) +
                       " majority_lost=" + std::to_string(total(&worker_stats::majority_lost)) +
                       " fence_regressions=" + std::to_string(total(&worker_stats::fence_regressions));
    if (cluster_) redlock_fields = cluster_fields(window_lost_updates);
    std::printf(
        "torture: kind=%s%s processes=%d threads=%d lease_ms=%ld seconds=%.1f acquisitions=%llu%s writes=%llu "
        "faults=%llu (%s) stale_rejected=%llu stale_overlaps=%llu lease_expired=%llu epoch_skips=%llu errors=%llu "
        "stalls=%llu unexpected_exits=%llu counter=%lld applied=%lld violations=%llu lost_updates=%lld %s\n",
        cfg_.kind.c_str(), redlock_fields.c_str(), cfg_.processes, cfg_.threads, cfg_.lease_ms, seconds,
        (unsigned long long)acquisitions, read_side ? (" reads=" + std::to_string(reads)).c_str() : "",
        (unsigned long long)writes, (unsigned long long)faults_, fault_list.empty() ? "none" : fault_list.c_str(),
        (unsigned long long)total(&worker_stats::stale_rejected),
        (unsigned long long)total(&worker_stats::stale_overlaps),
        (unsigned long long)total(&worker_stats::lease_expired), (unsigned long long)total(&worker_stats::epoch_skips),
        (unsigned long long)total(&worker_stats::errors), (unsigned long long)stalls_,
        (unsigned long long)unexpected_exits_, counter, applied, (unsigned long long)violations, lost,
        pass ? "PASS" : "FAIL");
    std::fflush(stdout);
    return pass ? 0 : 1;
  }

  // Cluster mode: what the failover faults cost, and how long recovery took.
  std::string cluster_fields(long long window_lost_updates) const {
    auto list = [](const std::map<std::string, std::vector<long long>>& by_fault) {
      std::string out;
      for (const auto& [fault, ms] : by_fault) {
        if (ms.empty()) continue;
        long long sum = 0;
        for (long long m : ms) sum += m;
        out += " " + fault + ":mean=" + std::to_string(sum / static_cast<long long>(ms.size())) +
               ",max=" + std::to_string(*std::max_element(ms.begin(), ms.end()));
      }
      return out.empty() ? std::string(" none") : out;
    };
    std::string names;
    for (std::size_t n = 0; n < cfg_.lock_names.size(); ++n)
      names += (names.empty() ? "" : ",") + std::to_string(state_->names[n].acquisitions.load());
    return " cluster=3+3 names=" + std::to_string(cfg_.lock_names.size()) + " name_acquisitions=" + names +
           " windows=" + std::to_string(cluster_->windows()) + " window_ms=" + std::to_string(cluster_->window_ms()) +
           " window_violations=" + std::to_string(total(&worker_stats::window_violations)) +
           " window_lost=" + std::to_string(total(&worker_stats::window_lost)) +
           " fence_regressions=" + std::to_string(total(&worker_stats::fence_regressions)) +
           " fence_regressions_after_window=" + std::to_string(total(&worker_stats::late_fence_regressions)) +
           " window_lost_updates=" + std::to_string(window_lost_updates) + " promotion_ms=(" +
           list(promotion_ms_).substr(1) + ") recovery_ms=(" + list(recovery_ms_).substr(1) + ")";
  }

  config cfg_;
  std::mt19937 rng_;
  shared_state* state_ = nullptr;
  std::unique_ptr<redislock_test::redis_server> server_;                // Redlock mode: the record only
  std::vector<std::unique_ptr<redislock_test::redis_server>> masters_;  // Redlock mode: the lock
  std::unique_ptr<redislock_test::tcp_proxy> proxy_;
  std::unique_ptr<cluster_faults> cluster_;  // cluster mode: the lock's cluster and its faults
  std::map<std::string, std::vector<long long>> promotion_ms_, recovery_ms_;  // per cluster fault
  connection_options admin_options_;
  std::unique_ptr<connection> admin_;
  std::vector<worker> workers_;
  int next_slot_ = 0;
  std::map<std::string, std::uint64_t> counts_;
  std::uint64_t faults_ = 0, stalls_ = 0, unexpected_exits_ = 0, outage_acquisitions_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    config cfg = parse(argc, argv);
    if (cfg.slot >= 0) return run_worker(cfg);
    coordinator c(std::move(cfg));
    return c.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redislock_torture: %s\n", e.what());
    return 1;
  }
}
