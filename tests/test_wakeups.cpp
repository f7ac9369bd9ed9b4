// Waiting without polling: waiters are woken by the release's PUBLISH through the client's
// shared subscriber connection, honour their deadlines, fall back to backoff (counted) when
// they cannot subscribe, and the subscriber never hangs shutdown.
#include "eventually.hpp"
#include "redis_server.hpp"
#include "server_version.hpp"
#include "server_fixture.hpp"
#include "steady_contention.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace test_wakeups {

using namespace redislock;
using redislock_test::acl_channel_rules;
using redislock_test::command_calls;
using redislock_test::eventually;
using redislock_test::redis_server;
using redislock_test::steady_contention;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

struct WakeupTest : redislock_test::server_test {
  /// Waiters of a mutex listen on their own channels, P{N}:w:<token>.
  long long waiter_channels(const mutex& m) {
    return static_cast<long long>(admin->command({"PUBSUB", "CHANNELS", m.key() + ":w:*"})->elements);
  }
  long long queued(const mutex& m) { return admin->command({"ZCARD", m.key() + ":queue"})->integer; }
  /// Redis 7: SET NX GET (before, a plain SET NX whose failure the queue script follows up)
  /// and sharded pub/sub.
  bool redis7() { return version() >= 70000; }
  /// The ids of the pub/sub connections of ACL user `user` subscribed to a channel (CLIENT LIST).
  std::set<std::string> subscribed_ids(const std::string& user) {
    reply_ptr r = admin->command({"CLIENT", "LIST", "TYPE", "pubsub"});
    std::istringstream lines(std::string(r->str, r->len));
    std::set<std::string> ids;
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);  // "id=… sub=1 psub=0 … user=u …" (user= last on 6.0)
      bool theirs = false, subscribed = false;
      std::string id;
      for (std::string f; fields >> f;) {
        theirs = theirs || f == "user=" + user;
        subscribed = subscribed || (f.rfind("sub=", 0) == 0 && f != "sub=0");
        if (f.rfind("id=", 0) == 0) id = f;
      }
      if (theirs && subscribed) ids.insert(id);
    }
    return ids;
  }
  /// Whether a pub/sub connection of ACL user `user` is subscribed to a channel.
  bool user_subscribed(const std::string& user) { return !subscribed_ids(user).empty(); }
  /// Two contenders (clients of the default user) that take the lock `name` in turn, 20 ms
  /// each, so that every release hands it to the other one: it is never free.
  void contend(const std::string& name) {
    std::vector<steady_contention::round> rounds;
    for (int i = 0; i < 2; ++i) {
      contenders.push_back(std::make_unique<client>(options()));
      rounds.push_back(steady_contention::exclusive_round(std::make_shared<mutex>(*contenders.back(), name), seconds(5),
                                                          milliseconds(20)));
    }
    contention = std::make_unique<steady_contention>(std::move(rounds));
  }
  /// Makes the ACL user `user` ("on >pw ~* +@all", then `rules`); the client options of it.
  client_options acl_user(const std::string& user, const std::vector<std::string>& rules) {
    std::vector<std::string> acl = {"ACL", "SETUSER", user, "on", ">pw", "~*", "+@all"};
    acl.insert(acl.end(), rules.begin(), rules.end());
    admin->command(std::vector<std::string_view>(acl.begin(), acl.end()));
    client_options o = options();
    o.connection.user = user;
    o.connection.password = "pw";
    return o;
  }
  /// An ACL user `user` (acl_user) whose client waits (try_lock_for 30 s) for the lock `user`
  /// that contend(user) keeps taken.
  void wait_as(const std::string& user, const std::vector<std::string>& rules) {
    waiter_client = std::make_unique<client>(acl_user(user, rules));
    contend(user);
    ASSERT_TRUE(eventually([&] { return contention->acquired() >= 4; }));
    waiter = std::make_unique<mutex>(*waiter_client, user);
    waited = std::async(std::launch::async, [this] { return waiter->try_lock_for(seconds(30)); });
  }
  /// The waiter of wait_as() is handed the lock, and the contenders saw no error.
  void expect_handed_over(const std::string& user) {
    ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready) << "starved";
    EXPECT_TRUE(waited.get());
    if (waiter->owns_lock()) waiter->unlock();
    contention->stop();
    EXPECT_EQ(contention->errors(), 0u);
    admin->command({"ACL", "DELUSER", user});
  }
  void TearDown() override {
    if (contention) contention->stop();
  }
  std::vector<std::unique_ptr<client>> contenders;
  std::unique_ptr<steady_contention> contention;
  std::unique_ptr<client> waiter_client;
  std::unique_ptr<mutex> waiter;
  std::future<bool> waited;  // destroyed first: the wait ends before its mutex and client go
};

}  // namespace

