// A reentrant lock: a thread that holds it may lock it again (nested calls that each guard
// the same resource), and other threads and processes wait until the outermost unlock.
// Usage: reentrant [redis://host:port]   (default: $REDISLOCK_URL, then redis://127.0.0.1:6379)
#include <redislock/redislock.hpp>
#include "server_url.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>

namespace {

redislock::reentrant_mutex* account_lock = nullptr;
int balance = 100;
std::int64_t deepest_hold = 0;

void withdraw(int amount) {
  std::lock_guard<redislock::reentrant_mutex> guard(*account_lock);  // nested when called below
  deepest_hold = std::max(deepest_hold, account_lock->hold_count());
  balance -= amount;
}

void transfer_fee_and_amount(int amount) {
  std::lock_guard<redislock::reentrant_mutex> guard(*account_lock);
  withdraw(1);  // takes the same lock again: no deadlock, hold_count() is 2 inside
  withdraw(amount);
}

}  // namespace

int main(int argc, char** argv) {
  const char* uri = argc > 1 ? argv[1] : server_url_from_env();
  redislock::client redis(uri ? uri : "redis://127.0.0.1:6379");
  redislock::reentrant_mutex lock(redis, "account:42");
  account_lock = &lock;

  transfer_fee_and_amount(10);
  std::cout << "holds of this thread inside the nested call: " << deepest_hold << "\n";

  // Another thread is a different holder: while this thread holds, its try_lock fails.
  std::lock_guard<redislock::reentrant_mutex> outer(lock);
  bool other_got_it = true;
  std::thread other([&] { other_got_it = lock.try_lock(); });
  other.join();
  std::cout << "balance " << balance
            << ", another thread's try_lock while held: " << (other_got_it ? "acquired (BUG)" : "refused") << "\n";
  return other_got_it || balance != 89 || deepest_hold != 2 ? 1 : 0;
}
