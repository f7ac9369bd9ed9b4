#pragma once
// The torture checker's cluster mode, coordinator side: a 3-master, 3-replica Redis Cluster
// (tests/harness/redis_cluster.hpp), the lock names spread over its masters, and its faults:
//   failover      CLUSTER FAILOVER on a random master's replica (a manual failover: the replica
//                 catches up first, so no lock should be lost);
//   master-kill9  kill -9 of a random master; its replica is promoted after cluster-node-timeout
//                 (2 s) and an election; then the killed node starts again (empty: no
//                 persistence; with its nodes.conf) and rejoins as the new master's replica;
//   migrate       the slot of a random lock name moves to another master (SETSLOT MIGRATING /
//                 IMPORTING, MIGRATE of its keys, SETSLOT NODE), as redis-cli --cluster reshard.
// Each failover fault opens a failover window (checker.hpp) before it starts and closes it one
// lease after the cluster serves again: every node up, cluster_state:ok, one slot map. A
// migration opens none.

#include "checker.hpp"
#include "redis_cluster.hpp"

#include <redislock/redislock.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace redislock_torture {

class cluster_faults {
 public:
  static constexpr int masters = 3;
  using steady = std::chrono::steady_clock;

  cluster_faults(shared_state& state, std::chrono::milliseconds lease, std::mt19937& rng)
      : state_(state), lease_(lease), rng_(rng), cluster_(masters, 1) {
    // A killed master comes back as a replica and needs a full sync before the next fault;
    // Redis waits 5 s by default for more replicas to share a diskless one.
    for (std::size_t i = 0; i < cluster_.size(); ++i)
      cluster_.node(i).admin().command({"CONFIG", "SET", "repl-diskless-sync-delay", "0"});
  }

  /// Every node's port: the workers' seeds (any live one will do).
  std::vector<int> ports() {
    std::vector<int> out;
    for (std::size_t i = 0; i < cluster_.size(); ++i) out.push_back(cluster_.node(i).port());
    return out;
  }

  /// `count` lock names (prefix `base`), name i on the i % 3-th master, so that with the kinds
  /// cycling every 3 names (torture.cpp) each kind runs on each master.
  std::vector<std::string> spread_names(const std::string& base, int count) {
    const std::vector<int> by_master = cluster_.masters();
    std::vector<std::string> names;
    for (int candidate = 0; static_cast<int>(names.size()) < count; ++candidate) {
      if (candidate > 100000) throw std::runtime_error("cluster_faults: cannot spread the lock names");
      const std::string name = base + std::to_string(candidate);
      const int want = by_master[names.size() % by_master.size()];
      if (cluster_.master_of(slot_of(name)) == want) names.push_back(name);
    }
    names_ = names;
    return names;
  }

  /// Runs one fault to its end (the cluster stable again); false if the cluster did not
  /// recover within the bound (a stall). Throws redislock::error when a node refuses an
  /// administrative command.
  bool inject(const std::string& fault) {
    const auto bound = std::chrono::seconds(30);
    // A replica that never synced (a new cluster, a victim back from the last fault) is not
    // eligible for promotion: every replica's link must be up before the next fault.
    if (fault != "migrate" && !wait_for([&] { return cluster_.replicas_linked(); }, bound)) return false;
    fault_start_ns_ = now_ns();
    serving_ns_ = 0;
    if (fault == "failover") {
      const int master = random_master(), replica = cluster_.replica_of(master);
      if (replica == 0) return false;
      const window w(*this);
      if (!redislock_test::redis_cluster::manual_failover(replica, bound)) {
        print_logs("the replica on " + std::to_string(replica) + " was not promoted", {replica, master});
        return false;
      }
      promoted();
      return stable_or_print_logs(bound);
    }
    if (fault == "master-kill9") {
      const int master = random_master();
      redislock_test::redis_server& victim = cluster_.node_on(master);
      state_.master_data_losses.fetch_add(1);  // what it had not yet replicated is gone
      const window w(*this);
      victim.kill();
      // Promoted: no live node's slot map names the victim any more.
      const bool was_promoted = wait_for([&] { return !cluster_.serves_slots(master); }, bound) && promoted();
      if (!was_promoted) std::fprintf(stderr, "torture: no replica of %d was promoted\n", master);
      victim.start_again();  // rejoins as a replica of its successor (nodes.conf kept)
      return stable_or_print_logs(bound) && was_promoted;
    }
    if (fault == "migrate") {
      // Not while the last fault's epochs are still spreading (see wait_until_stable()).
      if (!stable_or_print_logs(bound)) return false;
      fault_start_ns_ = now_ns();  // recovery counts from the move, not from the wait
      const std::string& name = names_.at(std::uniform_int_distribution<std::size_t>(0, names_.size() - 1)(rng_));
      const int slot = slot_of(name), from = cluster_.master_of(slot);
      std::vector<int> others;
      for (int p : cluster_.masters())
        if (p != from) others.push_back(p);
      if (others.empty()) return false;
      cluster_.migrate_slot(slot, from, others[std::uniform_int_distribution<std::size_t>(0, others.size() - 1)(rng_)]);
      mark_recovery_start();
      return stable_or_print_logs(bound);
    }
    throw std::invalid_argument("cluster_faults: unknown fault " + fault);
  }