TEST_F(WakeupTest, AWaiterIsWokenByTheReleaseNotByPollingHoweverLongTheHold) {
  client holder_client(options()), waiter_client(options());
  lock_options notified_only = lease(seconds(20));
  notified_only.recheck_interval = seconds(60);  // no re-check within the 1.5 s hold
  mutex holder(holder_client, "hold", lease(seconds(20)));
  mutex waiter(waiter_client, "hold", notified_only);
  holder.lock();  // a first cycle loads the scripts: the counts below are EVALSHA only
  holder.unlock();
  holder.lock();
  reset_stats();

  auto waited = std::async(std::launch::async, [&] { waiter.lock(); });
  ASSERT_TRUE(eventually([&] { return waiter_channels(holder) == 1 && queued(holder) == 1; }));
  // Held for 1.5 s after the waiter subscribed: backoff (retry_max 100 ms) would send well
  // over a dozen attempts; a notified waiter sends a SET and one script (joining the queue)
  // before the release, and nothing after it: the release hands it the lock.
  std::this_thread::sleep_for(milliseconds(1500));
  const long long before_release = evalsha();
  holder.unlock();
  ASSERT_EQ(waited.wait_for(seconds(5)), std::future_status::ready);
  waited.get();
  EXPECT_TRUE(waiter.owns_lock());
  // One queue join: two EVALSHA, as the script cache did not know the queue script yet (and
  // before Redis 7 one "try" of the queue script after the plain SET NX failed).
  EXPECT_LE(before_release, redis7() ? 2 : 3) << "the waiter polled while the lock was held";
  EXPECT_EQ(evalsha() - before_release, 1) << "the release alone: a hand-off needs no attempt";
  EXPECT_EQ(waiter_client.wait_stats().wakeups, 1u);
  EXPECT_EQ(waiter_client.wait_stats().fallback_waits, 0u);
  waiter.unlock();
  // The object keeps its channel for its next wait (no SUBSCRIBE per contended acquisition)...
  EXPECT_EQ(waiter_channels(holder), 1);
  holder.lock();
  auto again = std::async(std::launch::async, [&] { waiter.lock(); });
  ASSERT_TRUE(eventually([&] { return queued(holder) == 1; }));
  holder.unlock();
  ASSERT_EQ(again.wait_for(seconds(5)), std::future_status::ready);
  again.get();
  waiter.unlock();
  EXPECT_EQ(waiter_client.wait_stats().subscriptions, 1u);
  // ...and unsubscribes when it is destroyed.
  {
    mutex brief(waiter_client, "hold");
    holder.lock();
    EXPECT_FALSE(brief.try_lock_for(milliseconds(20)));  // confirmed its subscription first
    EXPECT_EQ(waiter_channels(holder), 2);
    holder.unlock();
  }
  EXPECT_TRUE(eventually([&] { return waiter_channels(holder) == 1; }));
}

