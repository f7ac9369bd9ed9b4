#pragma once
// A throwaway Redis Cluster on loopback: `masters` masters with `replicas` replicas each,
// every node a redis_server on a free port whose bus port (+10000) is free too, joined by
// `redis-cli --cluster create`, ready once every node reports cluster_state:ok and agrees on
// the slot map. Stopped (and its temporary directories removed) by the destructor.

#include "process.hpp"
#include "redis_server.hpp"

#include <redislock/cluster_client.hpp>
#include <redislock/connection.hpp>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace redislock_test {

inline std::string redis_cli_binary() {
  const char* env = std::getenv("REDISLOCK_REDIS_CLI");
  return env && *env ? env : "redis-cli";
}

class redis_cluster {
 public:
  /// `extra`: more redis-server arguments for every node.
  explicit redis_cluster(int masters = 3, int replicas = 1, const std::vector<std::string>& extra = {}) {
    for (int i = 0; i < masters * (1 + replicas); ++i) {
      // Each node keeps nodes.conf in its own temporary directory (redis_server's). A short node timeout keeps failure
      // detection quick; the manual failover of the tests does not depend on it.
      std::vector<std::string> args = {"--cluster-enabled",      "yes", "--cluster-config-file", "nodes.conf",
                                       "--cluster-node-timeout", "2000"};
      args.insert(args.end(), extra.begin(), extra.end());
      nodes_.push_back(std::make_unique<redis_server>(args, true));
    }
    std::vector<std::string> argv = {redis_cli_binary(), "--cluster", "create"};
    for (const auto& n : nodes_) argv.push_back("127.0.0.1:" + std::to_string(n->port()));
    argv.insert(argv.end(), {"--cluster-replicas", std::to_string(replicas), "--cluster-yes"});
    const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    child_process create(argv, devnull);
    if (devnull >= 0) ::close(devnull);
    if (create.wait_for(std::chrono::seconds(60)) != 0)
      throw std::runtime_error("redis_cluster: redis-cli --cluster create failed");
    if (!wait_until_stable(std::chrono::seconds(30)))
      throw std::runtime_error("redis_cluster: not stable within 30 s: " + unstable_because_);
  }
  ~redis_cluster() {
    for (auto& n : nodes_) n->stop();
  }
  redis_cluster(const redis_cluster&) = delete;
  redis_cluster& operator=(const redis_cluster&) = delete;

  std::size_t size() const { return nodes_.size(); }
  redis_server& node(std::size_t i) { return *nodes_.at(i); }

  /// The cluster_client options seeded with the first node only (the rest is discovered).
  redislock::cluster_options options() const {
    redislock::cluster_options o;
    o.seeds.push_back(nodes_.front()->options());
    return o;
  }
  std::string uri() const { return "redis-cluster://127.0.0.1:" + std::to_string(nodes_.front()->port()); }

  /// A plain connection to the node listening on `port` (commands wait `timeout` for a reply).
  /// 5 s by default: Valkey (8 on) replicates CLUSTER SETSLOT to the master's replicas and waits
  /// up to 2 s for them to confirm before it answers (a busy machine made 1 s too short).
  static redislock::connection admin(int port, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    redislock::connection_options o;
    o.host = "127.0.0.1";
    o.port = port;
    o.command_timeout = timeout;
    return redislock::connection(o);
  }
  static std::string text(const redislock::reply_ptr& r) { return std::string(r->str, r->len); }
  static std::string node_id(int port) { return text(admin(port).command({"CLUSTER", "MYID"})); }

