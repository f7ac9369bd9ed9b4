// redislock::latch: a count-down latch shared by processes (docs/latch.md). Waiters wake when
// the count reaches zero and not before, by the notice rather than by polling; creation is
// idempotent and refuses another count; a lost count_down reply is never counted twice; an
// abandoned latch expires and its waiters are told so, never that it opened.
#include "eventually.hpp"
#include "redis_cluster.hpp"
#include "redis_keys.hpp"
#include "redis_stats.hpp"
#include "server_fixture.hpp"
#include "server_version.hpp"
#include "tcp_proxy.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace test_latch {

using namespace redislock;
using redislock_test::eventually;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

/// A Client that runs every call twice, as one that sends a call again after its reply was lost.
struct twice {
  client& inner;
  template <class F>
  auto run(std::string_view key, F&& f) {
    (void)inner.run(key, f);
    return inner.run(key, f);
  }
};

struct Latch : redislock_test::server_test {
  static latch_options lease_of(milliseconds ms) {
    latch_options o;
    o.lease = ms;
    return o;
  }
  std::string field(const latch& l, const char* f) { return redislock_test::hget(*admin, l.key(), f); }
  std::string field_of(const std::string& name, const char* f) {
    return redislock_test::hget(*admin, "redislock:{" + name + "}", f);
  }
};

// Three waiters (two on one client, so one notice must wake both of its waiters, and one on
// another client) wake once the count reaches zero, and not before: each checks that the last
// count_down was already sent when its wait returned. They would look again only after a
// minute (recheck_interval, lease): the notice wakes them.
TEST_F(Latch, WaitersWakeWhenTheCountReachesZeroAndNotBefore) {
  client other(options());
  latch_options patient;
  patient.recheck_interval = seconds(60);
  latch creator(*pool, "l-wake", 3);
  EXPECT_TRUE(creator.created());
  EXPECT_EQ(field(creator, "@kind"), "latch");
  std::atomic<bool> last_sent{false};
  std::vector<std::future<bool>> waiters;
  for (client* c : {pool.get(), pool.get(), &other}) {
    waiters.push_back(std::async(std::launch::async, [&, c] {
      latch mine(*c, "l-wake", 3, patient);
      mine.wait();
      return last_sent.load();
    }));
  }
  ASSERT_TRUE(eventually([&] { return subscribers(creator.key() + ":open") == 2; }));  // two clients
  std::vector<std::future<void>> counters;
  for (int i = 0; i < 2; ++i)
    counters.push_back(std::async(std::launch::async, [&] {
      client own(options());
      latch l(own, "l-wake", 3);
      l.count_down();
    }));
  for (auto& c : counters) c.get();
  EXPECT_EQ(creator.count(), 1);
  EXPECT_FALSE(creator.try_wait());
  for (auto& w : waiters) EXPECT_EQ(w.wait_for(milliseconds(0)), std::future_status::timeout);
  last_sent = true;
  creator.count_down();
  for (auto& w : waiters) {
    ASSERT_EQ(w.wait_for(seconds(5)), std::future_status::ready) << "a waiter missed the notice";
    EXPECT_TRUE(w.get()) << "a waiter returned before the count reached zero";
  }
  EXPECT_TRUE(creator.try_wait());
  EXPECT_EQ(creator.count(), 0);
  EXPECT_EQ(pool->wait_stats().fallback_waits, 0u);
}

// A waiter sleeps subscribed: a timed wait reads the count at most three times (before
// subscribing, once subscribed, at the deadline), and ends at its deadline.
TEST_F(Latch, ATimedWaitSleepsUntilItsDeadlineAndDoesNotPoll) {
  latch l(*pool, "l-timed", 2);
  EXPECT_FALSE(l.try_wait());  // loads the script
  reset_stats();
  const steady::time_point start = steady::now();
  EXPECT_FALSE(l.wait_for(milliseconds(300)));
  const auto took = steady::now() - start;
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, seconds(2));
  EXPECT_LE(evalsha(), 3) << "the waiter polled";
  EXPECT_FALSE(l.wait_until(std::chrono::system_clock::now() + milliseconds(50)));
  EXPECT_EQ(l.count(), 2);
}

TEST_F(Latch, ArriveAndWaitOpensTheLatchForEveryParticipant) {
  std::vector<std::future<void>> parties;
  for (int i = 0; i < 4; ++i)
    parties.push_back(std::async(std::launch::async, [&] {
      client own(options());
      latch l(own, "l-arrive", 4);
      l.arrive_and_wait();
    }));
  for (auto& p : parties) ASSERT_EQ(p.wait_for(seconds(10)), std::future_status::ready);
  for (auto& p : parties) p.get();
  latch l(*pool, "l-arrive", 4);
  EXPECT_FALSE(l.created());
  EXPECT_TRUE(l.try_wait());
}

