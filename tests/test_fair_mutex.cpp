// Fair (FIFO) mode: waiters acquire in arrival order, a release hands the lock straight to the
// head of the queue, try_lock never jumps the queue, a waiter that gives up leaves it, and a
// crashed (SIGKILLed) waiter blocks it for at most its wait lease.
#include "process.hpp"
#include "eventually.hpp"
#include "redis_server.hpp"
#include "server_fixture.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace test_fair_mutex {

using namespace redislock;
using redislock_test::child_process;
using redislock_test::command_calls;
using redislock_test::eventually;
using redislock_test::redis_server;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

lock_options fair(milliseconds wait_lease = seconds(2)) {
  lock_options o;
  o.fair = true;
  o.lease = seconds(20);
  o.wait_lease = wait_lease;
  return o;
}

struct FairTest : redislock_test::server_test {
  long long queued(const mutex& m) { return admin->command({"ZCARD", m.key() + ":queue"})->integer; }
  std::string holder_of(const mutex& m) { return get(m.key()); }
  std::string holder_of_key(const std::string& key) { return get(key); }
  static std::string text(const reply_ptr& r) { return std::string(r->str, r->len); }
  static std::string text(const redisReply* r) { return std::string(r->str, r->len); }
};

}  // namespace

TEST_F(FairTest, UncontendedLockAndUnlockLeaveNoQueueBehind) {
  client c(options());
  mutex m(c, "plain", fair());
  m.lock();
  EXPECT_GT(m.fencing_token(), 0u);
  m.unlock();
  EXPECT_EQ(m.last_release(), release_status::released);
  EXPECT_EQ(redislock_test::all_keys(*admin),
            std::vector<std::string>{m.key() + ":fence"});  // only the fencing counter
}

// Both modes queue waiters and hand the lock over in arrival order.
TEST_F(FairTest, WaitersAcquireInArrivalOrderInBothModes) {
  for (const bool is_fair : {true, false}) {
    lock_options o;
    o.fair = is_fair;
    const std::string name = is_fair ? "fifo" : "fifo-default";
    client c(options());
    mutex holder(c, name, o);
    holder.lock();
    constexpr int n = 5;
    std::vector<std::unique_ptr<client>> clients;
    std::vector<std::unique_ptr<mutex>> waiters;
    std::mutex order_mutex;
    std::vector<int> order;
    std::vector<std::uint64_t> fences;
    std::vector<std::future<void>> done;
    for (int i = 0; i < n; ++i) {
      clients.push_back(std::make_unique<client>(options()));
      waiters.push_back(std::make_unique<mutex>(*clients.back(), name, o));
      done.push_back(std::async(std::launch::async, [&, i, w = waiters.back().get()] {
        std::lock_guard<mutex> g(*w);
        std::lock_guard<std::mutex> l(order_mutex);
        order.push_back(i);
        fences.push_back(w->fencing_token());
      }));
      // The next waiter starts only once this one is queued on the server.
      ASSERT_TRUE(eventually([&] { return queued(holder) == i + 1; }));
    }
    holder.unlock();
    for (auto& f : done) ASSERT_EQ(f.wait_for(seconds(5)), std::future_status::ready);
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4})) << (is_fair ? "fair" : "default");
    EXPECT_TRUE(std::is_sorted(fences.begin(), fences.end()));
    EXPECT_EQ(queued(holder), 0);
  }
}

TEST_F(FairTest, ReleaseHandsTheLockToTheHeadSoTryLockCannotJumpTheQueue) {
  client holder_client(options()), waiter_client(options()), intruder_client(options());
  mutex holder(holder_client, "handoff", fair());
  mutex waiter(waiter_client, "handoff", fair());
  mutex intruder(intruder_client, "handoff", fair());
  holder.lock();
  auto waited = std::async(std::launch::async, [&] { return waiter.try_lock_for(seconds(5)); });
  ASSERT_TRUE(eventually([&] { return queued(holder) == 1; }));
  holder.unlock();
  // The release script itself gave the key to the waiter: nobody can take it in between.
  EXPECT_FALSE(intruder.try_lock());
  ASSERT_TRUE(waited.get());
  EXPECT_EQ(holder_of(waiter).size(), 34u);
  EXPECT_FALSE(intruder.try_lock());
  waiter.unlock();
  EXPECT_TRUE(intruder.try_lock());
  intruder.unlock();
}

