// A job that runs under a lock and stops the moment the lock may be lost: with_lock renews the
// lease while the job runs, and the scope's signal fires when the hold is gone. Here an
// operator breaks the lock (`redislock break`, done in-process with force_release() for the
// example's sake): the next renewal finds it gone, the job's wait for its next chunk ends at
// once, and the job stops instead of writing unguarded.
// Usage: with_lock [redis://host:port]   (default: $REDISLOCK_URL, then redis://127.0.0.1:6379)
#include <redislock/redislock.hpp>
#include "server_url.hpp"

#include <chrono>
#include <iostream>

int main(int argc, char** argv) {
  const char* uri = argc > 1 ? argv[1] : server_url_from_env();
  redislock::client redis(uri ? uri : "redis://127.0.0.1:6379");

  redislock::lock_options renewed;
  renewed.lease = std::chrono::milliseconds(600);
  renewed.auto_renew = true;  // with_lock renews while the job runs
  redislock::mutex job(redis, "nightly-import", renewed);
  redislock::latch next_chunk(redis, "nightly-import:chunks", 1);  // never opened here: the job's "work"

  const int chunks = redislock::with_lock(job, [&](const redislock::hold_scope& s) {
    int done = 0;
    std::cout << "importing with fencing token " << s.fencing_token() << "\n";
    (void)redislock::force_release(redis, "nightly-import");  // the operator's break
    // Each chunk: wait for it (at most 10 s), unless the lock may be lost first.
    while (!s.lost()) {
      if (!next_chunk.wait_for(std::chrono::seconds(10), s.stop_token())) break;
      ++done;
    }
    return done;
  });
  const bool stopped = job.last_release() == redislock::release_status::lease_expired;
  std::cout << "the job stopped after " << chunks
            << " chunks: " << (stopped ? "its lock was lost, and it knew" : "it finished") << "\n";
  return stopped && chunks == 0 ? 0 : 1;
}
