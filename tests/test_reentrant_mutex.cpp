// redislock::reentrant_mutex against a real redis-server: what is its own (hold counts,
// owners per thread, nested stale releases, wrong kinds, guards, its queued hand-off and fair
// mode, processes). What every kind promises (extend, bad input, round trips, ...):
// test_lock_contract.cpp.
#include "eventually.hpp"
#include "process.hpp"
#include "redis_server.hpp"
#include "freeze_waiter.hpp"
#include "server_fixture.hpp"
#include "worker_process.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace test_reentrant_mutex {

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
    EXPECT_EQ(m.unlock_and_report(), release_status::not_held);
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
  EXPECT_EQ(slow.unlock_and_report(), release_status::lease_expired);
  EXPECT_EQ(slow.unlock_and_report(), release_status::lease_expired);
  EXPECT_EQ(slow.unlock_and_report(), release_status::not_held);
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

// --- queued hand-off and fair mode ----------------------------------------------------------

namespace {
long long queued(connection& admin, const reentrant_mutex& m) {
  return admin.command({"ZCARD", m.key() + ":rqueue"})->integer;
}
lock_options fair_options(bool fair = true) {
  lock_options o;
  o.fair = fair;
  o.lease = seconds(20);
  return o;
}
/// The lock's hash as "field=value" lines in field order (HGETALL).
std::vector<std::string> fields(connection& admin, const std::string& key) {
  reply_ptr r = admin.command({"HGETALL", key});
  std::vector<std::string> out;
  for (std::size_t i = 0; i + 1 < r->elements; i += 2)
    out.push_back(std::string(r->element[i]->str, r->element[i]->len) + "=" +
                  std::string(r->element[i + 1]->str, r->element[i + 1]->len));
  std::sort(out.begin(), out.end());
  return out;
}
/// Commands the server ran since CONFIG RESETSTAT (INFO commandstats), but the admin's own
/// INFO and CONFIG.
long long commands_run(connection& admin) {
  reply_ptr r = admin.command({"INFO", "commandstats"});
  const std::string info(r->str, r->len);
  long long total = 0;
  for (std::size_t at = info.find("cmdstat_"); at != std::string::npos; at = info.find("cmdstat_", at + 1)) {
    const std::size_t calls = info.find("calls=", at);
    const bool admins = info.compare(at, 13, "cmdstat_info:") == 0 || info.compare(at, 14, "cmdstat_config") == 0;
    if (!admins) total += std::stoll(info.substr(calls + 6));
  }
  return total;
}
/// `owner`'s entry of the lock hash as the hand-off writes it: {@kind=reentrant, owner=1}.
std::vector<std::string> handed_to(const std::string& owner) {
  std::vector<std::string> out{"@kind=reentrant", owner + "=1"};
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

// Waiters in separate clients queue on the server and get the lock in arrival order: each
// release hands it to the head in the same script (the hash holds the head's owner at once).
TEST_F(ReentrantTest, WaitersInSeparateClientsAcquireInArrivalOrderInBothModes) {
  for (const bool is_fair : {true, false}) {
    SCOPED_TRACE(is_fair ? "fair" : "default");
    const std::string name = is_fair ? "fifo" : "fifo-default";
    reentrant_mutex holder(*pool, name, fair_options(is_fair));
    holder.lock();
    constexpr int n = 4;
    std::vector<std::unique_ptr<client>> clients;
    std::vector<std::unique_ptr<reentrant_mutex>> waiters;
    std::mutex order_mutex;
    std::vector<int> order;
    std::vector<std::uint64_t> fences;
    std::vector<std::future<void>> done;
    for (int i = 0; i < n; ++i) {
      clients.push_back(std::make_unique<client>(options()));
      waiters.push_back(std::make_unique<reentrant_mutex>(*clients.back(), name, fair_options(is_fair)));
      done.push_back(std::async(std::launch::async, [&, i, w = waiters.back().get()] {
        std::lock_guard<reentrant_mutex> g(*w);
        std::lock_guard<std::mutex> l(order_mutex);
        order.push_back(i);
        fences.push_back(w->fencing_token());
      }));
      // The next waiter starts only once this one is queued on the server.
      ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, holder) == i + 1; }));
    }
    EXPECT_EQ(admin->command({"EXISTS", holder.key() + ":queue", holder.key() + ":waiters"})->integer, 0)
        << "the mutex's queue keys are not the reentrant kind's";
    holder.unlock();
    for (auto& f : done) ASSERT_EQ(f.wait_for(seconds(10)), std::future_status::ready);
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_TRUE(std::is_sorted(fences.begin(), fences.end()));
    EXPECT_EQ(queued(*admin, holder), 0);
    EXPECT_EQ(admin->command({"EXISTS", holder.key(), holder.key() + ":rqueue"})->integer, 0);
  }
}