TEST_F(FairTest, AHandOffCostsTheWaiterNoRoundTripHoweverLongTheHold) {
  client holder_client(options()), waiter_client(options());
  mutex holder(holder_client, "cheap", fair());
  mutex waiter(waiter_client, "cheap", fair());
  holder.lock();  // a first cycle loads the scripts
  holder.unlock();
  holder.lock();
  admin->command({"CONFIG", "RESETSTAT"});
  auto waited = std::async(std::launch::async, [&] { waiter.lock(); });
  // Queued (it subscribes first, then queues: subscribed alone, the release could find nobody
  // queued and the waiter take the lock by an attempt of its own).
  ASSERT_TRUE(eventually([&] { return queued(waiter) == 1; }));
  std::this_thread::sleep_for(milliseconds(500));  // the hold: the waiter sleeps through it
  const long long before = command_calls(*admin, "evalsha");
  holder.unlock();
  ASSERT_EQ(waited.wait_for(seconds(5)), std::future_status::ready);
  waited.get();
  EXPECT_LE(before, 2);                                     // try, then queue after SUBSCRIBE
  EXPECT_EQ(command_calls(*admin, "evalsha") - before, 1);  // the hand-off release alone
  EXPECT_EQ(waiter_client.wait_stats().wakeups, 1u);
  waiter.unlock();
}

TEST_F(FairTest, AWaiterThatGivesUpLeavesTheQueue) {
  client c(options()), w(options());
  mutex holder(c, "giveup", fair());
  mutex waiter(w, "giveup", fair());
  holder.lock();
  const auto start = steady::now();
  EXPECT_FALSE(waiter.try_lock_for(milliseconds(200)));
  const auto took = steady::now() - start;
  EXPECT_GE(took, milliseconds(200));
  EXPECT_LT(took, milliseconds(200 + 250));
  EXPECT_EQ(queued(holder), 0);
  holder.unlock();
  EXPECT_EQ(holder_of(holder), "(nil)");  // nobody to hand it to
}

// A waiter whose process died is skipped by the release at once: PUBLISH on its channel
// reaches nobody, since the server dropped its connection.
TEST_F(FairTest, ACrashedWaiterIsSkippedAtOnce) {
  client holder_client(options()), waiter_client(options());
  mutex holder(holder_client, "crashed", fair());
  mutex waiter(waiter_client, "crashed", fair());
  holder.lock();
  constexpr long wait_lease_ms = 600;
  child_process crashed(
      {REDISLOCK_TEST_WORKER, "fair-wait", std::to_string(server->port()), "crashed", std::to_string(wait_lease_ms)});
  ASSERT_TRUE(eventually([&] { return queued(holder) == 1; }));
  auto waited = std::async(std::launch::async, [&] { return waiter.try_lock_for(seconds(8)); });
  ASSERT_TRUE(eventually([&] { return queued(holder) == 2; }));
  crashed.signal(SIGKILL);
  ASSERT_EQ(crashed.wait_for(seconds(5)), 128 + SIGKILL);
  // Until the server has seen the connection close, the dead waiter still counts as listening.
  ASSERT_TRUE(eventually([&] { return admin->command({"PUBSUB", "CHANNELS", holder.key() + ":w:*"})->elements == 1; }));
  holder.unlock();  // skips the dead head, hands the lock to the live waiter
  EXPECT_EQ(queued(holder), 0);
  EXPECT_NE(holder_of(holder), "(nil)");
  ASSERT_TRUE(waited.get());
  waiter.unlock();
}

