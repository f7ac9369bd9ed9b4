// What a holder does when its lease is lost: auto_renew keeps the lease while the work runs;
// when the lock is taken away anyway (here an operator force-releases it; in production a
// partition or a paused process), on_lost fires, lost() turns true, and the stale holder's
// fencing token no longer passes the storage's check.
// Usage: lease_loss [redis://host:port]   (default: $REDISLOCK_URL, then redis://127.0.0.1:6379)
#include <redislock/redislock.hpp>
#include "server_url.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>

int main(int argc, char** argv) {
  const char* uri = argc > 1 ? argv[1] : server_url_from_env();
  redislock::client redis(uri ? uri : "redis://127.0.0.1:6379");

  std::mutex m;
  std::condition_variable cv;
  bool lost = false;
  redislock::lock_options options;
  options.lease = std::chrono::seconds(3);
  options.auto_renew = true;                        // renewed every lease/3 while held
  options.on_lost = [&](const std::string& name) {  // runs on the watchdog thread: only signal
    std::lock_guard<std::mutex> g(m);
    lost = true;
    std::cout << "on_lost: '" << name << "' is no longer ours; stop writing\n";
    cv.notify_all();
  };
  redislock::mutex job(redis, "nightly-import", options);

  job.lock();
  const std::uint64_t my_token = job.fencing_token();
  std::cout << "holding with fencing token " << my_token << "\n";

  // An operator breaks the lock (`redislock break nightly-import`), and someone else takes it.
  redislock::force_release(redis, "nightly-import");
  redislock::mutex other(redis, "nightly-import");
  other.lock();
  const std::uint64_t newer_token = other.fencing_token();

  std::unique_lock<std::mutex> g(m);
  const bool told = cv.wait_for(g, std::chrono::seconds(10), [&] { return lost; });
  std::cout << "lost() " << std::boolalpha << job.lost() << "; stale token " << my_token << " < new holder's "
            << newer_token << ": the storage rejects the stale holder's writes\n";
  job.unlock();  // never throws; the outcome is recorded
  std::cout << "stale holder's release: " << to_string(job.last_release()) << "\n";
  other.unlock();
  return told && job.lost() && newer_token > my_token ? 0 : 1;
}
