// redislock_model — a randomized, seeded property checker for redislock's locks.
//
//   redislock_model [--topology single|redlock|sentinel|cluster] [--seed N] [--runs K] [--seconds S]
//                   [--threads 4] [--names 2] [--ops 30] [--lease-ms 500] [--no-faults]
//                   [--kind mutex|fair_mutex|reentrant|shared|redlock|semaphore|async_mutex|
//                           election|broken_stealing|broken_optimistic|broken_deaf|
//                           broken_redlock_extend|broken_semaphore|broken_unrenewed|
//                           broken_never_lost|broken_async_extend]
//                   [--no-extend-shorter] [--slack-ms 150] [--shrink-seconds 120] [--reruns 3]
//                   [--stop-on-finding] [--verbose] [--run-timeout-seconds 120] [--repeat 1]
//                   [--mixed-kinds] [--processes 0]
//   redislock_model --seed N --replay [--keep t0.1,t0.2,f3]     (one run, every call printed)
//
// Each run generates a history from its seed (history.hpp): per thread a list of operations on
// --names lock names (each name one kind, drawn from the seed unless --kind), and a list of
// faults. It starts the servers once (single: one redis-server; redlock: 3 masters; sentinel:
// a master, its replica and 3 sentinels; cluster: 3 masters with a replica each), and per run
// gives each thread its own client(s), on one server and Redlock behind its own fault-injecting
// proxy (one per server: harness/tcp_proxy.hpp), runs the threads and the fault thread (and
// --processes crash workers: crash_workers.hpp) together, records every call (start, end,
// outcome), then checks the invariants (checks.hpp; docs/testing.md, "The model checker"):
//   overlap     no two certainly-valid holds of one name overlap (exclusive; reader vs writer;
//               a semaphore: no more than its permits at once);
//   optimism    remaining_lease()/validity() = r of a hold with owns_lock() && !lost(): an
//               independent direct connection, right after, finds at least r - eps left on the
//               server (Redlock: on a majority), eps = time from the call's start to the end of
//               the look + 2 ms; else the hold is lost() by then, or revoked (force_release,
//               master data loss, a failover that may lose writes);
//   early_loss  the server never answers "not yours" (extend false, still_held false,
//               release lease_expired) to a hold before its certain bound ends;
//   lease_clock every hold seen with owns_lock() && !lost() (after each of its calls): without
//               auto_renew it has a lease_confirmed_until(), no later than the end of its last
//               confirmed acquisition or extend + that lease; with or without renewal, once
//               lease_confirmed_until() has passed lost() is true, and (after remaining,
//               still_held and pause) the server, looked at right after on an independent
//               connection, keeps the lease at least until lease_confirmed_until() - 2 ms
//               (Redlock: a majority), unless the hold is lost() by then or revoked;
//   extreme     a third of the lock() calls are try_lock_for(max()) of several periods (the
//               election first waits for a change with wait_for_change_for(max())), which must
//               never return false; a third of the try_lock() calls try_lock_for(0), held to
//               try_lock's deadline (subjects.hpp, extreme_variant);
//   fence       tokens of certainly-valid holds of one name increase with time;
//   deadline    every call returns within its deadline (try_lock_for) + slack, every other
//               call (but lock()) within the slack: connect + command timeout + --slack-ms;
//   leak        after the run every key has an expiry, and within 3 leases + wait_lease all
//               are gone but the fencing counters;
//   wrong_type  (--mixed-kinds) wrong_type_error only while another kind may hold the name.
// Overlaps that only a failover losing unreplicated writes explains are counted apart
// (failover_overlaps), not findings: replication is asynchronous.
// A run prints its seed and one summary line; a failing run is shrunk (drop faults, threads,
// then ops, delta debugging; each candidate rerun up to --reruns times, since thread timing
// differs from run to run) and its shortest failing history printed with the command that
// replays it. Exit status: 0 when every run passed.
#include "checks.hpp"
#include "command_monitor.hpp"
#include "crash_workers.hpp"
#ifdef REDISLOCK_MODEL_ASYNC
#include "async_subject.hpp"
#endif
#include "history.hpp"
#include "redis_cluster.hpp"
#include "redis_server.hpp"
#include "sentinel_topology.hpp"
#include "subjects.hpp"
#include "tcp_proxy.hpp"

#include <redislock/redislock.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace redislock_model;
using redislock_test::redis_cluster;
using redislock_test::redis_server;
using redislock_test::sentinel_topology;
using redislock_test::tcp_proxy;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

namespace {

struct config {
  std::uint64_t seed = 0;
  bool seed_given = false;
  int runs = 1;
  int repeat = 1;      // runs of each seed (a replay's timing differs from run to run)
  double seconds = 0;  // 0: no time budget (--runs only)
  history_shape shape;
  std::string forced_kind;
  bool mixed_kinds = false;  // each thread draws its own kind per name (one server, Sentinel, Cluster)
  long slack_ms = 150;
  double shrink_seconds = 120;
  int reruns = 3;
  bool replay = false;
  std::set<std::string> keep;
  bool keep_given = false;
  bool verbose = false;
  bool stop_on_finding = false;      // end the series at the first failing seed (once shrunk)
  double run_timeout_seconds = 120;  // a run taking longer hung: the process ends (exit 3)
  milliseconds connect_timeout{200}, command_timeout{200};
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "redislock_model: %s\nsee the comment at the top of tests/model/model.cpp\n", why.c_str());
  std::exit(2);
}

kind kind_named(const std::string& s) {
  for (kind k :
       {kind::mutex, kind::fair_mutex, kind::reentrant, kind::shared, kind::redlock, kind::semaphore, kind::async_mutex,
        kind::election, kind::broken_stealing, kind::broken_optimistic, kind::broken_deaf, kind::broken_redlock_extend,
        kind::broken_semaphore, kind::broken_unrenewed, kind::broken_never_lost, kind::broken_async_extend})
    if (s == to_string(k)) return k;
  usage("unknown kind " + s);
}

config parse(int argc, char** argv) {
  config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value for " + a);
      return argv[++i];
    };
    if (a == "--topology") {
      const std::string t = value();
      bool known = false;
      for (topology w : {topology::single, topology::redlock, topology::sentinel, topology::cluster})
        if (t == to_string(w)) c.shape.where = w, known = true;
      if (!known) usage("topology must be single, redlock, sentinel or cluster");
    } else if (a == "--seed") {
      c.seed = std::stoull(value());
      c.seed_given = true;
    } else if (a == "--runs") c.runs = std::stoi(value());
    else if (a == "--repeat") c.repeat = std::stoi(value());
    else if (a == "--seconds") c.seconds = std::stod(value());
    else if (a == "--threads") c.shape.threads = std::stoi(value());
    else if (a == "--names") c.shape.names = std::stoi(value());
    else if (a == "--ops") c.shape.ops = std::stoi(value());
    else if (a == "--lease-ms") c.shape.lease_ms = std::stol(value());
    else if (a == "--no-faults") c.shape.faults = false;
    else if (a == "--kind") c.forced_kind = value();
    else if (a == "--mixed-kinds") c.mixed_kinds = true;
    else if (a == "--processes") c.shape.processes = std::stoi(value());
    else if (a == "--no-extend-shorter") c.shape.extend_shorter = false;
    else if (a == "--slack-ms") c.slack_ms = std::stol(value());
    else if (a == "--shrink-seconds") c.shrink_seconds = std::stod(value());
    else if (a == "--reruns") c.reruns = std::stoi(value());
    else if (a == "--replay") c.replay = true;
    else if (a == "--verbose") c.verbose = true;
    else if (a == "--stop-on-finding") c.stop_on_finding = true;
    else if (a == "--run-timeout-seconds") c.run_timeout_seconds = std::stod(value());
    else if (a == "--keep") {
      c.keep_given = true;
      std::stringstream s(value());
      for (std::string item; std::getline(s, item, ',');)
        if (!item.empty()) c.keep.insert(item);
    } else usage("unknown argument " + a);
  }
  if (c.shape.threads < 1 || c.shape.threads > 16 || c.shape.names < 1 || c.shape.names > 8 || c.shape.ops < 1 ||
      c.shape.lease_ms < 100 || c.runs < 1 || c.repeat < 1)
    usage("bad --threads/--names/--ops/--lease-ms/--runs");
  if (!c.forced_kind.empty()) {
    const kind k = kind_named(c.forced_kind);
    if (is_redlock(k) != (c.shape.where == topology::redlock))
      usage("kind " + c.forced_kind + (is_redlock(k) ? " needs --topology redlock" : " does not run on Redlock"));
    if (is_broken(k) && c.shape.where != topology::single && c.shape.where != topology::redlock)
      usage("the broken kinds run on one server or Redlock");
    if (is_async(k) && c.shape.where != topology::single)
      usage("the async mutex runs on one server (async_client has no Sentinel or Cluster variant)");
#ifndef REDISLOCK_MODEL_ASYNC
    if (is_async(k)) usage("this redislock_model was built without asio: no async_mutex");
#endif
  }
  if (c.replay && !c.seed_given) usage("--replay needs --seed");
  if (c.shape.processes < 0 || c.shape.processes > 8 ||
      (c.shape.processes > 0 &&
       (c.shape.where != topology::single || (!c.forced_kind.empty() && is_broken(kind_named(c.forced_kind))))))
    usage("--processes: 0 to 8 crash workers, on one server, with the library's kinds");
  if (c.mixed_kinds && (!c.forced_kind.empty() || c.shape.where == topology::redlock))
    usage("--mixed-kinds draws the kinds: not with --kind or on Redlock");
  if (!c.seed_given) c.seed = std::random_device{}() % 1000000;
  c.shape.restart_delay_ms = c.shape.lease_ms + c.shape.lease_ms / 10;  // README, "Redlock": at least a lease
  return c;
}

