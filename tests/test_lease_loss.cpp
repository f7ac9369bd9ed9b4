// Losing a lease: a paused holder (SIGSTOP), a lock taken over, renewals failing until the
// lease ran out, a restarted server, and extend() answering false. The holder must learn it
// (lost(), on_lost, release_status::lease_expired) and must never disturb the next holder.
#include "eventually.hpp"
#include "lost_signal.hpp"
#include "redis_keys.hpp"
#include "redis_server.hpp"
#include "tcp_proxy.hpp"
#include "worker_process.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace test_lease_loss {

using namespace redislock;
using redislock_test::lost_signal;
using redislock_test::redis_server;
using redislock_test::worker_process;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {}  // namespace

TEST(LeaseLoss, APausedHolderLosesTheLockAndItsLateReleaseLeavesTheNextHolderAlone) {
  redis_server server;
  worker_process holder(REDISLOCK_TEST_WORKER, {"renew", std::to_string(server.port()), "paused", "1000"});
  const std::string acquired = holder.acquired();
  ASSERT_FALSE(acquired.empty());
  const std::uint64_t holder_fence = std::stoull(acquired);

  client c(client_options{server.options()});
  mutex next(c, "paused");
  EXPECT_FALSE(next.try_lock());
  holder.signal(SIGSTOP);                       // a GC pause / a stalled VM: the watchdog thread stops too
  ASSERT_TRUE(next.try_lock_for(seconds(20)));  // once the paused holder's lease ran out
  EXPECT_GT(next.fencing_token(), holder_fence);
  holder.signal(SIGCONT);

  EXPECT_EQ(holder.read_line(), "lost 1");
  EXPECT_EQ(holder.read_line(), "release lease_expired");
  EXPECT_EQ(holder.wait_for(seconds(20)), 0);
  EXPECT_TRUE(next.still_held());  // the late release did not delete the new holder's key
  EXPECT_EQ(next.unlock_and_report(), release_status::released);
}

TEST(LeaseLoss, TheWatchdogFindsALockTakenOver) {
  redis_server server;
  client c(client_options{server.options()});
  connection admin = server.admin();
  lost_signal signal;
  mutex m(c, "taken", signal.options(milliseconds(900)));
  m.lock();
  EXPECT_FALSE(m.lost());
  admin.command({"SET", m.key(), "someone-else"});  // as if the lease had run out and been taken
  ASSERT_TRUE(signal.wait(seconds(20)));
  EXPECT_EQ(signal.name, "taken");
  EXPECT_TRUE(m.lost());
  EXPECT_TRUE(m.owns_lock());  // still to be released by its owner
  EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
  EXPECT_EQ(redislock_test::string_value(admin, m.key()), "someone-else");
  const watchdog_stats s = c.watchdog().stats();
  EXPECT_EQ(s.lost, 1u);
  EXPECT_EQ(s.registered, 0u);
}

TEST(LeaseLoss, RenewalsFailingUntilTheLeaseRanOutMarkItLost) {
  redis_server server;
  client_options o{server.options()};
  o.connection.command_timeout = milliseconds(100);
  o.pool_wait_timeout = milliseconds(100);
  client c(o);
  lost_signal signal;
  const milliseconds lease(600);
  mutex m(c, "stalled", signal.options(lease));
  const steady::time_point before = steady::now();
  m.lock();
  server.pause();  // every renewal times out from now on
  const bool fired = signal.wait(seconds(20));
  server.resume();
  ASSERT_TRUE(fired);
  // Declared lost no earlier than the lease could have run out (counted from the acquisition).
  EXPECT_GE(signal.at - before, lease);
  EXPECT_TRUE(m.lost());
  EXPECT_GE(c.watchdog().stats().failures, 1u);
  EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
}

