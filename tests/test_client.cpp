// redislock::client: a bounded, thread-safe pool.
#include "eventually.hpp"
#include "redis_server.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace test_client {

using namespace redislock;
using redislock_test::redis_server;

TEST(Client, ManyThreadsShareABoundedPool) {
  redis_server server;
  client_options o{server.options()};
  o.pool_size = 3;
  client c(o);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) c.command({"INCR", "client:n"});
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.command({"GET", "client:n"})->str, std::string("1600"));
  EXPECT_LE(c.open_connections(), 3u);
}

TEST(Client, WaitingForAConnectionIsBounded) {
  redis_server server;
  client_options o{server.options()};
  o.pool_size = 1;
  o.pool_wait_timeout = std::chrono::milliseconds(100);
  client c(o);
  std::promise<void> borrowed, give_back;
  std::thread holder([&] {
    c.run({}, [&](connection&) {
      borrowed.set_value();
      give_back.get_future().wait();
      return 0;
    });
  });
  borrowed.get_future().wait();
  EXPECT_THROW(c.command({"PING"}), timeout_error);
  give_back.set_value();
  holder.join();
  EXPECT_EQ(c.command({"PING"})->str, std::string("PONG"));
}

TEST(Client, FailedConnectFreesItsPoolSlot) {
  client_options o;
  o.connection.port = redislock_test::free_port();  // nobody listens
  o.pool_size = 1;
  client c(o);
  for (int i = 0; i < 3; ++i) EXPECT_THROW(c.command({"PING"}), connection_error);
  EXPECT_EQ(c.open_connections(), 0u);
}

TEST(Client, ConstructsFromAUri) {
  redis_server server;
  client c(server.uri());
  EXPECT_EQ(c.command({"PING"})->str, std::string("PONG"));
}

// A client (and every lock on it) belongs to the process that made it. In a child of fork()
// each call is a typed error rather than a command on the parent's sockets (or a repeat of its
// tokens); tearing the copies down in the child leaves the parent's connections, subscription
// and renewal thread alone; and the parent goes on as before.
TEST(Client, AChildOfForkGetsATypedErrorAndLeavesTheParentsClientIntact) {
  redis_server server;
  client_options o{server.options()};
  auto c = std::make_unique<client>(o);
  client other(o);
  lock_options renewing;
  renewing.auto_renew = true;
  auto renewed = std::make_unique<mutex>(*c, "fork-renewed", renewing);
  renewed->lock();  // starts the client's watchdog thread
  renewed->unlock();
  mutex holder(other, "fork-waited");
  holder.lock();
  auto waiter = std::make_unique<mutex>(*c, "fork-waited");
  EXPECT_FALSE(waiter->try_lock_for(std::chrono::milliseconds(50)));  // subscribes (and stays)
  ASSERT_GE(c->wait_stats().subscriptions, 1u);

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the child: no gtest assertions here, only an exit code
    int code = 0;
    try {
      waiter->try_lock();
      code = 10;
    } catch (const connection_error&) {
      code = 11;
    } catch (const redislock::error&) {
    }
    try {
      mutex fresh(*c, "fork-fresh");
      fresh.lock();
      code = 12;
    } catch (const redislock::error&) {
    }
    waiter.reset();
    renewed.reset();
    c.reset();
    ::_exit(code);
  }
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  ASSERT_GE(pidfd, 0);
  pollfd p{pidfd, POLLIN, 0};
  const bool exited = ::poll(&p, 1, 10000) == 1;
  if (!exited) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(pidfd);
  ASSERT_TRUE(exited) << "the child hung tearing down its copies";
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);

  // The parent's subscription survived: the release hands over by notice, no backoff.
  auto waited = std::async(std::launch::async, [&] { waiter->lock(); });
  ASSERT_TRUE(redislock_test::eventually([&] {
    return other.command({"ZCARD", holder.key() + ":queue"})->integer == 1;
  }));
  holder.unlock();
  ASSERT_EQ(waited.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  waited.get();
  EXPECT_EQ(c->wait_stats().fallback_waits, 0u);
  waiter->unlock();
  renewed->lock();
  EXPECT_TRUE(renewed->still_held());
  renewed->unlock();
}

}  // namespace test_client
