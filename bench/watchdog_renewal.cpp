// How the one watchdog thread renews many auto_renew locks: round trips and time per tick.
// Usage: watchdog_renewal [--locks N] [--lease-ms L] [--rounds R] [redis://host:port]
//        (default URI: $REDISLOCK_URL, then redis://127.0.0.1:6379; use a throwaway server:
//         it counts EVALSHA calls in INFO commandstats, so nothing else should run EVALSHA.)
// Acquires N locks with auto_renew, waits for one warm-up round, then for each of R rounds (N renewals) prints the
// watchdog's ticks, pipelined batches, EVALSHA calls seen by the server, and tick durations.
#include <redislock/redislock.hpp>
#include "../examples/server_url.hpp"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace redislock;

namespace {

long long evalsha_calls(client& c) {
  reply_ptr r = c.command({"INFO", "commandstats"});
  const std::string text(r->str, r->len);
  const std::string needle = "cmdstat_evalsha:calls=";
  const auto pos = text.find(needle);
  return pos == std::string::npos ? 0 : std::stoll(text.substr(pos + needle.size()));
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 10000, rounds = 5;
  long lease_ms = 6000;
  const char* uri = server_url_from_env();
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--locks") && i + 1 < argc) n = std::stoul(argv[++i]);
    else if (!std::strcmp(argv[i], "--lease-ms") && i + 1 < argc) lease_ms = std::stol(argv[++i]);
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::stoul(argv[++i]);
    else uri = argv[i];
  }
  client_options o{parse_uri(uri ? uri : "redis://127.0.0.1:6379")};
  client redis(o);
  lock_options lo;
  lo.lease = std::chrono::milliseconds(lease_ms);
  lo.auto_renew = true;
  lo.key_prefix = "redislock-bench:";

  std::vector<std::unique_ptr<mutex>> locks(n);
  std::vector<std::thread> acquirers;
  for (std::size_t t = 0; t < 4; ++t)
    acquirers.emplace_back([&, t] {
      for (std::size_t i = t; i < n; i += 4) {
        locks[i] = std::make_unique<mutex>(redis, "lock-" + std::to_string(i), lo);
        locks[i]->lock();
      }
    });
  for (auto& t : acquirers) t.join();
  std::cout << n << " locks held, lease " << lease_ms << " ms, max_batch " << watchdog::max_batch << "\n";
  std::cout << "round  ticks  batches  evalsha  renewals  last_tick_ms  max_tick_ms  max_late_ms\n";

  watchdog& dog = redis.watchdog();
  // Warm-up round: the first renewals of locks acquired over a spread of time.
  dog.wait_for_stats(std::chrono::milliseconds(lease_ms * 4), [&](const watchdog_stats& s) { return s.renewals >= n; });
  watchdog_stats before = dog.stats();
  long long evalsha_before = evalsha_calls(redis);
  for (std::size_t r = 1; r <= rounds; ++r) {
    const bool done = dog.wait_for_stats(std::chrono::milliseconds(lease_ms * 4), [&](const watchdog_stats& s) {
      return s.renewals >= before.renewals + n || s.lost > 0;
    });
    const watchdog_stats now = dog.stats();
    const long long evalsha_now = evalsha_calls(redis);
    if (!done || now.lost > 0 || now.failures > 0) {
      std::cerr << "round " << r << ": renewals fell behind (lost " << now.lost << ", failures " << now.failures
                << ")\n";
      return 1;
    }
    std::cout << r << "  " << now.ticks - before.ticks << "  " << now.batches - before.batches << "  "
              << evalsha_now - evalsha_before << "  " << now.renewals - before.renewals << "  "
              << now.last_tick.count() / 1000.0 << "  " << now.max_tick.count() / 1000.0 << "  "
              << now.max_late.count() / 1000.0 << "\n";
    before = now;
    evalsha_before = evalsha_now;
  }
  return 0;
}
