// The reentrant and shared mutexes wait like redislock::mutex and renew like it:
// waiters are woken by the release's notice (not by polling) for every transition that
// admits them, sleep no longer than the first blocking lease, honour deadlines; auto_renew
// keeps each kind (and each side of the shared mutex) held past its lease, per owner; a stolen
// hold is reported (lost(), on_lost, lease_expired); the last release stops the renewal.
#include "eventually.hpp"
#include "lost_signal.hpp"
#include "server_fixture.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <thread>

namespace test_lock_kinds_waiting {

using namespace redislock;
using redislock_test::eventually;
using redislock_test::lost_signal;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

/// lock() on a thread of its own (owners are threads), holding until leave(), then unlock().
class own_thread_holder {
 public:
  template <class Lock, class Unlock>
  own_thread_holder(Lock lock, Unlock unlock) {
    done_ = std::async(std::launch::async, [this, lock, unlock]() mutable {
      lock();
      got_.set_value();
      left_.wait_for(seconds(20));
      unlock();
    });
  }
  ~own_thread_holder() { leave(); }
  bool acquired_within(seconds bound) { return acquired_.wait_for(bound) == std::future_status::ready; }
  /// Lets the thread unlock and waits for it; rethrows what lock() threw.
  void leave() {
    if (!done_.valid()) return;
    leave_.set_value();
    done_.get();
  }

 private:
  std::promise<void> got_, leave_;
  std::future<void> acquired_ = got_.get_future(), left_ = leave_.get_future(), done_;
};

struct KindsTest : redislock_test::server_test {
  /// A waiter that looks again only when notified within these tests (recheck_interval is
  /// far beyond their holds), so what they count is the notification alone.
  static lock_options no_recheck(milliseconds lease_ms) {
    lock_options o = lease(lease_ms);
    o.recheck_interval = seconds(60);
    return o;
  }

  /// Waits (bounded) until a waiter of `key`'s lock subscribed, then keeps the lock held for
  /// 1.5 s: a polling waiter (retry_max 100 ms) would send well over a dozen attempts.
  void hold_while_subscribed(const std::string& key) {
    ASSERT_TRUE(eventually([&] { return subscribers(key + ":released") == 1; }));
    std::this_thread::sleep_for(milliseconds(1500));
  }
  /// The same for a shared lock, whose waiters queue on the server (each on its own channel).
  void hold_while_queued(const std::string& key) {
    ASSERT_TRUE(eventually([&] { return queued(key) == 1; }));
    std::this_thread::sleep_for(milliseconds(1500));
  }
  long long queued(const std::string& key) { return admin->command({"ZCARD", key + ":squeue"})->integer; }

  /// Calls release(); the waiter must get in, woken by it: before, the waiter (and the
  /// holders) sent at most `sent_before` EVALSHAs since reset_stats(); after, only the release
  /// and one woken attempt are sent.
  template <class Release>
  void expect_woken_by(Release release, own_thread_holder& waiter, client& waiter_client, long long sent_before) {
    const long long before_release = evalsha();
    release();
    ASSERT_TRUE(waiter.acquired_within(seconds(5)));
    EXPECT_LE(before_release, sent_before) << "the waiter polled while the lock was held";
    EXPECT_LE(evalsha() - before_release, 2) << "release + one woken attempt";
    EXPECT_EQ(waiter_client.wait_stats().wakeups, 1u);
    EXPECT_EQ(waiter_client.wait_stats().fallback_waits, 0u);
    waiter.leave();
  }

  /// The server's clock in ms (for writing a holder's lease end by hand).
  long long server_now_ms() {
    reply_ptr t = admin->command({"TIME"});
    return std::stoll(t->element[0]->str) * 1000 + std::stoll(t->element[1]->str) / 1000;
  }
};

lock_options renewed(milliseconds lease) {
  lock_options o;
  o.lease = lease;
  o.auto_renew = true;
  return o;
}

/// Asserts for 3 x lease (by the clock) that attempt() keeps failing, pacing the attempts.
template <class Attempt>
void keeps_failing(milliseconds lease, Attempt attempt) {
  const steady::time_point start = steady::now();
  int attempts = 0;
  while (steady::now() - start < 3 * lease) {
    ASSERT_FALSE(attempt()) << "lost the lock after " << (steady::now() - start).count() << " ns";
    ++attempts;
    std::this_thread::sleep_for(milliseconds(20));  // pacing only: every attempt must fail
  }
  EXPECT_GT(attempts, 0);
}

}  // namespace

