// Locks on Redis Cluster: cluster_client routes each lock's keys (one {hash tag} per lock
// name, so one slot) to the master that owns the slot, follows MOVED/ASK while slots move,
// and wakes waiters with sharded pub/sub on that master.
// Usage: cluster [redis-cluster://host:port[,host:port...]]   (default: $REDISLOCK_CLUSTER_URI)
#include <redislock/redislock.hpp>

#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using cluster_mutex = redislock::basic_mutex<redislock::cluster_client>;

int main(int argc, char** argv) {
  const char* uri = argc > 1 ? argv[1] : std::getenv("REDISLOCK_CLUSTER_URI");
  if (uri == nullptr) {
    std::cerr << "usage: cluster redis-cluster://host:port[,host:port...]\n";
    return 2;
  }
  redislock::cluster_client redis(uri);

  // Names spread over the masters; each lock lives wholly on the master owning its slot.
  std::vector<int> counters(8, 0);
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t)
    workers.emplace_back([&] {
      for (int i = 0; i < 40; ++i) {
        const int n = i % 8;
        cluster_mutex lock(redis, "order:" + std::to_string(n));
        std::lock_guard<cluster_mutex> guard(lock);
        const int seen = counters[n];
        std::this_thread::yield();
        counters[n] = seen + 1;
      }
    });
  for (auto& w : workers) w.join();
  int total = 0;
  for (int c : counters) total += c;
  std::cout << "8 lock names over the cluster's masters, 160 guarded increments: " << total << "\n";
  return total == 160 ? 0 : 1;
}