  /// Port of the master that serves `slot`, as node 0 sees it.
  int master_of(int slot) { return owner_seen_by(nodes_.front()->port(), slot); }
  /// Port of the master that serves `slot` as the node on `port` sees it (0: none).
  static int owner_seen_by(int port, int slot) {
    for (const auto& range :
         redislock::detail::parse_cluster_slots(*admin(port).command({"CLUSTER", "SLOTS"}), "127.0.0.1"))
      if (slot >= range.first && slot <= range.last) return range.port;
    return 0;
  }
  /// Ports of the current masters (nodes whose role is master and that serve slots).
  std::vector<int> masters() {
    redislock::connection c = admin(nodes_.front()->port());
    std::vector<int> out;
    for (const auto& range : redislock::detail::parse_cluster_slots(*c.command({"CLUSTER", "SLOTS"}), "127.0.0.1"))
      if (std::find(out.begin(), out.end(), range.port) == out.end()) out.push_back(range.port);
    return out;
  }
  /// Port of a replica of the master on `master_port` (0 when none).
  int replica_of(int master_port) {
    for (const auto& n : nodes_) {
      redislock::connection c = admin(n->port());
      std::string info = text(c.command({"INFO", "replication"}));
      if (info.find("role:slave") != std::string::npos &&
          info.find("master_port:" + std::to_string(master_port) + "\r") != std::string::npos)
        return n->port();
    }
    return 0;
  }

  /// The node listening on `port`.
  redis_server& node_on(int port) {
    for (auto& n : nodes_)
      if (n->port() == port) return *n;
    throw std::runtime_error("redis_cluster: no node on port " + std::to_string(port));
  }

  /// Whether every replica's link to its master is up (a replica that never synced, such as a
  /// killed master back as a replica, is not eligible for promotion yet).
  bool replicas_linked() {
    for (auto& n : nodes_) {
      const std::string info = text(n->admin().command({"INFO", "replication"}));
      if (info.find("role:slave") != std::string::npos && info.find("master_link_status:up") == std::string::npos)
        return false;
    }
    return true;
  }

  /// Whether any live node other than the one on `port` gives `port` slots in its slot map.
  bool serves_slots(int port) {
    for (auto& n : nodes_) {
      if (n->port() == port || !n->running()) continue;
      const redislock::reply_ptr r = n->admin().command({"CLUSTER", "SLOTS"});
      for (const auto& range : redislock::detail::parse_cluster_slots(*r, "127.0.0.1"))
        if (range.port == port) return true;
    }
    return false;
  }

  /// Moves `slot` from the master on `src` to the master on `dst` the way redis-cli reshards:
  /// IMPORTING / MIGRATING, MIGRATE of its keys in batches, then SETSLOT NODE on every master;
  /// `after_migrating` runs once the slot is marked migrating, `after_keys` once its keys moved.
  /// Its commands wait up to 10 s: a node may hold writes back for a while (a manual failover
  /// pauses its old master's clients until the new master is known), and MIGRATE has 5 s.
  /// MIGRATE replaces a key the target already has: while the source holds a key, every client
  /// of it is served there, so the target's copy is an older one (a MIGRATE whose reply was
  /// lost, or a key made through ASK before an earlier move was cut short).
  void migrate_slot(int slot, int src, int dst, const std::function<void()>& after_migrating = {},
                    const std::function<void()>& after_keys = {}) {
    const std::string s = std::to_string(slot), dst_id = node_id(dst);
    const std::chrono::seconds patient(10);
    redislock::connection source = admin(src, patient), target = admin(dst, patient);
    target.command({"CLUSTER", "SETSLOT", s, "IMPORTING", node_id(src)});
    source.command({"CLUSTER", "SETSLOT", s, "MIGRATING", dst_id});
    if (after_migrating) after_migrating();
    for (int round = 0; round < 100; ++round) {
      redislock::reply_ptr keys = source.command({"CLUSTER", "GETKEYSINSLOT", s, "1000"});
      if (keys->elements == 0) break;
      std::vector<std::string> argv = {"MIGRATE", "127.0.0.1", std::to_string(dst), "", "0", "5000", "REPLACE", "KEYS"};
      for (std::size_t i = 0; i < keys->elements; ++i) argv.emplace_back(keys->element[i]->str, keys->element[i]->len);
      source.command(std::vector<std::string_view>(argv.begin(), argv.end()));
    }
    if (after_keys) after_keys();
    target.command({"CLUSTER", "SETSLOT", s, "NODE", dst_id});
    source.command({"CLUSTER", "SETSLOT", s, "NODE", dst_id});
    for (int port : masters())
      if (port != src && port != dst) admin(port, patient).command({"CLUSTER", "SETSLOT", s, "NODE", dst_id});
  }