// --- waking ---------------------------------------------------------------------------------

TEST_F(KindsTest, AReentrantWaiterIsWokenByTheLastReleaseNotByPolling) {
  client waiter_client(options());
  reentrant_mutex holder(*pool, "r-wake", lease(seconds(20)));
  reentrant_mutex waiter(waiter_client, "r-wake", no_recheck(seconds(20)));
  holder.lock();  // a first cycle loads the scripts: the counts below are EVALSHA only
  holder.unlock();
  holder.lock();
  holder.lock();
  reset_stats();
  own_thread_holder waited([&] { waiter.lock(); }, [&] { waiter.unlock(); });
  // It waits in the lock's queue, on a channel of its own (reentrant_scripts.hpp).
  ASSERT_TRUE(eventually([&] { return admin->command({"ZCARD", holder.key() + ":rqueue"})->integer == 1; }));
  std::this_thread::sleep_for(milliseconds(1500));                      // the hold (see hold_while_subscribed)
  holder.unlock();                                                      // nested: still held, nothing handed over
  expect_woken_by([&] { holder.unlock(); }, waited, waiter_client, 3);  // 2 attempts + the nested release
}

TEST_F(KindsTest, ASharedReaderIsWokenWhenTheWriterLeaves) {
  client waiter_client(options());
  shared_mutex writer(*pool, "s-wake-r", lease(seconds(20)));
  shared_mutex reader(waiter_client, "s-wake-r", no_recheck(seconds(20)));
  reader.lock_shared();  // loads the scripts
  reader.unlock_shared();
  writer.lock();
  writer.unlock();
  writer.lock();
  reset_stats();
  own_thread_holder waited([&] { reader.lock_shared(); }, [&] { reader.unlock_shared(); });
  hold_while_queued(writer.key());
  expect_woken_by([&] { writer.unlock(); }, waited, waiter_client, 2);
}

TEST_F(KindsTest, ASharedWriterIsWokenWhenTheLastReaderLeaves) {
  client waiter_client(options());
  lock_options patient = no_recheck(seconds(20));
  shared_mutex r1(*pool, "s-wake-w", lease(seconds(20))), r2(*pool, "s-wake-w", lease(seconds(20)));
  shared_mutex writer(waiter_client, "s-wake-w", patient);
  writer.lock();  // loads the scripts
  writer.unlock();
  r1.lock_shared();
  r1.unlock_shared();
  r1.lock_shared();
  r2.lock_shared();
  reset_stats();
  own_thread_holder waited([&] { writer.lock(); }, [&] { writer.unlock(); });
  hold_while_queued(r1.key());
  r1.unlock_shared();  // a reader is still inside: nothing handed over, the writer sleeps on
  EXPECT_FALSE(waited.acquired_within(seconds(0)));
  expect_woken_by([&] { r2.unlock_shared(); }, waited, waiter_client, 3);  // 2 attempts + r1's release
}

TEST_F(KindsTest, AWaitingWriterSendsNothingWhileTheReadersHold) {
  lock_options o;
  o.wait_lease = milliseconds(900);  // no refresh of a "writer waiting" marker any more
  o.recheck_interval = seconds(60);
  shared_mutex reader(*pool, "s-refresh"), writer(*pool, "s-refresh", o);
  reader.lock_shared();
  EXPECT_FALSE(writer.try_lock());  // loads the script
  reset_stats();
  EXPECT_FALSE(writer.try_lock_for(milliseconds(1500)));
  // A try, the attempt that queues once subscribed, the "leave" at the deadline.
  EXPECT_LE(evalsha(), 3) << "the waiting writer polled";
  EXPECT_EQ(queued(reader.key()), 0) << "the writer that gave up is still queued";
  reader.unlock_shared();
}