TEST_F(Latch, JoiningWithAnotherCountIsRefusedAndChangesNothing) {
  latch first(*pool, "l-twice", 3);
  first.count_down();
  latch same(*pool, "l-twice", 3);
  EXPECT_FALSE(same.created());
  EXPECT_EQ(same.count(), 2);
  try {
    latch other(*pool, "l-twice", 5);
    ADD_FAILURE() << "joined a latch of another count";
  } catch (const latch_mismatch_error& e) {
    EXPECT_EQ(e.initial(), 3);
  }
  EXPECT_EQ(field(first, "count"), "2");
  EXPECT_EQ(field(first, "initial"), "3");
}

TEST_F(Latch, CountingPastZeroIsRefusedAndChangesNothing) {
  latch l(*pool, "l-over", 2);
  EXPECT_THROW(l.count_down(3), latch_error);
  EXPECT_EQ(l.count(), 2);
  l.count_down(2);
  EXPECT_TRUE(l.try_wait());
  EXPECT_THROW(l.count_down(), latch_error);
  EXPECT_EQ(l.count(), 0);
}

// The count_down a lost reply makes the client send again carries the same call number: the
// server applies it once. Sent here by hand, twice, as the resend would; then a late delivery of
// the caller's earlier call, after a later one was applied, is not applied either.
TEST_F(Latch, ACountDownSentTwiceIsAppliedOnce) {
  latch l(*pool, "l-resend", 4);
  const std::string id = field(l, "@id"), record = l.key() + ":c:caller-1";
  const auto send = [&](const char* call) {
    reply_ptr r =
        detail::latch_scripts::count_down().run(*admin, {l.key(), record}, {id, "1", "60000", call, "60000", "1", ""});
    return detail::as_integer(detail::element(*r, 0));
  };
  EXPECT_EQ(send("1"), 3);
  EXPECT_EQ(send("1"), 3) << "the resend counted again";
  EXPECT_EQ(send("2"), 2);
  EXPECT_EQ(send("1"), 2) << "a late delivery of an earlier call counted";
  EXPECT_EQ(redislock_test::string_value(*admin, record), "2");
  const long long pttl = admin->command({"PTTL", record})->integer;
  EXPECT_GT(pttl, 50000);
  EXPECT_LE(pttl, 60000);
  EXPECT_EQ(l.count(), 2);
  l.count_down(2);
  EXPECT_TRUE(l.try_wait());
}

// A count_down that ran but whose reply was lost (the connection cut after the request) is
// sent again with the same call id: the caller is not told it failed, and it counts once.
TEST_F(Latch, ACountDownWhoseReplyWasLostCountsOnceAndSucceeds) {
  redislock_test::tcp_proxy proxy(server->port());
  client_options via = options();
  via.connection.port = proxy.port();
  client through(via);
  latch l(through, "l-lost", 3);
  l.count_down();  // the connection is made and the script loaded
  proxy.cut_after_next_requests(1);
  EXPECT_NO_THROW(l.count_down());
  EXPECT_EQ(proxy.cut_after_request_count(), 1u) << "no reply was lost";
  EXPECT_EQ(l.count(), 1) << "the resent count_down counted twice";
}

// A count_down whose reply was lost, and whose latch then expired before the resend reached
// the server, was applied: the resend reports it so (the call returns), not latch_expired_error.
// The resend is held in the proxy until the latch's 200 ms lease has ended.
TEST_F(Latch, ACountDownAppliedBeforeTheLatchExpiredIsReportedAppliedToItsResend) {
  redislock_test::tcp_proxy proxy(server->port());
  client_options via = options();
  via.connection.port = proxy.port();
  client through(via);
  latch l(through, "l-lost-expired", 3, lease_of(milliseconds(200)));
  l.count_down();  // the connection is made and the script loaded
  connection watcher(server->options());
  std::atomic<int> sent{0};
  std::atomic<bool> expired_first{false};
  proxy.set_request_hook([&](const std::string& chunk) {
    if (chunk.find("EVALSHA") == std::string::npos || ++sent != 2) return;
    // The resend: forwarded once the latch is gone (bounded).
    expired_first = eventually([&] { return watcher.command({"EXISTS", l.key()})->integer == 0; }, seconds(3));
  });
  proxy.cut_after_next_requests(1);
  EXPECT_NO_THROW(l.count_down()) << "an applied count_down was reported as not applied";
  proxy.set_request_hook({});
  EXPECT_EQ(proxy.cut_after_request_count(), 1u) << "no reply was lost";
  EXPECT_EQ(sent.load(), 2) << "the count_down was not resent";
  EXPECT_TRUE(expired_first.load()) << "the latch did not expire before the resend";
  EXPECT_THROW(l.count(), latch_expired_error);
}