TEST(LeaseLoss, ARestartedServerIsALoss) {
  redis_server server;
  client c(client_options{server.options()});
  lost_signal signal;
  mutex m(c, "restarted", signal.options(milliseconds(900)));
  m.lock();
  server.restart();  // an empty data set (and script cache): the key is gone
  ASSERT_TRUE(signal.wait(seconds(20)));
  EXPECT_TRUE(m.lost());
  EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
  // After a loss the same object acquires afresh, not lost.
  ASSERT_TRUE(m.try_lock());
  EXPECT_FALSE(m.lost());
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
}

TEST(LeaseLoss, ExtendAnsweringFalseMarksTheLockLost) {
  redis_server server;
  client c(client_options{server.options()});
  connection admin = server.admin();
  mutex m(c, "extended");
  m.lock();
  EXPECT_TRUE(m.extend());
  EXPECT_FALSE(m.lost());
  admin.command({"DEL", m.key()});  // the lease ran out
  EXPECT_FALSE(m.extend());
  EXPECT_TRUE(m.lost());
  EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
  m.lock();
  EXPECT_FALSE(m.lost());
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
}

// Redis stops answering (a black hole: connections stay open, nothing comes back) while
// 10,000 auto-renewed leases are held. No reply arrives after `stalled`, so no renewal sent
// after it was confirmed: by stalled + lease every lease may have run out on the server and
// every lock must say lost(), whatever the number of leases and however long the watchdog's
// pipelines wait for replies. on_lost follows within a bound that does not grow with the
// number of leases, and a release is never held up by a renewal stuck in flight: it waits
// for its own command's timeout only.
TEST(LeaseLoss, TenThousandLeasesBehindABlackHoleAreReportedLostWhenTheirLeaseRunsOut) {
  constexpr std::size_t n = 10000, acquirers = 4;
  const milliseconds lease(3000), command_timeout(2000);
  redis_server server;
  redislock_test::tcp_proxy proxy(server.port());
  client_options o{server.options()};
  o.connection.port = proxy.port();
  o.connection.command_timeout = command_timeout;
  client c(o);

  std::atomic<std::size_t> callbacks{0};
  std::atomic<steady::rep> last_callback{0};
  std::mutex names_mutex;
  std::vector<std::string> reported;
  lock_options lo;
  lo.lease = lease;
  lo.auto_renew = true;
  lo.on_lost = [&](const std::string& name) {
    const steady::rep now = steady::now().time_since_epoch().count();
    steady::rep seen = last_callback.load();
    while (seen < now && !last_callback.compare_exchange_weak(seen, now)) {
    }
    {
      std::lock_guard<std::mutex> g(names_mutex);
      reported.push_back(name);
    }
    ++callbacks;
  };
  std::vector<std::unique_ptr<mutex>> locks(n);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < acquirers; ++t)
    threads.emplace_back([&, t] {
      for (std::size_t i = t; i < n; i += acquirers) {
        locks[i] = std::make_unique<mutex>(c, "hole-" + std::to_string(i), lo);
        locks[i]->lock();
      }
    });
  for (auto& t : threads) t.join();
  // Every lease renewed once through the proxy: the path works before it goes silent.
  ASSERT_TRUE(c.watchdog().wait_for_stats(seconds(120), [&](const watchdog_stats& s) { return s.renewals >= n; }));
  ASSERT_EQ(c.watchdog().stats().lost, 0u);

  proxy.set_stalled(true);
  const steady::time_point stalled = steady::now();

  // A release while renewals wait for replies that never come: bounded by its own timeout.
  // (Polled: a batch in flight is a state between the watchdog's notifications.)
  ASSERT_TRUE(redislock_test::eventually([&] { return c.watchdog().stats().in_flight > 0; }, seconds(20)));
  const steady::time_point before_unlock = steady::now();
  locks[0]->unlock();
  const auto unlock_took = steady::now() - before_unlock;
  EXPECT_EQ(locks[0]->last_release(), release_status::failed);
  EXPECT_LT(unlock_took, command_timeout + command_timeout / 2)
      << "unlock() took " << std::chrono::duration_cast<milliseconds>(unlock_took).count() << " ms";

  // lost() needs no reply and no watchdog turn: it is true once the lease may have run out.
  std::this_thread::sleep_until(stalled + lease + milliseconds(1));  // a clock deadline, not a race
  std::size_t not_lost = 0;
  for (std::size_t i = 1; i < n; ++i) not_lost += locks[i]->lost() ? 0 : 1;
  EXPECT_EQ(not_lost, 0u) << "locks not lost at stalled + lease";

  const bool all_reported =
      c.watchdog().wait_for_stats(seconds(60), [&](const watchdog_stats&) { return callbacks.load() >= n - 1; }) ||
      callbacks.load() >= n - 1;
  const auto late = steady::time_point(steady::duration(last_callback.load())) - (stalled + lease);
  std::cout << callbacks.load() << " on_lost calls, the last " << std::chrono::duration_cast<milliseconds>(late).count()
            << " ms after stalled + lease; unlock took "
            << std::chrono::duration_cast<milliseconds>(unlock_took).count() << " ms\n";
  EXPECT_TRUE(all_reported);
  {
    std::lock_guard<std::mutex> g(names_mutex);
    std::sort(reported.begin(), reported.end());
    EXPECT_EQ(std::adjacent_find(reported.begin(), reported.end()), reported.end()) << "a lease reported twice";
    EXPECT_FALSE(std::binary_search(reported.begin(), reported.end(), std::string("hole-0")))
        << "the released lock was reported lost";
  }
  // The callbacks' bound: one command timeout (a pipeline in flight when the first lease ran
  // out gives up by then), however many leases; generous for sanitizer builds.
  EXPECT_LT(std::chrono::duration_cast<milliseconds>(late).count(), (2 * command_timeout).count());

  proxy.set_stalled(false);  // so that the destructors' releases are answered
}

