// redislock::reentrant_mutex against a real redis-server: what is its own (hold counts,
// owners per thread, nested stale releases, wrong kinds, guards, publishing, processes).
// What every kind promises (extend, bad input, round trips, ...): test_lock_contract.cpp.
#include "server_fixture.hpp"
#include "worker_process.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

using namespace redislock;
using std::chrono::milliseconds;
using std::chrono::seconds;

using ReentrantTest = redislock_test::server_test;

using redislock_test::hget;

TEST_F(ReentrantTest, NestedLocksCountUpAndBalancedUnlocksFreeIt) {
  reentrant_mutex m(*pool, "nested", lease(seconds(10)));
  EXPECT_EQ(m.key(), "redislock:{nested}");
  for (int depth = 1; depth <= 3; ++depth) {
    m.lock();
    EXPECT_EQ(m.hold_count(), depth);
    EXPECT_EQ(hget(*admin, m.key(), m.owner_id()), std::to_string(depth));
  }
  EXPECT_EQ(hget(*admin, m.key(), "@kind"), "reentrant");
  const auto fence = m.fencing_token();
  EXPECT_GT(fence, 0u);
  m.unlock();
  m.unlock();
  EXPECT_EQ(m.last_release(), release_status::released);
  EXPECT_TRUE(m.owns_lock());
  EXPECT_EQ(hget(*admin, m.key(), m.owner_id()), "1");
  EXPECT_EQ(m.fencing_token(), fence);  // nested acquisitions keep the outer token
  m.unlock();
  EXPECT_FALSE(m.owns_lock());
  EXPECT_EQ(admin->command({"EXISTS", m.key()})->integer, 0);
}

TEST_F(ReentrantTest, ReEntryRenewsTheLease) {
  reentrant_mutex m(*pool, "renew", lease(seconds(20)));
  m.lock();
  admin->command({"PEXPIRE", m.key(), "1000"});
  m.lock();
  EXPECT_GT(admin->command({"PTTL", m.key()})->integer, 10000);
  m.unlock();
  m.unlock();
}

TEST_F(ReentrantTest, OtherObjectsAreExcludedUntilTheCountIsZero) {
  reentrant_mutex a(*pool, "exclusive"), b(*pool, "exclusive");
  a.lock();
  a.lock();
  EXPECT_FALSE(b.try_lock());
  EXPECT_FALSE(b.try_lock_for(milliseconds(50)));
  a.unlock();
  EXPECT_FALSE(b.try_lock());
  const auto first = a.fencing_token();
  a.unlock();
  ASSERT_TRUE(b.try_lock());
  EXPECT_GT(b.fencing_token(), first);
  b.unlock();
}

TEST_F(ReentrantTest, AWaiterGetsTheLockWhenTheHolderReleases) {
  reentrant_mutex a(*pool, "handoff"), b(*pool, "handoff");
  a.lock();
  auto waiter = std::async(std::launch::async, [&] {
    b.lock();
    return b.hold_count();
  });
  EXPECT_EQ(waiter.wait_for(milliseconds(50)), std::future_status::timeout);
  a.unlock();
  ASSERT_EQ(waiter.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_EQ(waiter.get(), 1);
  // The count and ownership are the waiting thread's, not ours.
  EXPECT_FALSE(b.owns_lock());
  b.unlock();
  EXPECT_EQ(b.last_release(), release_status::not_held);
}

TEST_F(ReentrantTest, ThreadsSharingOneObjectAreDistinctOwners) {
  reentrant_mutex m(*pool, "threads");
  std::atomic<int> inside{0}, overlaps{0};
  int counter = 0;  // plain int: the lock alone protects it
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t)
    workers.emplace_back([&] {
      for (int i = 0; i < 30; ++i) {
        std::lock_guard<reentrant_mutex> outer(m);
        std::lock_guard<reentrant_mutex> inner(m);  // re-entry by the same thread
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        ++counter;
        inside.fetch_sub(1);
      }
    });
  for (auto& w : workers) w.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter, 120);
  EXPECT_EQ(admin->command({"EXISTS", m.key()})->integer, 0);
}

TEST_F(ReentrantTest, AThreadThatDoesNotHoldItCannotRelease) {
  reentrant_mutex m(*pool, "not-mine");
  m.lock();
  const std::string owner = m.owner_id();
  std::thread([&] {
    EXPECT_FALSE(m.owns_lock());
    EXPECT_EQ(m.release(), release_status::not_held);
    EXPECT_THROW(m.extend(), lock_error);
    EXPECT_EQ(m.remaining_lease(), milliseconds(0));
  }).join();
  EXPECT_EQ(hget(*admin, m.key(), owner), "1");
  EXPECT_TRUE(m.still_held());
  m.unlock();
  EXPECT_EQ(m.last_release(), release_status::released);
}