// An object whose last acquisition had to wait skips the SET that would most likely fail:
// its first attempt joins the queue at once. The queue and the waiters hash keep nothing of a
// waiter once it got the lock (a field in the hash exactly while its token is queued).
TEST_F(WakeupTest, AWaiterThatWaitedLastTimeQueuesAtOnceAndLeavesNothingBehind) {
  client holder_client(options()), waiter_client(options());
  mutex holder(holder_client, "requeue", lease(seconds(20)));
  mutex waiter(waiter_client, "requeue", lease(seconds(20)));
  const std::string waiters_key = holder.key() + ":waiters";
  auto token_fields = [&] {
    reply_ptr r = admin->command({"HKEYS", waiters_key});
    long long n = 0;
    for (std::size_t i = 0; i < r->elements; ++i)
      if (std::string(r->element[i]->str, r->element[i]->len) != "#seq") ++n;  // an older version's counter
    return n;
  };
  for (int round = 0; round < 2; ++round) {
    holder.lock();
    const long long sets_before = command_calls(*admin, "set");
    auto waited = std::async(std::launch::async, [&] { waiter.lock(); });
    ASSERT_TRUE(eventually([&] { return queued(holder) == 1; }));
    EXPECT_EQ(token_fields(), 1);
    // The first round's waiter tried SET first (before Redis 7 SET NX GET, refused, then SET
    // NX); the second one's queued at once.
    EXPECT_EQ(command_calls(*admin, "set") - sets_before, round == 0 ? (redis7() ? 1 : 2) : 0) << "round " << round;
    holder.unlock();
    ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready);
    waited.get();
    EXPECT_TRUE(waiter.owns_lock());
    EXPECT_EQ(queued(holder), 0);
    EXPECT_EQ(token_fields(), 0);
    waiter.unlock();
  }
  // Free now: the queue script's first attempt takes it; the next acquisition is SET again.
  ASSERT_TRUE(waiter.try_lock_for(seconds(5)));
  waiter.unlock();
  const long long sets_before = command_calls(*admin, "set");
  ASSERT_TRUE(waiter.try_lock_for(seconds(5)));
  EXPECT_EQ(command_calls(*admin, "set") - sets_before, 1);
  waiter.unlock();
  EXPECT_EQ(admin->command({"EXISTS", holder.key(), holder.key() + ":queue"})->integer, 0);
  EXPECT_EQ(token_fields(), 0);
}

TEST_F(WakeupTest, AnExpiredLeaseWakesTheWaiterThoughNothingIsPublished) {
  client c(options());
  mutex waiter(c, "abandoned");
  admin->command({"SET", waiter.key(), "someone-who-crashed", "PX", "400"});
  reset_stats();
  const auto start = steady::now();
  ASSERT_TRUE(waiter.try_lock_for(seconds(5)));
  EXPECT_GE(steady::now() - start, milliseconds(350));
  EXPECT_LE(evalsha(), 6) << "slept until the holder's PTTL ran out, not polled";
  EXPECT_EQ(c.wait_stats().wakeups, 0u);
  waiter.unlock();
}

TEST_F(WakeupTest, DeadlinesAreHonouredWhileWaitingForANotification) {
  client holder_client(options()), waiter_client(options());
  mutex holder(holder_client, "deadline", lease(seconds(20)));
  mutex waiter(waiter_client, "deadline");
  holder.lock();
  EXPECT_FALSE(waiter.try_lock());  // loads the acquire script
  reset_stats();

  auto start = steady::now();
  EXPECT_FALSE(waiter.try_lock_for(milliseconds(300)));
  auto took = steady::now() - start;
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, milliseconds(300 + 250));  // generous: a loaded machine

  start = steady::now();
  EXPECT_FALSE(waiter.try_lock_until(std::chrono::system_clock::now() + milliseconds(200)));
  took = steady::now() - start;
  EXPECT_GE(took, milliseconds(190));
  EXPECT_LT(took, milliseconds(200 + 250));

  // Each wait: SET, then one script to queue and one to leave (+1 EVALSHA for the first
  // NOSCRIPT of the queue script).
  EXPECT_LE(evalsha(), 5) << "two timed waits, two scripts each";
  EXPECT_GE(waiter_client.wait_stats().subscriptions, 1u);
  EXPECT_EQ(waiter_client.wait_stats().fallback_waits, 0u);
  EXPECT_FALSE(waiter.owns_lock());
  holder.unlock();
}