TEST_F(KindsTest, AWriterSleepsOnlyUntilTheFirstBlockingLeaseMayLapse) {
  // A crashed reader (its hold written by hand, lease 600 ms) and a live one (20 s). The live
  // one leaves: nothing is published (a hold remains); the crashed one lapses unannounced. The
  // writer must get in when the short lease ends, not when the long one would have.
  lock_options patient;
  patient.recheck_interval = seconds(60);
  shared_mutex live(*pool, "s-first", lease(seconds(20))), writer(*pool, "s-first", patient);
  live.lock_shared();
  const std::string ghost = "ghost:1";
  admin->command({"HSET", live.key(), "r:" + ghost, "1", "x:" + ghost, std::to_string(server_now_ms() + 600)});
  const steady::time_point start = steady::now();
  auto waited = std::async(std::launch::async, [&] { return writer.try_lock_for(seconds(10)); });
  ASSERT_TRUE(eventually([&] { return queued(live.key()) == 1; }));
  live.unlock_shared();
  ASSERT_EQ(waited.wait_for(seconds(15)), std::future_status::ready);
  ASSERT_TRUE(waited.get());
  EXPECT_GE(steady::now() - start, milliseconds(550));
  EXPECT_LT(steady::now() - start, seconds(5)) << "slept towards the 20 s lease, not the first one";
  writer.unlock();
}

TEST_F(KindsTest, AnExpiredReentrantHoldWakesTheWaiterThoughNothingIsPublished) {
  reentrant_mutex waiter(*pool, "r-abandoned");
  admin->command({"HSET", waiter.key(), "@kind", "reentrant", "crashed:1", "1"});
  admin->command({"PEXPIRE", waiter.key(), "400"});
  reset_stats();
  const steady::time_point start = steady::now();
  ASSERT_TRUE(waiter.try_lock_for(seconds(5)));
  EXPECT_GE(steady::now() - start, milliseconds(350));
  EXPECT_LE(evalsha(), 6) << "slept until the holder's PTTL ran out, not polled";
  waiter.unlock();
}

// A timed wait sleeps subscribed and makes at most three attempts (its deadline, to the
// millisecond, for every kind: test_lock_contract.cpp).
TEST_F(KindsTest, ATimedWaitSleepsSubscribedAndMakesAtMostThreeAttempts) {
  reentrant_mutex r_holder(*pool, "r-deadline", lease(seconds(20))), r_waiter(*pool, "r-deadline");
  shared_mutex s_holder(*pool, "s-deadline", lease(seconds(20))), s_waiter(*pool, "s-deadline");
  r_holder.lock();
  EXPECT_FALSE(r_waiter.try_lock());  // loads the scripts
  s_holder.lock_shared();
  EXPECT_FALSE(s_waiter.try_lock());
  auto timed = [&](auto&& attempt) {
    reset_stats();
    EXPECT_FALSE(attempt());
    EXPECT_LE(evalsha(), 3) << "one timed wait: at most three attempts";
  };
  timed([&] { return r_waiter.try_lock_for(milliseconds(300)); });
  timed([&] { return s_waiter.try_lock_for(milliseconds(300)); });
  s_holder.unlock_shared();
  s_holder.lock();
  timed([&] { return s_waiter.try_lock_shared_until(std::chrono::system_clock::now() + milliseconds(300)); });
  // The reentrant waiter's channel and the shared waiter's own, kept between its two waits.
  EXPECT_GE(pool->wait_stats().subscriptions, 2u);
  EXPECT_EQ(pool->wait_stats().fallback_waits, 0u);
  s_holder.unlock();
  r_holder.unlock();
}

// --- renewal --------------------------------------------------------------------------------

TEST_F(KindsTest, AutoRenewKeepsAReentrantLockForThreeTimesItsLeaseOneRenewalPerOwner) {
  const milliseconds lease(900);
  reentrant_mutex holder(*pool, "r-long", renewed(lease)), other(*pool, "r-long");
  holder.lock();
  holder.lock();  // nested: the same owner, the same renewal
  EXPECT_EQ(pool->watchdog().stats().registered, 1u);
  keeps_failing(lease, [&] { return other.try_lock(); });
  EXPECT_TRUE(holder.still_held());
  EXPECT_FALSE(holder.lost());
  EXPECT_GE(pool->watchdog().stats().renewals, 2u);
  EXPECT_EQ(holder.unlock_and_report(), release_status::released);
  EXPECT_EQ(pool->watchdog().stats().registered, 1u) << "a nested release keeps renewing";
  EXPECT_EQ(holder.unlock_and_report(), release_status::released);
  EXPECT_EQ(pool->watchdog().stats().registered, 0u);
}

