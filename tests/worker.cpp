// A worker process for the multi-process tests.
//
//   redislock_test_worker count <port> <lock> <counter-key> <rounds>
//       rounds x { lock; GET counter; SET counter+1; unlock } with an overlap marker
//       (SET NX on entry, DEL on exit). Exit 0 when no overlap was seen, 3 otherwise.
//   redislock_test_worker count-reentrant <port> <lock> <counter-key> <rounds>
//       the same with a reentrant_mutex, locked twice (nested) per round.
//   redislock_test_worker count-redlock <port,port,...> <lock> <counter-key> <rounds>
//       the same with a redlock over the listed servers (the counter on the first).
//   redislock_test_worker count-shared <port> <lock> <counter-key> <rounds>
//       the same with the write side of a shared_mutex.
//   redislock_test_worker hold <port> <lock> <lease-ms>
//       acquires the lock, prints "acquired <fencing token>" and waits to be signalled.
//   redislock_test_worker renew <port> <lock> <lease-ms>
//       acquires the lock with auto_renew, prints "acquired <fencing token>", waits (at most
//       60 s) for its on_lost callback, then prints "lost <lost()>" and "release <status>".
//       Exit 0 after the loss was seen, 4 when it never came.
//   redislock_test_worker hold-shared <port> <lock> <lease-ms>
//       takes a read hold of a shared_mutex, prints "acquired <owner id>" and waits to be
//       signalled (never renewing its lease).
//   redislock_test_worker hold-permit <port> <semaphore> <lease-ms> <permits>
//       acquires a permit of a semaphore, prints "acquired <owner id>" and waits to be
//       signalled (never renewing its lease).
//   redislock_test_worker fair-wait <port> <lock> <wait-lease-ms>
//       queues for the lock in fair mode (blocks there until killed, or exits 0 once acquired).
//   redislock_test_worker fair-wait-reentrant <port> <lock> <wait-lease-ms>
//       the same with a reentrant_mutex.
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
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using namespace redislock;

static client_options options_for(const char* port) {
  client_options o;
  o.connection.port = std::atoi(port);
  o.connection.command_timeout = std::chrono::seconds(5);
  return o;
}

template <class Lock>
static int count(const char* port, const std::string& lock, const std::string& counter, int rounds, int depth) {
  client c(options_for(port));
  Lock m(c, lock);
  connection data(options_for(port).connection);
  const std::string marker = counter + ":inside";
  int overlaps = 0;
  for (int i = 0; i < rounds; ++i) {
    std::lock_guard<Lock> guard(m);
    if (depth > 1) m.lock();  // nested (reentrant locks only)
    if (data.command({"SET", marker, "1", "NX"})->type == REDIS_REPLY_NIL) ++overlaps;
    reply_ptr r = data.command({"GET", counter});
    const long value = r->type == REDIS_REPLY_NIL ? 0 : std::stol(std::string(r->str, r->len));
    data.command({"SET", counter, std::to_string(value + 1)});
    data.command({"DEL", marker});
    if (depth > 1) m.unlock();
  }
  return overlaps == 0 ? 0 : 3;
}

static int count_redlock(const std::string& ports, const std::string& lock, const std::string& counter, int rounds) {
  std::vector<std::unique_ptr<client>> clients;
  std::vector<std::reference_wrapper<client>> refs;
  for (std::size_t at = 0; at <= ports.size();) {
    const std::size_t comma = std::min(ports.find(',', at), ports.size());
    clients.push_back(std::make_unique<client>(options_for(ports.substr(at, comma - at).c_str())));
    refs.emplace_back(*clients.back());
    at = comma + 1;
  }
  redlock m(refs, lock);
  connection data(clients.front()->options().connection);
  const std::string marker = counter + ":inside";
  int overlaps = 0;
  for (int i = 0; i < rounds; ++i) {
    std::lock_guard<redlock> guard(m);
    if (data.command({"SET", marker, "1", "NX"})->type == REDIS_REPLY_NIL) ++overlaps;
    reply_ptr r = data.command({"GET", counter});
    const long value = r->type == REDIS_REPLY_NIL ? 0 : std::stol(std::string(r->str, r->len));
    data.command({"SET", counter, std::to_string(value + 1)});
    data.command({"DEL", marker});
  }
  return overlaps == 0 ? 0 : 3;
}