// A waiter that stops answering without its connection closing (SIGSTOP here; power loss or a
// partition in production) keeps its place only for its wait lease: a release after that skips it.
TEST_F(FairTest, ASilentWaiterLosesItsPlaceAfterItsWaitLease) {
  client holder_client(options()), waiter_client(options());
  lock_options short_lease = fair();
  short_lease.lease = seconds(3);
  mutex holder(holder_client, "silent", short_lease);
  mutex waiter(waiter_client, "silent", fair());
  holder.lock();
  child_process silent({REDISLOCK_TEST_WORKER, "fair-wait", std::to_string(server->port()), "silent", "300"});
  ASSERT_TRUE(eventually([&] { return queued(holder) == 1; }));
  silent.signal(SIGSTOP);
  // The silent waiter's place lasts until 300 ms after the lease it saw (3 s); the holder keeps
  // the lock longer, so the release below comes after that place lapsed.
  ASSERT_TRUE(holder.extend(seconds(30)));
  auto waited = std::async(std::launch::async, [&] { return waiter.try_lock_for(seconds(8)); });
  ASSERT_TRUE(eventually([&] { return queued(holder) == 2; }));
  // Wait, on the server's clock, until the stopped waiter's place has lapsed.
  const std::string head = text(admin->command({"ZRANGE", holder.key() + ":queue", "0", "0"})->element[0]);
  const std::string entry = text(admin->command({"HGET", holder.key() + ":waiters", head}));
  const long long expiry = std::stoll(entry.substr(0, entry.find(':')));
  ASSERT_TRUE(eventually([&] {
    reply_ptr t = admin->command({"TIME"});
    return std::stoll(text(t->element[0])) * 1000 + std::stoll(text(t->element[1])) / 1000 > expiry;
  }));
  holder.unlock();  // skips the silent head: its place lapsed
  EXPECT_EQ(queued(holder), 0);
  ASSERT_TRUE(waited.get());
  waiter.unlock();
  silent.signal(SIGKILL);
  EXPECT_EQ(silent.wait_for(seconds(5)), 128 + SIGKILL);
}

TEST_F(FairTest, ANonQueuedTryLockTakesAFreeLock) {
  client c(options());
  mutex m(c, "try", fair());
  EXPECT_TRUE(m.try_lock());
  mutex other(c, "try", fair());
  EXPECT_FALSE(other.try_lock());
  EXPECT_EQ(queued(m), 0);  // try_lock never queues
  m.unlock();
}

TEST_F(FairTest, ARetriedAcquireWhoseReplyWasLostRestartsTheLease) {
  // The same token sent twice, as when the first reply was lost: the second "acquired" must
  // restart the lease, or the caller would count a full lease from its retry while the key
  // expires earlier.
  static const std::string token = "0123456789abcdef0123456789abcdef";
  const std::string key = "redislock:{retry}";
  auto acquire = [&] {
    return detail::mutex_scripts::queue_attempt().run(*admin, {key, key + ":fence", key + ":queue", key + ":waiters"},
                                                      {token, "30000", "wait", "1", "2000", key + ":w:"});
  };
  ASSERT_EQ(acquire()->element[0]->integer, 1);
  admin->command({"PEXPIRE", key, "1000"});  // as if 29 s had passed
  reply_ptr again = acquire();
  EXPECT_EQ(again->element[0]->integer, 1);
  EXPECT_GT(admin->command({"PTTL", key})->integer, 29000);
}

// Places are ordered by arrival on the server's clock (µs); a refresh keeps its place (ZADD
// NX), a waiter whose entry vanished without its field queues again, last, and an entry of an
// older version (arrival counter "#seq": small numbers) sorts first.
TEST_F(FairTest, ARefreshKeepsItsPlaceAndALostEntryQueuesAgainLast) {
  const std::string key = "redislock:{order}", queue = key + ":queue";
  admin->command({"SET", key, "holder:1", "PX", "30000"});
  auto wait = [&](const std::string& token) {
    reply_ptr r = detail::mutex_scripts::queue_attempt().run(*admin, {key, key + ":fence", queue, key + ":waiters"},
                                                             {token, "30000", "wait", "0", "2000", key + ":w:"});
    return r->element[0]->integer;
  };
  auto order = [&] {
    std::vector<std::string> out;
    reply_ptr r = admin->command({"ZRANGE", queue, "0", "-1"});
    for (std::size_t i = 0; i < r->elements; ++i) out.push_back(text(r->element[i]));
    return out;
  };
  auto server_us = [&] {
    reply_ptr t = admin->command({"TIME"});
    return std::stoll(text(t->element[0])) * 1000000 + std::stoll(text(t->element[1]));
  };
  auto score = [&](const char* token) { return std::stoll(text(admin->command({"ZSCORE", queue, token}))); };
  const long long before = server_us();
  for (const char* t : {"c:1", "b:1", "a:1"}) ASSERT_EQ(wait(t), 0);  // not in name order
  const long long after = server_us();
  EXPECT_EQ(order(), (std::vector<std::string>{"c:1", "b:1", "a:1"}));
  EXPECT_GE(score("c:1"), before);
  EXPECT_LE(score("a:1"), after);
  const long long c_score = score("c:1");
  ASSERT_EQ(wait("c:1"), 0);  // a refresh
  EXPECT_EQ(score("c:1"), c_score);
  EXPECT_EQ(order(), (std::vector<std::string>{"c:1", "b:1", "a:1"}));
  admin->command({"ZREM", queue, "b:1"});  // gone from the queue, still in the hash
  ASSERT_EQ(wait("b:1"), 0);
  EXPECT_EQ(order(), (std::vector<std::string>{"c:1", "a:1", "b:1"}));
  admin->command({"ZADD", queue, "1", "old:1"});  // queued by an older version
  admin->command({"HSET", key + ":waiters", "old:1", "99999999999999:30000", "#seq", "1"});
  ASSERT_EQ(wait("d:1"), 0);
  EXPECT_EQ(order(), (std::vector<std::string>{"old:1", "c:1", "a:1", "b:1", "d:1"}));
  admin->command({"DEL", key, queue, key + ":waiters"});
}