// The server keeps what a latch needs and no more, whatever its count: its hash has five fields
// (@kind, @id, round, count, initial), and each object that counted down keeps one call record
// (its last call, for a resend) that expires a minute after its last count_down. 5,000
// count_downs here, from 11 objects: 5 fields and 11 records.
TEST_F(Latch, ItsServerStateStaysBoundedWhateverTheCount) {
  constexpr int kCount = 5000, kOthers = 10, kEach = 100;
  latch l(*pool, "l-bounded", kCount);
  const auto footprint = [&] {
    long long records = 0, bytes = admin->command({"MEMORY", "USAGE", l.key()})->integer;
    reply_ptr keys = admin->command({"KEYS", l.key() + ":*"});
    for (std::size_t i = 0; i < keys->elements; ++i) {
      ++records;
      const std::string k = redislock_test::reply_text(*keys->element[i]);
      bytes += admin->command({"MEMORY", "USAGE", k})->integer;
      EXPECT_GT(admin->command({"PTTL", k})->integer, 0) << k << " never expires";
    }
    return std::pair{records, bytes};
  };
  for (int i = 0; i < kOthers; ++i) {
    latch other(*pool, "l-bounded", kCount);
    for (int j = 0; j < kEach; ++j) other.count_down();
  }
  for (int i = kOthers * kEach; i < kCount; ++i) l.count_down();
  EXPECT_TRUE(l.try_wait());
  const long long fields = admin->command({"HLEN", l.key()})->integer;
  const auto [records, bytes] = footprint();
  std::printf("after %d count_downs from %d objects: %lld hash fields, %lld call records, %lld bytes\n", kCount,
              kOthers + 1, fields, records, bytes);
  EXPECT_EQ(fields, 5);
  EXPECT_LE(records, kOthers + 1);
  EXPECT_LT(bytes, 8 * 1024);
}

// The constructor's script whose reply was lost (it ran: the latch exists) is sent again with
// the same new id: it finds the latch its first send made, and created() says this object
// created it (failed on the old code: the constructor threw connection_error).
TEST_F(Latch, AConstructorWhoseReplyWasLostIsSentAgainAndStillSaysItCreatedTheLatch) {
  redislock_test::tcp_proxy proxy(server->port());
  client_options via = options();
  via.connection.port = proxy.port();
  client through(via);
  { latch warm(through, "l-warm", 1); }  // the connection is made and the script loaded
  proxy.cut_after_next_requests(1);
  std::unique_ptr<latch> l;
  try {
    l = std::make_unique<latch>(through, "l-created", 3);
  } catch (const connection_error& e) {
    FAIL() << "the constructor threw: " << e.what() << "; the latch exists: " << field_of("l-created", "@id");
  }
  EXPECT_EQ(proxy.cut_after_request_count(), 1u) << "no reply was lost";
  EXPECT_TRUE(l->created()) << "its own resend counted as a join";
  EXPECT_EQ(l->count(), 3);
  latch joined(*pool, "l-created", 3);
  EXPECT_FALSE(joined.created());
}

// The same when the Client itself sends the call again after it ran (its reply lost): a
// Client's run() may call f more than once.
TEST_F(Latch, ACreateTheClientSentTwiceStillSaysItCreatedTheLatch) {
  twice c{*pool};
  basic_latch<twice> l(c, "l-twice", 2);
  EXPECT_TRUE(l.created());
  basic_latch<twice> joined(c, "l-twice", 2);
  EXPECT_FALSE(joined.created());
  EXPECT_EQ(l.count(), 2);
}

// A waiter whose subscription is cut while it waits (its subscriber's connection killed) falls
// back to reading with backoff and subscribes again: the count_down is not missed, though the
// waiter would look again only after a minute by itself.
TEST_F(Latch, AWaiterWhoseSubscriptionIsCutStillSeesTheLatchOpen) {
  latch_options patient;
  patient.recheck_interval = seconds(60);
  client other(options());
  latch counter(*pool, "l-cut", 1), waiter(other, "l-cut", 1, patient);
  auto opened = std::async(std::launch::async, [&] { return waiter.wait_for(seconds(20)); });
  ASSERT_TRUE(eventually([&] { return subscribers(waiter.key() + ":open") == 1; }));
  admin->command({"CLIENT", "KILL", "TYPE", "pubsub"});
  counter.count_down();
  ASSERT_EQ(opened.wait_for(seconds(5)), std::future_status::ready) << "the waiter missed the count_down";
  EXPECT_TRUE(opened.get());
}

TEST_F(Latch, AnUnreachableServerIsAnErrorWithinTheTimeout) {
  client_options nowhere = options();
  nowhere.connection.port = redislock_test::free_port();
  nowhere.connection.connect_timeout = milliseconds(200);
  client c(nowhere);
  const steady::time_point start = steady::now();
  EXPECT_THROW(latch(c, "l-nowhere", 1), connection_error);
  EXPECT_LT(steady::now() - start, seconds(2));
}

