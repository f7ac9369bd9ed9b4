// redislock_test_with_server [--topology single|sentinel|cluster|redlock] <program> [args...]
// Starts throwaway servers on free loopback ports, runs the program with their address in its
// environment, stops the servers, and exits with the program's status:
//   single    one redis-server                           REDISLOCK_URL=redis://127.0.0.1:PORT
//   sentinel  a master, a replica and three sentinels    REDISLOCK_SENTINEL_URI=redis-sentinel://...
//   cluster   a 3-master Redis Cluster                    REDISLOCK_CLUSTER_URI=redis-cluster://...
//   redlock   three independent masters                  REDISLOCK_REDLOCK_URIS=redis://A,redis://B,redis://C
// The examples and the consumer projects are run by it as tests, and scripts/demo.sh runs the
// stock example with it.
#include "process.hpp"
#include "redis_cluster.hpp"
#include "redis_server.hpp"
#include "sentinel_topology.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

int run_program(char** first, char** last) {
  redislock_test::child_process program(std::vector<std::string>(first, last));
  const int status = program.wait_for(std::chrono::minutes(10));
  return status < 0 ? 124 : status;
}

int usage() {
  std::fprintf(stderr,
               "usage: redislock_test_with_server [--topology single|sentinel|cluster|redlock] <program> [args...]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string topology = "single";
  int first = 1;
  if (argc > 2 && std::strcmp(argv[1], "--topology") == 0) {
    topology = argv[2];
    first = 3;
  }
  if (first >= argc) return usage();
  try {
    if (topology == "single") {
      redislock_test::redis_server server;
      ::setenv("REDISLOCK_URL", server.uri().c_str(), 1);
      return run_program(argv + first, argv + argc);
    }
    if (topology == "sentinel") {
      redislock_test::sentinel_topology sentinel;
      ::setenv("REDISLOCK_SENTINEL_URI", sentinel.uri().c_str(), 1);
      return run_program(argv + first, argv + argc);
    }
    if (topology == "cluster") {
      redislock_test::redis_cluster cluster(3, 0);
      ::setenv("REDISLOCK_CLUSTER_URI", cluster.uri().c_str(), 1);
      return run_program(argv + first, argv + argc);
    }
    if (topology == "redlock") {
      std::vector<std::unique_ptr<redislock_test::redis_server>> masters;
      std::string uris;
      for (int i = 0; i < 3; ++i) {
        masters.push_back(std::make_unique<redislock_test::redis_server>());
        uris += (i ? "," : "") + masters.back()->uri();
      }
      ::setenv("REDISLOCK_REDLOCK_URIS", uris.c_str(), 1);
      return run_program(argv + first, argv + argc);
    }
    return usage();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redislock_test_with_server: %s\n", e.what());
    return 1;
  }
}