TEST_F(WakeupTest, TryLockNeverSubscribes) {
  client holder_client(options()), waiter_client(options());
  mutex holder(holder_client, "try");
  mutex waiter(waiter_client, "try");
  holder.lock();
  EXPECT_FALSE(waiter.try_lock());
  EXPECT_EQ(waiter_client.wait_stats().subscriptions, 0u);
  EXPECT_EQ(waiter_client.wait_stats().subscribe_failures, 0u);
  holder.unlock();
}

TEST_F(WakeupTest, WaitersOfOneClientShareOneSubscriberConnection) {
  client holder_client(options()), waiters_client(options());
  mutex holder(holder_client, "shared-a");
  holder.lock();
  mutex other_holder(holder_client, "shared-b");
  other_holder.lock();
  constexpr int n = 4;
  std::vector<std::unique_ptr<mutex>> waiters;
  std::vector<std::future<void>> done;
  for (int i = 0; i < n; ++i) {
    waiters.push_back(std::make_unique<mutex>(waiters_client, i % 2 ? "shared-a" : "shared-b"));
    done.push_back(std::async(std::launch::async, [w = waiters.back().get()] { std::lock_guard<mutex> g(*w); }));
  }
  ASSERT_TRUE(eventually([&] { return waiter_channels(holder) == 2 && waiter_channels(other_holder) == 2; }));
  reply_ptr clients = admin->command({"CLIENT", "LIST", "TYPE", "pubsub"});
  const std::string list(clients->str, clients->len);
  EXPECT_EQ(std::count(list.begin(), list.end(), '\n'), 1) << list;  // one connection, four channels
  holder.unlock();
  other_holder.unlock();
  for (auto& f : done) ASSERT_EQ(f.wait_for(seconds(5)), std::future_status::ready);
  // Served through that connection, none by backoff. (How many sleeps a notice ended depends on
  // timing: a hand-off that arrives before its waiter sleeps is taken without one.)
  EXPECT_EQ(waiters_client.wait_stats().fallback_waits, 0u);
  EXPECT_EQ(waiters_client.wait_stats().subscribe_failures, 0u);
}

TEST_F(WakeupTest, WithoutSubscribePermissionWaitersBackOffAndItIsCounted) {
  std::vector<std::string> rules = acl_channel_rules(*admin, "*");
  rules.push_back("-subscribe");
  client holder_client(options()), waiter_client(acl_user("nosub", rules));
  mutex holder(holder_client, "acl", lease(seconds(20)));
  mutex waiter(waiter_client, "acl");
  holder.lock();
  auto waited = std::async(std::launch::async, [&] { waiter.lock(); });
  ASSERT_TRUE(eventually([&] { return waiter_client.wait_stats().fallback_waits == 1; }));
  holder.unlock();
  ASSERT_EQ(waited.wait_for(seconds(5)), std::future_status::ready);
  waited.get();
  EXPECT_TRUE(waiter.owns_lock());
  const wait_stats s = waiter_client.wait_stats();
  EXPECT_GE(s.subscribe_failures, 1u);
  EXPECT_EQ(s.wakeups, 0u);
  EXPECT_EQ(s.subscriptions, 0u);
  waiter.unlock();
  admin->command({"ACL", "DELUSER", "nosub"});
}

TEST_F(WakeupTest, ALostSubscriberConnectionFallsBackToBackoff) {
  client holder_client(options()), waiter_client(options());
  mutex holder(holder_client, "killed", lease(seconds(20)));
  mutex waiter(waiter_client, "killed");
  holder.lock();
  auto waited = std::async(std::launch::async, [&] { waiter.lock(); });
  ASSERT_TRUE(eventually([&] { return waiter_channels(holder) == 1; }));
  admin->command({"CLIENT", "KILL", "TYPE", "pubsub"});
  ASSERT_TRUE(eventually([&] { return waiter_client.wait_stats().fallback_waits == 1; }));
  holder.unlock();
  ASSERT_EQ(waited.wait_for(seconds(5)), std::future_status::ready);
  waited.get();
  EXPECT_TRUE(waiter.owns_lock());
  EXPECT_GE(waiter_client.wait_stats().subscribe_failures, 1u);
  waiter.unlock();
}

