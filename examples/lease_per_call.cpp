// A lease per call: one lock object, its options' 5 s lease for the quick jobs, and 30 s for
// the one job that is known to take longer (lock(lease) / try_lock_for(timeout, lease)). The
// server keeps each hold for its own lease; extend() renews to it; a bad lease is refused
// before anything is sent.
// Usage: lease_per_call [redis://host:port]   (default: $REDISLOCK_URL, then redis://127.0.0.1:6379)
#include <redislock/redislock.hpp>
#include "server_url.hpp"

#include <chrono>
#include <iostream>
#include <mutex>

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  const char* uri = argc > 1 ? argv[1] : server_url_from_env();
  redislock::client redis(uri ? uri : "redis://127.0.0.1:6379");
  redislock::lock_options options;
  options.lease = 5s;
  redislock::mutex reports(redis, "reports", options);

  {
    std::lock_guard<redislock::mutex> quick(reports);  // options().lease
    std::cout << "quick job: " << (reports.remaining_lease() + 999ms).count() / 1000 << " s lease\n";
  }
  if (!reports.try_lock_for(2s, 30s)) return 1;  // the long job asks for 30 s
  std::lock_guard<redislock::mutex> slow(reports, std::adopt_lock);
  std::cout << "long job: " << (reports.remaining_lease() + 999ms).count() / 1000 << " s lease\n";
  reports.extend();  // back to a full 30 s, not to options().lease
  std::cout << "extended: " << (reports.remaining_lease() + 999ms).count() / 1000 << " s lease\n";
  try {
    redislock::mutex other(redis, "reports-other", options);
    other.lock(0s);
  } catch (const redislock::invalid_argument& e) {
    std::cout << "refused, nothing sent: " << e.what() << "\n";
  }
  return reports.remaining_lease() > 25s ? 0 : 1;
}