// Acquires with acquire(lock) (which returns what to print), prints it and waits to be killed.
template <class Lock, class Acquire>
static int hold(const char* port, const std::string& lock, long lease_ms, Acquire acquire) {
  client c(options_for(port));
  lock_options o;
  o.lease = std::chrono::milliseconds(lease_ms);
  Lock m(c, lock, o);
  std::printf("acquired %s\n", acquire(m).c_str());
  std::fflush(stdout);
  for (;;) ::pause();
}

static int hold_permit(const char* port, const std::string& name, long lease_ms, long permits) {
  client c(options_for(port));
  lock_options o;
  o.lease = std::chrono::milliseconds(lease_ms);
  semaphore s(c, name, permits, o);
  s.acquire();
  std::printf("acquired %s\n", s.owner_id().c_str());
  std::fflush(stdout);
  for (;;) ::pause();
}

static int renew(const char* port, const std::string& lock, long lease_ms) {
  client c(options_for(port));
  std::promise<std::string> lost;
  lock_options o;
  o.lease = std::chrono::milliseconds(lease_ms);
  o.auto_renew = true;
  o.on_lost = [&lost](const std::string& name) { lost.set_value(name); };  // once per acquisition
  mutex m(c, lock, o);
  m.lock();
  std::printf("acquired %llu\n", static_cast<unsigned long long>(m.fencing_token()));
  std::fflush(stdout);
  std::future<std::string> seen = lost.get_future();
  if (seen.wait_for(std::chrono::seconds(60)) != std::future_status::ready) return 4;
  std::printf("lost %d\n", m.lost() ? 1 : 0);
  std::printf("release %s\n", to_string(m.unlock_and_report()));
  std::fflush(stdout);
  return 0;
}

template <class Lock>
static int fair_wait(const char* port, const std::string& lock, long wait_lease_ms) {
  client c(options_for(port));
  lock_options o;
  o.fair = true;
  o.wait_lease = std::chrono::milliseconds(wait_lease_ms);
  Lock m(c, lock, o);
  m.lock();
  return 0;
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
    if (mode == "count" && argc == 6) return count<mutex>(argv[2], argv[3], argv[4], std::atoi(argv[5]), 1);
    if (mode == "count-reentrant" && argc == 6)
      return count<reentrant_mutex>(argv[2], argv[3], argv[4], std::atoi(argv[5]), 2);
    if (mode == "count-redlock" && argc == 6) return count_redlock(argv[2], argv[3], argv[4], std::atoi(argv[5]));
    if (mode == "count-shared" && argc == 6)
      return count<shared_mutex>(argv[2], argv[3], argv[4], std::atoi(argv[5]), 1);
    if (mode == "hold" && argc == 5)
      return hold<mutex>(argv[2], argv[3], std::atol(argv[4]), [](mutex& m) {
        m.lock();
        return std::to_string(m.fencing_token());
      });
    if (mode == "hold-shared" && argc == 5)
      return hold<shared_mutex>(argv[2], argv[3], std::atol(argv[4]), [](shared_mutex& m) {
        m.lock_shared();
        return m.owner_id();
      });
    if (mode == "hold-permit" && argc == 6)
      return hold_permit(argv[2], argv[3], std::atol(argv[4]), std::atol(argv[5]));
    if (mode == "renew" && argc == 5) return renew(argv[2], argv[3], std::atol(argv[4]));
    if (mode == "fair-wait" && argc == 5) return fair_wait<mutex>(argv[2], argv[3], std::atol(argv[4]));
    if (mode == "fair-wait-reentrant" && argc == 5)
      return fair_wait<reentrant_mutex>(argv[2], argv[3], std::atol(argv[4]));
    if (mode == "stale-write" && argc == 6) return stale_write(argv[2], argv[3], std::atol(argv[4]), argv[5]);
    std::fprintf(stderr, "usage: see the comment at the top of worker.cpp\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker: %s\n", e.what());
    return 1;
  }
}
