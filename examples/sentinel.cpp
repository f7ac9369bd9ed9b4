// The same locks on a master that Redis Sentinel watches: sentinel_client asks the sentinels
// where the master is and follows it after a failover. Every lock kind takes it as its client.
// Usage: sentinel [redis-sentinel://[:password@]host:port[,host:port...]/service]
//        (default: $REDISLOCK_SENTINEL_URI)
#include <redislock/redislock.hpp>

#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const char* uri = argc > 1 ? argv[1] : std::getenv("REDISLOCK_SENTINEL_URI");
  if (uri == nullptr) {
    std::cerr << "usage: sentinel redis-sentinel://host:port[,host:port...]/service\n";
    return 2;
  }
  redislock::sentinel_client redis(uri);
  redislock::basic_mutex<redislock::sentinel_client> lock(redis, "invoice:run");

  int counter = 0;  // guarded by the distributed lock only
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t)
    workers.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        std::lock_guard<redislock::basic_mutex<redislock::sentinel_client>> guard(lock);
        const int seen = counter;
        std::this_thread::yield();
        counter = seen + 1;
      }
    });
  for (auto& w : workers) w.join();
  std::cout << "4 threads x 25 increments under one lock on the Sentinel master: " << counter << "\n";
  return counter == 100 ? 0 : 1;
}