// A release tells the head alone, on its own channel: the other waiters sleep on (no wake-up,
// no command), and the head's hand-off costs it no attempt however long the hold was.
TEST_F(ReentrantTest, AReleaseWakesOnlyTheHeadAndWaitingSendsNoCommands) {
  lock_options sleepy = fair_options(false);
  sleepy.recheck_interval = seconds(60);                       // no re-check within the hold
  reentrant_mutex holder(*pool, "head", fair_options(false));  // auto_renew off, 20 s lease
  holder.lock();  // a first cycle loads the scripts: the counts below are EVALSHA only
  holder.unlock();
  holder.lock();
  constexpr int n = 3;
  std::vector<std::unique_ptr<client>> clients;
  std::vector<std::unique_ptr<reentrant_mutex>> waiters;
  std::vector<std::promise<void>> leave(n);
  std::vector<std::future<void>> got;
  for (int i = 0; i < n; ++i) {
    clients.push_back(std::make_unique<client>(options()));
    waiters.push_back(std::make_unique<reentrant_mutex>(*clients.back(), "head", sleepy));
    got.push_back(std::async(std::launch::async, [w = waiters.back().get(), l = leave[i].get_future()] {
      if (!w->try_lock_for(seconds(30))) return;
      l.wait_for(seconds(20));
      w->unlock();
    }));
    ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, holder) == i + 1; }));
  }
  reset_stats();
  // The hold: waiters notified only (retry_max 100 ms would poll a dozen times meanwhile).
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_EQ(commands_run(*admin), 0) << "a waiter sent commands during the hold";
  reply_ptr first = admin->command({"ZRANGE", holder.key() + ":rqueue", "0", "0"});
  ASSERT_EQ(first->elements, 1u);
  const std::string head(first->element[0]->str, first->element[0]->len);
  holder.unlock();
  EXPECT_EQ(fields(*admin, holder.key()), handed_to(head)) << "the release script handed the lock over";
  ASSERT_TRUE(redislock_test::eventually([&] { return clients[0]->wait_stats().wakeups == 1; }));
  EXPECT_EQ(got[1].wait_for(milliseconds(0)), std::future_status::timeout);
  EXPECT_EQ(redislock_test::command_calls(*admin, "evalsha"), 1) << "the release alone: no attempt after it";
  for (int i = 1; i < n; ++i) EXPECT_EQ(clients[i]->wait_stats().wakeups, 0u) << "waiter " << i << " was woken";
  EXPECT_EQ(queued(*admin, holder), 2);
  for (int i = 0; i < n; ++i) {
    leave[i].set_value();
    ASSERT_EQ(got[i].wait_for(seconds(10)), std::future_status::ready);
  }
  for (int i = 0; i < n; ++i) EXPECT_EQ(clients[i]->wait_stats().wakeups, 1u) << "waiter " << i;
}

// Nested releases hand nothing over; the one that brings the count to zero does.
TEST_F(ReentrantTest, NestedHoldsHandOverOnlyAtCountZero) {
  client waiter_client(options());
  reentrant_mutex holder(*pool, "nested-handoff", fair_options());
  reentrant_mutex waiter(waiter_client, "nested-handoff", fair_options());
  holder.lock();
  holder.lock();
  const std::string holder_owner = holder.owner_id();
  auto waited = std::async(std::launch::async, [&] {
    if (!waiter.try_lock_for(seconds(20))) return std::string();
    const std::string owner = waiter.owner_id();
    waiter.unlock();
    return owner;
  });
  ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, holder) == 1; }));
  holder.unlock();
  EXPECT_EQ(hget(*admin, holder.key(), holder_owner), "1");
  EXPECT_EQ(queued(*admin, holder), 1) << "a nested release handed the lock over";
  EXPECT_EQ(waited.wait_for(milliseconds(0)), std::future_status::timeout);
  holder.unlock();
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_FALSE(waited.get().empty());
  EXPECT_EQ(waiter_client.wait_stats().wakeups, 1u);
}

