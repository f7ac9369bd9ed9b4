// The smallest useful program: one critical section, guarded across every host that runs it.
// Usage: quickstart [redis://host:port]   (default: $REDISLOCK_URL, then redis://127.0.0.1:6379)
#include <redislock/redislock.hpp>
#include "server_url.hpp"

#include <cstdlib>
#include <iostream>
#include <mutex>

int main(int argc, char** argv) {
  const char* uri = argc > 1 ? argv[1] : server_url_from_env();
  redislock::client redis(uri ? uri : "redis://127.0.0.1:6379");
  redislock::mutex nightly(redis, "nightly-report");  // 30 s lease by default

  {
    std::lock_guard<redislock::mutex> guard(nightly);  // blocks until this process holds it
    std::cout << "holding 'nightly-report', fencing token " << nightly.fencing_token() << "\n";
  }  // released here: only if it is still ours

  std::cout << "release: " << to_string(nightly.last_release()) << "\n";
}