// An abandoned latch goes with its lease; its waiter is told it expired (never that it
// opened), woken by the lease's end rather than by polling; later calls say so too, and an
// object of the old latch never touches a new one made under the same name.
TEST_F(Latch, AnAbandonedLatchExpiresAndItsWaiterIsToldSo) {
  latch_options o = lease_of(milliseconds(300));
  o.recheck_interval = seconds(60);
  latch l(*pool, "l-abandoned", 2, o);
  l.count_down();
  const steady::time_point start = steady::now();
  EXPECT_THROW(l.wait_for(seconds(5)), latch_expired_error);
  EXPECT_GE(steady::now() - start, milliseconds(250));
  EXPECT_LT(steady::now() - start, seconds(2)) << "slept past the lease's end";
  EXPECT_THROW(l.try_wait(), latch_expired_error);
  EXPECT_THROW(l.count_down(), latch_expired_error);
  latch anew(*pool, "l-abandoned", 2);
  EXPECT_TRUE(anew.created());
  EXPECT_THROW(l.count_down(), latch_expired_error);
  EXPECT_THROW(l.count(), latch_expired_error);
  EXPECT_EQ(anew.count(), 2);
}

// An open latch stays open for one lease after the count_down that opened it, then goes.
TEST_F(Latch, AnOpenLatchStaysOpenForItsLease) {
  latch l(*pool, "l-open", 1, lease_of(milliseconds(800)));
  l.count_down();
  const long long pttl = admin->command({"PTTL", l.key()})->integer;
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 800);
  latch late(*pool, "l-open", 1, lease_of(seconds(60)));
  EXPECT_TRUE(late.try_wait());
  EXPECT_LE(admin->command({"PTTL", l.key()})->integer, 800) << "joining an open latch restarted its lease";
  EXPECT_TRUE(eventually([&] { return admin->command({"EXISTS", l.key()})->integer == 0; }, seconds(2)));
  EXPECT_THROW(late.try_wait(), latch_expired_error);
}

TEST_F(Latch, AnotherKindOnTheNameIsWrongType) {
  mutex m(*pool, "l-kind-m");
  ASSERT_TRUE(m.try_lock());
  EXPECT_THROW(latch(*pool, "l-kind-m", 1), wrong_type_error);
  m.unlock();
  latch l(*pool, "l-kind", 1);
  mutex m2(*pool, "l-kind");
  EXPECT_THROW(m2.try_lock(), wrong_type_error);
  reentrant_mutex r(*pool, "l-kind");
  EXPECT_THROW(r.try_lock(), wrong_type_error);
  shared_mutex s(*pool, "l-kind");
  EXPECT_THROW(s.try_lock_shared(), wrong_type_error);
  semaphore sem(*pool, "l-kind", 2);
  EXPECT_THROW(sem.try_acquire(), wrong_type_error);
  EXPECT_EQ(l.count(), 1);
  admin->command({"SET", "redislock:{l-kind-s}", "x"});
  EXPECT_THROW(latch(*pool, "l-kind-s", 1), wrong_type_error);
}

TEST_F(Latch, BadInputIsRefusedAndSendsNothing) {
  latch l(*pool, "l-bad", 2);
  redislock_test::command_monitor monitor(server->options());
  monitor.take(*admin);
  EXPECT_THROW(latch(*pool, "", 1), invalid_argument);
  EXPECT_THROW(latch(*pool, "l-bad", -1), invalid_argument);
  EXPECT_THROW(latch(*pool, "l-bad", max_latch_count + 1), invalid_argument);
  EXPECT_THROW(latch(*pool, "l-bad", 2, lease_of(milliseconds(0))), invalid_argument);
  EXPECT_THROW(latch(*pool, "l-bad", 2, lease_of(max_lease + milliseconds(1))), invalid_argument);
  latch_options fast;
  fast.recheck_interval = milliseconds(1);
  EXPECT_THROW(latch(*pool, "l-bad", 2, fast), invalid_argument);
  EXPECT_THROW(l.count_down(0), invalid_argument);
  EXPECT_THROW(l.count_down(-1), invalid_argument);
  EXPECT_THROW(l.arrive_and_wait(0), invalid_argument);
  EXPECT_EQ(monitor.take(*admin), std::vector<std::string>{});
  EXPECT_EQ(l.count(), 2);
}

// inspect() tells a latch from the lock kinds, with its counts, lease and listening clients;
// force_release() leaves it alone.
TEST_F(Latch, InspectShowsALatchAndForceReleaseLeavesItAlone) {
  latch l(*pool, "l-inspect", 2, lease_of(seconds(30)));
  auto opened = std::async(std::launch::async, [&] { return l.wait_for(seconds(10)); });
  ASSERT_TRUE(eventually([&] { return subscribers(l.key() + ":open") == 1; }));
  lock_info i = inspect(*pool, "l-inspect");
  EXPECT_EQ(i.kind, lock_kind::latch);
  EXPECT_EQ(i.latch_count, 2);
  EXPECT_EQ(i.latch_initial, 2);
  EXPECT_EQ(i.latch_round, 1);
  EXPECT_GT(i.key_ttl.count(), 25000);
  EXPECT_LE(i.key_ttl.count(), 30000);
  EXPECT_EQ(i.waiters, 1);
  EXPECT_FALSE(i.held());
  i = force_release(*pool, "l-inspect");
  EXPECT_EQ(i.kind, lock_kind::latch);
  EXPECT_EQ(l.count(), 2);
  l.count_down(2);
  ASSERT_EQ(opened.wait_for(seconds(5)), std::future_status::ready);
  EXPECT_TRUE(opened.get());
  EXPECT_EQ(inspect(*pool, "l-inspect").latch_count, 0);
}