// Fair mode: a lock that fell free (its holder's lease ran out) while waiters are queued goes
// to the head, not to a newcomer's try_lock. The default mode lets the newcomer take it.
TEST_F(ReentrantTest, AnExpiredHoldersLockGoesToTheHeadNotToANewcomerInFairMode) {
  for (const bool is_fair : {true, false}) {
    SCOPED_TRACE(is_fair ? "fair" : "default");
    const std::string name = is_fair ? "expired" : "expired-default";
    lock_options sleepy = fair_options(is_fair);
    sleepy.recheck_interval = seconds(60);
    client waiter_client(options()), newcomer_client(options());
    reentrant_mutex holder(*pool, name, fair_options(is_fair));
    reentrant_mutex waiter(waiter_client, name, sleepy);
    reentrant_mutex newcomer(newcomer_client, name, fair_options(is_fair));
    holder.lock();
    auto waited = std::async(std::launch::async, [&] {
      const bool got = waiter.try_lock_for(seconds(20));
      if (got) waiter.unlock();
      return got;
    });
    ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, holder) == 1; }));
    // The holder's lease runs out (it would in 20 s; the waiter sleeps until then).
    admin->command({"DEL", holder.key()});
    if (is_fair) {
      EXPECT_FALSE(newcomer.try_lock());
      ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready);
      EXPECT_TRUE(waited.get());
      EXPECT_EQ(waiter_client.wait_stats().wakeups, 1u) << "handed over by the newcomer's attempt";
    } else {
      EXPECT_TRUE(newcomer.try_lock());
      newcomer.unlock();  // hands it to the waiter
      ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready);
      EXPECT_TRUE(waited.get());
    }
    EXPECT_EQ(holder.unlock_and_report(), release_status::lease_expired);
  }
}

// A waiter that gives up leaves the queue: the next release skips nothing and hands the lock
// to the next waiter, or frees it.
TEST_F(ReentrantTest, AWaiterThatTimedOutLeavesTheQueue) {
  client quitter_client(options()), next_client(options());
  reentrant_mutex holder(*pool, "giveup", fair_options());
  reentrant_mutex quitter(quitter_client, "giveup", fair_options());
  reentrant_mutex next(next_client, "giveup", fair_options());
  holder.lock();
  auto gave_up = std::async(std::launch::async, [&] { return quitter.try_lock_for(milliseconds(1500)); });
  ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, holder) == 1; }));
  auto waited = std::async(std::launch::async, [&] {
    const bool got = next.try_lock_for(seconds(20));
    if (got) next.unlock();
    return got;
  });
  ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, holder) == 2; }));
  EXPECT_FALSE(gave_up.get());
  EXPECT_EQ(queued(*admin, holder), 1);
  holder.unlock();
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(waited.get());
  EXPECT_EQ(next_client.wait_stats().wakeups, 1u) << "handed over, not found free";
  EXPECT_EQ(quitter_client.wait_stats().wakeups, 0u);
  // Alone: the quitter's place is gone, so the release frees the lock.
  holder.lock();
  EXPECT_FALSE(quitter.try_lock_for(milliseconds(200)));
  holder.unlock();
  EXPECT_EQ(admin->command({"EXISTS", holder.key()})->integer, 0);
}

