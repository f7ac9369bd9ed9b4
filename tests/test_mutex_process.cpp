// Exclusion between processes and a crashed holder: each worker is a separate process.
#include "process.hpp"
#include "redis_server.hpp"
#include "server_fixture.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <poll.h>
#include <unistd.h>

#include <vector>

using namespace redislock;
using redislock_test::child_process;
using redislock_test::read_line;
using redislock_test::redis_server;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(MutexProcesses, WorkersInSeparateProcessesNeverOverlap) {
  EXPECT_EQ(redislock_test::count_in_processes(REDISLOCK_TEST_WORKER, "count", 4, 100), std::to_string(4 * 100));
}

TEST(MutexProcesses, AKilledHoldersLockFreesWhenItsLeaseRunsOut) {
  redis_server server;
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  child_process holder({REDISLOCK_TEST_WORKER, "hold", std::to_string(server.port()), "crash", "300"}, out[1]);
  ::close(out[1]);
  const std::string line = read_line(out[0], seconds(20));
  ::close(out[0]);
  ASSERT_EQ(line.rfind("acquired ", 0), 0u) << line;
  const std::uint64_t holder_fence = std::stoull(line.substr(9));

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
