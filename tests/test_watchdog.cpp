// The lease watchdog: one thread per client, started lazily; renewal keeps a lock past its
// lease; release stops renewal at once (and never lets a callback of a released lock run);
// 10,000 locks are renewed in pipelined batches without falling behind.
#include "eventually.hpp"
#include "lost_signal.hpp"
#include "server_fixture.hpp"
#include "tcp_proxy.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace test_watchdog {

using namespace redislock;
using redislock_test::command_calls;
using redislock_test::redis_server;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

struct WatchdogTest : redislock_test::server_test {
  static lock_options renewed(milliseconds lease) {
    lock_options o;
    o.lease = lease;
    o.auto_renew = true;
    return o;
  }
};

}  // namespace

TEST_F(WatchdogTest, TheThreadStartsWithTheFirstAutoRenewLock) {
  mutex plain(*pool, "plain");
  plain.lock();
  plain.unlock();
  EXPECT_FALSE(pool->watchdog().running());
  mutex renewing(*pool, "renewing", renewed(seconds(10)));
  renewing.lock();
  EXPECT_TRUE(pool->watchdog().running());
  EXPECT_EQ(pool->watchdog().stats().registered, 1u);
  renewing.unlock();
  EXPECT_EQ(pool->watchdog().stats().registered, 0u);
}

TEST_F(WatchdogTest, AutoRenewKeepsALockForThreeTimesItsLease) {
  const milliseconds lease(1000);
  mutex holder(*pool, "long-job", renewed(lease)), other(*pool, "long-job");
  holder.lock();
  const steady::time_point start = steady::now();
  int attempts = 0;
  while (steady::now() - start < 3 * lease) {  // bounded by the clock, not by an event
    ASSERT_FALSE(other.try_lock()) << "lost the lock after " << (steady::now() - start).count() << " ns";
    ++attempts;
    std::this_thread::sleep_for(milliseconds(20));  // pacing only: every attempt must fail
  }
  EXPECT_GT(attempts, 0);
  EXPECT_TRUE(holder.still_held());
  EXPECT_FALSE(holder.lost());
  EXPECT_GE(pool->watchdog().stats().renewals, 2u);
  EXPECT_EQ(holder.unlock_and_report(), release_status::released);
}

TEST_F(WatchdogTest, ABatchRefusedWithNoscriptLoadsTheScriptAndRetries) {
  mutex m(*pool, "flushed", renewed(milliseconds(900)));
  m.lock();
  admin->command({"SCRIPT", "FLUSH"});
  const std::uint64_t before = pool->watchdog().stats().renewals;
  ASSERT_TRUE(pool->watchdog().wait_for_stats(
      seconds(20), [&](const watchdog_stats& s) { return s.renewals >= before + 2 || s.lost > 0; }));
  EXPECT_FALSE(m.lost());
  EXPECT_EQ(pool->watchdog().stats().failures, 0u);
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
}

TEST_F(WatchdogTest, ReleaseAndDestructionStopRenewalAtOnce) {
  {
    mutex m(*pool, "stopped", renewed(milliseconds(300)));
    m.lock();
    EXPECT_EQ(m.unlock_and_report(), release_status::released);
    EXPECT_EQ(pool->watchdog().stats().registered, 0u);
    m.lock();  // a fresh acquisition of the same object: renewed again, not lost
    EXPECT_EQ(pool->watchdog().stats().registered, 1u);
    EXPECT_FALSE(m.lost());
  }  // destroyed while held
  EXPECT_EQ(pool->watchdog().stats().registered, 0u);
  EXPECT_EQ(admin->command({"EXISTS", "redislock:{stopped}"})->integer, 0);
}