// A waiter whose process died is skipped by the release at once (nobody listens on its
// channel any more); the live waiter behind it gets the lock.
TEST_F(ReentrantTest, ACrashedWaiterIsSkipped) {
  client waiter_client(options());
  reentrant_mutex holder(*pool, "crashed", fair_options());
  reentrant_mutex waiter(waiter_client, "crashed", fair_options());
  holder.lock();
  redislock_test::child_process crashed(
      {REDISLOCK_TEST_WORKER, "fair-wait-reentrant", std::to_string(server->port()), "crashed", "30000"});
  ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, holder) == 1; }));
  auto waited = std::async(std::launch::async, [&] {
    const bool got = waiter.try_lock_for(seconds(20));
    if (got) waiter.unlock();
    return got;
  });
  ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, holder) == 2; }));
  crashed.signal(SIGKILL);
  ASSERT_EQ(crashed.wait_for(seconds(5)), 128 + SIGKILL);
  // Until the server has seen the connection close, the dead waiter still counts as listening.
  ASSERT_TRUE(redislock_test::eventually([&] {
    return admin->command({"PUBSUB", "CHANNELS", holder.key() + ":w:*"})->elements == 1;
  }));
  holder.unlock();  // skips the dead head, hands the lock to the live waiter
  EXPECT_EQ(queued(*admin, holder), 0);
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(waited.get());
  EXPECT_EQ(waiter_client.wait_stats().wakeups, 1u);
}

// Threads of one object are distinct owners: each waits on its own channel and queue place,
// and the holder's thread unlocking hands the lock to the first of them.
TEST_F(ReentrantTest, ThreadsOfOneObjectQueueLikeAnyoneElse) {
  reentrant_mutex m(*pool, "threads-queue", fair_options());
  m.lock();
  std::mutex order_mutex;
  std::vector<int> order;
  std::vector<std::future<void>> done;
  for (int i = 0; i < 2; ++i) {
    done.push_back(std::async(std::launch::async, [&, i] {
      ASSERT_TRUE(m.try_lock_for(seconds(20)));
      {
        std::lock_guard<std::mutex> l(order_mutex);
        order.push_back(i);
      }
      m.unlock();
    }));
    ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, m) == i + 1; }));
  }
  EXPECT_EQ(admin->command({"PUBSUB", "CHANNELS", m.key() + ":w:*"})->elements, 2u);
  m.unlock();
  for (auto& f : done) ASSERT_EQ(f.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_EQ(order, (std::vector<int>{0, 1}));
  EXPECT_EQ(pool->wait_stats().wakeups, 2u);
  EXPECT_EQ(pool->wait_stats().fallback_waits, 0u);
}

// A hand-off notice that arrives after its wait gave up (read too late) must not complete a
// later acquisition of the same thread: the owner id it names is of an earlier generation.
TEST_F(ReentrantTest, ANoticeLeftFromAnEarlierWaitNeverCompletesALaterAcquisition) {
  client waiter_client(options());
  reentrant_mutex holder(*pool, "stale-notice", fair_options());
  reentrant_mutex waiter(waiter_client, "stale-notice", fair_options());
  holder.lock();
  const std::string holder_owner = holder.owner_id();
  std::promise<std::string> queued_as;
  std::promise<void> published;
  auto waits = std::async(std::launch::async, [&] {  // both waits on one thread: one channel
    const bool first = waiter.try_lock_for(milliseconds(500));
    queued_as.set_value(waiter.owner_id());
    published.get_future().wait_for(seconds(10));
    const bool second = waiter.try_lock_for(milliseconds(300));
    if (second) waiter.unlock();
    return std::pair{first, second};
  });
  std::string token;
  ASSERT_TRUE(redislock_test::eventually([&] {
    reply_ptr r = admin->command({"ZRANGE", holder.key() + ":rqueue", "0", "-1"});
    if (r->elements != 1) return false;
    token.assign(r->element[0]->str, r->element[0]->len);
    return true;
  }));
  auto next_owner = queued_as.get_future();
  ASSERT_EQ(next_owner.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_NE(next_owner.get(), token) << "a wait that gave up keeps no name a notice could match";
  const std::string channel = holder.key() + ":w:" + token.substr(0, token.rfind(':'));
  ASSERT_EQ(admin->command({"PUBLISH", channel, token})->integer, 1);
  published.set_value();
  const auto [first, second] = waits.get();
  EXPECT_FALSE(first);
  EXPECT_FALSE(second) << "the old notice completed the later wait";
  EXPECT_EQ(fields(*admin, holder.key()), handed_to(holder_owner));
  holder.unlock();
  EXPECT_EQ(holder.last_release(), release_status::released);
}

// Each waiting thread keeps its channel between its waits (no SUBSCRIBE per contended
// acquisition); it goes when the thread ends.
TEST_F(ReentrantTest, AWaitingThreadKeepsItsChannelBetweenWaitsUntilItEnds) {
  client waiter_client(options());
  reentrant_mutex holder(*pool, "kept", fair_options());
  auto waiter = std::make_unique<reentrant_mutex>(waiter_client, "kept", fair_options());
  auto channels = [&] { return admin->command({"PUBSUB", "CHANNELS", holder.key() + ":w:*"})->elements; };
  std::promise<void> second_round;
  holder.lock();
  auto rounds = std::async(std::launch::async, [&, w = waiter.get()] {  // one thread: one channel
    for (int round = 0; round < 2; ++round) {
      if (round == 1) second_round.get_future().wait_for(seconds(20));
      if (!w->try_lock_for(seconds(20))) return false;
      w->unlock();
    }
    return true;
  });
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      ASSERT_TRUE(redislock_test::eventually([&] { return waiter_client.wait_stats().wakeups == 1; }));
      ASSERT_TRUE(redislock_test::eventually([&] { return admin->command({"EXISTS", holder.key()})->integer == 0; }));
      holder.lock();
      second_round.set_value();
    }
    ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, holder) == 1; }));
    EXPECT_EQ(channels(), 1u);
    holder.unlock();
  }
  ASSERT_EQ(rounds.wait_for(seconds(20)), std::future_status::ready);
  EXPECT_TRUE(rounds.get());
  EXPECT_EQ(waiter_client.wait_stats().subscriptions, 1u);
  EXPECT_EQ(waiter_client.wait_stats().wakeups, 2u);
  // The waiting thread has ended: its channel went with it, though the object lives on.
  EXPECT_TRUE(redislock_test::eventually([&] { return channels() == 0; }));
}

