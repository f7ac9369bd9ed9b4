// A worker process for the multi-process tests.
//
//   redislock_test_worker count <port> <lock> <counter-key> <rounds>
//       rounds x { lock; GET counter; SET counter+1; unlock } with an overlap marker
//       (SET NX on entry, DEL on exit). Exit 0 when no overlap was seen, 3 otherwise.
//   redislock_test_worker hold <port> <lock> <lease-ms>
//       acquires the lock, prints "acquired <fencing token>" and waits to be signalled.
//   redislock_test_worker fair-wait <port> <lock> <wait-lease-ms>
//       queues for the lock in fair mode (blocks there until killed, or exits 0 once acquired).
#include <redislock/redislock.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

using namespace redislock;

static client_options options_for(const char* port) {
  client_options o;
  o.connection.port = std::atoi(port);
  o.connection.command_timeout = std::chrono::seconds(5);
  return o;
}

static int count(const char* port, const std::string& lock, const std::string& counter, int rounds) {
  client c(options_for(port));
  mutex m(c, lock);
  connection data(options_for(port).connection);
  const std::string marker = counter + ":inside";
  int overlaps = 0;
  for (int i = 0; i < rounds; ++i) {
    std::lock_guard<mutex> guard(m);
    if (data.command({"SET", marker, "1", "NX"})->type == REDIS_REPLY_NIL) ++overlaps;
    reply_ptr r = data.command({"GET", counter});
    const long value = r->type == REDIS_REPLY_NIL ? 0 : std::stol(std::string(r->str, r->len));
    data.command({"SET", counter, std::to_string(value + 1)});
    data.command({"DEL", marker});
  }
  return overlaps == 0 ? 0 : 3;
}

static int hold(const char* port, const std::string& lock, long lease_ms) {
  client c(options_for(port));
  lock_options o;
  o.lease = std::chrono::milliseconds(lease_ms);
  mutex m(c, lock, o);
  m.lock();
  std::printf("acquired %llu\n", static_cast<unsigned long long>(m.fencing_token()));
  std::fflush(stdout);
  for (;;) ::pause();
}

static int fair_wait(const char* port, const std::string& lock, long wait_lease_ms) {
  client c(options_for(port));
  lock_options o;
  o.fair = true;
  o.wait_lease = std::chrono::milliseconds(wait_lease_ms);
  mutex m(c, lock, o);
  m.lock();
  return 0;
}

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "count" && argc == 6) return count(argv[2], argv[3], argv[4], std::atoi(argv[5]));
    if (mode == "hold" && argc == 5) return hold(argv[2], argv[3], std::atol(argv[4]));
    if (mode == "fair-wait" && argc == 5) return fair_wait(argv[2], argv[3], std::atol(argv[4]));
    std::fprintf(stderr, "usage: see the comment at the top of worker.cpp\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker: %s\n", e.what());
    return 1;
  }
}