// A waiter whose subscriber connection was lost subscribes again during its wait instead of
// backing off for the rest of it: a release hands the lock only to a waiter that listens (a
// deaf one is passed over and dropped from the queue), so a waiter that only polls loses its
// place at every release, and in fair mode can win only when nobody else queues (failed on the
// old code: no second subscription, no hand-off).
TEST_F(WakeupTest, AWaiterWhoseSubscriptionWasLostSubscribesAgainDuringItsWait) {
  client holder_client(options()), waiter_client(options());
  lock_options fair;
  fair.fair = true;
  mutex holder(holder_client, "resubscribe", fair), waiter(waiter_client, "resubscribe", fair);
  holder.lock();
  auto waited = std::async(std::launch::async, [&] { return waiter.try_lock_for(seconds(20)); });
  ASSERT_TRUE(eventually([&] { return waiter_channels(holder) == 1; }));
  admin->command({"CLIENT", "KILL", "TYPE", "pubsub"});
  ASSERT_TRUE(eventually([&] { return waiter_client.wait_stats().fallback_waits == 1; }));
  EXPECT_TRUE(eventually([&] { return waiter_channels(holder) == 1; })) << "it never subscribed again";
  holder.unlock();  // hands it over: the waiter is queued and listening again
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(waited.get());
  EXPECT_EQ(waiter_client.wait_stats().subscriptions, 2u);
  if (waiter.owns_lock()) waiter.unlock();
}

// A waiter whose subscriber connection is lost again and again subscribes again kResubscribe
// (250 ms) after each loss (failed on the old code, which doubled the pause at each loss:
// 250 ms, 500 ms, 1 s, then 2 s after the fourth), then is handed the lock. One holder keeps
// the name through the losses: under steady contention a waiter listening again could be
// handed the lock between two losses (seen on a busy machine), and then has nothing left to
// subscribe to.
TEST_F(WakeupTest, AWaiterWhoseSubscriptionIsLostAgainAndAgainSubscribesAgainWithinABound) {
  client holder_client(options()), waiter_client(acl_user("lossy", acl_channel_rules(*admin, "*")));
  mutex holder(holder_client, "lossy", lease(seconds(30))), waiter(waiter_client, "lossy");
  holder.lock();
  auto waited = std::async(std::launch::async, [&] { return waiter.try_lock_for(seconds(30)); });
  ASSERT_TRUE(eventually([&] { return user_subscribed("lossy"); }));
  // Subscribed again: on a connection other than those killed.
  std::set<std::string> killed_ids;
  const auto subscribed_anew = [&] {
    for (const std::string& id : subscribed_ids("lossy"))
      if (killed_ids.count(id) == 0) return true;
    return false;
  };
  for (int loss = 1; loss <= 4; ++loss) {
    const std::set<std::string> before = subscribed_ids("lossy");
    killed_ids.insert(before.begin(), before.end());
    admin->command({"CLIENT", "KILL", "USER", "lossy", "TYPE", "pubsub"});
    const auto killed = steady::now();
    EXPECT_TRUE(eventually(subscribed_anew, seconds(10)));
    const auto took = std::chrono::duration_cast<milliseconds>(steady::now() - killed);
    EXPECT_LT(took.count(), 1000) << "loss " << loss << ": subscribed again after " << took.count() << " ms";
  }
  // The first and one after each loss; the server lists a subscription before the client has
  // read its confirmation (and counted it).
  EXPECT_TRUE(eventually([&] { return waiter_client.wait_stats().subscriptions >= 5u; }))
      << waiter_client.wait_stats().subscriptions;
  holder.unlock();
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready) << "starved";
  EXPECT_TRUE(waited.get());
  if (waiter.owns_lock()) waiter.unlock();
  admin->command({"ACL", "DELUSER", "lossy"});
}