// The permissions a latch needs beyond the mutex's (docs/latch.md, "ACL"): create, join,
// count down, read and wait by the notice, under exactly those.
TEST_F(Latch, TheDocumentedAclSuffices) {
  if (version() < 60000) GTEST_SKIP() << "no ACL before Redis 6";
  std::vector<std::string> acl = {"ACL", "SETUSER", "latcher", "reset", "on", ">latch-pw", "~redislock:*", "-@all",
                                  "+evalsha", "+script|load", "+get", "+set", "+del", "+pexpire", "+pttl", "+time",
                                  "+zadd", "+zpopmin", "+zrem", "+hset", "+hget", "+hdel", "+publish", "+subscribe",
                                  "+unsubscribe", "+pubsub|numsub",
                                  // the latch's additions
                                  "+hmget", "+exists"};
  for (const std::string& rule : redislock_test::acl_channel_rules(*admin, "redislock:*")) acl.push_back(rule);
  admin->command(std::vector<std::string_view>(acl.begin(), acl.end()));
  admin->command({"SCRIPT", "FLUSH"});
  client_options as_latcher = options();
  as_latcher.connection.user = "latcher";
  as_latcher.connection.password = "latch-pw";
  client c(as_latcher), c2(as_latcher);
  latch_options patient;
  patient.recheck_interval = seconds(60);
  latch a(c, "l-acl", 2), b(c2, "l-acl", 2, patient);
  std::future<bool> opened = std::async(std::launch::async, [&] { return b.wait_for(seconds(10)); });
  ASSERT_TRUE(eventually([&] { return subscribers(a.key() + ":open") == 1; }));
  a.count_down();
  EXPECT_FALSE(b.try_wait());
  EXPECT_EQ(b.count(), 1);
  a.count_down();
  ASSERT_EQ(opened.wait_for(seconds(5)), std::future_status::ready) << "not woken by the notice";
  EXPECT_TRUE(opened.get());
  EXPECT_EQ(c2.wait_stats().fallback_waits, 0u);
  EXPECT_TRUE(a.try_set_count(1));  // and starts it again
  EXPECT_EQ(b.join_current_round(), 2);
}

// Rounds. A latch that opened starts again under its name with a new count; its waiters of the
// round that opened are told it opened, also when they read only after the next round began,
// and the next round's waiters wait for the next round's count_downs. 20 rounds: each round's
// waiter (an object kept across rounds, on another client, subscribed and woken by the notice)
// must return only after its round's last count_down was sent, and the coordinator starts the
// next round right after the count_down that opened the last one, racing the waiter's read.
TEST_F(Latch, EachRoundOpensForItsOwnWaitersAndTheNextRoundWaitsForItsOwnCount) {
  constexpr int kRounds = 20;
  client other(options());
  latch_options patient;
  patient.recheck_interval = seconds(60);
  latch coordinator(*pool, "l-rounds", 2), waiter(other, "l-rounds", 2, patient);
  for (int round = 1; round <= kRounds; ++round) {
    ASSERT_EQ(waiter.join_current_round(), round);
    ASSERT_EQ(coordinator.round(), round);
    std::atomic<bool> last_sent{false};
    auto opened = std::async(std::launch::async, [&] { return waiter.wait_for(seconds(10)) && last_sent.load(); });
    ASSERT_TRUE(eventually([&] { return subscribers(coordinator.key() + ":open") == 1; }));
    coordinator.count_down();
    EXPECT_EQ(opened.wait_for(milliseconds(0)), std::future_status::timeout) << "round " << round << " opened early";
    last_sent = true;
    coordinator.count_down();
    ASSERT_TRUE(coordinator.try_set_count(2)) << "round " << round;  // before or after the waiter's read
    ASSERT_EQ(opened.wait_for(seconds(5)), std::future_status::ready) << "round " << round << ": no wake";
    EXPECT_TRUE(opened.get()) << "round " << round << ": the waiter returned before its round opened";
    EXPECT_TRUE(waiter.try_wait()) << "the waiter's round is open, whatever came after it";
    EXPECT_EQ(waiter.count(), 0);
    EXPECT_EQ(coordinator.count(), 2) << "the new round starts with its own count";
    EXPECT_FALSE(coordinator.try_wait());
  }
  EXPECT_EQ(field(coordinator, "round"), std::to_string(kRounds + 1));
  EXPECT_EQ(other.wait_stats().fallback_waits, 0u);
}