TEST_F(KindsTest, AutoRenewKeepsEachSideOfASharedLockForThreeTimesItsLease) {
  const milliseconds lease(900);
  shared_mutex holder(*pool, "s-long", renewed(lease)), other(*pool, "s-long");
  holder.lock();
  EXPECT_EQ(pool->watchdog().stats().registered, 1u);
  keeps_failing(lease, [&] { return other.try_lock_shared(); });
  EXPECT_TRUE(holder.still_held());
  EXPECT_FALSE(holder.lost());
  ASSERT_TRUE(holder.try_lock_shared());  // downgrade: the read hold is renewed separately
  ASSERT_TRUE(holder.try_lock_shared());  // nested read: no second renewal
  EXPECT_EQ(pool->watchdog().stats().registered, 2u);
  EXPECT_EQ(holder.unlock_and_report(), release_status::released);
  EXPECT_EQ(pool->watchdog().stats().registered, 1u);
  keeps_failing(lease, [&] { return other.try_lock(); });
  EXPECT_TRUE(holder.still_held_shared());
  EXPECT_FALSE(holder.lost_shared());
  EXPECT_EQ(holder.unlock_shared_and_report(), release_status::released);
  EXPECT_EQ(pool->watchdog().stats().registered, 1u);
  EXPECT_EQ(holder.unlock_shared_and_report(), release_status::released);
  EXPECT_EQ(pool->watchdog().stats().registered, 0u);
  EXPECT_TRUE(other.try_lock());
  other.unlock();
}

TEST_F(KindsTest, AStolenReentrantHoldIsReportedLost) {
  lost_signal signal;
  reentrant_mutex m(*pool, "r-stolen", signal.options(milliseconds(900)));
  m.lock();
  m.lock();
  EXPECT_FALSE(m.lost());
  admin->command({"HDEL", m.key(), m.owner_id()});  // as if the lease had run out
  ASSERT_TRUE(signal.wait());
  EXPECT_EQ(signal.name, "r-stolen");
  EXPECT_TRUE(m.lost());
  EXPECT_EQ(m.hold_count(), 2);  // still to be released by its owner
  EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
  EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
  EXPECT_EQ(pool->watchdog().stats().registered, 0u);
  // The next outermost acquisition starts afresh.
  m.lock();
  EXPECT_FALSE(m.lost());
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
}

TEST_F(KindsTest, AStolenSharedHoldIsReportedLostOnItsSideOnly) {
  for (const bool write : {true, false}) {
    lost_signal signal;
    shared_mutex m(*pool, "s-stolen", signal.options(milliseconds(900)));
    m.lock();
    m.lock_shared();  // both sides held and renewed
    admin->command({"HDEL", m.key(), write ? "@w" : "r:" + m.owner_id()});
    ASSERT_TRUE(signal.wait()) << "write side: " << write;
    EXPECT_EQ(m.lost(), write);
    EXPECT_EQ(m.lost_shared(), !write);
    EXPECT_EQ(m.unlock_and_report(), write ? release_status::lease_expired : release_status::released);
    EXPECT_EQ(m.unlock_shared_and_report(), write ? release_status::released : release_status::lease_expired);
    EXPECT_EQ(pool->watchdog().stats().registered, 0u);
  }
  EXPECT_EQ(pool->watchdog().stats().lost, 2u);
}

// Each side of a shared lock has its own lease: extend_shared() answering false marks the read
// side lost, not the write side (the same rule for every kind: test_lock_contract.cpp).
TEST_F(KindsTest, ExtendSharedAnsweringFalseMarksOnlyTheReadSideLost) {
  shared_mutex s(*pool, "s-extend");
  s.lock_shared();
  EXPECT_TRUE(s.extend_shared());
  admin->command({"DEL", s.key()});
  EXPECT_FALSE(s.extend_shared());
  EXPECT_TRUE(s.lost_shared());
  EXPECT_FALSE(s.lost());
  EXPECT_EQ(s.unlock_shared_and_report(), release_status::lease_expired);
}