  /// Moves `slot` to the master on `dst` and sees the move through; "" when every node agrees
  /// that `dst` serves it, else why not (after 3 attempts, each waiting up to `bound` for the
  /// cluster to settle). Each attempt starts from the slot's owner as most nodes see it then:
  /// a failover during an attempt leaves the move half done with a source that is now a
  /// replica, and a target still importing from that replica never takes the new owner's word
  /// for the slot (it counts the slot as unassigned: cluster_state:fail, for good). Taken up
  /// again from the new owner (or, when `dst` already owns the slot, with SETSLOT NODE alone),
  /// the move ends that state: a move left open is first closed (unwind_move()).
  std::string move_slot_to(int slot, int dst, std::chrono::milliseconds bound) {
    std::string why;
    for (int attempt = 1; attempt <= 3; ++attempt) {
      try {
        unwind_move(slot, bound);
        wait_until_stable(bound);  // no wait when settled; a move is tried either way
        const int from = owner_by_most(slot);
        if (from == 0) throw std::runtime_error("no node names an owner of slot " + std::to_string(slot));
        if (from != dst) migrate_slot(slot, from, dst);
        else
          for (int port : masters_by_role())
            admin(port, std::chrono::seconds(10))
                .command({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", node_id(dst)});
        if (wait_until_stable(bound)) return {};
        why = "not stable after the move: " + unstable_because_;
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    return "the slot move failed 3 times, last: " + why + describe_slot(slot);
  }

  /// Closes a move of `slot` left open (CLUSTER SETSLOT STABLE on each master that shows it
  /// importing or migrating, then SETSLOT NODE <owner>), once the nodes outside the move agree
  /// on the slot's owner (within `bound`) and no master but that owner holds keys of the slot,
  /// so closing strands none. A node importing the slot from a node that is not its owner
  /// counts the slot as unassigned and refuses every command (CLUSTERDOWN) until it is closed,
  /// and closed, it still waits for a change in the owner's claim that never comes: it is told
  /// the owner. True when it closed one.
  bool unwind_move(int slot, std::chrono::milliseconds bound) {
    const std::string s = std::to_string(slot);
    std::vector<int> open;
    for (int port : masters_by_role()) {
      std::istringstream lines(text(admin(port).command({"CLUSTER", "NODES"})));
      for (std::string line; std::getline(lines, line);)
        if (line.find("myself") != std::string::npos &&
            (line.find("[" + s + "-<-") != std::string::npos || line.find("[" + s + "->-") != std::string::npos))
          open.push_back(port);
    }
    if (open.empty()) return false;
    int owner = 0;
    if (!poll_until([&] { return (owner = agreed_owner(slot, open)) != 0; }, std::chrono::steady_clock::now() + bound))
      return false;
    for (int port : masters_by_role())
      if (port != owner && admin(port).command({"CLUSTER", "COUNTKEYSINSLOT", s})->integer > 0) return false;
    const std::string owner_id = node_id(owner);
    for (int port : open) {
      redislock::connection c = admin(port, std::chrono::seconds(10));
      c.command({"CLUSTER", "SETSLOT", s, "STABLE"});
      if (port != owner) c.command({"CLUSTER", "SETSLOT", s, "NODE", owner_id});
    }
    return true;
  }

  /// The master every running node but those in `excluded` names as the owner of `slot` in
  /// CLUSTER SLOTS, and that says it is a master itself; 0 while they disagree.
  int agreed_owner(int slot, const std::vector<int>& excluded) {
    int owner = 0;
    for (auto& n : nodes_) {
      if (!n->running() || std::find(excluded.begin(), excluded.end(), n->port()) != excluded.end()) continue;
      const int named = owner_seen_by(n->port(), slot);
      if (named == 0 || (owner != 0 && named != owner)) return 0;
      owner = named;
    }
    return owner != 0 && is_master(owner) ? owner : 0;
  }

  /// The port most nodes name as the master of `slot` in CLUSTER SLOTS (0 when none does).
  int owner_by_most(int slot) {
    std::map<int, int> votes;
    for (auto& n : nodes_) {
      if (!n->running()) continue;
      try {
        if (const int named = owner_seen_by(n->port(), slot)) ++votes[named];
      } catch (const redislock::error&) {  // a node restarting: it has no vote
      }
    }
    int best = 0, most = 0;
    for (const auto& [port, n] : votes)
      if (n > most) best = port, most = n;
    return best;
  }

  /// Ports of the running nodes whose own INFO says role:master (a stale slot map may still
  /// name a node just demoted, which refuses writes with READONLY).
  std::vector<int> masters_by_role() {
    std::vector<int> out;
    for (auto& n : nodes_) {
      if (!n->running()) continue;
      try {
        if (is_master(n->port())) out.push_back(n->port());
      } catch (const redislock::error&) {
      }
    }
    return out;
  }

  /// Each node's view of `slot`, for a failure message: port, role, keys of the slot it holds
  /// (with their PTTL), and the slot's state in its own CLUSTER NODES line (importing or
  /// migrating shows as "[slot-<-id]" / "[slot->-id]").
  std::string describe_slot(int slot) {
    std::string out;
    const std::string s = std::to_string(slot);
    for (auto& n : nodes_) {
      out += "\n  node " + std::to_string(n->port()) + ": ";
      if (!n->running()) {
        out += "down";
        continue;
      }
      try {
        redislock::connection c = admin(n->port());
        const std::string info = text(c.command({"INFO", "replication"}));
        out += info.find("role:master") != std::string::npos ? "master" : "replica";
        const redislock::reply_ptr keys = c.command({"CLUSTER", "GETKEYSINSLOT", s, "10"});
        out += ", keys of the slot:";
        for (std::size_t i = 0; i < keys->elements; ++i) {
          const std::string k(keys->element[i]->str, keys->element[i]->len);
          out += " " + k;
          try {
            out += " (pttl " + std::to_string(c.command({"PTTL", k})->integer) + ")";
          } catch (const redislock::error& e) {  // a key of a slot the node does not serve
            out += std::string(" (") + e.what() + ")";
          }
        }
        std::istringstream lines(text(c.command({"CLUSTER", "NODES"})));
        for (std::string line; std::getline(lines, line);)
          if (line.find("myself") != std::string::npos) {
            const std::size_t open = line.find('[');
            out += open == std::string::npos ? ", no slot in a move" : ", moves " + line.substr(open);
          }
      } catch (const redislock::error& e) {
        out += std::string("not answering: ") + e.what();
      }
    }
    return out;
  }

  /// Looks at `done` every 20 ms until it returns true (true), or until `end` (false). A
  /// redislock::error from it counts as "not yet" (a node restarting, a stale map).
  template <class Condition>
  static bool poll_until(Condition&& done, std::chrono::steady_clock::time_point end) {
    for (;;) {
      try {
        if (done()) return true;
      } catch (const redislock::error&) {
      }
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the cluster, bounded
    }
  }

  /// Whether the node on `port` is a master (INFO replication).
  static bool is_master(int port) {
    return text(admin(port).command({"INFO", "replication"})).find("role:master") != std::string::npos;
  }

  /// Whether a replica of the master on `port` has acknowledged every write the master took
  /// before this call (its offset in INFO replication has reached the master's); false after
  /// `bound`. Not WAIT: WAIT counts the writes of the connection that sends it, and this one
  /// has made none (a lock's SET came through the cluster client's own connection), so it would
  /// answer at once with the replicas online.
  static bool replicated(int port, std::chrono::milliseconds bound) {
    long long target = -1;
    return poll_until(
        [&] {
          const std::string info = text(admin(port).command({"INFO", "replication"}));
          if (target < 0) {
            const std::string offset = info_field(info, "master_repl_offset");
            if (!offset.empty()) target = std::atoll(offset.c_str());
          }
          // Replicas are listed as "slaveN:ip=...,port=...,state=online,offset=N,lag=N" (they
          // acknowledge about once a second).
          for (std::size_t at = info.find("state=online,offset="); at != std::string::npos;
               at = info.find("state=online,offset=", at + 1))
            if (target >= 0 && std::atoll(info.c_str() + at + 20) >= target) return true;
          return false;
        },
        std::chrono::steady_clock::now() + bound);
  }

  /// CLUSTER FAILOVER on `replica` until it is a master; false after `bound`. Redis gives a
  /// manual failover 5 s (CLUSTER_MF_TIMEOUT) and then drops it without a word, as when the
  /// replica could not catch up or win the vote in time on a loaded machine: it is asked again
  /// every 6 s, as an operator would. Refusals and new rounds are printed to stderr.
  static bool manual_failover(int replica, std::chrono::milliseconds bound) {
    const auto end = std::chrono::steady_clock::now() + bound;
    for (int round = 1;; ++round) {
      try {
        admin(replica).command({"CLUSTER", "FAILOVER"});
      } catch (const redislock::error& e) {
        // Refused: promoted since the last look ("send CLUSTER FAILOVER to a replica"), or its
        // master is seen down; the wait below tells which.
        std::fprintf(stderr, "redis_cluster: CLUSTER FAILOVER on %d refused: %s\n", replica, e.what());
      }
      const auto round_end = std::min(end, std::chrono::steady_clock::now() + std::chrono::seconds(6));
      if (poll_until([&] { return is_master(replica); }, round_end)) return true;
      if (std::chrono::steady_clock::now() >= end) return false;
      std::fprintf(stderr, "redis_cluster: CLUSTER FAILOVER on %d not done within 6 s (round %d): asked again\n",
                   replica, round);
    }
  }

  /// CLUSTER FAILOVER TAKEOVER on `replica`: it takes its master's slots with a new config epoch
  /// at once, without an election, and the old master turns into its replica on hearing of it.
  /// True once both are so, false after `bound`. For tests that fail the same shard over
  /// repeatedly: Redis 7.0 can take a manual failover asked of a replica that won an election
  /// a few seconds before as won again without a new epoch (seen here, the third manual
  /// failover of one shard within 3 s: "Failover election won" with no election, the node a
  /// replica again 50 ms later, the old master still serving the slots).
  static bool takeover(int replica, int master, std::chrono::milliseconds bound) {
    admin(replica).command({"CLUSTER", "FAILOVER", "TAKEOVER"});
    return poll_until([&] { return is_master(replica) && !is_master(master); },
                      std::chrono::steady_clock::now() + bound);
  }

  /// Every node reports cluster_state:ok, the same slot map, the same current epoch and the
  /// same config epoch of every live master as node 0, and no two masters share one; false
  /// after `bound`, and unstable_because() says what was still wrong at the last look.
  /// The epochs matter to the next slot move: its importer takes "current epoch + 1" as its
  /// own, and one that has not yet learned the last move's epoch takes the same number as the
  /// last importer. With Redis 7.0 that tie can leave two masters each naming the other as the
  /// slot's owner for good (seen with three CPU-bound processes beside a 3-master cluster: 13
  /// of 1,000 moves back and forth without this wait, 0 of 1,000 with it).
  bool wait_until_stable(std::chrono::milliseconds bound) {
    return poll_until(
        [&] {
          unstable_because_ = instability();
          return unstable_because_.empty();
        },
        std::chrono::steady_clock::now() + bound);
  }
  const std::string& unstable_because() const { return unstable_because_; }

 private:
  // Why the cluster is not stable yet, or "" when it is (see wait_until_stable()).
  std::string instability() {
    try {
      std::string reference_map, reference_epoch, reference_masters;
      for (const auto& n : nodes_) {
        const std::string at = "node " + std::to_string(n->port()) + ": ";
        redislock::connection c = n->admin();
        const std::string info = text(c.command({"CLUSTER", "INFO"}));
        if (info.find("cluster_state:ok") == std::string::npos) return at + "cluster_state is not ok";
        const std::string epoch = info_field(info, "cluster_current_epoch");
        if (reference_epoch.empty()) reference_epoch = epoch;
        else if (epoch != reference_epoch) return at + "current epoch " + epoch + ", node 0: " + reference_epoch;
        std::string masters;
        if (!master_epochs(text(c.command({"CLUSTER", "NODES"})), masters))
          return at + "masters share an epoch: " + masters;
        if (reference_masters.empty()) reference_masters = masters;
        else if (masters != reference_masters)
          return at + "masters' epochs " + masters + ", node 0: " + reference_masters;
        // In slot order: Redis 6.0 lists the ranges in each node's own order.
        auto ranges = redislock::detail::parse_cluster_slots(*c.command({"CLUSTER", "SLOTS"}), "127.0.0.1");
        std::sort(ranges.begin(), ranges.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
        std::string map;
        for (const auto& range : ranges)
          map +=
              std::to_string(range.first) + "-" + std::to_string(range.last) + "@" + std::to_string(range.port) + ";";
        if (map.empty()) return at + "no slots";
        if (reference_map.empty()) reference_map = map;
        else if (map != reference_map) return at + "slot map " + map + ", node 0: " + reference_map;
      }
      return {};
    } catch (const redislock::error& e) {
      return std::string("not answering: ") + e.what();
    }
  }

  // The value of `field` in a CLUSTER INFO reply ("field:value\r\n" lines); empty if absent.
  static std::string info_field(const std::string& info, const std::string& field) {
    const std::size_t at = info.find(field + ":");
    if (at == std::string::npos) return {};
    const std::size_t from = at + field.size() + 1;
    return info.substr(from, info.find_first_of("\r\n", from) - from);
  }

  // Writes the live masters of a CLUSTER NODES reply to `out` as "<id>=<config epoch>;..." in
  // id order; false when two share an epoch. Fields: "<id> <addr> <flags> <master> <ping>
  // <pong> <config epoch> <link> <slots...>" (a replica's line shows its master's epoch). A
  // master flagged failed settles its epoch once back, or leaves: not a live tie.
  static bool master_epochs(const std::string& nodes, std::string& out) {
    std::vector<std::pair<std::string, std::string>> masters;  // id, epoch
    std::istringstream lines(nodes);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::string id, addr, flags, master, ping, pong, config_epoch;
      if (!(fields >> id >> addr >> flags >> master >> ping >> pong >> config_epoch)) continue;
      if (!has_flag(flags, "master") || has_flag(flags, "fail")) continue;
      masters.emplace_back(id, config_epoch);
    }
    std::sort(masters.begin(), masters.end());
    bool distinct = true;
    out.clear();
    for (std::size_t i = 0; i < masters.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) distinct = distinct && masters[j].second != masters[i].second;
      out += masters[i].first + "=" + masters[i].second + ";";
    }
    return distinct;
  }
  // Whether the comma-separated `flags` has exactly `flag` ("fail" is not "fail?").
  static bool has_flag(const std::string& flags, const std::string& flag) {
    return ("," + flags + ",").find("," + flag + ",") != std::string::npos;
  }

  std::string unstable_because_;
  std::vector<std::unique_ptr<redis_server>> nodes_;
};

}  // namespace redislock_test