// Rounds under lost replies: the coordinator and the participants reach the server through a
// proxy that cuts a connection right after a request (the command runs, its reply is lost), once
// per round, at the round's start (hitting the set_count) or among the participants' joins and
// count_downs. Every call is sent again and applied once: each reset starts exactly one round,
// each round opens after its three count_downs were sent and not before, and none throws.
TEST_F(Latch, RoundsUnderLostRepliesOpenOnTimeAndStartOnce) {
  constexpr int kRounds = 30, kParties = 3;
  redislock_test::tcp_proxy proxy(server->port());
  client_options via = options();
  via.connection.port = proxy.port();
  client coordinating(via);
  std::vector<std::unique_ptr<client>> parties;
  for (int i = 0; i < kParties; ++i) parties.push_back(std::make_unique<client>(via));
  latch coordinator(coordinating, "l-faulty-rounds", kParties);
  latch waiter(*pool, "l-faulty-rounds", kParties);  // directly: its reads are not resent
  for (int round = 1; round <= kRounds; ++round) {
    if (round > 1) {
      if (round % 2 == 0) proxy.cut_after_next_requests(1);  // the set_count's reply is lost
      ASSERT_NO_THROW(coordinator.reset(kParties)) << "round " << round;
    }
    ASSERT_EQ(coordinator.round(), round);
    ASSERT_EQ(field(coordinator, "round"), std::to_string(round)) << "a resent set_count started another round";
    ASSERT_EQ(waiter.join_current_round(), round);
    if (round % 2 == 1) proxy.cut_after_next_requests(1);  // a join's or a count_down's reply is lost
    std::atomic<int> sent{0}, failed{0};
    std::vector<std::future<void>> counting;
    for (auto& c : parties)
      counting.push_back(std::async(std::launch::async, [&, c = c.get()] {
        try {
          latch mine(*c, "l-faulty-rounds", kParties);
          ++sent;
          mine.count_down();
        } catch (const std::exception& e) {
          ++failed;
          std::fprintf(stderr, "round %d: %s\n", round, e.what());
        }
      }));
    const bool opened = waiter.wait_for(seconds(10));
    const int sent_when_opened = sent.load();
    for (auto& f : counting) f.get();
    ASSERT_EQ(failed.load(), 0) << "round " << round;
    ASSERT_TRUE(opened) << "round " << round << " never opened";
    ASSERT_EQ(sent_when_opened, kParties) << "round " << round << " opened before its count_downs were sent";
    ASSERT_EQ(field(coordinator, "count"), "0") << "round " << round;
    ASSERT_TRUE(coordinator.try_wait());
  }
  EXPECT_GE(proxy.cut_after_request_count(), static_cast<unsigned long>(kRounds) - 2) << "too few replies were lost";
}

// A round that still counts cannot be started again: try_set_count says no, reset throws
// latch_error, and nothing changes; of two objects starting an open latch again, one does.
TEST_F(Latch, ARoundThatStillCountsIsNotStartedAgain) {
  latch a(*pool, "l-busy", 2), b(*pool, "l-busy", 2);
  EXPECT_FALSE(a.try_set_count(5));
  EXPECT_THROW(a.reset(5), latch_error);
  EXPECT_EQ(a.round(), 1);
  EXPECT_EQ(a.count(), 2);
  EXPECT_EQ(field(a, "initial"), "2");
  a.count_down(2);
  reset_stats();
  EXPECT_TRUE(a.try_set_count(3));
  EXPECT_EQ(evalsha(), 1) << "a start is one round trip";
  long long inside = 0;
  for (const char* c : {"hget", "hmget", "hset", "pttl", "pexpire", "exists"})
    inside += redislock_test::command_calls(*admin, c);
  std::printf("try_set_count: 1 EVALSHA, %lld commands inside it\n", inside);
  EXPECT_FALSE(b.try_set_count(4)) << "a second start while the first's round counts";
  EXPECT_EQ(b.round(), 1) << "a refused start moves nothing";
  EXPECT_EQ(a.round(), 2);
  EXPECT_EQ(a.initial(), 3);
  EXPECT_EQ(a.count(), 3);
  EXPECT_TRUE(a.created()) << "starting a round again keeps who created the latch";
  EXPECT_THROW(a.try_set_count(-1), invalid_argument);
  EXPECT_THROW(a.try_set_count(max_latch_count + 1), invalid_argument);
}