// A hand-off counts the new hold's lease from the waiter's last "wait" attempt, which can be
// up to recheck_interval old: with a shorter lease the hold would start out lost() by the
// clock. As for the mutex, one owner-checked extend confirms it, so it starts valid and renewed.
TEST_F(ReentrantTest, AHandOffAfterALongWaitStartsAValidRenewedHold) {
  reentrant_mutex holder(*pool, "long-wait");
  lock_options o;
  o.lease = milliseconds(900);
  o.auto_renew = true;
  o.recheck_interval = seconds(20);  // the waiter's last "wait" is as old as the hold
  reentrant_mutex waiter(*pool, "long-wait", o);
  holder.lock();
  auto waited = std::async(std::launch::async, [&] {
    std::vector<bool> seen;
    if (!waiter.try_lock_for(seconds(30))) return seen;
    seen.push_back(!waiter.lost());
    seen.push_back(waiter.still_held());
    seen.push_back(pool->watchdog().wait_for_stats(
        seconds(20), [](const watchdog_stats& s) { return s.renewals >= 1 || s.lost > 0; }));
    seen.push_back(!waiter.lost());
    seen.push_back(waiter.unlock_and_report() == release_status::released);
    return seen;
  });
  ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, holder) == 1; }, seconds(20)));
  std::this_thread::sleep_for(milliseconds(1500));  // lets the waiter's queue attempt age past its lease
  holder.unlock();
  ASSERT_EQ(waited.wait_for(seconds(40)), std::future_status::ready);
  EXPECT_EQ(waited.get(), std::vector<bool>(5, true)) << "acquired, not lost, held, renewed, not lost, released";
}