/// The kinds of the names of `seed`'s run (forced, or drawn from the seed).
std::vector<kind> kinds_for(const config& c, std::uint64_t seed) {
  std::vector<kind> out;
  std::mt19937_64 rng(seed * 7919 + 17);
  const std::vector<kind> single = {kind::mutex, kind::fair_mutex, kind::reentrant, kind::shared};
  // Mixed kinds: every kind that may share a name (each refuses the others' keys with
  // wrong_type_error; the async mutex shares the mutex's key and excludes it) on that topology.
  std::vector<kind> mixed = {kind::mutex,  kind::fair_mutex, kind::reentrant,
                             kind::shared, kind::semaphore,  kind::election};
#ifdef REDISLOCK_MODEL_ASYNC
  if (c.shape.where == topology::single) mixed.push_back(kind::async_mutex);
#endif
  for (int n = 0; n < c.shape.names; ++n) {
    if (!c.forced_kind.empty()) out.push_back(kind_named(c.forced_kind));
    else if (c.shape.where == topology::redlock) out.push_back(kind::redlock);
    else out.push_back(single[std::uniform_int_distribution<std::size_t>(0, single.size() - 1)(rng)]);
  }
  if (!c.mixed_kinds) return out;
  // Every thread its own kind on each name: the kinds share the name's key.
  out.clear();
  for (int i = 0; i < c.shape.threads * c.shape.names; ++i)
    out.push_back(mixed[std::uniform_int_distribution<std::size_t>(0, mixed.size() - 1)(rng)]);
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string name_of(int n) { return "n" + std::to_string(n); }

// ---------------------------------------------------------------------------------------------
// The servers (kept across runs) and one run's proxies, clients, threads and faults.

class servers {
 public:
  explicit servers(const config& c) : where(c.shape.where) {
    const std::vector<std::string> debug = {"--enable-debug-command", "yes"};
    // A killed master comes back as a replica and needs a full sync before the next fault;
    // Redis waits 5 s by default for more replicas to share a diskless one.
    std::vector<std::string> replicated = debug;
    replicated.insert(replicated.end(), {"--repl-diskless-sync-delay", "0"});
    if (where == topology::sentinel) sentinel = std::make_unique<sentinel_topology>(replicated);
    else if (where == topology::cluster) cluster = std::make_unique<redis_cluster>(c.shape.masters, 1, replicated);
    else
      for (int i = 0; i < (where == topology::redlock ? c.shape.masters : 1); ++i)
        list.push_back(std::make_unique<redis_server>(debug));
  }

  /// The data masters now (with credentials): what server faults and the leak check act on.
  std::vector<redislock::connection_options> masters() const {
    std::vector<redislock::connection_options> out;
    if (sentinel) {
      const int m = sentinel->master();
      if (m >= 0) out.push_back(sentinel->node_options(m));
    } else if (cluster) {
      for (int port : cluster->masters_by_role()) out.push_back(cluster->node_on(port).options());
    } else {
      for (const auto& s : list) out.push_back(s->options());
    }
    return out;
  }
  static redislock::connection admin(redislock::connection_options o, milliseconds timeout = milliseconds(5000)) {
    o.command_timeout = timeout;
    return redislock::connection(o);
  }

  /// Runs a failover or a slot move to its end: the topology serves again, every node up and
  /// agreeing. "" when done, else why not (within 30 s per step).
  std::string topology_fault(const fault& f) {
    const auto bound = std::chrono::seconds(30);
    try {
      if (sentinel) {
        if (!sentinel->wait_healthy(bound)) return "not healthy before the fault";
        const int m = sentinel->master();
        if (f.kind == fault_kind::failover) {
          // A sentinel refuses while it still sees the replica as unfit (NOGOODSLAVE: just
          // resynced after the last fault) or a failover in progress (INPROG): asked again.
          std::string refused;
          int round = 0;
          const bool asked = redis_cluster::poll_until(
              [&] {
                try {
                  redislock::connection(sentinel->sentinel_options(round++ % 3))
                      .command({"SENTINEL", "FAILOVER", sentinel_topology::service});
                  return true;
                } catch (const redislock::error& e) {
                  refused = e.what();
                  throw;
                }
              },
              steady::now() + bound);
          if (!asked) return "no sentinel took SENTINEL FAILOVER: " + refused;
        } else {
          sentinel->node(m).kill();
        }
        if (!redis_cluster::poll_until([&] { return sentinel->master() == 1 - m; }, steady::now() + bound))
          return "the replica was not promoted";
        if (f.kind == fault_kind::master_kill) sentinel->restart_as_replica(m);
        return sentinel->wait_healthy(bound) ? "" : "not healthy after the fault";
      }
      const auto ports = cluster->masters();
      const int master = ports.at(first_bit(f.subset) % ports.size());
      if (f.kind == fault_kind::migrate) {
        if (!cluster->wait_until_stable(bound)) return "not stable before the move: " + cluster->unstable_because();
        redislock::lock_options o;
        o.key_prefix = "model:";
        const int slot = redislock::detail::key_slot(redislock::detail::base_key(name_of(f.thread), o));
        const auto live = cluster->masters();  // settled now
        const int from = cluster->master_of(slot);
        const std::size_t at = static_cast<std::size_t>(std::find(live.begin(), live.end(), from) - live.begin());
        const int to = live.at((at + static_cast<std::size_t>(f.dir)) % live.size());
        // A node may refuse a step for a moment (CLUSTERDOWN while another marks a busy peer as
        // failing): the move is taken up again from the slot's owner then.
        if (std::string why = cluster->move_slot_to(slot, to, bound); !why.empty()) return why;
      } else {
        if (!redis_cluster::poll_until([&] { return cluster->replicas_linked(); }, steady::now() + bound))
          return "a replica not linked before the fault";
        if (f.kind == fault_kind::failover) {
          if (!redis_cluster::manual_failover(cluster->replica_of(master), bound))
            return "the replica was not promoted";
        } else {
          redis_server& victim = cluster->node_on(master);
          victim.kill();
          const bool promoted =
              redis_cluster::poll_until([&] { return !cluster->serves_slots(master); }, steady::now() + bound);
          victim.start_again();  // rejoins as its successor's replica (nodes.conf kept), empty
          if (!promoted) return "no replica was promoted";
        }
      }
      return cluster->wait_until_stable(bound) ? "" : "not stable after the fault: " + cluster->unstable_because();
    } catch (const std::exception& e) {
      return e.what();
    }
  }

  /// "" when the set-up serves as it did at the start (Sentinel healthy, the cluster settled),
  /// else why not (after up to 30 s).
  std::string unsettled() {
    if (sentinel && !sentinel->wait_healthy(std::chrono::seconds(30))) return "the Sentinel set-up is not healthy";
    if (cluster && !cluster->wait_until_stable(std::chrono::seconds(30)))
      return "the cluster is not settled: " + cluster->unstable_because();
    return {};
  }

  topology where;
  std::vector<std::unique_ptr<redis_server>> list;  // one server, Redlock masters
  std::unique_ptr<sentinel_topology> sentinel;
  std::unique_ptr<redis_cluster> cluster;

 private:
  static std::size_t first_bit(unsigned subset) {
    std::size_t i = 0;
    while (subset > 1 && !(subset & 1u)) subset >>= 1, ++i;
    return i;
  }
};

/// One thread's way to the servers: a client per server (one server, Redlock: through the
/// thread's proxies), or one sentinel_client or cluster_client.
struct thread_clients {
  std::vector<std::unique_ptr<redislock::client>> plain;
#ifdef REDISLOCK_MODEL_ASYNC
  std::unique_ptr<redislock::async_client> async;  // the async mutex's (one server), on run::async_
#endif
  std::unique_ptr<redislock::sentinel_client> sentinel;
  std::unique_ptr<redislock::cluster_client> cluster;

  /// f(the client the public kinds use).
  template <class F>
  auto with(F&& f) {
    if (sentinel) return f(*sentinel);
    if (cluster) return f(*cluster);
    return f(*plain.front());
  }
};

std::string type_of(const std::exception& e) {
  if (dynamic_cast<const redislock::timeout_error*>(&e)) return "timeout_error";
  if (dynamic_cast<const redislock::connection_error*>(&e)) return "connection_error";
  if (dynamic_cast<const redislock::lock_error*>(&e)) return "lock_error";
  if (dynamic_cast<const redislock::invalid_argument*>(&e)) return "invalid_argument";
  if (dynamic_cast<const redislock::wrong_type_error*>(&e)) return "wrong_type_error";
#ifdef REDISLOCK_MODEL_ASYNC
  if (dynamic_cast<const async_server_error*>(&e)) return "server_error";
#endif
  if (dynamic_cast<const redislock::reply_error*>(&e)) return "reply_error";
  if (dynamic_cast<const redislock::error*>(&e)) return "error";
  return std::string("std::exception(") + e.what() + ")";
}

class run {
 public:
  run(const config& cfg, servers& srv, const history& h, std::uint64_t seed)
      : cfg_(cfg), srv_(srv), h_(h), seed_(seed), lease_ns_(cfg.shape.lease_ms * 1000000LL) {
    kinds_ = kinds_for(cfg, seed);
    const std::size_t n = h.threads.size();
    proxies_.resize(n);
    clients_.resize(n);
    observers_.resize(n);
    for (std::size_t t = 0; t < n; ++t) {
      if (srv.sentinel) {
        redislock::sentinel_options o = redislock::parse_sentinel_uri(srv.sentinel->uri());
        o.connection.connect_timeout = cfg.connect_timeout;
        o.connection.command_timeout = cfg.command_timeout;
        o.pool_wait_timeout = cfg.command_timeout;
        clients_[t].sentinel = std::make_unique<redislock::sentinel_client>(o);
        observers_[t].sentinel =
            std::make_unique<redislock::sentinel_client>(redislock::parse_sentinel_uri(srv.sentinel->uri()));
      }
      if (srv.cluster) {
        redislock::cluster_options o;
        for (std::size_t i = 0; i < srv.cluster->size(); ++i) o.seeds.push_back(srv.cluster->node(i).options());
        redislock::cluster_options direct = o;
        for (auto& seed : o.seeds)
          seed.connect_timeout = cfg.connect_timeout, seed.command_timeout = cfg.command_timeout;
        o.pool_wait_timeout = cfg.command_timeout;
        o.retry_timeout = milliseconds(cluster_retry_ms);
        clients_[t].cluster = std::make_unique<redislock::cluster_client>(o);
        observers_[t].cluster = std::make_unique<redislock::cluster_client>(direct);
      }
      for (std::size_t s = 0; s < srv.list.size(); ++s) {
        proxies_[t].push_back(
            std::make_unique<tcp_proxy>(srv.list[s]->port(), static_cast<unsigned>(seed * 31 + t * 7 + s)));
        redislock::client_options o;
        o.connection = srv.list[s]->options();
        o.connection.port = proxies_[t].back()->port();
        o.connection.connect_timeout = cfg.connect_timeout;
        o.connection.command_timeout = cfg.command_timeout;
        o.pool_wait_timeout = cfg.command_timeout;
        clients_[t].plain.push_back(std::make_unique<redislock::client>(o));
        redislock::client_options direct;
        direct.connection = srv.list[s]->options();
        direct.connection.command_timeout = milliseconds(3000);
        observers_[t].plain.push_back(std::make_unique<redislock::client>(direct));
      }
#ifdef REDISLOCK_MODEL_ASYNC
      if (std::count_if(kinds_.begin(), kinds_.end(), is_async) > 0) {
        if (!async_) async_ = std::make_unique<async_runtime>();
        redislock::async_client_options o;
        o.connection = clients_[t].plain.front()->options().connection;  // through the thread's proxy
        clients_[t].async = std::make_unique<redislock::async_client>(async_->executor(), o);
      }
#endif
    }
  }

  run_log& execute() {
    for (int w = 0; w < cfg_.shape.processes; ++w) start_worker(w);
    t0_ = now_ns();
    current_.assign(h_.threads.size(), "starting");
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < h_.threads.size(); ++t) threads.emplace_back([this, t] { thread_body(t); });
    std::thread faults([this] { fault_body(); });
    std::thread heartbeat([this] { heartbeat_body(); });
    std::thread roles([this] { sentinel_roles_body(); });
    for (auto& t : threads) t.join();
    {
      std::lock_guard<std::mutex> g(m_);
      done_ = true;
    }
    cv_.notify_all();
    faults.join();
    heartbeat.join();
    roles.join();
    // The next run starts from a settled set-up (after an unplanned failover too).
    if (srv_.sentinel && !srv_.sentinel->wait_healthy(std::chrono::seconds(30)))
      log_.findings.push_back({"crash", "the Sentinel set-up is not healthy after the run"});
    record_workers();
    judge_deadlines();
    for (const auto& [a, b] : starved_) log_.busy.push_back({-1, a, b, -1, false});  // no waiter could act
    proxies_.clear();  // late requests still queued in a proxy are dropped with it
    check_overlaps(log_, t0_);
    log_.failover_overlaps = count_failover_overlaps(log_);
    check_fences(log_, t0_, data_loss_);
    // A waiter wakes on the release's notice, or at the holder's lease as it saw it, or after
    // recheck_interval (Redlock: retry_max) at the latest, then needs one round trip.
    name_faults_in_calls();
    check_liveness(log_, t0_, (recheck_ms + cfg_.command_timeout.count() + cfg_.slack_ms) * 1000000LL,
                   [this](int thread, int name) {
                     return is_semaphore(kind_of(static_cast<std::size_t>(thread), name)) ? semaphore_permits : 0;
                   });
    check_wrong_type();
    check_leaks();
    return log_;
  }

  std::int64_t t0() const { return t0_; }

 private:
  redislock::lock_options options_for(kind k, bool auto_renew) const {
    redislock::lock_options o;
    o.lease = milliseconds(cfg_.shape.lease_ms);
    o.key_prefix = "model:";
    o.auto_renew = auto_renew;
    if (!is_redlock(k)) {
      o.wait_lease = milliseconds(wait_lease_ms);
      o.recheck_interval = milliseconds(recheck_ms);  // the liveness bound's main term
    }
    return o;
  }

  clients clients_of(std::size_t t) {
    clients cs;
    for (auto& c : clients_[t].plain) cs.push_back(*c);
    return cs;
  }

  void add_finding(const std::string& invariant, const std::string& detail) {
    std::lock_guard<std::mutex> g(m_);
    log_.findings.push_back({invariant, detail});
  }

  std::string at(std::int64_t ns) const {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f ms", ms_of(ns - t0_));
    return b;
  }

  // ---- the threads ----------------------------------------------------------------------

  struct slot {
    std::unique_ptr<subject> s;
    bool auto_renew = false;
    int hold = -1;  // index in log_.holds while held
    // The end of the last confirmed call that set the lease (acquisition, extend, nested
    // acquisition) + that lease: no lease_confirmed_until() without renewal may be later.
    std::int64_t clock_bound_ns = 0;
  };

  void thread_body(std::size_t t) {
    std::vector<slot> slots(static_cast<std::size_t>(cfg_.shape.names));
    for (op o : h_.threads[t]) {
      slot& sl = slots[static_cast<std::size_t>(o.name)];
      if (!sl.s && o.kind != op_kind::force_release) sl.s = make(t, o.name, false);
      // lock() only while this thread holds nothing: two threads each holding one name (with
      // auto_renew) and waiting for the other's would wait forever. A shortened history (or a
      // run that went otherwise than the generator expected) may ask for it: wait bounded then.
      const bool holds = std::any_of(slots.begin(), slots.end(), [](const slot& x) { return x.s && x.s->owns(); });
      if (o.kind == op_kind::acquire && o.mode == acquire_mode::block && holds) {
        o.mode = acquire_mode::try_for;
        o.arg_ms = 2 * cfg_.shape.lease_ms;
      }
      {
        std::lock_guard<std::mutex> g(m_);
        current_[t] = describe(o);
      }
      step(t, o, sl);
    }
    {
      std::lock_guard<std::mutex> g(m_);
      current_[t] = "ending";
    }
    // The end: every object destroyed (which releases what it holds).
    for (std::size_t n = 0; n < slots.size(); ++n) {
      if (!slots[n].s) continue;
      op o;
      o.thread = static_cast<int>(t);
      o.index = -1;  // printed as "end"
      o.kind = op_kind::recreate;
      o.name = static_cast<int>(n);
      destroy(o, slots[n]);
    }
  }

  kind kind_of(std::size_t t, int name) const {
    if (t >= first_worker_thread) return kind_at(kinds_, cfg_.shape.names, 0, name);  // a crash worker's
    return kind_at(kinds_, cfg_.shape.names, static_cast<int>(t), name);
  }

  // ---- crash workers (other processes) ----------------------------------------------------

  // Worker slot `w` (a new process in its place after a crash) on name w % names, with the
  // kind thread 0 uses there.
  void start_worker(int w) {
    static const std::string self = [] {
      char path[4096];
      const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
      return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : std::string("redislock_model");
    }();
    const int name = w % cfg_.shape.names;
    // The async mutex's worker is a blocking mutex: the same protocol and keys.
    const kind k =
        kind_of(first_worker_thread, name) == kind::async_mutex ? kind::mutex : kind_of(first_worker_thread, name);
    auto worker = std::make_unique<crash_worker>(self, srv_.list.front()->port(), name, k, cfg_.shape.lease_ms,
                                                 seed_ * 1000 + workers_.size());
    std::lock_guard<std::mutex> g(m_);
    if (live_workers_.size() <= static_cast<std::size_t>(w)) live_workers_.resize(static_cast<std::size_t>(w) + 1);
    live_workers_[static_cast<std::size_t>(w)] = workers_.size();
    workers_.push_back(std::move(worker));
  }

  void crash_worker_fault(const fault& f) {
    std::size_t which = 0, slot = 0;
    {
      std::lock_guard<std::mutex> g(m_);
      if (live_workers_.empty()) return;
      slot = static_cast<std::size_t>(f.thread) % live_workers_.size();
      which = live_workers_[slot];
    }
    workers_[which]->kill();
    start_worker(static_cast<int>(slot));
  }

  // The workers' calls, as holds of threads first_worker_thread + i.
  void record_workers() {
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      workers_[i]->kill();  // the run's end: the last ones die too
      workers_[i]->record(log_, static_cast<int>(first_worker_thread + i), cfg_.shape.lease_ms, certain_until,
                          aftermath_ns());
    }
  }

  std::unique_ptr<subject> make(std::size_t t, int name, bool auto_renew) {
    const kind k = kind_of(t, name);
#ifdef REDISLOCK_MODEL_ASYNC
    if (k == kind::async_mutex)
      return std::make_unique<async_mutex_subject>(*clients_[t].async, name_of(name), options_for(k, auto_renew));
    if (k == kind::broken_async_extend)
      return std::make_unique<async_extend_max_subject>(*clients_[t].async, name_of(name), options_for(k, auto_renew));
#endif
    if (!clients_[t].plain.empty())
      return make_subject(k, clients_of(t), name_of(name), options_for(k, auto_renew),
                          static_cast<unsigned>(seed_ * 131 + t));
    return clients_[t].with(
        [&](auto& c) { return make_public_subject(k, c, name_of(name), options_for(k, auto_renew)); });
  }

  void destroy(const op& o, slot& sl) {
    record r;
    r.o = o;
    r.start_ns = now_ns();
    sl.s.reset();
    r.end_ns = now_ns();
    r.outcome = "destroyed";
    end_hold(sl, r);
    push(r);
  }

  void end_hold(slot& sl, record& r) {
    if (sl.hold < 0) return;
    std::lock_guard<std::mutex> g(m_);
    hold& h = log_.holds[static_cast<std::size_t>(sl.hold)];
    h.end_ns = r.start_ns;
    h.busy_until_ns = r.outcome == "released" ? r.end_ns : r.end_ns + h.longest_lease_ms * 1000000LL;
    if (r.o.index >= 0) h.last_op = r.o.index;
    r.hold = sl.hold;
    sl.hold = -1;
  }

  void push(const record& r) {
    std::lock_guard<std::mutex> g(m_);
    log_.records.push_back(r);
  }

  // A call that returned `ok` within `limit_ms` past its start (plus the stated slack).
  void check_deadline(const record& r, long limit_ms) {
    std::lock_guard<std::mutex> g(m_);
    deadlines_.push_back({r, limit_ms});
  }

  // After the run: a call's time beyond its limit, less the time this process was not scheduled
  // meanwhile (starved: heartbeat gaps), must stay within the slack.
  // Timed calls (try_lock, try_lock_for) keep that slack on every topology, plus the budget of
  // a clean-up after their deadline (leaving the queue, releasing what an unanswered attempt may
  // have taken: call_deadline::cleanup_time and one connect timeout); Sentinel and Cluster
  // calls without a deadline get the client's own budget (topology_allowance_ms).
  void judge_deadlines() {
    const long cleanup_ms = (redislock::detail::call_deadline::cleanup_time + cfg_.connect_timeout).count();
    for (const auto& [r, limit_ms] : deadlines_) {
      const bool timed = r.o.kind == op_kind::acquire || r.o.kind == op_kind::pause;
      const long slack = cfg_.slack_ms + (cfg_.connect_timeout + cfg_.command_timeout).count() +
                         (timed ? cleanup_ms : topology_allowance_ms());
      const long long took_ms = (r.end_ns - r.start_ns) / 1000000;
      std::int64_t starved = 0;
      for (const auto& [a, b] : starved_)
        starved += std::max<std::int64_t>(0, std::min(b, r.end_ns) - std::max(a, r.start_ns));
      const long long over = took_ms - limit_ms - starved / 1000000;
      if (over > log_.max_overrun_ms) {
        log_.max_overrun_ms = over;
        log_.max_overrun_op = describe(r.o) + " " + r.outcome;
      }
      if (over <= slack) continue;
      log_.findings.push_back({"deadline",
                               describe(r.o) + " took " + std::to_string(took_ms) + " ms (" +
                                   std::to_string(starved / 1000000) + " ms of it starved), allowed " +
                                   std::to_string(limit_ms) + " + slack " + std::to_string(slack) + " ms (" +
                                   at(r.start_ns) + ".." + at(r.end_ns) + ", " + r.outcome + ")",
                               r.start_ns, r.end_ns});
    }
  }

  // Gaps in which this process was not scheduled (a loaded machine): a 5 ms sleep that took
  // over 25 ms. Calls and waits are not blamed for them.
  // It also ends the process when the run hangs (a call that never returns), naming the calls
  // in progress: a hang is a finding too, and must not stall CI.
  void heartbeat_body() {
    std::int64_t last = t0_;  // from the run's start: this thread may itself start late
    const std::int64_t hung_at = last + static_cast<std::int64_t>(cfg_.run_timeout_seconds * 1e9);
    std::unique_lock<std::mutex> g(m_);
    while (!done_) {
      cv_.wait_for(g, milliseconds(5));
      const std::int64_t now = now_ns();
      if (now - last > 25000000LL) starved_.emplace_back(last, now);
      last = now;
      if (now < hung_at) continue;
      std::printf("model: seed %llu: the run hung (over %.0f s); calls in progress:\n", (unsigned long long)seed_,
                  cfg_.run_timeout_seconds);
      for (std::size_t t = 0; t < current_.size(); ++t) std::printf("  t%zu: %s\n", t, current_[t].c_str());
      std::printf("model: finding hang FAIL\n");
      std::fflush(stdout);
      std::_Exit(3);
    }
  }

  // The server answered "not yours" at some time in [start, end] of `r`: never while certain.
  void early_loss(const record& r, const slot& sl, const char* what) {
    if (sl.hold < 0) return;
    std::lock_guard<std::mutex> g(m_);
    const hold& h = log_.holds[static_cast<std::size_t>(sl.hold)];
    if (!certainly_held(log_, h, r.start_ns, r.end_ns)) return;
    log_.findings.push_back({"early_loss", describe(r.o) + " " + what + " in " + at(r.start_ns) + ".." + at(r.end_ns) +
                                               ", inside a certainly-valid interval of " +
                                               describe_hold(log_, h, t0_)});
  }

  run_log log_copy_revocations() {
    std::lock_guard<std::mutex> g(m_);
    run_log l;
    l.revocations = log_.revocations;
    return l;
  }

  void step(std::size_t t, const op& o, slot& sl) {
    record r;
    r.o = o;
    r.hold = sl.hold;
    const kind k = kind_of(t, o.name);
    subject* s = sl.s.get();
    const int depth_before = s ? s->depth() : 0;
    const bool lost_before = s && s->owns() && s->lost();
    const bool applies = [&] {
      switch (o.kind) {
        case op_kind::acquire: return depth_before == 0 || (k == kind::reentrant && depth_before < 3);
        case op_kind::extend:
          // A shorter lease with auto_renew is refused (invalid_argument): checked below, once.
          return depth_before > 0;
        case op_kind::fencing_token:
        case op_kind::still_held:
        case op_kind::remaining:
        case op_kind::unlock: return depth_before > 0;
        case op_kind::pause:
        case op_kind::force_release:
        case op_kind::recreate: return true;
      }
      return false;
    }();
    if (!applies) {
      r.outcome = "skip";
      r.start_ns = r.end_ns = now_ns();
      push(r);
      return;
    }
    if (o.kind == op_kind::recreate) {
      destroy(o, sl);
      sl.s = make(t, o.name, o.write);
      sl.auto_renew = o.write;
      return;
    }
    long limit_ms = 0;
    r.start_ns = now_ns();
    try {
      switch (o.kind) {
        case op_kind::acquire: {
          if (o.mode == acquire_mode::try_for) limit_ms = o.arg_ms;
          const int variant = extreme_variant(o.thread, o.index, o.name);
          s->set_variant(variant);
          const bool ok = s->acquire(o.mode, milliseconds(o.arg_ms), o.write);
          r.outcome = ok ? "true" : "false";
          if (variant > 0)
            r.outcome += std::string(" (") + extreme_name(variant, o.mode == acquire_mode::try_once) + ")";
          break;
        }
        case op_kind::extend: {
          const bool ok = s->extend(milliseconds(o.arg_ms));
          r.outcome = ok ? "true" : "false";
          break;
        }
        case op_kind::fencing_token:
          r.value = static_cast<long long>(s->fencing_token());
          r.outcome = "token";
          break;
        case op_kind::still_held: r.outcome = s->still_held() ? "true" : "false"; break;
        case op_kind::remaining:
          r.value = s->remaining().count();
          r.outcome = "remaining";
          break;
        case op_kind::unlock: r.outcome = redislock::to_string(s->unlock()); break;
        case op_kind::pause:
          std::this_thread::sleep_for(milliseconds(o.arg_ms));
          limit_ms = o.arg_ms;
          r.outcome = "slept";
          break;
        case op_kind::force_release: {
          limit_ms = 2 * cfg_.command_timeout.count();  // up to three round trips
          {
            std::lock_guard<std::mutex> g(m_);
            log_.revocations.push_back({o.name, r.start_ns, LLONG_MAX});
          }
          if (is_redlock(k)) {
            r.outcome = "n/a";  // Redlock has no force_release: delete the key on every master
            for (auto& c : clients_[t].plain) c->command({"DEL", "model:{" + name_of(o.name) + "}"});
          } else {
            const bool held = clients_[t].with(
                [&](auto& c) { return redislock::force_release(c, name_of(o.name), options_for(k, false)).held(); });
            r.outcome = held ? "removed" : "free";
          }
          break;
        }
        case op_kind::recreate: break;
      }
    } catch (const std::exception& e) {
      r.outcome = "error:" + type_of(e);
      if (o.kind == op_kind::acquire) {  // it may hold the name, or a place in its queue, for a while
        std::lock_guard<std::mutex> g(m_);
        log_.busy.push_back({o.name, r.start_ns, now_ns() + aftermath_ns(), static_cast<int>(t), false});
      }
      if (o.kind == op_kind::extend && sl.hold >= 0) {  // may still run later: a cap on every interval
        std::lock_guard<std::mutex> g(m_);
        log_.holds[static_cast<std::size_t>(sl.hold)].caps.push_back(
            {r.start_ns, 0, certain_until(r.start_ns, o.arg_ms), true});
      }
    }
    r.end_ns = now_ns();
    // An unbounded wait that gave up (also when the call threw after it).
    if (const std::string failed = o.kind == op_kind::acquire ? s->take_extreme_failure() : ""; !failed.empty())
      add_finding("extreme",
                  describe(o) + ": " + failed + " (" + at(r.start_ns) + ".." + at(r.end_ns) + ", " + r.outcome + ")");
    if (o.kind == op_kind::extend && sl.hold >= 0) {
      std::lock_guard<std::mutex> g(m_);
      hold& h = log_.holds[static_cast<std::size_t>(sl.hold)];
      h.longest_lease_ms = std::max(h.longest_lease_ms, o.arg_ms);
    }
    if (o.kind == op_kind::acquire && o.write && k == kind::shared && o.mode != acquire_mode::try_once) {
      std::lock_guard<std::mutex> g(m_);  // a queued writer holds new readers back
      log_.busy.push_back({o.name, r.start_ns, r.end_ns, static_cast<int>(t), true});
    }
    if (o.kind == op_kind::force_release) {
      std::lock_guard<std::mutex> g(m_);
      for (auto& rv : log_.revocations)
        if (rv.name == o.name && rv.from_ns == r.start_ns) rv.until_ns = r.end_ns;
    }
    if (o.kind != op_kind::acquire || o.mode != acquire_mode::block) check_deadline(r, limit_ms);
    // The contract: with auto_renew, extend() refuses a lease shorter than the configured one.
    if (o.kind == op_kind::extend && sl.auto_renew && o.arg_ms < cfg_.shape.lease_ms &&
        r.outcome != "error:invalid_argument")
      add_finding("contract", describe(o) + " with auto_renew returned " + r.outcome + ", not invalid_argument");

    const int depth_after = s ? s->depth() : 0;
    if (depth_before == 0 && depth_after > 0) begin_hold(t, o, r, sl, *s, k);
    const bool nested = o.kind == op_kind::acquire && depth_before > 0 && depth_after > depth_before;
    if (sl.hold >= 0 && ((o.kind == op_kind::extend && r.outcome == "true") || nested)) {
      // The server set the lease at some time in the call: certainly ours from its end.
      const long lease_ms = nested || sl.auto_renew ? cfg_.shape.lease_ms : o.arg_ms;
      // The lease clock counts from the last confirmed call (a nested acquisition may leave
      // a longer lease in place: the larger end then).
      const std::int64_t end = r.end_ns + (nested ? cfg_.shape.lease_ms : o.arg_ms) * 1000000LL;
      sl.clock_bound_ns = nested ? std::max(sl.clock_bound_ns, end) : end;
      std::lock_guard<std::mutex> g(m_);
      hold& h = log_.holds[static_cast<std::size_t>(sl.hold)];
      h.caps.push_back({r.start_ns, r.end_ns, certain_until(r.start_ns, lease_ms), false});
      h.certain.emplace_back(r.end_ns, certain_until(r.start_ns, lease_ms));
    }
    if (sl.hold >= 0) {
      std::lock_guard<std::mutex> g(m_);
      log_.holds[static_cast<std::size_t>(sl.hold)].last_op = o.index;
    }
    // The server said "not yours": never before the hold's certain bound.
    if (!is_redlock(k)) {
      if (o.kind == op_kind::extend && r.outcome == "false") early_loss(r, sl, "returned false");
      if (o.kind == op_kind::still_held && r.outcome == "false") early_loss(r, sl, "returned false");
      if (o.kind == op_kind::remaining && r.value == 0) early_loss(r, sl, "returned 0");
    } else if (o.kind == op_kind::still_held && r.outcome == "false") {
      early_loss(r, sl, "returned false");
    }
    // A hold already known lost() reports lease_expired without the server's word (even when a
    // nested acquisition took the name again since: lost() stays until the next outermost one).
    if (o.kind == op_kind::unlock && r.outcome == "lease_expired" && !lost_before)
      early_loss(r, sl, "found the lease expired");
    if (o.kind == op_kind::fencing_token && r.outcome == "token" && sl.hold >= 0) {
      std::lock_guard<std::mutex> g(m_);
      log_.fences.push_back(
          {sl.hold, static_cast<int>(t), o.index, static_cast<std::uint64_t>(r.value), r.start_ns, r.end_ns});
    }
    if (o.kind == op_kind::remaining && r.value > 0 && s->owns() && !s->lost()) check_optimism(t, r, sl, *s, k);
    if (s && s->owns()) check_clock(t, r, sl, *s, k);
    r.hold = sl.hold >= 0 ? sl.hold : r.hold;
    if (depth_before > 0 && depth_after == 0) end_hold(sl, r);
    push(r);
  }

  void begin_hold(std::size_t t, const op& o, record& r, slot& sl, subject& s, kind k) {
    hold h;
    h.thread = static_cast<int>(t);
    h.name = o.name;
    h.write = s.writing();
    h.permits = is_semaphore(k) ? semaphore_permits : 0;
    h.auto_renew = sl.auto_renew;
    h.acquire_start_ns = r.start_ns;
    h.acquired_ns = r.end_ns;
    h.certain.emplace_back(r.end_ns, certain_until(r.start_ns, cfg_.shape.lease_ms));
    h.longest_lease_ms = cfg_.shape.lease_ms;
    h.first_op = h.last_op = o.index;
    sl.clock_bound_ns = r.end_ns + lease_ns_;
    try {
      h.owner = s.owner();
    } catch (...) {
    }
    std::lock_guard<std::mutex> g(m_);
    h.id = static_cast<int>(log_.holds.size());
    log_.holds.push_back(h);
    sl.hold = h.id;
    r.hold = h.id;
  }

  // The observer's look, again when CLIENT KILL (a fault) closed its connection.
  template <class F>
  static auto observe(F&& f) {
    for (int attempt = 1;; ++attempt) {
      try {
        return f();
      } catch (const redislock::connection_error&) {
        if (attempt == 3) throw;
      }
    }
  }

  // What the server, read now on an independent connection, keeps of this hold's lease (ms;
  // Redlock: what a majority of masters keeps; LLONG_MAX: no expiry), and what it saw. nullopt
  // when no look was possible (a crash finding, unless a failover or slot move is settling).
  std::optional<long long> server_left(std::size_t t, int name, subject& s, kind k, std::string& seen) {
    const std::string owner = s.owner();
    long long server_ms = 0;
    try {
      if (is_redlock(k)) {
        // Validity r promises a majority holds our key for r more: count the masters that do.
        const std::string key = "model:{" + name_of(name) + "}";
        std::vector<long long> left;
        for (auto& c : observers_[t].plain) {
          try {
            const auto v = observe([&] { return c->command({"GET", key}); });
            const auto p = observe([&] { return c->command({"PTTL", key}); });
            // The value is the token, or token#round after an extend (detail/redlock_scripts.hpp).
            const std::string value = v->type == REDIS_REPLY_STRING ? std::string(v->str, v->len) : std::string();
            const bool ours = value == owner || value.rfind(owner + "#", 0) == 0;
            left.push_back(ours ? p->integer : 0);
          } catch (const redislock::connection_error&) {
            left.push_back(0);  // a master down (restarting): it holds nothing for us
          }
        }
        std::sort(left.rbegin(), left.rend());
        server_ms = left[left.size() / 2];  // what a majority has at least
        for (long long l : left) seen += std::to_string(l) + " ";
      } else {
        const redislock::lock_info info = observe([&] {
          return observers_[t].with(
              [&](auto& c) { return redislock::inspect(c, name_of(name), options_for(k, false)); });
        });
        for (const auto& holder : info.holders)
          if (holder.owner == owner && (holder.role == "reader") == !s.writing())
            server_ms = holder.remaining.count() < 0 ? LLONG_MAX : holder.remaining.count();
        seen = std::to_string(info.holders.size()) + " holder(s)";
      }
    } catch (const std::exception& e) {
      // While a failover or slot move settles, the observer's client may not reach the master
      // either: no look, no check.
      if (!topology_unsettled()) add_finding("crash", std::string("observer failed: ") + e.what());
      return std::nullopt;
    }
    return server_ms;
  }

  // Invariant 2: the server, read right after on an independent connection, has at least r - eps.
  void check_optimism(std::size_t t, const record& r, const slot& sl, subject& s, kind k) {
    std::string seen;
    const auto left = server_left(t, r.o.name, s, k, seen);
    if (!left) return;
    const long long server_ms = *left;
    const std::int64_t observed = now_ns();
    const long long eps_ms = (observed - r.start_ns) / 1000000 + 2;
    if (server_ms >= r.value - eps_ms) return;
    if (s.lost()) return;  // known lost by now
    hold h;
    {
      std::lock_guard<std::mutex> g(m_);
      h = log_.holds[static_cast<std::size_t>(sl.hold)];
      if (revoked(log_, r.o.name, h.acquire_start_ns, observed)) return;
    }
    add_finding("optimism", describe(r.o) + " reported " + std::to_string(r.value) + " ms at " + at(r.end_ns) +
                                ", the server had " + std::to_string(server_ms) + " ms (" + seen + ") at " +
                                at(observed) + ", eps " + std::to_string(eps_ms) + " ms; " +
                                describe_hold(log_, h, t0_));
  }

  // The lease clock (issue 39, items 1 and 2), after each call of a hold seen with owns_lock():
  // while !lost(), a hold without auto_renew has a lease_confirmed_until(), no later than the end
  // of its last confirmed acquisition or extend + that lease (the library counts from the send,
  // which is earlier); once it has passed, lost() is true; and after remaining, still_held and
  // pause, the server (an independent look) keeps the lease at least until then.
  void check_clock(std::size_t t, const record& r, const slot& sl, subject& s, kind k) {
    if (sl.hold < 0) return;
    const std::int64_t before = now_ns();
    const auto confirmed = s.confirmed_until();
    if (s.lost()) return;
    auto finding = [&](const std::string& what) {
      std::lock_guard<std::mutex> g(m_);
      log_.findings.push_back(
          {"lease_clock", "after " + describe(r.o) + " (" + at(r.start_ns) + ".." + at(r.end_ns) + "), " + what + "; " +
                              describe_hold(log_, log_.holds[static_cast<std::size_t>(sl.hold)], t0_)});
    };
    if (!confirmed) {
      if (!sl.auto_renew) finding("owns_lock() && !lost() without auto_renew, and no lease_confirmed_until()");
      return;
    }
    const std::int64_t until_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(confirmed->time_since_epoch()).count();
    if (until_ns <= before) {
      finding("lease_confirmed_until() " + at(until_ns) + " had passed at " + at(before) + ", lost() still false");
      return;
    }
    if (!sl.auto_renew && until_ns > sl.clock_bound_ns + 1000000LL) {
      finding("lease_confirmed_until() " + at(until_ns) +
              " is after the end of its last confirmed acquisition or extend + that lease, " + at(sl.clock_bound_ns));
      return;
    }
    if (r.o.kind != op_kind::remaining && r.o.kind != op_kind::still_held && r.o.kind != op_kind::pause) return;
    std::string seen;
    const auto left = server_left(t, r.o.name, s, k, seen);
    if (!left) return;
    const std::int64_t observed = now_ns();
    const long long left_ms = std::min<long long>(*left, 1000LL * 1000 * 1000);
    if (until_ns <= observed + left_ms * 1000000LL + 2000000LL) return;
    if (s.lost()) return;  // known lost by now
    {
      std::lock_guard<std::mutex> g(m_);
      if (revoked(log_, r.o.name, log_.holds[static_cast<std::size_t>(sl.hold)].acquire_start_ns, observed)) return;
    }
    finding("lease_confirmed_until() " + at(until_ns) + ", the server kept " + std::to_string(*left) + " ms (" + seen +
            ") at " + at(observed) + ": until " + at(observed + left_ms * 1000000LL));
  }

  // ---- the faults -----------------------------------------------------------------------

  bool wait_until(std::int64_t ns) {
    std::unique_lock<std::mutex> g(m_);
    const auto deadline = steady::time_point(std::chrono::nanoseconds(ns));
    cv_.wait_until(g, deadline, [&] { return done_; });
    return !done_;
  }

  std::vector<tcp_proxy*> proxies_of(const fault& f, bool subset) {
    std::vector<tcp_proxy*> out;
    auto& ps = proxies_[static_cast<std::size_t>(f.thread) % proxies_.size()];
    for (std::size_t s = 0; s < ps.size(); ++s)
      if (!subset || (f.subset >> s) & 1u) out.push_back(ps[s].get());
    return out;
  }

  void on_servers(const fault& f, const std::vector<std::string>& command, milliseconds timeout) {
    std::vector<redislock::connection_options> masters;
    try {
      masters = srv_.masters();
    } catch (const redislock::error& e) {
      add_finding("crash", std::string("fault ") + describe(f) + ": no masters: " + e.what());
    }
    for (std::size_t s = 0; s < masters.size(); ++s) {
      if (masters.size() > 1 && !((f.subset >> s) & 1u)) continue;
      try {
        auto c = servers::admin(masters[s], timeout);
        std::vector<std::string_view> argv(command.begin(), command.end());
        c.command(argv);
      } catch (const redislock::error& e) {
        add_finding("crash", std::string("fault ") + describe(f) + " failed: " + e.what());
      }
    }
  }

  void fault_body() {
    for (const fault& f : h_.faults) {
      if (!wait_until(t0_ + f.at_ms * 1000000LL)) return;
      const std::int64_t started = now_ns();
      using d = tcp_proxy::direction;
      const milliseconds len(f.duration_ms);
      std::function<void()> undo;
      std::int64_t topology_settle_ns = 0;
      switch (f.kind) {
        case fault_kind::delay:
          for (auto* p : proxies_of(f, false)) p->set_delay(milliseconds(f.arg_ms), milliseconds(f.arg_ms));
          undo = [this, f] {
            for (auto* p : proxies_of(f, false)) p->set_delay(milliseconds(0));
          };
          break;
        case fault_kind::stall:
          for (auto* p : proxies_of(f, false)) p->set_stalled(true, static_cast<d>(f.dir));
          undo = [this, f] {
            for (auto* p : proxies_of(f, false)) p->set_stalled(false, d::both);
          };
          break;
        case fault_kind::black_hole:
          for (auto* p : proxies_of(f, false)) p->set_black_hole(true, static_cast<d>(f.dir));
          undo = [this, f] {
            for (auto* p : proxies_of(f, false)) p->set_black_hole(false, d::both);
          };
          break;
        case fault_kind::cut:
          for (auto* p : proxies_of(f, false)) p->cut_all();
          break;
        case fault_kind::cut_after_request:
          for (auto* p : proxies_of(f, false)) p->set_cut_after_request(true);
          undo = [this, f] {
            for (auto* p : proxies_of(f, false)) p->set_cut_after_request(false);
          };
          break;
        case fault_kind::refuse:
          for (auto* p : proxies_of(f, false)) p->set_refusing(true);
          undo = [this, f] {
            for (auto* p : proxies_of(f, false)) p->set_refusing(false);
          };
          break;
        case fault_kind::partition:
          for (auto* p : proxies_of(f, true)) p->partition(true);
          undo = [this, f] {
            for (auto* p : proxies_of(f, true)) p->partition(false);
          };
          break;
        case fault_kind::client_kill:
          if (srv_.sentinel) kill_clients_but_sentinels(f);
          else on_servers(f, {"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"}, milliseconds(5000));
          break;
        case fault_kind::debug_sleep: {
          char secs[32];
          std::snprintf(secs, sizeof secs, "%.3f", static_cast<double>(f.arg_ms) / 1000);
          on_servers(f, {"DEBUG", "SLEEP", secs}, milliseconds(f.arg_ms + 5000));
          break;
        }
        case fault_kind::script_flush: on_servers(f, {"SCRIPT", "FLUSH"}, milliseconds(5000)); break;
        case fault_kind::master_restart: {
          std::vector<std::size_t> which;
          for (std::size_t s = 0; s < srv_.list.size(); ++s)
            if ((f.subset >> s) & 1u) which.push_back(s);
          const std::size_t revocation = revoke_all(false);
          {
            std::lock_guard<std::mutex> g(m_);
            data_loss_ = true;
          }
          for (std::size_t s : which) srv_.list[s]->kill();
          // Down for the documented delay (at least a lease), even when the run ends meanwhile.
          std::this_thread::sleep_for(len);
          for (std::size_t s : which) srv_.list[s]->start_again();
          std::lock_guard<std::mutex> g(m_);
          log_.revocations[revocation].until_ns = now_ns() + lease_ns_;
          break;
        }
        case fault_kind::client_crash: crash_worker_fault(f); break;
        case fault_kind::failover:
        case fault_kind::master_kill:
        case fault_kind::migrate: {
          // Replication is asynchronous: a crashed master, or a Sentinel failover (which does
          // not wait for the replica), may lose the holds it had not replicated. A Cluster
          // manual failover (the replica catches up first) and a slot move lose nothing.
          const bool may_lose = f.kind == fault_kind::master_kill ||
                                (f.kind == fault_kind::failover && cfg_.shape.where == topology::sentinel);
          const std::size_t revocation = may_lose ? revoke_all(true) : 0;
          topology_fault_until_ns_ = LLONG_MAX;
          const std::string failed = srv_.topology_fault(f);  // to its end, even when the run ends meanwhile
          topology_fault_until_ns_ = now_ns() + topology_allowance_ms() * 1000000LL;
          if (may_lose) {
            std::lock_guard<std::mutex> g(m_);
            log_.revocations[revocation].until_ns = now_ns() + lease_ns_;
          }
          if (!failed.empty()) add_finding("crash", "fault " + describe(f) + ": " + failed);
          topology_settle_ns = topology_allowance_ms() * 1000000LL;
          break;
        }
      }
      {
        std::lock_guard<std::mutex> g(m_);
        ++log_.faults_by_kind[to_string(f.kind)];
      }
      if (undo) {
        wait_until(now_ns() + len.count() * 1000000LL);
        undo();
      }
      std::lock_guard<std::mutex> g(m_);
      log_.busy.push_back({-1, started, now_ns() + aftermath_ns() + topology_settle_ns, -1, false});
      log_.applied.push_back({describe(f), started, now_ns()});
    }
  }

  // Sentinel: CLIENT KILL TYPE normal would cut the sentinels' own links to the master too, and
  // sentinels that cannot reach it for down-after-milliseconds fail it over: the fault is the
  // clients', so every normal client but the sentinels' ("sentinel-…" names) is killed, by id.
  void kill_clients_but_sentinels(const fault& f) {
    try {
      for (const auto& m : srv_.masters()) {
        auto c = servers::admin(m);
        std::istringstream list(redis_cluster::text(c.command({"CLIENT", "LIST"})));
        const std::string me = std::to_string(c.command({"CLIENT", "ID"})->integer);
        for (std::string line; std::getline(list, line);) {
          // As TYPE normal: no replica or master link (flags N), no subscriber.
          const std::size_t id = line.find("id="), name = line.find(" name=");
          const bool normal = line.find(" flags=N ") != std::string::npos &&
                              line.find(" sub=0 ") != std::string::npos && line.find(" psub=0 ") != std::string::npos;
          if (id != 0 || !normal || name == std::string::npos || line.compare(name + 6, 9, "sentinel-") == 0) continue;
          const std::string which = line.substr(3, line.find(' ') - 3);
          if (which != me) c.command({"CLIENT", "KILL", "ID", which});
        }
      }
    } catch (const redislock::error& e) {
      add_finding("crash", std::string("fault ") + describe(f) + " failed: " + e.what());
    }
  }

  // Sentinel: whether the set-up stays as it was (the same master, the other node its replica)
  // while no failover fault runs. A failover the checker did not ask for (Sentinel's own
  // decision) may lose writes like any other: from the last good look, every hold is revoked as
  // by a failover, and the run says so (unplanned_failovers).
  void sentinel_roles_body() {
    if (!srv_.sentinel) return;
    int master = srv_.sentinel->master();
    bool moved = false;  // a planned failover ran: which node is master is asked again after it
    std::int64_t last_good = now_ns();
    std::unique_lock<std::mutex> g(m_);
    while (!done_) {
      cv_.wait_for(g, milliseconds(20));
      if (done_) break;
      g.unlock();
      const std::int64_t looked = now_ns();
      bool ok = topology_fault_until_ns_.load() > looked;  // a planned one: revoked already
      moved = moved || ok;
      if (!ok) {
        try {
          if (std::exchange(moved, false) || master < 0) master = srv_.sentinel->master();
          if (master < 0) throw redislock::connection_error("no sentinel answers");
          const auto role = [&](int i) {
            auto c = servers::admin(srv_.sentinel->node_options(i), milliseconds(100));
            const std::string info = redis_cluster::text(c.command({"INFO", "replication"}));
            return info.find("role:master") != std::string::npos ? 'm' : 's';
          };
          ok = role(master) == 'm' && role(1 - master) == 's';
        } catch (const redislock::error&) {
          ok = true;  // not answering (DEBUG SLEEP): no look
        }
      }
      g.lock();
      if (ok) {
        last_good = looked;
        continue;
      }
      ++log_.unplanned_failovers;
      log_.revocations.push_back({-1, last_good, LLONG_MAX, true});
      break;
    }
  }

  bool topology_unsettled() const { return now_ns() < topology_fault_until_ns_.load(); }

  // Every hold may be taken away from now on (until the caller sets the end); its index.
  std::size_t revoke_all(bool failover) {
    std::lock_guard<std::mutex> g(m_);
    log_.revocations.push_back({-1, now_ns(), LLONG_MAX, failover});
    return log_.revocations.size() - 1;
  }

  // How long after a failover or slot move the clients may still be finding the new master:
  // Sentinel re-discovery (recheck_interval, then retries with backoff), Cluster retries.
  long topology_allowance_ms() const {
    if (cfg_.shape.where == topology::sentinel) return sentinel_budget_ms();
    if (cfg_.shape.where == topology::cluster) return cluster_retry_ms + cfg_.connect_timeout.count();
    return 0;
  }
  // The sentinel_options::retries budget of one call (defaults: 3 retries, backoff 100 ms
  // doubling): each attempt asks up to 3 sentinels, connects and runs the command.
  long sentinel_budget_ms() const {
    const redislock::sentinel_options o;
    long backoff = 0;
    for (int i = 0, b = static_cast<int>(o.retry_backoff.count()); i < o.retries; ++i, b = std::min(2 * b, 1000))
      backoff += b;
    return backoff + (o.retries + 1) * (4 * cfg_.connect_timeout.count() + cfg_.command_timeout.count());
  }

  // ---- after the run --------------------------------------------------------------------

  // A deadline finding lists the faults applied while its call ran (times from the run's start).
  void name_faults_in_calls() {
    for (auto& f : log_.findings) {
      if (f.invariant != "deadline") continue;
      std::string in;
      for (const auto& a : log_.applied)
        if (a.from_ns <= f.to_ns && a.to_ns >= f.from_ns)
          in += "; " + a.what + " applied " + at(a.from_ns) + ".." + at(a.to_ns);
      f.detail += in.empty() ? "; no fault applied meanwhile" : in;
    }
  }

  // Mixed kinds: a call throws wrong_type_error only while another family's hold could be on
  // the name (acquired and not yet certainly gone), or a fault or call of unknown outcome
  // (another thread's) may have left one.
  void check_wrong_type() {
    for (const auto& r : log_.records) {
      // The async API reports another kind's key as async_errc::server_error (async_subject.hpp).
      const bool async = is_async(kind_of(static_cast<std::size_t>(r.o.thread), r.o.name));
      if (r.outcome != "error:wrong_type_error" && !(async && r.outcome == "error:server_error")) continue;
      ++log_.wrong_types;
      const int family = family_of(kind_of(static_cast<std::size_t>(r.o.thread), r.o.name));
      bool explained = false;
      for (const auto& h : log_.holds)
        explained = explained ||
                    (h.name == r.o.name && family_of(kind_of(static_cast<std::size_t>(h.thread), h.name)) != family &&
                     h.acquire_start_ns <= r.end_ns && h.busy_until_ns >= r.start_ns);
      for (const auto& b : log_.busy)
        explained = explained || ((b.name < 0 || b.name == r.o.name) && b.thread != r.o.thread &&
                                  b.from_ns <= r.end_ns && b.until_ns >= r.start_ns);
      if (!explained)
        log_.findings.push_back({"wrong_type", describe(r.o) + " threw wrong_type_error in " + at(r.start_ns) + ".." +
                                                   at(r.end_ns) + ", while no other kind could hold the name"});
    }
  }

  static std::vector<std::string> keys_on(const redislock::connection_options& server) {
    auto c = servers::admin(server);
    auto r = c.command({"KEYS", "model:*"});
    std::vector<std::string> out;
    for (std::size_t i = 0; i < r->elements; ++i) out.emplace_back(r->element[i]->str, r->element[i]->len);
    return out;
  }

  // Invariant 6: no key without expiry; within 3 leases + wait_lease only fencing counters left.
  void check_leaks() {
    try {
      // The faults ended with the cluster settled; a master killed by the last one may still be
      // on its way back as a replica.
      if (srv_.cluster) srv_.cluster->wait_until_stable(std::chrono::seconds(30));
      const auto masters = srv_.masters();
      for (std::size_t s = 0; s < masters.size(); ++s) {
        auto c = servers::admin(masters[s]);
        for (const auto& k : keys_on(masters[s])) {
          if (ends_with(k, ":rfence")) continue;  // Redlock's register never expires
          redislock::reply_ptr pttl;
          try {
            pttl = c.command({"PTTL", k});
          } catch (const redislock::error& e) {
            // A key of a slot this master does not serve (MOVED): left behind by a failover
            // or a move cut short, out of every client's reach; the key's owner is checked too.
            if (std::string(e.what()).find("MOVED") != std::string::npos) continue;
            throw;
          }
          if (pttl->integer == -1)
            log_.findings.push_back({"leak", "key " + k + " on server " + std::to_string(s) + " has no expiry"});
        }
      }
      const auto deadline = steady::now() + milliseconds(4 * cfg_.shape.lease_ms + 300 + 1000);
      std::vector<std::string> left;
      do {
        left.clear();
        for (const auto& m : masters)
          for (const auto& k : keys_on(m))
            if (!ends_with(k, ":fence") && !ends_with(k, ":rfence")) left.push_back(k);
        if (left.empty()) break;
        std::this_thread::sleep_for(milliseconds(20));
      } while (steady::now() < deadline);
      for (const auto& k : left) log_.findings.push_back({"leak", "key " + k + " outlived every lease"});
      for (const auto& m : masters) servers::admin(m).command({"FLUSHALL"});
    } catch (const std::exception& e) {
      log_.findings.push_back({"crash", std::string("leak check failed: ") + e.what()});
    }
  }

  // After a fault or a call of unknown outcome: a late request may take the name for a lease
  // (extends: up to 3 leases), or leave a place in its queue for wait_lease.
  std::int64_t aftermath_ns() const {
    return (3 * cfg_.shape.lease_ms + wait_lease_ms + cfg_.command_timeout.count()) * 1000000LL;
  }

  static constexpr long wait_lease_ms = 300, recheck_ms = 100;  // Redlock: retry_max is 100 ms too
  static constexpr long cluster_retry_ms = 1000;                // cluster_options::retry_timeout
  const config& cfg_;
  servers& srv_;
  const history& h_;
  std::uint64_t seed_;
  std::int64_t lease_ns_;
  std::vector<kind> kinds_;
  std::vector<std::vector<std::unique_ptr<tcp_proxy>>> proxies_;
