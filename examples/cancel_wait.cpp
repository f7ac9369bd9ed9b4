// Ending a blocking wait from another thread: a worker waits for the lock another process
// holds; the service shuts down, cancels the wait, and the worker returns at once holding
// nothing (its place in the lock's queue is gone too). The holder here is in-process for the
// example's sake; in production it is another host.
// Usage: cancel_wait [redis://host:port]   (default: $REDISLOCK_URL, then redis://127.0.0.1:6379)
#include <redislock/redislock.hpp>
#include "server_url.hpp"

#include <chrono>
#include <future>
#include <iostream>
#include <mutex>
#include <thread>

int main(int argc, char** argv) {
  const char* uri = argc > 1 ? argv[1] : server_url_from_env();
  redislock::client redis(uri ? uri : "redis://127.0.0.1:6379");

  redislock::mutex elsewhere(redis, "nightly-import");  // the other host, holding the job
  elsewhere.lock();

  redislock::cancel_source shutdown;  // cancelled when the service is told to stop
  redislock::mutex job(redis, "nightly-import");
  std::promise<bool> ran;
  std::thread worker([&] {
    if (!job.lock(shutdown.token())) {  // false: cancelled, nothing held, out of the queue
      ran.set_value(false);
      return;
    }
    std::lock_guard<redislock::mutex> held(job, std::adopt_lock);  // released at scope end
    ran.set_value(true);
  });

  // Time for the worker to start waiting (had it not, its lock() would return false at once).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto asked = std::chrono::steady_clock::now();
  shutdown.cancel();  // e.g. from the thread that handles SIGTERM
  const bool worked = ran.get_future().get();
  worker.join();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - asked).count();
  std::cout << (worked ? "the worker ran the job" : "the worker stopped waiting") << " " << ms
            << " ms after the cancel\n";
  elsewhere.unlock();
  return worked ? 1 : 0;
}
