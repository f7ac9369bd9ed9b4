// A program as a user would write it, built by a separate CMake project that pulls in
// redislock with FetchContent or find_package. Run with REDISLOCK_URL set.
#include <redislock/redislock.hpp>

#include <cstdio>
#include <cstdlib>
#include <mutex>

int main() {
  const char* uri = std::getenv("REDISLOCK_URL");
  if (uri == nullptr) {
    std::fprintf(stderr, "REDISLOCK_URL is not set\n");
    return 2;
  }
  // The hiredis this program was built against; the hiredis-1.x test variant insists on it.
  std::printf("built with hiredis %d.%d.%d\n", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
  if (const char* major = std::getenv("REDISLOCK_EXPECT_HIREDIS_MAJOR"); major && std::atoi(major) != HIREDIS_MAJOR) {
    std::fprintf(stderr, "expected hiredis %s.x\n", major);
    return 3;
  }
  redislock::client client(uri);
  redislock::mutex lock(client, "consumer");
  {
    std::lock_guard<redislock::mutex> guard(lock);
    std::printf("consumer holds the lock, fencing token %llu\n", static_cast<unsigned long long>(lock.fencing_token()));
  }
  return lock.last_release() == redislock::release_status::released ? 0 : 1;
}
