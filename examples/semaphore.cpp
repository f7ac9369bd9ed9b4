// A semaphore: at most N holders of one name at a time, across threads and processes. Here
// eight workers share three permits for "calls to a rate-limited API"; each permit has its own
// lease, so a worker that crashed would give its permit back when its lease ends.
// Usage: semaphore [redis://host:port]   (default: $REDISLOCK_URL, then redis://127.0.0.1:6379)
#include <redislock/redislock.hpp>
#include "server_url.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const char* uri = argc > 1 ? argv[1] : server_url_from_env();
  redislock::client redis(uri ? uri : "redis://127.0.0.1:6379");
  constexpr int permits = 3, workers = 8, calls_each = 5;

  std::atomic<int> inside{0}, most_inside{0}, calls{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      // One object per worker that may hold a permit (as with a mutex object and its lock).
      redislock::semaphore api_slots(redis, "partner-api", permits);
      for (int i = 0; i < calls_each; ++i) {
        std::lock_guard<redislock::semaphore> permit(api_slots);  // acquire() ... release()
        const int now = ++inside;
        int seen = most_inside.load();
        while (now > seen && !most_inside.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the call to the partner
        ++calls;
        --inside;
      }
    });
  }
  for (std::thread& t : threads) t.join();

  redislock::semaphore probe(redis, "partner-api", permits);
  std::cout << calls << " calls by " << workers << " workers, at most " << most_inside << " at once (permits "
            << probe.permits() << ")\n";
  return calls == workers * calls_each && most_inside <= permits ? 0 : 1;
}
