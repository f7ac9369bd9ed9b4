// redislock::mutex against a real redis-server: what is the mutex's own (its key and tokens,
// the local gate shared by threads, SET NX GET and its fallback, wrong types, guards, server
// loss). What every kind promises (deadlines, stale releases, extend, bad input, round trips,
// fencing, hand-off): test_lock_contract.cpp.
#include "eventually.hpp"
#include "freeze_waiter.hpp"
#include "mutex_access.hpp"
#include "server_fixture.hpp"
#include "tcp_proxy.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace test_mutex {

using namespace redislock;
using redislock_test::command_calls;
using redislock_test::redis_server;
using std::chrono::milliseconds;
using std::chrono::seconds;

using MutexTest = redislock_test::server_test;

TEST_F(MutexTest, LockSetsAKeyWithTheLeaseAndUnlockDeletesIt) {
  mutex m(*pool, "orders", lease(seconds(10)));
  EXPECT_EQ(m.key(), "redislock:{orders}");
  m.lock();
  EXPECT_TRUE(m.owns_lock());
  const std::string token = get(m.key());
  EXPECT_EQ(token.size(), 34u);  // 128 random bits of the object, ":", the acquisition's number
  EXPECT_EQ(token.substr(32), ":1");
  const long long pttl = admin->command({"PTTL", m.key()})->integer;
  EXPECT_GT(pttl, 9000);
  EXPECT_LE(pttl, 10000);
  m.unlock();
  EXPECT_FALSE(m.owns_lock());
  EXPECT_EQ(m.last_release(), release_status::released);
  EXPECT_EQ(admin->command({"EXISTS", m.key()})->integer, 0);
}

TEST_F(MutexTest, EveryAcquisitionHasAFreshToken) {
  mutex m(*pool, "fresh");
  m.lock();
  const std::string first = get(m.key());
  m.unlock();
  m.lock();
  EXPECT_NE(get(m.key()), first);
  m.unlock();
}

TEST_F(MutexTest, TryLockFailsWhileAnotherObjectHoldsIt) {
  mutex a(*pool, "contended"), b(*pool, "contended");
  ASSERT_TRUE(a.try_lock());
  EXPECT_FALSE(b.try_lock());
  EXPECT_FALSE(b.owns_lock());
  a.unlock();
  EXPECT_TRUE(b.try_lock());
  b.unlock();
}

TEST_F(MutexTest, ThreadsWithTheirOwnObjectsExcludeEachOther) {
  // Non-atomic read-modify-write on a Redis counter, plus an overlap marker.
  constexpr int threads = 4, rounds = 50;
  std::atomic<int> inside{0}, overlaps{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&] {
      client own(client_options{server->options()});
      mutex m(own, "counter");
      connection c(server->options());
      for (int i = 0; i < rounds; ++i) {
        std::lock_guard<mutex> guard(m);
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        reply_ptr r = c.command({"GET", "counter:value"});
        const int value = r->type == REDIS_REPLY_NIL ? 0 : std::stoi(std::string(r->str, r->len));
        c.command({"SET", "counter:value", std::to_string(value + 1)});
        inside.fetch_sub(1);
      }
    });
  for (auto& w : workers) w.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(get("counter:value"), std::to_string(threads * rounds));
}

TEST_F(MutexTest, ThreadsSharingOneObjectBehaveLikeATimedMutex) {
  mutex m(*pool, "shared-object");
  int counter = 0;  // plain int: the lock alone protects it
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t)
    workers.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        std::unique_lock<mutex> guard(m);
        ++counter;
      }
    });
  for (auto& w : workers) w.join();
  EXPECT_EQ(counter, 200);
  EXPECT_EQ(admin->command({"EXISTS", m.key()})->integer, 0);
}