// As for the mutex (test_wakeups.cpp): a release counts the listeners on its own server only,
// so a waiter queued on the master but listening on a replica (a stale topology after a
// failover) is dropped, never sent a hand-off the release did not count on (a double grant).
TEST_F(ReentrantTest, AHandOffIsNeverSentToAWaiterListeningOnAReplica) {
  redislock_test::redis_server replica({"--replicaof", "127.0.0.1", std::to_string(server->port())});
  connection on_replica(replica.options());
  ASSERT_TRUE(redislock_test::eventually(
      [&] {
        reply_ptr r = on_replica.command({"INFO", "replication"});
        return std::string(r->str, r->len).find("master_link_status:up") != std::string::npos;
      },
      seconds(20)));
  for (const std::string verb : {"SUBSCRIBE", "SSUBSCRIBE"}) {
    if (verb == "SSUBSCRIBE" && version() < 70000) continue;  // no sharded pub/sub before Redis 7
    SCOPED_TRACE(verb);
    reentrant_mutex holder(*pool, "replicated-" + verb);
    holder.lock();
    const std::string owner = "stale:1:0", channel = holder.key() + ":w:stale:1";
    // W's "wait" attempt, as its client would have made it on the master.
    const auto& q = detail::reentrant_scripts::acquire();
    reply_ptr queued_reply =
        admin->command({"EVAL", q.source(), "4", holder.key(), holder.key() + ":fence", holder.key() + ":rqueue",
                        holder.key() + ":rwaiters", owner, "30000", "1", "wait", "0", "30000", holder.key() + ":w:"});
    ASSERT_EQ(queued_reply->type, REDIS_REPLY_ARRAY);
    ASSERT_EQ(queued_reply->element[0]->integer, 0) << "W waits behind the holder";
    connection listener(replica.options());
    ASSERT_EQ(listener.command({verb, channel})->type, REDIS_REPLY_ARRAY) << "subscribed on the replica";
    holder.unlock();
    EXPECT_EQ(holder.last_release(), release_status::released);
    EXPECT_EQ(admin->command({"EXISTS", holder.key()})->integer, 0)
        << "nobody listens on the master: W is dropped and the lock is free";
    admin->command({verb == "SUBSCRIBE" ? "PUBLISH" : "SPUBLISH", channel, "marker"});
    reply_ptr first = listener.read_reply();
    ASSERT_TRUE(first && first->type == REDIS_REPLY_ARRAY && first->elements == 3);
    EXPECT_EQ(std::string(first->element[2]->str, first->element[2]->len), "marker")
        << "the replica's subscriber was sent the hand-off the release did not count";
  }
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

// (Found in review; failed before the fix.) A re-entry by the holding thread that fails (here:
// its reply times out) keeps the hold the thread still has. Once the thread has waited (or in
// fair mode) a re-entry's first attempt is a "wait", so its failure goes through the "leave"
// path, which used to take the thread's own outer hold for a hand-off that reached it meanwhile
// and pass it on: the server freed the lock while the thread still held count 1.
TEST_F(ReentrantTest, AFailedReEntryKeepsTheOuterHold) {
  if (version() < 60200) GTEST_SKIP() << "needs CLIENT PAUSE ... WRITE and CLIENT UNPAUSE (Redis 6.2)";
  auto connections_received = [&] {
    reply_ptr r = admin->command({"INFO", "stats"});
    const std::string info(r->str, r->len);
    const std::size_t at = info.find("total_connections_received:");
    return std::stoll(info.substr(at + 27));
  };
  for (const bool is_fair : {true, false}) {
    SCOPED_TRACE(is_fair ? "fair" : "default (the thread waited last time)");
    const std::string name = is_fair ? "reentry-fails" : "reentry-fails-default";
    client_options co = options();
    co.pool_size = 1;                                   // the re-entry and its "leave" share it
    co.connection.command_timeout = milliseconds(300);  // the re-entry's reply times out
    client thread_client(co);
    reentrant_mutex holder(*pool, name, fair_options(is_fair));
    reentrant_mutex mine(thread_client, name, fair_options(is_fair));
    reentrant_mutex newcomer(*pool, name, fair_options(is_fair));
    holder.lock();
    struct outcome {
      bool threw = false;
      std::int64_t count = 0;
      bool owns = false;
    };
    std::promise<void> acquired, go, done;
    std::promise<outcome> reported;
    auto thread = std::async(std::launch::async, [&] {
      outcome o;
      mine.lock();  // waits: its channel is now kept, and its next first attempt is a "wait"
      acquired.set_value();
      go.get_future().wait_for(seconds(20));
      try {
        mine.lock();  // re-entry
      } catch (const std::exception&) {
        o.threw = true;
      }
      o.count = mine.hold_count();
      o.owns = mine.owns_lock();
      reported.set_value(o);
      done.get_future().wait_for(seconds(20));
      while (mine.hold_count() > 0) mine.unlock();
    });
    ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, holder) == 1; }));
    holder.unlock();  // hands it to `mine`
    ASSERT_EQ(acquired.get_future().wait_for(seconds(10)), std::future_status::ready);
    ASSERT_EQ(hget(*admin, holder.key(), "@kind"), "reentrant");
    const long long before = connections_received();
    admin->command({"CLIENT", "PAUSE", "30000", "WRITE"});  // scripts wait; the admin does not
    go.set_value();
    // The re-entry's reply timed out: its pool connection reconnects for the "leave".
    const bool reconnected = redislock_test::eventually([&] { return connections_received() > before; });
    admin->command({"CLIENT", "UNPAUSE"});
    ASSERT_TRUE(reconnected);
    auto report = reported.get_future();
    ASSERT_EQ(report.wait_for(seconds(20)), std::future_status::ready);
    const outcome o = report.get();  // lock() threw; the thread still holds its outer hold
    const bool key_exists = admin->command({"EXISTS", holder.key()})->integer == 1;
    const bool newcomer_got_it = newcomer.try_lock();
    done.set_value();
    thread.get();
    EXPECT_TRUE(o.threw);
    EXPECT_EQ(o.count, 1);
    EXPECT_TRUE(o.owns);
    EXPECT_TRUE(key_exists) << "the failed re-entry released the thread's outer hold on the server";
    EXPECT_FALSE(newcomer_got_it) << "double grant: the newcomer holds while the thread still holds";
    if (newcomer_got_it) newcomer.unlock();
  }
}

