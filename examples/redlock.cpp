// Redlock: one lock over several independent masters (no replication between them); a hold
// is valid when a majority granted it, for its validity() (the lease minus the time the round
// took and the clock-drift allowance). Read docs/topologies.md before choosing it: it needs
// bounded clock drift and process pauses, and fencing tokens for the storage.
// Usage: redlock [redis://A,redis://B,redis://C]   (default: $REDISLOCK_REDLOCK_URIS)
#include <redislock/redislock.hpp>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const char* uris = argc > 1 ? argv[1] : std::getenv("REDISLOCK_REDLOCK_URIS");
  if (uris == nullptr) {
    std::cerr << "usage: redlock redis://A,redis://B,redis://C\n";
    return 2;
  }
  std::vector<std::unique_ptr<redislock::client>> masters;
  std::vector<std::reference_wrapper<redislock::client>> clients;
  for (std::string rest = uris; !rest.empty();) {
    const std::size_t comma = rest.find(',');
    masters.push_back(std::make_unique<redislock::client>(rest.substr(0, comma)));
    clients.push_back(*masters.back());
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }

  redislock::redlock lock(clients, "billing:close-month");
  redislock::redlock rival(clients, "billing:close-month");
  {
    std::lock_guard<redislock::redlock> guard(lock);
    std::cout << "held on " << lock.quorum() << " of " << lock.instances() << " masters at least, valid for "
              << lock.validity().count() << " ms, fencing token " << lock.fencing_token() << "\n";
    if (rival.try_lock()) {
      std::cout << "a second holder got it too (BUG)\n";
      return 1;
    }
  }
  std::cout << "released: " << to_string(lock.last_release())
            << "; rival's try_lock now: " << (rival.try_lock() ? "acquired" : "refused") << "\n";
  rival.unlock();
  return 0;
}