#ifdef REDISLOCK_MODEL_ASYNC
  std::unique_ptr<async_runtime> async_;  // before the clients: it outlives the async ones
#endif
  std::vector<thread_clients> clients_, observers_;
  static constexpr std::size_t first_worker_thread = 100;  // crash workers' holds in the log
  std::vector<std::unique_ptr<crash_worker>> workers_;     // every one started, in order
  std::vector<std::size_t> live_workers_;                  // per worker slot: its current one
  std::int64_t t0_ = 0;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false, data_loss_ = false;
  std::atomic<std::int64_t> topology_fault_until_ns_{0};        // a failover or slot move settles until then
  std::vector<std::pair<record, long>> deadlines_;              // calls and their limits
  std::vector<std::string> current_;                            // each thread's call in progress
  std::vector<std::pair<std::int64_t, std::int64_t>> starved_;  // heartbeat gaps
  run_log log_;
};

// ---------------------------------------------------------------------------------------------

struct outcome {
  run_log log;
  std::int64_t t0 = 0;
};

outcome run_once(const config& cfg, servers& srv, const history& h, std::uint64_t seed) {
  run r(cfg, srv, h, seed);
  outcome o;
  o.log = r.execute();
  o.t0 = r.t0();
  return o;
}

std::set<std::string> invariants_of(const run_log& log) {
  std::set<std::string> out;
  for (const auto& f : log.findings) out.insert(f.invariant);
  return out;
}

