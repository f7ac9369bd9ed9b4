// A read/write lock across processes: many readers at once, or one writer alone.
// Usage: shared [redis://host:port]   (default: $REDISLOCK_URL, then redis://127.0.0.1:6379)
#include <redislock/redislock.hpp>
#include "server_url.hpp"

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const char* uri = argc > 1 ? argv[1] : server_url_from_env();
  redislock::client redis(uri ? uri : "redis://127.0.0.1:6379");
  redislock::shared_mutex config(redis, "config:pricing");

  std::atomic<int> readers_inside{0}, most_readers_at_once{0};
  std::atomic<bool> writer_met_a_reader{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        std::shared_lock<redislock::shared_mutex> read(config);  // readers share the lock
        const int now = ++readers_inside;
        for (int seen = most_readers_at_once; now > seen && !most_readers_at_once.compare_exchange_weak(seen, now);) {
        }
        std::this_thread::yield();
        --readers_inside;
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 10; ++i) {
      std::lock_guard<redislock::shared_mutex> write(config);  // the writer is alone
      if (readers_inside != 0) writer_met_a_reader = true;
    }
  });
  for (auto& t : threads) t.join();

  std::cout << "most readers inside at once: " << most_readers_at_once
            << ", writer ever met a reader: " << (writer_met_a_reader ? "yes (BUG)" : "no") << "\n";
  return writer_met_a_reader ? 1 : 0;
}
