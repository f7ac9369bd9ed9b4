// redislock::client: a bounded, thread-safe pool.
#include "redis_server.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

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