void print_records(const outcome& o) {
  for (const auto& a : o.log.applied)
    std::printf("    %8.1f..%8.1f ms  %s\n", ms_of(a.from_ns - o.t0), ms_of(a.to_ns - o.t0), a.what.c_str());
  for (const auto& w : o.log.worker_calls)
    std::printf("    %8.1f..%8.1f ms  %s\n", ms_of(w.start_ns - o.t0), ms_of(w.end_ns - o.t0), w.what.c_str());
  for (const auto& r : o.log.records) {
    if (r.outcome == "skip") continue;
    std::printf("    %8.1f..%8.1f ms  %-40s %s%s\n", ms_of(r.start_ns - o.t0), ms_of(r.end_ns - o.t0),
                describe(r.o).c_str(), r.outcome.c_str(), r.value >= 0 ? (" " + std::to_string(r.value)).c_str() : "");
  }
}

std::string summary(const config& cfg, std::uint64_t seed, const history& h, const run_log& log) {
  std::size_t executed = 0, skipped = 0, extremes = 0;
  for (const auto& r : log.records) {
    (r.outcome == "skip" ? skipped : executed)++;
    if (r.o.kind == op_kind::acquire && r.outcome.find(" (") != std::string::npos) ++extremes;
  }
  std::string faults;
  int fault_count = 0;
  for (const auto& [k, n] : log.faults_by_kind) {
    faults += (faults.empty() ? "" : " ") + k + "=" + std::to_string(n);
    fault_count += n;
  }
  std::string kinds;
  for (kind k : kinds_for(cfg, seed)) kinds += (kinds.empty() ? "" : ",") + std::string(to_string(k));
  std::map<std::string, int> by;
  for (const auto& f : log.findings) ++by[f.invariant];
  std::string findings;
  for (const auto& [k, n] : by) findings += " " + k + "=" + std::to_string(n);
  char b[1536];
  std::snprintf(b, sizeof b,
                "model: seed=%llu topology=%s kinds=%s threads=%zu ops=%zu executed=%zu skipped=%zu holds=%zu "
                "faults=%d (%s) max_overrun_ms=%lld (%s) waits_checked=%d extremes=%zu failover_overlaps=%d "
                "unplanned_failovers=%d wrong_types=%d findings=%zu%s %s",
                (unsigned long long)seed, to_string(cfg.shape.where), kinds.c_str(), h.threads.size(), h.op_count(),
                executed, skipped, log.holds.size(), fault_count, faults.empty() ? "none" : faults.c_str(),
                log.max_overrun_ms, log.max_overrun_op.c_str(), log.waits_checked, extremes, log.failover_overlaps,
                log.unplanned_failovers, log.wrong_types, log.findings.size(), findings.c_str(),
                log.findings.empty() ? "PASS" : "FAIL");
  return b;
}