// Threads lock and release their own objects over and over with a lease so short that
// renewals are nearly always in flight, while a thief briefly overwrites held keys so that
// renewals find locks lost (on_lost) just as their holders release them. Whatever the
// timing: no on_lost runs after its lock's release returned (release waits for a renewal in
// flight and its callback), and every registration is gone at the end. Run under TSan too.
TEST_F(WatchdogTest, ReleaseRacingRenewalNeverLetsTheReleasedLockBeTouched) {
  constexpr int threads = 4, rounds = 100;
  std::atomic<int> late_callbacks{0}, callbacks{0}, running{threads};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::minstd_rand rng(static_cast<unsigned>(t));
      for (int i = 0; i < rounds; ++i) {
        // A fresh object per round, so each callback knows whose acquisition it reports.
        auto released = std::make_shared<std::atomic<bool>>(false);
        lock_options o = renewed(milliseconds(45));
        o.on_lost = [&callbacks, &late_callbacks, released](const std::string&) {
          ++callbacks;
          std::this_thread::sleep_for(milliseconds(2));  // widens the window for a racing release
          if (released->load()) ++late_callbacks;
        };
        {
          mutex m(*pool, "race-" + std::to_string(t % 2), o);  // two objects per name: contention too
          if (!m.try_lock_for(seconds(10))) {
            ADD_FAILURE() << "no acquisition within 10 s";
            break;
          }
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 30000));  // the critical section
          if (i % 2 == 0) {  // even rounds release explicitly, odd ones by the destructor
            const release_status st = m.unlock_and_report();
            EXPECT_TRUE(st == release_status::released || st == release_status::lease_expired) << to_string(st);
          }
        }
        released->store(true);
      }
      --running;
    });
  }
  connection thief(server->options());
  while (running.load() > 0) {  // ends when the workers do (each is bounded)
    for (const char* key : {"redislock:{race-0}", "redislock:{race-1}"})
      thief.command({"SET", key, "thief", "PX", "5", "XX"});
    std::this_thread::sleep_for(milliseconds(20));  // pacing only
  }
  for (auto& w : workers) w.join();
  std::cout << callbacks.load() << " leases lost on the way, " << pool->watchdog().stats().renewals << " renewals\n";
  EXPECT_EQ(late_callbacks.load(), 0) << "of " << callbacks.load() << " callbacks";
  const watchdog_stats s = pool->watchdog().stats();
  EXPECT_EQ(s.registered, 0u);
  EXPECT_GT(s.renewals, 0u);
}

TEST_F(WatchdogTest, ClientsStartAndStopTheirWatchdogCleanly) {
  for (int i = 0; i < 10; ++i) {
    client c(client_options{server->options()});
    // A lease long enough that its first renewal (due at lease/3) lands in time even under
    // TSan on a loaded machine: a lost lease is never renewed and the wait below would fail.
    mutex m(c, "start-stop", renewed(milliseconds(900)));
    m.lock();
    ASSERT_TRUE(c.watchdog().wait_for_stats(seconds(20), [](const watchdog_stats& s) { return s.renewals >= 1; }));
    m.unlock();
  }  // ~client joins a thread that may be asleep or mid-batch
}

// Renewing N locks costs about N / max_batch round trips per tick, counted on the server.
TEST_F(WatchdogTest, TenThousandLocksAreRenewedInPipelinedBatchesWithoutFallingBehind) {
  constexpr std::size_t n = 10000, acquirers = 4;
  const milliseconds lease(6000);
  std::vector<std::unique_ptr<mutex>> locks(n);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < acquirers; ++t)
    threads.emplace_back([&, t] {
      for (std::size_t i = t; i < n; i += acquirers) {
        locks[i] = std::make_unique<mutex>(*pool, "many-" + std::to_string(i), renewed(lease));
        locks[i]->lock();
      }
    });
  for (auto& t : threads) t.join();

  watchdog& dog = pool->watchdog();
  const watchdog_stats s0 = dog.stats();
  // A renewal is one EVALSHA, or one SET (IFEQ) where the server has it (docs/servers.md).
  const auto renewal_commands = [&] { return command_calls(*admin, "evalsha") + command_calls(*admin, "set"); };
  const long long evalsha0 = renewal_commands();
  ASSERT_TRUE(
      dog.wait_for_stats(seconds(120), [&](const watchdog_stats& s) { return s.renewals >= s0.renewals + 2 * n; }));
  const watchdog_stats s1 = dog.stats();
  const long long evalsha1 = renewal_commands();

  const std::uint64_t renewals = s1.renewals - s0.renewals, batches = s1.batches - s0.batches;
  const std::uint64_t ticks = s1.ticks - s0.ticks;
  const auto evalsha = static_cast<std::uint64_t>(evalsha1 - evalsha0);
  std::cout << "renewed " << renewals << " leases of " << n << " locks in " << ticks << " ticks, " << batches
            << " batches, " << evalsha << " EVALSHA or SET IFEQ; last tick " << s1.last_tick.count() << " us, longest "
            << s1.max_tick.count() << " us, worst lateness " << s1.max_late.count() << " us\n";
  // What must always hold, however slow the machine: every lease was renewed before it ran
  // out (no failure, none lost) ...
  EXPECT_EQ(s1.failures, 0u);
  EXPECT_EQ(s1.lost, 0u);
  for (auto& m : locks) EXPECT_FALSE(m->lost());
  // ... each renewal is one command (batches in flight around either snapshot, or sent between
  // a snapshot and the server's count, make the two differ by at most two batches) ...
  EXPECT_GE(evalsha + 2 * watchdog::max_batch, renewals);
  EXPECT_LE(evalsha, renewals + 2 * watchdog::max_batch);
  // ... and renewals travel pipelined, not one round trip each. How tightly they pack depends
  // on scheduling (renewals falling due during a slow tick go in extra pipelines), so only a
  // generous bound is asserted: 50 renewals per pipeline on average. The packing itself is
  // measured by bench/watchdog_renewal.cpp.
  EXPECT_LE(batches * 50, renewals);
}

