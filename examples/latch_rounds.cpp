// A latch used again, round after round: a coordinator hands out batches of work; each batch's
// workers count the latch down as they finish, the coordinator waits for the batch, then
// starts the latch's next round for the next batch under the same name. The workers are
// threads here for the example's sake; in production they are other processes or hosts.
// Usage: latch_rounds [redis://host:port]   (default: $REDISLOCK_URL, then redis://127.0.0.1:6379)
#include <redislock/redislock.hpp>
#include "server_url.hpp"

#include <atomic>
#include <iostream>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const char* uri = argc > 1 ? argv[1] : server_url_from_env();
  redislock::client redis(uri ? uri : "redis://127.0.0.1:6379");
  constexpr int kWorkers = 3, kBatches = 3;

  redislock::latch batch(redis, "import-batches", kWorkers);  // round 1
  if (!batch.created()) batch.reset(kWorkers);                // an open latch of an earlier run: a round of our own
  int failures = 0;
  for (int b = 1; b <= kBatches; ++b) {
    if (b > 1) batch.reset(kWorkers);  // the round before is open: start the next one
    std::atomic<int> done{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < kWorkers; ++w)
      workers.emplace_back([&] {
        redislock::latch mine(redis, "import-batches", kWorkers);  // joins the current round
        ++done;                                                    // ... this worker's part ...
        mine.count_down();
      });
    batch.wait();  // returns once this round's count reached zero, never on a later round's
    const int finished = done.load();
    for (auto& t : workers) t.join();
    std::cout << "batch " << b << " (round " << batch.round() << "): " << finished << " of " << kWorkers
              << " parts done when the latch opened\n";
    if (finished != kWorkers) ++failures;
  }
  return failures == 0 ? 0 : 1;
}
