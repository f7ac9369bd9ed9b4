// Exclusion between processes and a crashed holder: each worker is a separate process.
#include "redis_server.hpp"
#include "worker_process.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <vector>

namespace test_mutex_process {

using namespace redislock;
using redislock_test::redis_server;
using redislock_test::worker_process;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(MutexProcesses, WorkersInSeparateProcessesNeverOverlap) {
  EXPECT_EQ(redislock_test::count_in_processes(REDISLOCK_TEST_WORKER, "count", 4, 100), std::to_string(4 * 100));
}

TEST(MutexProcesses, AKilledHoldersLockFreesWhenItsLeaseRunsOut) {
  redis_server server;
  worker_process holder(REDISLOCK_TEST_WORKER, {"hold", std::to_string(server.port()), "crash", "300"});
  const std::string acquired = holder.acquired();
  ASSERT_FALSE(acquired.empty());
  const std::uint64_t holder_fence = std::stoull(acquired);

  client c(client_options{server.options()});
  mutex m(c, "crash");
  EXPECT_FALSE(m.try_lock());
  holder.signal(SIGKILL);
  EXPECT_EQ(holder.wait_for(seconds(10)), 128 + SIGKILL);
  ASSERT_TRUE(m.try_lock_for(seconds(10)));  // within the dead holder's lease
  EXPECT_GT(m.fencing_token(), holder_fence);
  m.unlock();
  EXPECT_EQ(m.last_release(), release_status::released);
}

}  // namespace test_mutex_process