// A hand-off counts the new hold's lease from the waiter's last "wait" attempt, which can be
// up to recheck_interval old: with a shorter lease, the hold would start out as lost() by
// the clock (the watchdog counts from that send time). The mutex confirms such a stale hold
// with one owner-checked extend before renewing it, so it starts out valid and renewed.
TEST_F(WatchdogTest, AHandOffAfterALongWaitStartsAValidRenewedHold) {
  mutex holder(*pool, "long-wait");
  lock_options o = renewed(milliseconds(900));
  o.recheck_interval = seconds(20);  // the waiter's last "wait" is as old as the hold
  mutex waiter(*pool, "long-wait", o);
  holder.lock();
  std::atomic<bool> acquired{false};
  std::thread t([&] { acquired = waiter.try_lock_for(seconds(30)); });
  ASSERT_TRUE(redislock_test::eventually(
      [&] {
        return admin->command({"ZCARD", "redislock:{long-wait}:queue"})->integer == 1;
      },
      seconds(20)));
  std::this_thread::sleep_for(milliseconds(1500));  // lets the waiter's queue attempt age past its lease
  holder.unlock();
  t.join();
  ASSERT_TRUE(acquired.load());
  EXPECT_FALSE(waiter.lost());
  EXPECT_TRUE(waiter.still_held());
  ASSERT_TRUE(pool->watchdog().wait_for_stats(seconds(20),
                                              [](const watchdog_stats& s) { return s.renewals >= 1 || s.lost > 0; }));
  EXPECT_FALSE(waiter.lost());
  EXPECT_EQ(waiter.unlock_and_report(), release_status::released);
}

// An extend() whose answer comes only after the lease it continued may have run out (its reply
// held back by the proxy; the server ran it at once): lost() has said so by the clock, and the
// watchdog, which held this hold's renewals back meanwhile, must still report it with on_lost
// at once (as for a renewal confirmed that late), not at its next renewal, a third of the new lease on.
TEST_F(WatchdogTest, AnExtendConfirmedAfterTheLeaseRanOutIsReportedLost) {
  redislock_test::tcp_proxy proxy(server->port());
  client_options co{server->options()};
  co.connection.port = proxy.port();
  client c(co);
  redislock_test::lost_signal signal;
  mutex m(c, "late-extend", signal.options(milliseconds(600)));
  m.lock();
  // Also asks the connection's features (a round trip of its own), before replies are held
  // back; the next renewal is due 200 ms on: none is in flight while the extend is.
  ASSERT_TRUE(m.extend(milliseconds(600)));
  proxy.set_stalled(true, redislock_test::tcp_proxy::direction::to_client);
  auto extended = std::async(std::launch::async, [&] { return m.extend(seconds(30)); });
  EXPECT_TRUE(redislock_test::eventually([&] { return m.lost(); }, seconds(5))) << "600 ms without a confirmation";
  proxy.set_stalled(false, redislock_test::tcp_proxy::direction::to_client);
  EXPECT_TRUE(extended.get());  // the server ran it while the key was there
  EXPECT_TRUE(m.lost());        // a lost lease stays lost
  EXPECT_TRUE(signal.wait(seconds(2))) << "lost() said so; on_lost waits for the next renewal, 10 s on";
  EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
}

