// Uncontended lock/unlock cycle latency of each lock kind (one client, one thread).
//
//   redislock_test_with_server build/bench/bench_lock_kinds [cycles]
// (or set REDISLOCK_URI to a server of your own). Prints median and p99 per cycle in µs.
#include <redislock/redislock.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace redislock;

template <class Cycle>
static void measure(const char* what, int cycles, Cycle&& cycle) {
  cycle();  // warm-up: loads the scripts
  std::vector<double> us(static_cast<std::size_t>(cycles));
  for (auto& u : us) {
    const auto start = std::chrono::steady_clock::now();
    cycle();
    u = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }
  std::sort(us.begin(), us.end());
  std::printf("%-34s median %7.1f us   p99 %7.1f us   (%d cycles)\n", what, us[us.size() / 2],
              us[us.size() * 99 / 100], cycles);
}

int main(int argc, char** argv) {
  const char* uri = std::getenv("REDISLOCK_URI");
  const int cycles = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (cycles <= 0) return 2;
  client c(uri ? uri : "redis://127.0.0.1:6379");
  mutex m(c, "bench:mutex");
  reentrant_mutex r(c, "bench:reentrant");
  shared_mutex s(c, "bench:shared");
  measure("mutex lock+unlock", cycles, [&] { m.lock(); m.unlock(); });
  measure("reentrant_mutex lock+unlock", cycles, [&] { r.lock(); r.unlock(); });
  measure("reentrant_mutex nested (depth 2)", cycles, [&] { r.lock(); r.lock(); r.unlock(); r.unlock(); });
  measure("shared_mutex lock_shared+unlock", cycles, [&] { s.lock_shared(); s.unlock_shared(); });
  measure("shared_mutex lock+unlock", cycles, [&] { s.lock(); s.unlock(); });
  return 0;
}