TEST_F(KindsTest, TheLastReleaseStopsTheRenewal) {
  // Renewing a released hold would answer "not ours" and report it lost: after the releases,
  // another lock is renewed three times (a whole lease passes) and nothing is found lost.
  lost_signal signal;
  const milliseconds lease(300);
  reentrant_mutex r(*pool, "r-stop", signal.options(lease));
  shared_mutex s(*pool, "s-stop", signal.options(lease));
  r.lock();
  s.lock();
  s.lock_shared();
  EXPECT_EQ(r.unlock_and_report(), release_status::released);
  EXPECT_EQ(s.unlock_and_report(), release_status::released);
  EXPECT_EQ(s.unlock_shared_and_report(), release_status::released);
  EXPECT_EQ(pool->watchdog().stats().registered, 0u);
  mutex witness(*pool, "witness", renewed(lease));
  witness.lock();
  const std::uint64_t before = pool->watchdog().stats().renewals;
  ASSERT_TRUE(pool->watchdog().wait_for_stats(seconds(20),
                                              [&](const watchdog_stats& st) { return st.renewals >= before + 3; }));
  EXPECT_EQ(pool->watchdog().stats().lost, 0u);
  EXPECT_EQ(signal.calls.load(), 0);
  EXPECT_EQ(admin->command({"EXISTS", r.key()})->integer, 0);
  EXPECT_EQ(admin->command({"EXISTS", s.key()})->integer, 0);
  witness.unlock();
}

TEST_F(KindsTest, AWriterLeavingWakesEveryWaitingReaderOfTheClient) {
  // One client, three reader objects waiting behind a writer with a long lease: the writer's
  // release must let all of them in at once, not one per release.
  client c(options());
  shared_mutex writer(c, "all-readers", lease(seconds(30)));
  writer.lock();
  std::vector<std::unique_ptr<shared_mutex>> readers;
  std::vector<std::future<void>> entered;
  std::promise<void> leave;
  std::shared_future<void> may_leave = leave.get_future().share();
  for (int i = 0; i < 3; ++i) readers.push_back(std::make_unique<shared_mutex>(c, "all-readers", lease(seconds(30))));
  reset_stats();
  for (auto& r : readers)
    entered.push_back(std::async(std::launch::async, [&r, may_leave] {
      r->lock_shared();
      may_leave.wait_for(seconds(20));  // every reader holds until all three are inside
      r->unlock_shared();
    }));
  // Every reader queued on the server (each subscribed on its own channel first).
  ASSERT_TRUE(eventually([&] { return queued(writer.key()) == 3; }, seconds(10)));
  writer.unlock();
  const auto all_inside = [&] {
    return admin->command({"HLEN", writer.key()})->integer >= 1 + 2 * 3;  // @kind + r:/x: per reader
  };
  EXPECT_TRUE(eventually(all_inside, seconds(10))) << "readers were admitted one release at a time";
  leave.set_value();
  for (auto& e : entered) EXPECT_EQ(e.wait_for(seconds(20)), std::future_status::ready);
}

TEST_F(KindsTest, ExtendShorterThanTheRenewedLeaseIsRefused) {
  lock_options o = lease(seconds(3));
  o.auto_renew = true;
  mutex m(*pool, "short-extend", o);
  reentrant_mutex r(*pool, "short-extend-r", o);
  shared_mutex s(*pool, "short-extend-s", o);
  m.lock();
  r.lock();
  s.lock_shared();
  EXPECT_THROW(m.extend(seconds(1)), invalid_argument);  // would lapse before the next renewal
  EXPECT_THROW(r.extend(seconds(1)), invalid_argument);
  EXPECT_THROW(s.extend_shared(seconds(1)), invalid_argument);
  EXPECT_TRUE(m.extend(seconds(5)));
  s.unlock_shared();
  r.unlock();
  m.unlock();
}

}  // namespace test_lock_kinds_waiting