// (Found in review; failed before the fix.) A thread's hand-off channel goes when the thread
// ends: an object used from short-lived threads (std::async per task, thread-per-request)
// does not keep one server subscription per thread that ever waited.
TEST_F(ReentrantTest, TheChannelsOfExitedThreadsAreNotKept) {
  reentrant_mutex holder(*pool, "thread-churn");
  client waiter_client(options());
  reentrant_mutex shared_object(waiter_client, "thread-churn");
  auto channels = [&] { return admin->command({"PUBSUB", "CHANNELS", holder.key() + ":w:*"})->elements; };
  constexpr int threads = 8;
  for (int i = 0; i < threads; ++i) {
    holder.lock();
    std::thread t([&] {
      if (shared_object.try_lock_for(seconds(10))) shared_object.unlock();
    });
    ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, holder) == 1; }));
    holder.unlock();
    t.join();  // the thread is gone
  }
  EXPECT_EQ(waiter_client.wait_stats().wakeups, static_cast<std::uint64_t>(threads));
  EXPECT_LE(channels(), 1u) << "subscriptions of exited threads are kept until the object goes";
}

// (Found in review; failed before the fix.) A thread whose wait failed while Redis was
// unreachable (its "leave" failed too) leaves a place behind and exits; nobody listens on its
// channel any more, so the next release skips that place instead of handing the lock to an
// owner nobody will use (the live waiter behind it would wait out a whole lease).
TEST_F(ReentrantTest, AnExitedThreadsLeftoverPlaceIsSkipped) {
  if (version() < 60200) GTEST_SKIP() << "needs CLIENT PAUSE ... WRITE and CLIENT UNPAUSE (Redis 6.2)";
  lock_options o = fair_options(false);  // 20 s lease
  o.recheck_interval = milliseconds(200);
  reentrant_mutex holder(*pool, "exited-waiter", o);
  client_options co = options();
  co.connection.command_timeout = milliseconds(300);
  client waiter_client(co);
  reentrant_mutex shared_object(waiter_client, "exited-waiter", o);
  holder.lock();
  std::string abandoned;
  auto failing = std::async(std::launch::async, [&] {
    try {
      shared_object.try_lock_for(seconds(10));
    } catch (const std::exception&) {
      return true;  // the thread ends here
    }
    return false;
  });
  ASSERT_TRUE(redislock_test::eventually([&] {
    reply_ptr r = admin->command({"ZRANGE", holder.key() + ":rqueue", "0", "0"});
    if (r->elements != 1) return false;
    abandoned.assign(r->element[0]->str, r->element[0]->len);
    return true;
  }));
  admin->command({"CLIENT", "PAUSE", "30000", "WRITE"});  // its re-check and its "leave" time out
  const auto ended = failing.wait_for(seconds(10));
  admin->command({"CLIENT", "UNPAUSE"});
  ASSERT_EQ(ended, std::future_status::ready);
  ASSERT_TRUE(failing.get());
  if (queued(*admin, holder) != 1) GTEST_SKIP() << "the server ran the timed-out leave after all";
  client live_client(options());
  reentrant_mutex live(live_client, "exited-waiter", o);
  auto waited = std::async(std::launch::async, [&] {
    const bool got = live.try_lock_for(seconds(5));
    if (got) live.unlock();
    return got;
  });
  ASSERT_TRUE(redislock_test::eventually([&] { return queued(*admin, holder) == 2; }));
  holder.unlock();
  EXPECT_NE(fields(*admin, holder.key()), handed_to(abandoned))
      << "handed to the place of a thread that has exited (its channel is still subscribed)";
  admin->command({"DEL", holder.key()});  // let the live waiter finish either way
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready);
}