// A count_down meant for a round that opened (a slow participant) never counts down the next
// round: it throws latch_error and changes nothing, until the object joins the current round.
// New objects join the current round, with its count.
TEST_F(Latch, ACountDownForARoundThatOpenedLeavesTheNextRoundAlone) {
  latch a(*pool, "l-late", 1), late(*pool, "l-late", 1);
  a.count_down();
  a.reset(3);
  try {
    late.count_down();
    ADD_FAILURE() << "a count_down for round 1 was applied in round 2";
  } catch (const latch_expired_error& e) {
    ADD_FAILURE() << "round 1 taken as lost: " << e.what();
  } catch (const latch_error& e) {
    EXPECT_NE(std::string(e.what()).find("round 1 opened"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.count(), 3);
  EXPECT_TRUE(late.try_wait()) << "its own round opened";
  EXPECT_EQ(late.join_current_round(), 2);
  EXPECT_EQ(late.initial(), 3);
  late.count_down();
  EXPECT_EQ(a.count(), 2);
  latch joined(*pool, "l-late", 3);
  EXPECT_EQ(joined.round(), 2);
  EXPECT_FALSE(joined.created());
  try {
    latch wrong(*pool, "l-late", 1);
    FAIL() << "joined round 2 with the count of round 1";
  } catch (const latch_mismatch_error& e) {
    EXPECT_EQ(e.initial(), 3);
  }
}

// try_set_count sent twice (the Client resends it after its reply was lost): one round starts,
// not two, and the call says it started it (with count 0 the resend found an open round and,
// without the call's id in the round, started another one).
TEST_F(Latch, ASetCountTheClientSentTwiceStartsOneRound) {
  twice c{*pool};
  basic_latch<twice> l(c, "l-set-twice", 1);
  l.count_down();
  EXPECT_TRUE(l.try_set_count(0));
  EXPECT_EQ(l.round(), 2);
  EXPECT_EQ(field_of("l-set-twice", "round"), "2");
  EXPECT_TRUE(l.try_set_count(2));
  EXPECT_EQ(l.round(), 3);
  EXPECT_EQ(l.count(), 2);
  // A latch the call creates, sent twice: created, round 1.
  basic_latch<twice> gone(c, "l-set-twice-new", 0, lease_of(milliseconds(100)));
  ASSERT_TRUE(eventually([&] { return admin->command({"EXISTS", gone.key()})->integer == 0; }, seconds(3)));
  EXPECT_TRUE(gone.try_set_count(0));
  EXPECT_TRUE(gone.created());
  EXPECT_EQ(gone.round(), 1);
  EXPECT_EQ(field_of("l-set-twice-new", "round"), "1");
}

// A name whose latch expired gets a new latch (round 1) from try_set_count; the object moves to
// it. A round that a failover lost (the set_count that started the object's round: undone here
// by hand) is gone for that object, never "open": when the latch went back to an open round 1,
// when another round 2 was started in its place, and when that one was followed by a round 3.
TEST_F(Latch, SetCountMakesAGoneLatchAnewAndALostRoundIsGone) {
  latch l(*pool, "l-anew", 1, lease_of(milliseconds(100)));
  ASSERT_TRUE(eventually([&] { return admin->command({"EXISTS", l.key()})->integer == 0; }, seconds(3)));
  EXPECT_THROW(l.count(), latch_expired_error);
  EXPECT_TRUE(l.try_set_count(2));
  EXPECT_EQ(l.round(), 1);
  EXPECT_EQ(l.count(), 2);
  l.count_down(2);
  ASSERT_TRUE(l.try_set_count(1));
  EXPECT_EQ(l.round(), 2);
  admin->command({"HSET", l.key(), "round", "1", "count", "0"});  // round 2 lost, round 1 open
  EXPECT_THROW(l.try_wait(), latch_expired_error);
  EXPECT_THROW(l.count_down(), latch_expired_error);
  admin->command({"HSET", l.key(), "round", "2", "@set", "another", "count", "0"});  // another round 2, open
  EXPECT_THROW(l.try_wait(), latch_expired_error) << "another round 2 taken for this object's";
  EXPECT_THROW(l.count_down(), latch_expired_error);
  admin->command({"HSET", l.key(), "round", "3", "@prev", "another", "@set", "next", "count", "1"});
  EXPECT_THROW(l.try_wait(), latch_expired_error) << "the round after another round 2 taken as proof";
  EXPECT_THROW(l.count_down(), latch_expired_error);
  EXPECT_EQ(l.join_current_round(), 3);
  l.count_down();
  EXPECT_TRUE(l.try_wait());
}

// The scripts' answers to resends, sent by hand: a count_down applied in round 1 and sent again
// once round 2 started is answered "applied" (its call record is read before the round), not
// "round over"; a set_count sent again after its round opened and one more started finds its
// round through the next round's @prev, and starts none.
TEST_F(Latch, ResendsAcrossRoundsAreAnsweredAsTheirFirstSend) {
  latch l(*pool, "l-resends", 1);
  const std::string id = field(l, "@id"), record = l.key() + ":c:caller-1";
  const auto count_down = [&](const char* call, const char* round, const char* round_id) {
    reply_ptr r = detail::latch_scripts::count_down().run(*admin, {l.key(), record},
                                                          {id, "1", "60000", call, "60000", round, round_id});
    return detail::as_integer(detail::element(*r, 0));
  };
  const auto set_count = [&](const char* n, const char* call) {
    reply_ptr r = detail::latch_scripts::set_count().run(*admin, {l.key()}, {n, "60000", call});
    return std::pair<long long, long long>{detail::as_integer(detail::element(*r, 0)),
                                           detail::as_integer(detail::element(*r, 3))};
  };
  EXPECT_EQ(count_down("1", "1", ""), 0);  // round 1 opens
  EXPECT_EQ(set_count("2", "start-2"), std::pair(1LL, 2LL));
  EXPECT_EQ(count_down("1", "1", ""), 2) << "the applied call's resend was not answered as applied";
  EXPECT_EQ(count_down("2", "1", ""), detail::latch_scripts::round_over);
  EXPECT_EQ(l.count(), 0) << "round 1 is open";
  EXPECT_EQ(field(l, "count"), "2") << "round 2 was counted down";
  admin->command({"HSET", l.key(), "count", "0"});  // round 2 opens
  EXPECT_EQ(set_count("1", "start-3"), std::pair(1LL, 3LL));
  EXPECT_EQ(set_count("2", "start-2"), std::pair(1LL, 2LL)) << "the resend did not find its round";
  EXPECT_EQ(field(l, "round"), "3") << "the resend started a round";
}

// An object follows the latch back to the round the server has (a failover lost the rounds
// after it) with join_current_round().
TEST_F(Latch, JoinCurrentRoundFollowsTheLatchBack) {
  latch l(*pool, "l-back", 0);
  ASSERT_TRUE(l.try_set_count(0));
  ASSERT_TRUE(l.try_set_count(1));
  ASSERT_EQ(l.round(), 3);
  admin->command({"HSET", l.key(), "round", "1", "@set", "", "@prev", "", "count", "1"});
  EXPECT_THROW(l.count(), latch_expired_error);
  EXPECT_EQ(l.join_current_round(), 1);
  EXPECT_EQ(l.round(), 1);
  l.count_down();
  EXPECT_TRUE(l.try_wait());
}

// A latch made before rounds existed (no round field) is in round 1, and starts round 2.
TEST_F(Latch, ALatchWithoutARoundFieldIsInRoundOne) {
  latch l(*pool, "l-old", 1);
  admin->command({"HDEL", l.key(), "round"});
  latch joined(*pool, "l-old", 1);
  EXPECT_EQ(joined.round(), 1);
  EXPECT_EQ(l.count(), 1);
  EXPECT_EQ(inspect(*pool, "l-old").latch_round, 1);
  l.count_down();
  EXPECT_TRUE(joined.try_wait());
  EXPECT_TRUE(l.try_set_count(1));
  EXPECT_EQ(l.round(), 2);
  EXPECT_TRUE(joined.try_wait()) << "round 1 opened";
}

TEST_F(Latch, AZeroCountLatchIsOpenAtOnce) {
  latch l(*pool, "l-zero", 0);
  EXPECT_TRUE(l.try_wait());
  l.wait();
  EXPECT_TRUE(l.wait_for(milliseconds(0)));
}

// REVIEW (fails on purpose: a real bug, not fixed here). A participant that joins with a
// shorter lease than the creator's (here a monitor using 100 ms, or just the default 60 s
// against a creator's hour) restarts the latch's lease with its own, shorter one: the latch
// expires under the participants that chose the longer lease, their count_downs throw
// latch_expired_error, and the next constructor makes a new latch with the full count (the
// earlier counts are lost). A join or count_down should only ever lengthen the lease.
TEST_F(Latch, AJoinWithAShorterLeaseDoesNotCutTheLatchsLease) {
  latch creator(*pool, "l-short-join", 3, lease_of(seconds(30)));
  { latch monitor(*pool, "l-short-join", 3, lease_of(milliseconds(100))); }
  EXPECT_GT(admin->command({"PTTL", creator.key()})->integer, 20000) << "a join cut the creator's 30 s lease";
  latch hasty(*pool, "l-short-join", 3, lease_of(milliseconds(100)));
  creator.count_down();  // restarts the 30 s lease
  hasty.count_down();
  EXPECT_GT(admin->command({"PTTL", creator.key()})->integer, 20000) << "a count_down cut the creator's 30 s lease";
}

// REVIEW (fails on purpose: a real bug, not fixed here). cluster_client::run already retries a
// connection_error for up to retry_timeout (and resends the script, with the same call id), and
// documents that a call returns within retry_timeout + connect_timeout. count_down then resends
// once more after the connection_error it finally throws: against a dead master it takes twice
// the client's bound (1200 ms here for a bound of 800 ms; count() takes 600 ms).
TEST_F(Latch, ACountDownOnADeadClusterMasterEndsWithinTheClientsBound) {
  redislock_test::redis_cluster three(3, 0);
  cluster_options o = three.options();
  o.seeds.front().connect_timeout = milliseconds(200);
  o.seeds.front().command_timeout = milliseconds(200);
  o.retry_timeout = milliseconds(600);
  cluster_client c(o);
  basic_latch<cluster_client> l(c, "l-dead-master", 2);
  l.count_down();
  const std::string owner = c.node_of(l.key());
  for (std::size_t i = 0; i < three.size(); ++i)
    if (owner == "127.0.0.1:" + std::to_string(three.node(i).port())) three.node(i).kill();
  const steady::time_point start = steady::now();
  EXPECT_THROW(l.count_down(), connection_error);
  const auto took = std::chrono::duration_cast<milliseconds>(steady::now() - start);
  EXPECT_LT(took, milliseconds(900)) << "count_down took " << took.count() << " ms; the client's bound is 800 ms";
}

}  // namespace

}  // namespace test_latch