// A's on_lost (on the watchdog thread) releases B while another thread's B.extend() waits for
// the batch B's renewal is in, the batch whose callbacks are running: the release must not wait
// for that extend (nor the extend for the release), or neither ever returns. (Here on_lost
// gives up after 2 s, which ends the batch and so the wait.)
TEST_F(WatchdogTest, AReleaseFromAnOnLostIsNotHeldUpByAnExtendWaitingForTheSameBatch) {
  mutex b(*pool, "released-from-callback", renewed(milliseconds(600)));
  std::thread extender, releaser;
  std::promise<void> extending, released, called;
  std::future<void> extend_started = extending.get_future(), release_done = released.get_future();
  std::atomic<bool> extended{false}, released_in_time{false};
  lock_options ao = renewed(milliseconds(600));
  ao.on_lost = [&](const std::string&) {
    extender = std::thread([&] {
      extending.set_value();
      extended = b.extend(milliseconds(600));  // B is in this batch: it waits for the batch to end
    });
    extend_started.wait();
    std::this_thread::sleep_for(milliseconds(50));  // into its wait (if not, the test passes anyway)
    releaser = std::thread([&] {
      b.unlock();
      released.set_value();
    });
    released_in_time = release_done.wait_for(seconds(2)) == std::future_status::ready;
    called.set_value();
  };
  mutex a(*pool, "lost-in-callback", ao);
  a.lock();
  b.lock();  // B becomes eligible (100 ms on) before A is due (200 ms on): one batch
  admin->command({"DEL", a.key()});
  ASSERT_EQ(called.get_future().wait_for(seconds(10)), std::future_status::ready) << "on_lost never ran";
  extender.join();
  releaser.join();
  EXPECT_TRUE(released_in_time) << "B.unlock() in A's on_lost waited for B.extend(), which waited for the callback";
  EXPECT_EQ(b.last_release(), release_status::released);
  a.unlock();
}

// An extend() of B from A's on_lost (on the watchdog thread, which cannot wait for B's batch)
// to a shorter lease than B's renewals send (after a longer extend): what B counts on must
// follow the shorter lease, never stay with the longer one while the server's key runs out.
TEST_F(WatchdogTest, AnExtendFromAnOnLostIsCountedWithItsLease) {
  mutex b(*pool, "extended-from-callback", renewed(milliseconds(300)));
  std::promise<void> called;
  std::optional<steady::time_point> counted;
  long long pttl = -3;
  steady::time_point server_end;
  lock_options ao = renewed(milliseconds(300));
  ao.on_lost = [&](const std::string&) {
    if (b.extend(milliseconds(300))) {
      counted = b.lease_confirmed_until();
      connection probe(server->options());
      pttl = probe.command({"PTTL", b.key()})->integer;
      server_end = steady::now() + milliseconds(pttl);
    }
    called.set_value();
  };
  mutex a(*pool, "lost-before-extend", ao);
  b.lock();
  ASSERT_TRUE(b.extend(seconds(6)));  // B's renewals send 6 s from now on (the next one 2 s on)
  a.lock();
  admin->command({"DEL", a.key()});
  ASSERT_EQ(called.get_future().wait_for(seconds(10)), std::future_status::ready) << "on_lost never ran";
  ASSERT_TRUE(counted.has_value());
  EXPECT_LE(*counted, server_end + milliseconds(50))
      << "counted on " << std::chrono::duration_cast<milliseconds>(*counted - server_end).count()
      << " ms past the server's end (PTTL " << pttl << " ms)";
  b.unlock();
  a.unlock();
}

}  // namespace test_watchdog