// The same after an ACL refusal of its channel that lasts a while: the waiter subscribes again
// within a bound of the permission coming back, however long it was refused (failed on the
// old code: after 4.5 s of refusals it asked the server again only 7.75 s into its wait).
// The client's subscriber refuses joins for a second after a refused SUBSCRIBE (one SUBSCRIBE
// a second for all its waiters), so the bound is that second + 250 ms + a round trip.
TEST_F(WakeupTest, AWaiterRefusedItsChannelSubscribesAgainWithinABoundOnceAllowed) {
  if (version() < 60200) GTEST_SKIP() << "channel permissions came with Redis 6.2";
  ASSERT_NO_FATAL_FAILURE(wait_as("refused", {"resetchannels"}));
  ASSERT_TRUE(eventually([&] { return waiter_client->wait_stats().fallback_waits == 1; }));
  // Refused for 4.5 s: a pause that doubled at each refusal would now be 4 s long.
  std::this_thread::sleep_for(milliseconds(4500));
  ASSERT_NE(waited.wait_for(seconds(0)), std::future_status::ready) << "it won by polling: no steady contention";
  EXPECT_FALSE(user_subscribed("refused"));
  admin->command({"ACL", "SETUSER", "refused", "allchannels"});
  const auto allowed = steady::now();
  EXPECT_TRUE(eventually([&] { return user_subscribed("refused"); }, seconds(10)));
  const auto took = std::chrono::duration_cast<milliseconds>(steady::now() - allowed);
  EXPECT_LT(took.count(), 2500) << "subscribed again " << took.count() << " ms after it was allowed";
  expect_handed_over("refused");
}

// The waiters of one client take turns reading their shared connection (leader/follower):
// when the one reading gives up, another waiter of the client must take over, or its notice
// would sit unread until its own wake-up limit (the holder's 20 s lease here).
TEST_F(WakeupTest, WhenTheReadingWaiterGivesUpAnotherWaiterOfTheClientReadsOn) {
  client holder_client(options()), waiters_client(options());
  mutex holder_x(holder_client, "reader-x", lease(seconds(20)));
  mutex holder_y(holder_client, "reader-y", lease(seconds(20)));
  holder_x.lock();
  holder_y.lock();
  mutex waiter_x(waiters_client, "reader-x"), waiter_y(waiters_client, "reader-y");
  auto gave_up = std::async(std::launch::async, [&] { return waiter_x.try_lock_for(milliseconds(400)); });
  ASSERT_TRUE(eventually([&] { return queued(holder_x) == 1; }));  // waiter_x waits (and reads)
  auto waited = std::async(std::launch::async, [&] { waiter_y.lock(); });
  ASSERT_TRUE(eventually([&] { return queued(holder_y) == 1; }));
  EXPECT_FALSE(gave_up.get());
  EXPECT_EQ(queued(holder_x), 0);
  holder_y.unlock();  // hands over to waiter_y, told on the connection nobody else reads now
  ASSERT_EQ(waited.wait_for(seconds(5)), std::future_status::ready);
  waited.get();
  EXPECT_TRUE(waiter_y.owns_lock());
  EXPECT_EQ(waiters_client.wait_stats().fallback_waits, 0u);
  waiter_y.unlock();
  holder_x.unlock();
}

// A waiter connects the shared connection on a helper thread: its own deadline holds while
// the server is slow to answer (here the SELECT of the handshake, on a stopped server).
TEST(Subscriber, AJoinKeepsItsDeadlineWhileTheConnectionIsMade) {
  redis_server own;
  connection_options o = own.options();
  o.db = 1;
  o.command_timeout = seconds(3);
  redislock::detail::subscriber hub(o);
  own.pause();
  const auto start = steady::now();
  auto sub = hub.join("slow", start + milliseconds(100));
  const auto took = steady::now() - start;
  EXPECT_FALSE(sub.active());
  EXPECT_GE(took, milliseconds(100));
  EXPECT_LT(took, milliseconds(1000));
  own.resume();
  sub.reset();
  // Once the server answers, the connection made meanwhile serves the next join.
  EXPECT_TRUE(hub.join("slow", steady::now() + seconds(5)).active());
}

