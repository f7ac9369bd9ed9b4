// A holder paused past its lease (SIGSTOP, as a long GC pause would) wakes up believing it holds
// the lock. Its late write is detectable: the storage rejects a fencing token lower than one it
// has already seen (the check of tests/torture/checker.hpp).
#include "process.hpp"
#include "redis_server.hpp"
#include "torture/checker.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace redislock;
using redislock_test::child_process;
using redislock_test::redis_server;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

std::string read_line(int fd, milliseconds timeout) {
  std::string line;
  const auto end = std::chrono::steady_clock::now() + timeout;
  char ch;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    auto left = std::chrono::duration_cast<milliseconds>(end - std::chrono::steady_clock::now());
    if (::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0))) <= 0) break;
    if (::read(fd, &ch, 1) != 1) break;
    if (ch == '\n') return line;
    line.push_back(ch);
  }
  return line;
}

}  // namespace

TEST(Fencing, AHolderPausedPastItsLeaseHasItsLateWriteRejected) {
  redis_server server;
  const std::string prefix = "fencing:{t}";
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  child_process holder({REDISLOCK_TEST_WORKER, "stale-write", std::to_string(server.port()), "paused", "300", prefix},
                       out[1]);
  ::close(out[1]);
  const std::string acquired = read_line(out[0], seconds(20));
  ASSERT_EQ(acquired.rfind("acquired ", 0), 0u) << acquired;
  const std::uint64_t stale_fence = std::stoull(acquired.substr(9));
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
  const std::string result = read_line(out[0], seconds(20));
  ::close(out[0]);
  EXPECT_EQ(result, "write 0 held 0 release lease_expired");
  EXPECT_EQ(holder.wait_for(seconds(20)), 0);
  EXPECT_EQ(std::string(data.command({"GET", prefix + ":counter"})->str), "100");
  EXPECT_TRUE(next.still_held());
  next.unlock();
}