TEST_F(MutexTest, WrongTypeKeyIsATypedErrorAndChangesNothing) {
  mutex m(*pool, "typed");
  admin->command({"HSET", m.key(), "field", "value"});
  EXPECT_THROW(m.lock(), wrong_type_error);
  EXPECT_THROW(m.try_lock(), wrong_type_error);
  EXPECT_FALSE(m.owns_lock());
  EXPECT_EQ(std::string(admin->command({"TYPE", m.key()})->str), "hash");
  EXPECT_EQ(admin->command({"HGET", m.key(), "field"})->str, std::string("value"));
  EXPECT_EQ(admin->command({"EXISTS", m.key() + ":fence"})->integer, 0);
  // The fence key of the wrong type: asking for a fencing token fails and changes nothing.
  mutex f(*pool, "typed-fence");
  admin->command({"LPUSH", f.key() + ":fence", "x"});
  f.lock();
  EXPECT_THROW(f.fencing_token(), wrong_type_error);
  EXPECT_EQ(admin->command({"LLEN", f.key() + ":fence"})->integer, 1);
  admin->command({"DEL", f.key() + ":fence"});
  EXPECT_GT(f.fencing_token(), 0u);
  f.unlock();
  // After a failed lock() the object is usable again.
  admin->command({"DEL", m.key()});
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

TEST_F(MutexTest, UnreachableServerIsATypedErrorWithinTheTimeoutAndUnlockStaysQuiet) {
  client_options o;
  o.connection.port = redislock_test::free_port();
  o.connection.connect_timeout = milliseconds(200);
  client nowhere(o);
  mutex m(nowhere, "nowhere");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(m.lock(), connection_error);
  EXPECT_THROW(m.try_lock_for(seconds(1)), connection_error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(5));
  EXPECT_NO_THROW(m.unlock());
  EXPECT_EQ(m.last_release(), release_status::not_held);
}

TEST_F(MutexTest, ServerLostWhileHoldingReportsFailedRelease) {
  redis_server own;
  client c(client_options{own.options()});
  auto m = std::make_unique<mutex>(c, "lost");
  m->lock();
  own.stop();
  static_assert(noexcept(m->unlock()));
  m->unlock();
  EXPECT_EQ(m->last_release(), release_status::failed);
  EXPECT_FALSE(m->owns_lock());
}

TEST_F(MutexTest, StdGuardsWork) {
  mutex a(*pool, "guard-a"), b(*pool, "guard-b");
  {
    std::lock_guard<mutex> g(a);
    EXPECT_TRUE(a.owns_lock());
  }
  EXPECT_FALSE(a.owns_lock());
  {
    std::unique_lock<mutex> u(a, std::try_to_lock);
    EXPECT_TRUE(u.owns_lock());
    u.unlock();
    EXPECT_TRUE(u.try_lock_for(milliseconds(100)));
  }
  {
    std::scoped_lock both(a, b);
    EXPECT_TRUE(a.owns_lock());
    EXPECT_TRUE(b.owns_lock());
  }
  EXPECT_FALSE(a.owns_lock());
  EXPECT_FALSE(b.owns_lock());
  EXPECT_EQ(a.last_release(), release_status::released);
  EXPECT_EQ(b.last_release(), release_status::released);
}

TEST_F(MutexTest, ScopedLockOfTwoDoesNotDeadlockAgainstTheOppositeOrder) {
  std::atomic<int> done{0};
  auto run = [&](bool reversed) {
    client own(client_options{server->options()});
    mutex x(own, "pair-x"), y(own, "pair-y");
    for (int i = 0; i < 20; ++i) {
      if (reversed) {
        std::scoped_lock g(y, x);
      } else {
        std::scoped_lock g(x, y);
      }
    }
    done.fetch_add(1);
  };
  std::thread t1(run, false), t2(run, true);
  t1.join();
  t2.join();
  EXPECT_EQ(done.load(), 2);
}

// lock() is one SET NX GET PX, unlock() one EVALSHA (the round trips per cycle:
// test_lock_contract.cpp). (Commandstats count SETs inside scripts too, but the uncontended
// release script calls GET, DEL and EXISTS only.)
TEST_F(MutexTest, AnUncontendedCycleIsOneSetAndOneScriptAndMakesNoFence) {
  mutex m(*pool, "cost");
  m.lock();  // warm-up: loads the scripts
  m.unlock();
  admin->command({"CONFIG", "RESETSTAT"});
  constexpr int cycles = 100;
  for (int i = 0; i < cycles; ++i) {
    m.lock();
    m.unlock();
  }
  EXPECT_EQ(command_calls(*admin, "set"), cycles);
  EXPECT_EQ(command_calls(*admin, "evalsha"), cycles);
  EXPECT_EQ(command_calls(*admin, "incr"), 0);  // no fencing token asked for, none made
}

TEST_F(MutexTest, RecoversWhenTheScriptCacheIsFlushed) {
  mutex m(*pool, "flush");
  m.lock();
  admin->command({"SCRIPT", "FLUSH"});
  m.unlock();
  EXPECT_EQ(m.last_release(), release_status::released);
  admin->command({"SCRIPT", "FLUSH"});
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

TEST_F(MutexTest, KeepsWorkingAfterItsConnectionsAreKilled) {
  mutex m(*pool, "killed");
  m.lock();
  admin->command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
  // Idle longer than connection_options::idle_check_after (100 µs): the pool's connection is
  // checked before its next command, so the kill costs the calls nothing.
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  m.unlock();
  EXPECT_EQ(m.last_release(), release_status::released);
  admin->command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

TEST(MutexRestart, KeepsWorkingAfterAServerRestart) {
  redis_server server;
  client c(client_options{server.options()});
  mutex m(c, "restart");
  m.lock();
  const std::uint64_t before = m.fencing_token();
  m.unlock();
  server.restart();  // scripts and keys are gone, the fence counter too
  m.lock();
  // A lost counter starts again from the server's clock: tokens still increase.
  EXPECT_GT(m.fencing_token(), before);
  m.unlock();
  EXPECT_EQ(m.last_release(), release_status::released);
}

// Redis before 7.0 refuses SET with both NX and GET: the mutex then sends SET NX PX and, when
// that fails, asks the queue script who holds the lock. (Here the refusal is simulated.)
TEST_F(MutexTest, WithoutSetNxGetTheMutexStillRecognisesItsOwnAndWrongTypes) {
  mutex m(*pool, "old-redis"), other(*pool, "old-redis");
  detail::mutex_test_access::without_set_get(m);
  ASSERT_TRUE(m.try_lock());
  EXPECT_FALSE(other.try_lock());
  m.unlock();
  EXPECT_EQ(m.last_release(), release_status::released);
  other.lock();
  EXPECT_FALSE(m.try_lock());
  other.unlock();
  // A key of another type is a typed error, not a silent failure.
  admin->command({"HSET", m.key(), "field", "value"});
  EXPECT_THROW(m.try_lock(), wrong_type_error);
  admin->command({"DEL", m.key()});
  // A lost reply: the key already holds our token; the retry takes it as ours, in both forms.
  mutex modern(*pool, "old-redis");
  for (mutex* x : {&m, &modern}) {
    ASSERT_TRUE(x->try_lock());
    const std::string token = get(x->key());
    x->unlock();
    // Tokens are "<the object's random part>:<acquisition number>": the next one is known.
    const std::size_t colon = token.find(':');
    const std::string next = token.substr(0, colon + 1) + std::to_string(std::stoll(token.substr(colon + 1)) + 1);
    admin->command({"SET", x->key(), next, "PX", "1000"});  // as if the reply to its SET had been lost
    EXPECT_TRUE(x->try_lock());
    EXPECT_GT(admin->command({"PTTL", x->key()})->integer, 1000);  // the lease restarted
    x->unlock();
    EXPECT_EQ(x->last_release(), release_status::released);
  }
}

// As Semaphore.AHandOffNoticeReadAfterARefusedAttemptIsNotAHold, for the mutex (the wait is
// detail/object_hold.hpp's, shared): the lock was handed to the frozen waiter, its lease ran
// out, c took the lock; the waiter's next "wait" is refused, and the old notice must not make
// it the holder.
TEST_F(MutexTest, AHandOffNoticeReadAfterARefusedAttemptIsNotAHold) {
  auto freezer = std::make_shared<redislock_test::freeze_at_first_timer_wake>("stale-notice");
  const redislock_test::observer_installed observing(freezer);
  mutex h(*pool, "stale-notice", lease(seconds(20)));
  h.lock();
  redislock::client other(options());
  lock_options short_lease = lease(milliseconds(300));
  short_lease.recheck_interval = milliseconds(100);
  mutex w(other, "stale-notice", short_lease);
  std::future<bool> got = std::async(std::launch::async, [&] { return w.try_lock_for(seconds(3)); });
  std::future<void> frozen = freezer->frozen.get_future();
  ASSERT_EQ(frozen.wait_for(seconds(10)), std::future_status::ready);
  h.unlock();  // hands the lock to w's token and publishes the notice
  EXPECT_FALSE(get(h.key()).empty()) << "not handed to the waiter";
  redislock::client third(options());
  mutex c(third, "stale-notice", lease(seconds(20)));
  bool c_holds = false;
  for (const auto end = std::chrono::steady_clock::now() + seconds(5);
       !c_holds && std::chrono::steady_clock::now() < end;)
    c_holds = c.try_lock();  // once the handed 300 ms lease ran out
  ASSERT_TRUE(c_holds);
  freezer->go.set_value();
  ASSERT_EQ(got.wait_for(seconds(15)), std::future_status::ready);
  const bool w_holds = got.get();
  EXPECT_TRUE(c.still_held());
  EXPECT_FALSE(w_holds && !w.still_held()) << "w believes it holds the mutex while c holds it";
  if (w_holds) w.unlock();
  c.unlock();
}

// As Semaphore.ALateWaitOfAnAbandonedTokenStrandsNoPermit, for the mutex (the queue is
// detail/queue_lua.hpp's, shared): a "wait" of a wait that already left, delayed in the network
// (replayed on the admin connection), queues a token its object no longer uses; the release
// must not hand the lock to it while the same object waits again with its new token.
TEST_F(MutexTest, ALateWaitOfAnAbandonedTokenStrandsNoLock) {
  lock_options o = lease(seconds(20));
  o.recheck_interval = seconds(60);  // only a hand-off wakes the waiter
  mutex holder(*pool, "late-wait", o);
  holder.lock();
  redislock::client c(options());
  mutex w(c, "late-wait", o);
  const std::string stale = redislock::detail::mutex_test_access::token(w);
  EXPECT_FALSE(w.try_lock_for(milliseconds(200)));  // queued, then left: its token rotates
  ASSERT_NE(redislock::detail::mutex_test_access::token(w), stale);
  const std::string key = holder.key();
  reply_ptr r =
      detail::mutex_scripts::queue_attempt().run(*admin, {key, key + ":fence", key + ":queue", key + ":waiters"},
                                                 {stale, "20000", "wait", "0", "2000", key + ":w:"});
  ASSERT_EQ(r->element[0]->integer, 0);
  ASSERT_EQ(admin->command({"ZCARD", key + ":queue"})->integer, 1) << "the late wait did not queue";
  std::future<bool> got = std::async(std::launch::async, [&] { return w.try_lock_for(seconds(3)); });
  for (const auto end = std::chrono::steady_clock::now() + seconds(5);
       admin->command({"ZCARD", key + ":queue"})->integer < 2 && std::chrono::steady_clock::now() < end;)
    std::this_thread::sleep_for(milliseconds(1));
  holder.unlock();
  ASSERT_EQ(got.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(got.get()) << "the lock went to the abandoned token" << (get(key) == stale ? " (it holds it)" : "");
  if (w.owns_lock()) w.unlock();
}

// The uncontended SET NX path, as Semaphore.AnAttemptWhoseReplyWasLostLeavesNoPermitBehindItsObject:
// an attempt that set the key but whose reply was lost, by an object that then goes, must not
// leave the lock on a token nobody will use for its whole lease (20 s).
TEST_F(MutexTest, AnAttemptWhoseReplyWasLostLeavesNoLockBehindItsObject) {
  redislock_test::tcp_proxy proxy(server->port());
  client_options via = options();
  via.connection.port = proxy.port();
  via.connection.connect_timeout = milliseconds(300);
  via.connection.command_timeout = milliseconds(300);
  redislock::client through(via);
  const std::string key = mutex(*pool, "lost-set", lease(seconds(20))).key();
  {
    mutex m(through, "lost-set", lease(seconds(20)));
    ASSERT_TRUE(m.try_lock());  // the connection is made
    m.unlock();
    const long long sets_before = command_calls(*admin, "set");
    proxy.cut_after_next_requests(1);
    EXPECT_ANY_THROW(m.try_lock());
    // (the proxy forwards the request as it cuts: the server may run it after we are told)
    EXPECT_TRUE(redislock_test::eventually([&] { return command_calls(*admin, "set") > sets_before; }))
        << "the SET NX did not run";
  }
  EXPECT_EQ(admin->command({"EXISTS", key})->integer, 0) << "the lost attempt's lock was not released";
  mutex other(*pool, "lost-set", lease(seconds(20)));
  EXPECT_TRUE(other.try_lock_for(seconds(2))) << "the lost attempt's lock stays with an abandoned token";
  if (other.owns_lock()) other.unlock();
}

}  // namespace test_mutex
