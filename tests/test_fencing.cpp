// A holder paused past its lease (SIGSTOP, as a long GC pause would) wakes up believing it holds
// the lock. Its late write is detectable: the storage rejects a fencing token lower than one it
// has already seen (the check of tests/torture/checker.hpp).
#include "redis_server.hpp"
#include "torture/checker.hpp"
#include "worker_process.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>

namespace test_fencing {

using namespace redislock;
using redislock_test::redis_server;
using redislock_test::worker_process;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(Fencing, AHolderPausedPastItsLeaseHasItsLateWriteRejected) {
  redis_server server;
  const std::string prefix = "fencing:{t}";
  worker_process holder(REDISLOCK_TEST_WORKER, {"stale-write", std::to_string(server.port()), "paused", "300", prefix});
  const std::string acquired = holder.acquired();
  ASSERT_FALSE(acquired.empty());
  const std::uint64_t stale_fence = std::stoull(acquired);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(holder.pid()), &info, WSTOPPED | WEXITED | WNOWAIT), 0);
  ASSERT_EQ(info.si_code, CLD_STOPPED);

  // While it sleeps, its lease runs out and the lock passes on; the new holder writes.
  client c(client_options{server.options()});
  mutex next(c, "paused");
  ASSERT_TRUE(next.try_lock_for(seconds(10)));
  ASSERT_GT(next.fencing_token(), stale_fence);
  connection data = server.admin();
  const std::string epoch_key = prefix + ":epoch";
  const std::string epoch(detail::as_string(*redislock_torture::epoch_script().run(data, {epoch_key}, {"e"})));
  EXPECT_EQ(detail::as_integer(*redislock_torture::fenced_write_script().run(
                data, {epoch_key, prefix + ":counter", prefix + ":fence", prefix + ":applied"},
                {epoch, "100", std::to_string(next.fencing_token())})),
            1);

  holder.signal(SIGCONT);
  const std::string result = holder.read_line();
  EXPECT_EQ(result, "write 0 held 0 release lease_expired");
  EXPECT_EQ(holder.wait_for(seconds(20)), 0);
  EXPECT_EQ(std::string(data.command({"GET", prefix + ":counter"})->str), "100");
  EXPECT_TRUE(next.still_held());
  next.unlock();
}

}  // namespace test_fencing