TEST_F(ReentrantTest, AStaleOwnerNeverReleasesTheNextOwnersHold) {
  reentrant_mutex slow(*pool, "stale", lease(milliseconds(100)));
  reentrant_mutex next(*pool, "stale", lease(seconds(30)));
  slow.lock();
  slow.lock();
  ASSERT_TRUE(next.try_lock_for(seconds(10)));  // as soon as slow's lease ran out
  EXPECT_FALSE(slow.still_held());
  EXPECT_FALSE(slow.extend());
  EXPECT_EQ(slow.release(), release_status::lease_expired);
  EXPECT_EQ(slow.release(), release_status::lease_expired);
  EXPECT_EQ(slow.release(), release_status::not_held);
  EXPECT_EQ(hget(*admin, next.key(), next.owner_id()), "1");
  EXPECT_TRUE(next.still_held());
  next.unlock();
}

TEST_F(ReentrantTest, MutexAndReentrantNamesClashAsWrongType) {
  mutex plain(*pool, "clash");
  reentrant_mutex re(*pool, "clash");
  plain.lock();
  EXPECT_THROW(re.lock(), wrong_type_error);
  EXPECT_THROW(re.try_lock(), wrong_type_error);
  EXPECT_FALSE(re.owns_lock());
  EXPECT_TRUE(plain.still_held());
  plain.unlock();

  re.lock();
  EXPECT_THROW(plain.try_lock(), wrong_type_error);
  EXPECT_EQ(std::string(admin->command({"TYPE", re.key()})->str), "hash");
  re.unlock();
  EXPECT_EQ(re.last_release(), release_status::released);

  // A hash that is not a lock at all: typed error, untouched.
  admin->command({"HSET", re.key(), "field", "value"});
  try {
    re.lock();
    FAIL() << "lock() on a foreign hash succeeded";
  } catch (const wrong_type_error& e) {
    EXPECT_NE(e.server_message().find("not a reentrant lock"), std::string::npos) << e.server_message();
  }
  EXPECT_EQ(admin->command({"HLEN", re.key()})->integer, 1);
  EXPECT_EQ(admin->command({"EXISTS", re.key() + ":fence"})->integer, 0);  // nobody asked for a token
}

TEST_F(ReentrantTest, StdGuardsWork) {
  reentrant_mutex a(*pool, "guard-a"), b(*pool, "guard-b");
  {
    std::lock_guard<reentrant_mutex> g(a);
    std::unique_lock<reentrant_mutex> u(a, std::try_to_lock);
    EXPECT_TRUE(u.owns_lock());
    EXPECT_EQ(a.hold_count(), 2);
    u.unlock();
    EXPECT_TRUE(u.try_lock_for(milliseconds(100)));
    u.unlock();
    EXPECT_TRUE(u.try_lock_until(std::chrono::system_clock::now() + milliseconds(100)));
  }
  EXPECT_EQ(a.hold_count(), 0);
  {
    std::scoped_lock both(a, b);
    EXPECT_TRUE(a.owns_lock());
    EXPECT_TRUE(b.owns_lock());
  }
  EXPECT_FALSE(a.owns_lock());
  EXPECT_FALSE(b.owns_lock());
  EXPECT_EQ(admin->command({"DBSIZE"})->integer, 0);  // nothing left: no token was asked for
}

TEST_F(ReentrantTest, TheLastReleasePublishes) {
  reentrant_mutex m(*pool, "publish");
  connection sub(server->options());
  sub.command({"SUBSCRIBE", m.key() + ":released"});
  m.lock();
  m.lock();
  m.unlock();  // nested: still held, nothing published
  m.unlock();
  reply_ptr msg = sub.read_reply();  // bounded by the connection's command timeout
  ASSERT_EQ(msg->type, REDIS_REPLY_ARRAY);
  EXPECT_EQ(std::string(msg->element[1]->str), m.key() + ":released");
  EXPECT_EQ(admin->command({"PUBSUB", "NUMSUB", m.key() + ":released"})->element[1]->integer, 1);
}

TEST(ReentrantProcesses, WorkersInSeparateProcessesNeverOverlap) {
  EXPECT_EQ(redislock_test::count_in_processes(REDISLOCK_TEST_WORKER, "count-reentrant", 3, 60),
            std::to_string(3 * 60));
}

TEST(ReentrantServerLoss, UnreachableIsTypedAndReleasesReportFailed) {
  static_assert(noexcept(std::declval<reentrant_mutex&>().unlock()));
  redislock_test::redis_server own;
  client_options o{own.options()};
  o.connection.connect_timeout = milliseconds(200);
  client c(o);
  reentrant_mutex m(c, "lost");
  m.lock();
  m.lock();
  own.stop();
  m.unlock();
  EXPECT_EQ(m.last_release(), release_status::failed);
  EXPECT_EQ(m.hold_count(), 1);  // one hold dropped locally either way
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(m.lock(), connection_error);
  EXPECT_EQ(m.hold_count(), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
  m.unlock();
  EXPECT_EQ(m.last_release(), release_status::failed);
  EXPECT_FALSE(m.owns_lock());
}