// A release never hands the lock back to the releasing token, even when a stale queue entry of
// its own (left by a wait whose leave failed) is at the head: the lock is freed instead.
TEST_F(FairTest, AReleaseSkipsTheReleasersOwnStaleQueueEntry) {
  const std::string key = "redislock:{stale-entry}", token = "self:1";
  const std::string fence = key + ":fence", queue = key + ":queue", waiters = key + ":waiters";
  admin->command({"SET", key, token, "PX", "30000"});
  admin->command({"ZADD", queue, "1", token});
  admin->command({"HSET", waiters, token, "99999999999999:30000"});
  reply_ptr r = detail::mutex_scripts::release().run(*admin, {key, fence, queue, waiters}, {token, key + ":w:"});
  EXPECT_EQ(r->integer, 1);
  EXPECT_EQ(holder_of_key(key), "(nil)");
  EXPECT_EQ(admin->command({"EXISTS", queue})->integer, 0);
  EXPECT_EQ(admin->command({"EXISTS", waiters})->integer, 0);
}

// A waiter whose wait failed while Redis was unreachable (its "leave" failed too) leaves its
// place behind; the object stops listening on its channel, so the next release skips that
// place instead of handing the lock to a token nobody will use (the live waiter behind it
// would wait out the whole lease).
TEST_F(FairTest, ALeftoverPlaceOfAFailedWaitIsSkipped) {
  if (version() < 60200) GTEST_SKIP() << "needs CLIENT PAUSE ... WRITE and CLIENT UNPAUSE (Redis 6.2)";
  lock_options o;
  o.lease = seconds(20);
  o.recheck_interval = milliseconds(200);
  mutex holder(*pool, "failed-leave", o);
  client_options co = options();
  co.connection.command_timeout = milliseconds(300);
  client waiter_client(co);
  mutex failing_waiter(waiter_client, "failed-leave", o);
  auto queued = [&] { return admin->command({"ZCARD", holder.key() + ":queue"})->integer; };
  holder.lock();
  auto failing = std::async(std::launch::async, [&] {
    try {
      failing_waiter.try_lock_for(seconds(10));
    } catch (const std::exception&) {
      return true;
    }
    return false;
  });
  ASSERT_TRUE(eventually([&] { return queued() == 1; }));
  admin->command({"CLIENT", "PAUSE", "30000", "WRITE"});  // its re-check and its "leave" time out
  const auto ended = failing.wait_for(seconds(10));
  admin->command({"CLIENT", "UNPAUSE"});
  ASSERT_EQ(ended, std::future_status::ready);
  ASSERT_TRUE(failing.get());
  if (queued() != 1) GTEST_SKIP() << "the server ran the timed-out leave after all";
  client live_client(options());
  mutex live(live_client, "failed-leave", o);
  auto waited = std::async(std::launch::async, [&] {
    const bool got = live.try_lock_for(seconds(5));
    if (got) live.unlock();
    return got;
  });
  ASSERT_TRUE(eventually([&] { return queued() == 2; }));
  holder.unlock();
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(waited.get()) << "the release handed the lock to the failed wait's leftover place";
}

}  // namespace test_fair_mutex
