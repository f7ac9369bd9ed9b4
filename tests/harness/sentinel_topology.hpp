#pragma once
// A throwaway Sentinel set-up: two data nodes (a master and its replica, both with requirepass
// and masterauth so either can be master) and three sentinels (quorum 2, their own password,
// down-after 500 ms, failover-timeout 2 s) on free loopback ports. Readiness and health are
// polled with a bounded deadline.

#include "redis_server.hpp"
#include "server_version.hpp"
#include "redis_stats.hpp"

#include <redislock/connection.hpp>
#include <redislock/errors.hpp>
#include <redislock/options.hpp>
#include <redislock/reply.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace redislock_test {

class sentinel_topology {
 public:
  static constexpr const char* service = "mymaster";
  static constexpr const char* data_password = "data-secret";
  static constexpr const char* sentinel_password = "sentinel-secret";

  /// `extra`: more redis-server arguments for both data nodes (kept on restart_as_replica()).
  explicit sentinel_topology(std::vector<std::string> extra = {}) : extra_(std::move(extra)) {
    nodes_[0] = std::make_unique<redis_server>(data_args({}));
    nodes_[1] =
        std::make_unique<redis_server>(data_args({"--replicaof", "127.0.0.1", std::to_string(nodes_[0]->port())}));
    std::string conf = "sentinel monitor " + std::string(service) + " 127.0.0.1 " + std::to_string(nodes_[0]->port()) +
                       " 2\n"
                       "sentinel auth-pass " +
                       std::string(service) + " " + data_password +
                       "\n"
                       "sentinel down-after-milliseconds " +
                       std::string(service) +
                       " 500\n"
                       "sentinel failover-timeout " +
                       std::string(service) +
                       " 2000\n"
                       "requirepass " +
                       std::string(sentinel_password) + "\n";
    // Sentinels authenticate to each other with sentinel-pass since Redis 6.2, with their own
    // requirepass before (6.0 does not know the option).
    if (server_binary_version() >= 60200) conf += "sentinel sentinel-pass " + std::string(sentinel_password) + "\n";
    for (int i = 0; i < 3; ++i) sentinels_.push_back(std::make_unique<redis_server>(server_config{{}, true, conf}));
    if (!wait_healthy(std::chrono::seconds(30))) throw std::runtime_error("sentinel_topology: not ready within 30 s");
  }

  redis_server& node(int i) { return *nodes_[i]; }
  redis_server& sentinel(int i) { return *sentinels_[i]; }

  /// "h1:p1,h2:p2,h3:p3" for a redis-sentinel:// URI.
  std::string sentinel_hosts() const {
    std::string s;
    for (const auto& x : sentinels_)
      s += (s.empty() ? "" : ",") + std::string("127.0.0.1:") + std::to_string(x->port());
    return s;
  }
  std::string uri() const {
    return "redis-sentinel://:" + std::string(data_password) + "@" + sentinel_hosts() + "/" + service +
           "?sentinel_password=" + sentinel_password;
  }

  redislock::connection_options node_options(int i) const {
    redislock::connection_options o = nodes_[i]->options();
    o.password = data_password;
    return o;
  }
  redislock::connection_options sentinel_options(int i) const {
    redislock::connection_options o = sentinels_[i]->options();
    o.password = sentinel_password;
    return o;
  }

  /// Index of the node that sentinel `s` names as master (-1: none of ours / no answer).
  int master_by_sentinel(int s) const {
    try {
      redislock::connection c(sentinel_options(s));
      redislock::reply_ptr r = c.command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", service});
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) return -1;
      const int port = std::stoi(std::string(r->element[1]->str, r->element[1]->len));
      for (int i = 0; i < 2; ++i)
        if (nodes_[i]->port() == port) return i;
    } catch (const std::exception&) {
    }
    return -1;
  }

  /// The master's index as the first live sentinel says (-1: none answers).
  int master() const {
    for (int s = 0; s < 3; ++s)
      if (sentinels_[s]->running()) {
        int m = master_by_sentinel(s);
        if (m >= 0) return m;
      }
    return -1;
  }

  /// INFO <section> of a node as a field map (empty when it does not answer).
  std::map<std::string, std::string> info(const redislock::connection_options& o, const char* section) const {
    return info_fields(o, section);
  }

  /// SENTINEL MASTER <service> of sentinel `s` as a field map.
  std::map<std::string, std::string> sentinel_view(int s) const {
    std::map<std::string, std::string> fields;
    try {
      redislock::connection c(sentinel_options(s));
      redislock::reply_ptr r = c.command({"SENTINEL", "MASTER", service});
      for (std::size_t i = 0; i + 1 < r->elements; i += 2)
        fields[std::string(r->element[i]->str, r->element[i]->len)] =
            std::string(r->element[i + 1]->str, r->element[i + 1]->len);
    } catch (const std::exception&) {
    }
    return fields;
  }

  /// Every sentinel names the same master, sees the other two sentinels and one replica not
  /// down; the master is a master, its replica's link is up. Polled every 20 ms until `bound`.
  bool wait_healthy(std::chrono::milliseconds bound) const {
    const auto end = std::chrono::steady_clock::now() + bound;
    for (;;) {
      if (healthy()) return true;
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  bool healthy() const {
    const int m = master();
    if (m < 0) return false;
    for (int s = 0; s < 3; ++s) {
      if (master_by_sentinel(s) != m) return false;
      auto v = sentinel_view(s);
      if (v["flags"] != "master" || v["num-slaves"] != "1" || v["num-other-sentinels"] != "2") return false;
    }
    if (info(node_options(m), "replication")["role"] != "master") return false;
    auto r = info(node_options(1 - m), "replication");
    return r["role"] == "slave" && r["master_port"] == std::to_string(nodes_[m]->port()) &&
           r["master_link_status"] == "up";
  }

  /// Prints what healthy() looks at (for a failure's diagnosis).
  void describe() const {
    for (int s = 0; s < 3; ++s) {
      auto v = sentinel_view(s);
      std::printf("sentinel %d: master node %d, flags %s, num-slaves %s, num-other-sentinels %s\n", s,
                  master_by_sentinel(s), v["flags"].c_str(), v["num-slaves"].c_str(), v["num-other-sentinels"].c_str());
    }
    for (int i = 0; i < 2; ++i) {
      auto r = info(node_options(i), "replication");
      std::printf("node %d (port %d): role %s, master_port %s, link %s\n", i, nodes_[i]->port(), r["role"].c_str(),
                  r["master_port"].c_str(), r["master_link_status"].c_str());
    }
  }

  /// Brings a killed node back as a replica of the current master.
  void restart_as_replica(int i) {
    const int m = 1 - i;
    nodes_[i]->restart(data_args({"--replicaof", "127.0.0.1", std::to_string(nodes_[m]->port())}));
  }

 private:
  std::vector<std::string> data_args(std::vector<std::string> more) const {
    std::vector<std::string> a = {"--requirepass", data_password, "--masterauth", data_password};
    a.insert(a.end(), extra_.begin(), extra_.end());
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }

  std::vector<std::string> extra_;

  std::unique_ptr<redis_server> nodes_[2];
  std::vector<std::unique_ptr<redis_server>> sentinels_;
};

}  // namespace redislock_test
