// The headers under a consumer's strictest warnings (tests/consumers/strict/CMakeLists.txt:
// -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast -Werror,
// built with GCC and with Clang). Every kind is instantiated in full for every client, so
// member templates no test calls are compiled too; the async API's operations are
// instantiated with a completion handler. Run with REDISLOCK_URL set: it takes a lock both
// ways.
#include <redislock/redislock.hpp>
#include <redislock/asio.hpp>

#include <asio/io_context.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <cstdint>
#include <optional>
#include <system_error>

// Explicit instantiations: every member of every kind, for each client type.
#define REDISLOCK_STRICT_KINDS(Client)                     \
  template class redislock::basic_mutex<Client>;           \
  template class redislock::basic_reentrant_mutex<Client>; \
  template class redislock::basic_shared_mutex<Client>;    \
  template class redislock::basic_semaphore<Client>;       \
  template class redislock::basic_latch<Client>;           \
  template class redislock::basic_election<Client>;
REDISLOCK_STRICT_KINDS(redislock::client)
REDISLOCK_STRICT_KINDS(redislock::cluster_client)
REDISLOCK_STRICT_KINDS(redislock::sentinel_client)
template class redislock::basic_redlock<redislock::client>;

namespace strict_consumer {
// Compiled, not run: with_lock on every kind (the hold watch of each).
template <class Lock>
std::uint64_t instantiate_with_lock(Lock& l) {
  return redislock::with_lock(l, [](const redislock::hold_scope& s) { return s.lost() ? 0 : s.fencing_token(); });
}
[[maybe_unused]] bool instantiate_scoped_forms(redislock::mutex& m, redislock::shared_mutex& sh) {
  const std::optional<int> timed =
      redislock::try_with_lock_for(m, std::chrono::milliseconds(10), [](const redislock::hold_scope&) { return 1; });
  const bool ran = redislock::try_with_lock_for(m, std::chrono::milliseconds(10), [](const redislock::hold_scope&) {});
  redislock::with_shared_lock(sh, [](const redislock::hold_scope& s) { (void)s.stop_token(); });
  return timed.has_value() && ran;
}
// The forms with a lease per call, on every kind (templates: compiled only where used).
template <class Lock>
bool instantiate_leased(Lock& l) {
  using namespace std::chrono_literals;
  l.lock(5s);
  l.unlock();
  const bool timed = l.try_lock_for(10ms, 5s) && (l.unlock(), true);
  return l.try_lock_until(std::chrono::steady_clock::now() + 10ms, 5s) && timed;
}
[[maybe_unused]] bool instantiate_leased_sides(redislock::shared_mutex& sh, redislock::semaphore& s) {
  using namespace std::chrono_literals;
  sh.lock_shared(5s);
  sh.unlock_shared();
  s.acquire(5s);
  s.release();
  return sh.try_lock_shared_for(10ms, 5s) && s.try_acquire_for(10ms, 5s) &&
         s.try_acquire_until(std::chrono::steady_clock::now(), 5s) &&
         sh.try_lock_shared_until(std::chrono::steady_clock::now(), 5s);
}
}  // namespace strict_consumer
template bool strict_consumer::instantiate_leased(redislock::mutex&);
template bool strict_consumer::instantiate_leased(redislock::reentrant_mutex&);
template bool strict_consumer::instantiate_leased(redislock::shared_mutex&);
template bool strict_consumer::instantiate_leased(redislock::semaphore&);
template bool strict_consumer::instantiate_leased(redislock::election&);
template bool strict_consumer::instantiate_leased(redislock::redlock&);
template std::uint64_t strict_consumer::instantiate_with_lock(redislock::mutex&);
template std::uint64_t strict_consumer::instantiate_with_lock(redislock::reentrant_mutex&);
template std::uint64_t strict_consumer::instantiate_with_lock(redislock::shared_mutex&);
template std::uint64_t strict_consumer::instantiate_with_lock(redislock::semaphore&);
template std::uint64_t strict_consumer::instantiate_with_lock(redislock::election&);
template std::uint64_t strict_consumer::instantiate_with_lock(redislock::redlock&);

namespace {

// Compiled, not run: the async operations' templates with a plain handler.
[[maybe_unused]] void instantiate_async(redislock::async_client& c) {
  using namespace std::chrono_literals;
  redislock::async_mutex m(c, "strict-async");
  m.async_lock([](std::error_code, redislock::async_hold h) {
    h.async_extend([](std::error_code, bool) {});
    h.async_extend(5s, [](std::error_code, bool) {});
    h.async_fencing_token([](std::error_code, auto) {});
    h.async_remaining_lease([](std::error_code, auto) {});
    h.async_unlock([](std::error_code, redislock::release_status) {});
  });
  m.async_try_lock_for(100ms, [](std::error_code, redislock::async_hold) {});
  m.async_lock(5s, [](std::error_code, redislock::async_hold) {});
  m.async_try_lock_for(100ms, 5s, [](std::error_code, redislock::async_hold) {});
  redislock::async_semaphore s(c, "strict-semaphore", 2);
  s.async_acquire(5s, [](std::error_code, redislock::async_hold) {});
  s.async_try_acquire_for(100ms, 5s, [](std::error_code, redislock::async_hold) {});
  s.async_acquire([](std::error_code, redislock::async_hold) {});
  s.async_try_acquire_for(100ms, [](std::error_code, redislock::async_hold) {});
  redislock::async_shared_mutex sh(c, "strict-shared");
  sh.async_lock_shared([](std::error_code, redislock::async_hold) {});
  sh.async_try_lock_shared_for(100ms, [](std::error_code, redislock::async_hold) {});
  sh.async_lock(5s, [](std::error_code, redislock::async_hold) {});
  sh.async_lock_shared(5s, [](std::error_code, redislock::async_hold) {});
  sh.async_try_lock_for(100ms, 5s, [](std::error_code, redislock::async_hold) {});
  sh.async_try_lock_shared_for(100ms, 5s, [](std::error_code, redislock::async_hold) {});
}

}  // namespace

int main() {
  const char* url = std::getenv("REDISLOCK_URL");
  if (url == nullptr) {
    std::fprintf(stderr, "REDISLOCK_URL is not set\n");
    return 2;
  }
  redislock::client client(url);
  redislock::mutex lock(client, "strict-consumer");
  {
    std::lock_guard<redislock::mutex> guard(lock);
    std::printf("strict consumer holds the lock, fencing token %llu\n",
                static_cast<unsigned long long>(lock.fencing_token()));
  }
  if (lock.last_release() != redislock::release_status::released) return 1;

  asio::io_context io;
  redislock::async_client async(io.get_executor(), redislock::async_client_options{redislock::parse_uri(url)});
  redislock::async_mutex async_lock(async, "strict-consumer-async");
  bool released = false;
  async_lock.async_lock([&](std::error_code e, redislock::async_hold hold) {
    if (e) {
      io.stop();
      return;
    }
    hold.async_unlock([&](std::error_code u, redislock::release_status) {
      released = !u;
      io.stop();  // the client's connection keeps the loop busy
    });
  });
  io.run_for(std::chrono::seconds(30));
  std::printf("strict consumer: async lock %s\n", released ? "taken and released" : "FAILED");
  return released ? 0 : 1;
}
