// A worker process for the multi-process tests.
//
//   redislock_test_worker count <port> <lock> <counter-key> <rounds>
//       rounds x { lock; GET counter; SET counter+1; unlock } with an overlap marker
//       (SET NX on entry, DEL on exit). Exit 0 when no overlap was seen, 3 otherwise.
//   redislock_test_worker hold <port> <lock> <lease-ms>
//       acquires the lock, prints "acquired <fencing token>" and waits to be signalled.
//   redislock_test_worker stale-write <port> <lock> <lease-ms> <data-prefix>
//       acquires the lock, prints "acquired <fencing token>", stops itself (SIGSTOP: a pause
//       past its lease, like a GC pause), and once continued writes <data-prefix>:counter with
//       the storage-side fencing check of tests/torture/checker.hpp, then prints
//       "write <1 applied | 0 rejected> held <still_held()> release <status>".
#include "torture/checker.hpp"

#include <redislock/redislock.hpp>

#include <signal.h>

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

static int stale_write(const char* port, const std::string& lock, long lease_ms, const std::string& prefix) {
  client c(options_for(port));
  lock_options o;
  o.lease = std::chrono::milliseconds(lease_ms);
  mutex m(c, lock, o);
  connection data(options_for(port).connection);
  const std::string epoch_key = prefix + ":epoch";
  const std::string epoch(detail::as_string(*redislock_torture::epoch_script().run(data, {epoch_key}, {"e"})));
  m.lock();
  std::printf("acquired %llu\n", static_cast<unsigned long long>(m.fencing_token()));
  std::fflush(stdout);
  ::raise(SIGSTOP);
  reply_ptr v = data.command({"GET", prefix + ":counter"});
  const long value = v->type == REDIS_REPLY_NIL ? 0 : std::stol(std::string(v->str, v->len));
  const std::int64_t written = detail::as_integer(*redislock_torture::fenced_write_script().run(
      data, {epoch_key, prefix + ":counter", prefix + ":fence", prefix + ":applied"},
      {epoch, std::to_string(value + 1), std::to_string(m.fencing_token())}));
  const bool held = m.still_held();
  m.unlock();
  std::printf("write %lld held %d release %s\n", static_cast<long long>(written), held ? 1 : 0,
              to_string(m.last_release()));
  std::fflush(stdout);
  return 0;
}

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "count" && argc == 6) return count(argv[2], argv[3], argv[4], std::atoi(argv[5]));
    if (mode == "hold" && argc == 5) return hold(argv[2], argv[3], std::atol(argv[4]));
    if (mode == "stale-write" && argc == 6) return stale_write(argv[2], argv[3], std::atol(argv[4]), argv[5]);
    std::fprintf(stderr, "usage: see the comment at the top of worker.cpp\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker: %s\n", e.what());
    return 1;
  }
}