  /// After inject(): waits until every lock name was acquired again since the cluster served
  /// again (or since the slot moved), bounded; returns the time from the fault's start to the
  /// last name's first acquisition, or -1 when some name stayed unacquired.
  long long await_recovery(std::chrono::milliseconds bound) {
    const auto end = steady::now() + bound;
    for (;;) {
      std::int64_t last = 0;
      bool all = true;
      for (std::size_t i = 0; i < names_.size(); ++i) {
        const std::int64_t t = state_.names[i].first_since_mark_ns.load();
        if (t == 0) all = false;
        last = std::max(last, t);
      }
      if (all) return (last - fault_start_ns_) / 1000000;
      if (steady::now() >= end) {
        for (std::size_t i = 0; i < names_.size(); ++i)
          if (state_.names[i].first_since_mark_ns.load() == 0)
            std::fprintf(stderr, "torture: lock name %s (%zu) not acquired since the fault\n", names_[i].c_str(), i);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling shared counters, bounded
    }
  }

  /// Time from the last failover fault's start until the new master served (ms).
  long long last_promotion_ms() const { return promotion_ms_; }
  /// Total time spent inside failover windows (ms).
  long long window_ms() const { return window_ns_ / 1000000; }
  std::uint64_t windows() const { return state_.windows_opened.load(); }

 private:
  // A failover window, open for the object's life (closed even when the fault throws).
  struct window {
    cluster_faults& faults;
    explicit window(cluster_faults& f) : faults(f) { faults.open_window(); }
    ~window() { faults.close_window(); }
    window(const window&) = delete;
    window& operator=(const window&) = delete;
  };

  // Prints the last lines of the nodes' logs (every node when `ports` is empty) after a fault
  // the cluster did not get over: what Redis said is the first thing to read.
  void print_logs(const std::string& what, std::vector<int> ports = {}) {
    std::fprintf(stderr, "torture: %s\n", what.c_str());
    for (std::size_t i = 0; i < cluster_.size(); ++i) {
      const redislock_test::redis_server& n = cluster_.node(i);
      if (!ports.empty() && std::find(ports.begin(), ports.end(), n.port()) == ports.end()) continue;
      std::fprintf(stderr, "--- log of the node on %d (last lines)\n%s\n", n.port(), n.recent_log().c_str());
    }
  }
  bool stable_or_print_logs(std::chrono::milliseconds bound) {
    if (cluster_.wait_until_stable(bound)) return true;
    print_logs("the cluster is not stable: " + cluster_.unstable_because());
    return false;
  }

  static int slot_of(const std::string& name) {
    return redislock::detail::key_slot(redislock::detail::base_key(name, redislock::lock_options{}));
  }

  template <class Condition>
  static bool wait_for(Condition&& done, std::chrono::milliseconds bound) {
    return redislock_test::redis_cluster::poll_until(done, steady::now() + bound);
  }

  int random_master() {
    const std::vector<int> ports = cluster_.masters();
    return ports.at(std::uniform_int_distribution<std::size_t>(0, ports.size() - 1)(rng_));
  }
  void open_window() {
    const std::uint64_t i = state_.windows_opened.load();
    if (i >= shared_state::max_windows) throw std::runtime_error("cluster_faults: too many failover windows");
    state_.windows[i].start_ns.store(fault_start_ns_);
    state_.windows[i].end_ns.store(INT64_MAX);
    state_.windows_opened.store(i + 1);  // published after its fields (the workers read in order)
  }
  // The new master serves: the window ends a lease from now; recovery counts from here on.
  bool promoted() {
    serving_ns_ = now_ns();
    promotion_ms_ = (serving_ns_ - fault_start_ns_) / 1000000;
    mark_recovery_start();
    return true;
  }
  void close_window() {
    const std::uint64_t i = state_.windows_opened.load() - 1;
    const std::int64_t end =
        std::max(serving_ns_, now_ns()) + std::chrono::duration_cast<std::chrono::nanoseconds>(lease_).count();
    state_.windows[i].end_ns.store(end);
    window_ns_ += end - state_.windows[i].start_ns.load();
  }
  void mark_recovery_start() {
    for (std::size_t i = 0; i < names_.size(); ++i) state_.names[i].first_since_mark_ns.store(0);
    state_.recovery_mark_ns.store(now_ns());
  }

  shared_state& state_;
  std::chrono::milliseconds lease_;
  std::mt19937& rng_;
  redislock_test::redis_cluster cluster_;
  std::vector<std::string> names_;
  std::int64_t fault_start_ns_ = 0, serving_ns_ = 0, window_ns_ = 0;
  long long promotion_ms_ = 0;
};

}  // namespace redislock_torture