TEST_F(WakeupTest, DestroyingTheClientDoesNotHangOnAStalledServer) {
  redis_server own;
  auto c = std::make_unique<client>(client_options{own.options()});
  client holder_client(client_options{own.options()});
  mutex holder(holder_client, "stall");
  holder.lock();
  {
    mutex waiter(*c, "stall");
    EXPECT_FALSE(waiter.try_lock_for(milliseconds(50)));  // subscribes, times out
  }
  ASSERT_GE(c->wait_stats().subscriptions, 1u);
  own.pause();  // the subscriber connection stays open to a server that answers nothing
  const auto start = steady::now();
  c.reset();
  EXPECT_LT(steady::now() - start, seconds(2));
  own.resume();
}

TEST(LocalGate, HandsOverInArrivalOrder) {
  redislock::detail::local_gate gate;
  gate.lock();
  std::mutex order_mutex;
  std::vector<int> order;
  std::vector<std::thread> threads;
  std::atomic<int> started{0};
  for (int i = 0; i < 5; ++i) {
    threads.emplace_back([&, i] {
      ++started;
      gate.lock();
      {
        std::lock_guard<std::mutex> g(order_mutex);
        order.push_back(i);
      }
      gate.unlock();
    });
    // Next thread only once this one is queued.
    ASSERT_TRUE(eventually([&] { return gate.waiting() == static_cast<std::size_t>(i + 1); }));
  }
  gate.unlock();
  for (auto& t : threads) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(LocalGate, ATimedOutWaiterLeavesTheQueue) {
  redislock::detail::local_gate gate;
  gate.lock();
  const auto start = steady::now();
  EXPECT_FALSE(gate.lock_until(steady::now() + milliseconds(50)));
  EXPECT_GE(steady::now() - start, milliseconds(50));
  EXPECT_EQ(gate.waiting(), 0u);
  gate.unlock();
  EXPECT_TRUE(gate.try_lock());
  gate.unlock();
}

TEST_F(WakeupTest, AnObjectSharedByThreadsBehavesLikeATimedMutex) {
  client c(options());
  mutex shared(c, "shared-object");
  constexpr int threads = 4, rounds = 25;
  int counter = 0;  // protected by `shared` alone
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        std::lock_guard<mutex> g(shared);
        ++counter;
      }
    });
  for (auto& w : workers) w.join();
  EXPECT_EQ(counter, threads * rounds);

  // try_lock_for from another thread while one holds it: the deadline is honoured locally.
  shared.lock();
  auto timed = std::async(std::launch::async, [&] {
    const auto start = steady::now();
    const bool got = shared.try_lock_for(milliseconds(200));
    return std::pair{got, steady::now() - start};
  });
  auto [got, took] = timed.get();
  EXPECT_FALSE(got);
  EXPECT_GE(took, milliseconds(200));
  EXPECT_LT(took, milliseconds(200 + 250));
  // A thread waiting on the object gets it when the holder unlocks.
  auto waiting = std::async(std::launch::async, [&] {
    const bool ok = shared.try_lock_for(seconds(5));
    if (ok) shared.unlock();
    return ok;
  });
  shared.unlock();
  EXPECT_TRUE(waiting.get());
}

// A hand-off notice that arrives after its wait gave up (the waiter timed out before reading
// it, and left) must not complete a later acquisition of the same object: by then the lock
// may be someone else's.
TEST_F(WakeupTest, ANoticeLeftFromAnEarlierWaitNeverCompletesALaterAcquisition) {
  client holder_client(options()), waiter_client(options());
  mutex holder(holder_client, "stale", lease(seconds(20)));
  mutex waiter(waiter_client, "stale", lease(seconds(20)));
  holder.lock();
  const std::string holder_token = get(holder.key());
  std::string token;  // the waiter's token while it queues
  auto first = std::async(std::launch::async, [&] { return waiter.try_lock_for(milliseconds(500)); });
  ASSERT_TRUE(eventually([&] {
    reply_ptr r = admin->command({"ZRANGE", holder.key() + ":queue", "0", "-1"});
    if (r->elements != 1) return false;
    token.assign(r->element[0]->str, r->element[0]->len);
    return true;
  }));
  ASSERT_FALSE(first.get());  // gave up and left the queue
  // The notice for that wait's token arrives late, on the channel the object keeps subscribed.
  const std::string channel = holder.key() + ":w:" + token.substr(0, token.rfind(':'));
  ASSERT_EQ(admin->command({"PUBLISH", channel, token})->integer, 1);
  // The lock is still the holder's: the next wait must not take the old notice as a hand-off.
  EXPECT_FALSE(waiter.try_lock_for(milliseconds(300)));
  EXPECT_FALSE(waiter.owns_lock());
  EXPECT_EQ(get(holder.key()), holder_token);
  holder.unlock();
  EXPECT_EQ(holder.last_release(), release_status::released);
}