// Delta debugging over the history's items: drop faults, threads, then chunks of ops while a
// rerun (up to --reruns times: thread timing differs between runs) still finds `invariant`.
history shrink(const config& cfg, servers& srv, const history& full, std::uint64_t seed, const std::string& invariant,
               int& runs) {
  const auto budget_end = steady::now() + std::chrono::duration<double>(cfg.shrink_seconds);
  auto fails = [&](const std::vector<std::string>& items) {
    const history h = full.keep(std::set<std::string>(items.begin(), items.end()));
    for (int i = 0; i < cfg.reruns && steady::now() < budget_end; ++i) {
      ++runs;
      if (invariants_of(run_once(cfg, srv, h, seed).log).count(invariant)) return true;
    }
    return false;
  };
  std::vector<std::string> items = full.items();
  auto without = [&](auto&& drop) {
    std::vector<std::string> out;
    for (const auto& i : items)
      if (!drop(i)) out.push_back(i);
    return out;
  };
  // Coarse steps first: every fault, then each thread's whole list.
  if (auto c = without([](const std::string& i) { return i[0] == 'f'; }); c.size() < items.size() && fails(c))
    items = c;
  for (std::size_t t = 0; t < full.threads.size() && steady::now() < budget_end; ++t) {
    const std::string prefix = "t" + std::to_string(t) + ".";
    auto c = without([&](const std::string& i) { return i.rfind(prefix, 0) == 0; });
    if (c.size() < items.size() && !c.empty() && fails(c)) items = c;
  }
  std::size_t n = 2;
  while (items.size() >= 2 && steady::now() < budget_end) {
    const std::size_t chunk = (items.size() + n - 1) / n;
    bool reduced = false;
    for (std::size_t start = 0; start < items.size() && steady::now() < budget_end; start += chunk) {
      std::vector<std::string> c(items.begin(), items.begin() + static_cast<long>(start));
      c.insert(c.end(), items.begin() + static_cast<long>(std::min(items.size(), start + chunk)), items.end());
      if (!c.empty() && fails(c)) {
        items = c;
        n = std::max<std::size_t>(n - 1, 2);
        reduced = true;
        break;
      }
    }
    if (!reduced) {
      if (n >= items.size()) break;
      n = std::min(items.size(), 2 * n);
    }
  }
  return full.keep(std::set<std::string>(items.begin(), items.end()));
}

