// redislock_test_with_server <program> [args...]
// Starts a throwaway redis-server on a free loopback port, runs the program with
// REDISLOCK_URI set to it, stops the server, and exits with the program's status.
#include "process.hpp"
#include "redis_server.hpp"

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: redislock_test_with_server <program> [args...]\n");
    return 2;
  }
  try {
    redislock_test::redis_server server;
    ::setenv("REDISLOCK_URI", server.uri().c_str(), 1);
    redislock_test::child_process program(std::vector<std::string>(argv + 1, argv + argc));
    const int status = program.wait_for(std::chrono::minutes(10));
    return status < 0 ? 124 : status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redislock_test_with_server: %s\n", e.what());
    return 1;
  }
}