// The server may run an extend the moment it is sent: while a shorter extend's reply is on its
// way, the holder already counts with the shorter lease (detail/lease_clock.hpp), renewed or not,
// and is lost once it runs out even though no reply ever came.
TEST(LeaseLoss, AShorterExtendCountsFromItsSendWhileItsReplyIsHeldUp) {
  redis_server server;
  connection admin(server.options());
  for (const bool renewed : {false, true}) {
    SCOPED_TRACE(renewed ? "auto_renew" : "not renewed");
    redislock_test::tcp_proxy proxy(server.port());
    client_options o{server.options()};
    o.connection.port = proxy.port();
    client c(o);
    lock_options lo;
    lo.lease = renewed ? milliseconds(300) : seconds(20);  // auto_renew refuses extends below options().lease
    lo.auto_renew = renewed;
    mutex m(c, renewed ? "held-up-renewed" : "held-up", lo);
    m.lock();
    ASSERT_TRUE(m.extend(seconds(20)));  // its script is loaded: the next extend runs as sent
    proxy.set_stalled(true, redislock_test::tcp_proxy::direction::to_client);
    const steady::time_point sent = steady::now();
    auto extended = std::async(std::launch::async, [&] { return m.extend(milliseconds(300)); });
    // The server ran it: its key has 300 ms or less (the reply waits in the proxy).
    ASSERT_TRUE(redislock_test::eventually([&] {
      const long long pttl = admin.command({"PTTL", m.key()})->integer;
      return pttl <= 300;  // -2: it ran, and the key has run out already
    }));
    const std::optional<steady::time_point> counted = m.lease_confirmed_until();
    ASSERT_TRUE(counted.has_value());
    EXPECT_LE(*counted, steady::now() + milliseconds(300))
        << "counts on " << std::chrono::duration_cast<milliseconds>(*counted - steady::now()).count()
        << " ms while the server keeps the key at most 300 ms";
    EXPECT_TRUE(redislock_test::eventually([&] { return m.lost(); }, seconds(2))) << "lost only by a reply";
    EXPECT_GE(steady::now(), sent + milliseconds(300));
    proxy.heal();
    (void)extended.get();  // confirmed after the lease it set could have run out: it stays lost
    EXPECT_TRUE(m.lost());
    EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
  }
}

}  // namespace test_lease_loss