// The invariant a failing run is shrunk for: safety first (two holders), then the rest.
std::string first_by_priority(const run_log& log) {
  const auto found = invariants_of(log);
  for (const char* i : {"overlap", "fence", "early_loss", "optimism", "lease_clock", "extreme", "deadline", "liveness",
                        "contract", "wrong_type", "leak"})
    if (found.count(i)) return i;
  return log.findings.front().invariant;
}

std::string keep_argument(const history& h) {
  std::string s;
  for (const auto& i : h.items()) s += (s.empty() ? "" : ",") + i;
  return s;
}

// A self-check (ctest model_certain_bound_within_redlock_validity): for every lease an extend
// may send, a certainly-valid interval ends no later than the validity of a Redlock round that
// started with the call (its lost() by the clock is not the server's "not yours"). Returns the
// process's exit status.
int check_certain_bound() {
  const redislock::redlock_options defaults;
  int wrong = 0;
  for (long lease_ms = 1; lease_ms <= 60000; ++lease_ms) {
    const auto lease = std::chrono::milliseconds(lease_ms);
    const std::int64_t validity_end_ns = (lease - defaults.drift(lease)).count() * 1000000LL;
    if (certain_until(0, lease_ms) <= validity_end_ns) continue;
    if (wrong++ < 5)
      std::printf(
          "check_certain_bound: a %ld ms lease is certain until %.3f ms, a Redlock round's validity ends at %.3f ms\n",
          lease_ms, certain_until(0, lease_ms) / 1e6, validity_end_ns / 1e6);
  }
  std::printf("check_certain_bound: %s\n", wrong ? "FAIL" : "PASS");
  return wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--check-crash-worker-records") return check_crash_worker_records();
  if (argc == 2 && std::string(argv[1]) == "--check-certain-bound") return check_certain_bound();
  if (argc == 7 && std::string(argv[1]) == "--crash-worker")
    crash_worker_main(std::atoi(argv[2]), argv[3], kind_named(argv[4]), std::atol(argv[5]), std::stoull(argv[6]));
  try {
    config cfg = parse(argc, argv);
    auto srv_ptr = std::make_unique<servers>(cfg);
    const auto started = steady::now();
    int failed = 0, runs_done = 0, setups_replaced = 0;
    std::map<std::string, int> all_faults;
    long long all_ops = 0;
    for (int i = 0; i < cfg.runs * cfg.repeat; ++i) {
      if (cfg.seconds > 0 && i > 0 && steady::now() - started > std::chrono::duration<double>(cfg.seconds)) break;
      const std::uint64_t seed = cfg.seed + static_cast<std::uint64_t>(i / cfg.repeat);
      history_shape shape = cfg.shape;
      shape.kinds = kinds_for(cfg, seed);
      history h = generate(seed, shape);
      if (cfg.keep_given) h = h.keep(cfg.keep);
      // A set-up the last run's faults left broken (a cluster that never settles) is the
      // servers' state, not the library's: the run starts on new servers, and says so.
      if (i > 0) {
        if (const std::string why = srv_ptr->unsettled(); !why.empty()) {
          std::printf("model: %s; starting new servers\n", why.c_str());
          srv_ptr.reset();
          srv_ptr = std::make_unique<servers>(cfg);
          ++setups_replaced;
        }
      }
      servers& srv = *srv_ptr;
      std::printf("model: seed %llu\n", (unsigned long long)seed);
      std::fflush(stdout);
      const char* monitor_dir = std::getenv("REDISLOCK_MODEL_MONITOR");
      std::unique_ptr<command_monitor> monitor;
      if (monitor_dir != nullptr && cfg.shape.where == topology::single)
        monitor = std::make_unique<command_monitor>(srv.masters().front());
      const outcome o = run_once(cfg, srv, h, seed);
      if (monitor && !o.log.findings.empty()) {
        const std::string path = std::string(monitor_dir) + "/seed-" + std::to_string(seed) + ".monitor";
        monitor->write(path, o.t0);
        std::printf("model: the server's commands of this run: %s\n", path.c_str());
      }
      monitor.reset();
      ++runs_done;
      all_ops += static_cast<long long>(o.log.records.size());
      for (const auto& [k, n] : o.log.faults_by_kind) all_faults[k] += n;
      std::printf("%s\n", summary(cfg, seed, h, o.log).c_str());
      // A failing run's calls and faults are printed too: a concurrent failure may not recur.
      if (cfg.replay || cfg.verbose || !o.log.findings.empty()) print_records(o);
      for (const auto& f : o.log.findings) std::printf("  finding %s: %s\n", f.invariant.c_str(), f.detail.c_str());
      if (!o.log.findings.empty() && srv.sentinel) srv.sentinel->describe();  // who is master now
      std::fflush(stdout);
      if (o.log.findings.empty()) continue;
      ++failed;
      if (cfg.replay || cfg.shrink_seconds <= 0) continue;
      const std::string invariant = first_by_priority(o.log);
      int shrink_runs = 0;
      const history small = shrink(cfg, srv, h, seed, invariant, shrink_runs);
      std::printf("model: shrunk seed %llu (%s) from %zu ops + %zu faults to %zu ops + %zu faults in %d reruns:\n%s",
                  (unsigned long long)seed, invariant.c_str(), h.op_count(), h.faults.size(), small.op_count(),
                  small.faults.size(), shrink_runs, small.text().c_str());
      std::string args;
      for (int a = 1; a < argc; ++a) {
        const std::string s = argv[a];
        if (s == "--stop-on-finding" || s == "--verbose") continue;
        if (s == "--seed" || s == "--runs" || s == "--seconds" || s == "--keep" || s == "--shrink-seconds" ||
            s == "--repeat") {
          ++a;
          continue;
        }
        args += " " + s;
      }
      std::printf("model: replay with: redislock_model%s --seed %llu --replay --keep %s\n", args.c_str(),
                  (unsigned long long)seed, keep_argument(small).c_str());
      std::fflush(stdout);
      if (cfg.stop_on_finding) break;
    }
    std::string faults;
    for (const auto& [k, n] : all_faults) faults += (faults.empty() ? "" : " ") + k + "=" + std::to_string(n);
    std::printf("model: total runs=%d ops=%lld faults=(%s) setups_replaced=%d failed=%d %s\n", runs_done, all_ops,
                faults.empty() ? "none" : faults.c_str(), setups_replaced, failed, failed ? "FAIL" : "PASS");
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redislock_model: %s\n", e.what());
    return 1;
  }
}