// A re-entry after the thread's hold was lost (its lease ran out, or it was forcibly released)
// must not quietly take the lock again: another owner may have held it in between, so the
// critical section the outer hold guards was not continuous. The re-entry throws lock_error,
// marks the hold lost() and changes nothing on the server; the outer holds still need their
// unlock() (which reports lease_expired).
TEST_F(ReentrantTest, AReEntryAfterTheHoldWasLostThrowsAndTakesNothing) {
  for (const bool is_try : {false, true}) {
    SCOPED_TRACE(is_try ? "try_lock" : "lock");
    reentrant_mutex m(*pool, is_try ? "lost-reentry-try" : "lost-reentry", lease(seconds(10)));
    m.lock();
    admin->command({"DEL", m.key()});  // the lease is gone, as if it had run out
    if (is_try) {
      EXPECT_THROW((void)m.try_lock(), lock_error);
    } else {
      EXPECT_THROW(m.lock(), lock_error);
    }
    EXPECT_TRUE(m.lost());
    EXPECT_EQ(m.hold_count(), 1);
    EXPECT_EQ(admin->command({"EXISTS", m.key()})->integer, 0) << "the lost re-entry took the lock again";
    reentrant_mutex other(*pool, m.name());
    EXPECT_TRUE(other.try_lock()) << "the name is free for anyone";
    other.unlock();
    EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
    EXPECT_FALSE(m.owns_lock());
  }
}

// As Semaphore.AHandOffNoticeReadAfterARefusedAttemptIsNotAHold, for the reentrant mutex: the
// lock was handed to the frozen waiter, its lease ran out, c took it; the waiter's next "wait"
// is refused, and the old notice must not make it the holder. (Holds are per thread: the
// waiter's thread checks its own.)
TEST_F(ReentrantTest, AHandOffNoticeReadAfterARefusedAttemptIsNotAHold) {
  auto freezer = std::make_shared<redislock_test::freeze_at_first_timer_wake>("stale-notice");
  const redislock_test::observer_installed observing(freezer);
  reentrant_mutex h(*pool, "stale-notice", lease(seconds(20)));
  h.lock();
  redislock::client other(options());
  lock_options short_lease = lease(milliseconds(300));
  short_lease.recheck_interval = milliseconds(100);
  reentrant_mutex w(other, "stale-notice", short_lease);
  // Whether w acquired a hold the server does not confirm.
  std::future<bool> believes_wrongly = std::async(std::launch::async, [&] {
    if (!w.try_lock_for(seconds(3))) return false;
    const bool valid = w.still_held();
    w.unlock();
    return !valid;
  });
  std::future<void> frozen = freezer->frozen.get_future();
  ASSERT_EQ(frozen.wait_for(seconds(10)), std::future_status::ready);
  h.unlock();  // hands the lock to w and publishes the notice
  redislock::client third(options());
  reentrant_mutex c(third, "stale-notice", lease(seconds(20)));
  ASSERT_TRUE(redislock_test::eventually([&] { return c.try_lock(); }));  // once w's 300 ms ran out
  freezer->go.set_value();
  ASSERT_EQ(believes_wrongly.wait_for(seconds(15)), std::future_status::ready);
  EXPECT_FALSE(believes_wrongly.get()) << "w believed it held the reentrant mutex while c held it";
  EXPECT_TRUE(c.still_held());
  c.unlock();
}

}  // namespace test_reentrant_mutex