// A notice also reaches subscribers of the server's replicas (PUBLISH and SPUBLISH are
// replicated) while the count a release relies on covers only the server's own. A waiter still
// subscribed on a demoted master (a stale cluster map or Sentinel answer after a failover) must
// never be sent a hand-off the release did not count on: the lock goes to the next waiter, and
// the stale one would take its token on the channel for the lock (a double grant). Here W is
// queued on the master and listens on a replica only; a marker published after the release
// reaches the replica after anything the release sent (one replication stream, in order).
TEST_F(WakeupTest, AHandOffIsNeverSentToAWaiterListeningOnAReplica) {
  redis_server replica({"--replicaof", "127.0.0.1", std::to_string(server->port())});
  redislock::connection on_replica(replica.options());
  ASSERT_TRUE(eventually(
      [&] {
        reply_ptr r = on_replica.command({"INFO", "replication"});
        return std::string(r->str, r->len).find("master_link_status:up") != std::string::npos;
      },
      seconds(20)));
  for (const std::string verb : {"SUBSCRIBE", "SSUBSCRIBE"}) {
    if (verb == "SSUBSCRIBE" && !redis7()) continue;  // no sharded pub/sub before Redis 7
    SCOPED_TRACE(verb);
    mutex holder(*pool, "replicated-" + verb);
    holder.lock();
    const std::string token = "stalewaiter:1", channel = holder.key() + ":w:stalewaiter";
    // W's "wait" attempt, as its client would have made it on the master.
    const auto& q = detail::mutex_scripts::queue_attempt();
    reply_ptr queued =
        admin->command({"EVAL", q.source(), "4", holder.key(), holder.key() + ":fence", holder.key() + ":queue",
                        holder.key() + ":waiters", token, "30000", "wait", "0", "30000", holder.key() + ":w:"});
    ASSERT_EQ(queued->type, REDIS_REPLY_ARRAY);
    ASSERT_EQ(queued->element[0]->integer, 0) << "W waits behind the holder";
    redislock::connection listener(replica.options());
    reply_ptr confirmed = listener.command({verb, channel});
    ASSERT_EQ(confirmed->type, REDIS_REPLY_ARRAY) << "subscribed on the replica";
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

// A waiter's place is its field in the waiters hash AND its entry in the queue. Should the queue
// go without the hash (evicted, deleted by hand, or expired a millisecond earlier on Redis < 7),
// the waiter's next refresh queues it again, rather than leave it believing it waits in line
// while every release hands the lock past it (found in review of the cheaper join).
TEST_F(WakeupTest, AWaiterWhoseQueueEntryVanishedIsQueuedAgainByItsNextRefresh) {
  mutex holder(*pool, "vanished");
  holder.lock();
  lock_options refreshing;
  refreshing.recheck_interval = milliseconds(50);
  client waiter_client(options());
  mutex waiter(waiter_client, "vanished", refreshing);
  auto waited = std::async(std::launch::async, [&] { return waiter.try_lock_for(seconds(30)); });
  ASSERT_TRUE(eventually([&] { return queued(holder) == 1; }, seconds(10)));
  admin->command({"DEL", holder.key() + ":queue"});
  EXPECT_TRUE(eventually([&] { return queued(holder) == 1; }, seconds(10)))
      << "stranded: the waiter's refresh did not queue it again";
  holder.unlock();
  ASSERT_EQ(waited.wait_for(seconds(30)), std::future_status::ready);
  EXPECT_TRUE(waited.get());
  waiter.unlock();
}

}  // namespace test_wakeups
