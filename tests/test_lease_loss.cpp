// Losing a lease: a paused holder (SIGSTOP), a lock taken over, renewals failing until the
// lease ran out, a restarted server, and extend() answering false. The holder must learn it
// (lost(), on_lost, release_status::lease_expired) and must never disturb the next holder.
#include "process.hpp"
#include "redis_server.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <future>
#include <memory>
#include <string>

using namespace redislock;
using redislock_test::child_process;
using redislock_test::read_line;
using redislock_test::redis_server;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

std::string get(connection& admin, const std::string& key) {
  reply_ptr r = admin.command({"GET", key});
  return r->type == REDIS_REPLY_NIL ? std::string("(nil)") : std::string(r->str, r->len);
}

/// auto_renew options whose on_lost fulfils a promise (once) with the time it ran.
struct lost_signal {
  std::promise<steady::time_point> fired;
  std::future<steady::time_point> seen = fired.get_future();
  std::string name;
  lock_options options(milliseconds lease) {
    lock_options o;
    o.lease = lease;
    o.auto_renew = true;
    o.on_lost = [this](const std::string& n) {
      name = n;
      fired.set_value(steady::now());
    };
    return o;
  }
  bool wait(seconds timeout) { return seen.wait_for(timeout) == std::future_status::ready; }
};

}  // namespace

TEST(LeaseLoss, APausedHolderLosesTheLockAndItsLateReleaseLeavesTheNextHolderAlone) {
  redis_server server;
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  child_process holder({REDISLOCK_TEST_WORKER, "renew", std::to_string(server.port()), "paused", "1000"}, out[1]);
  ::close(out[1]);
  const std::string line = read_line(out[0], seconds(20));
  ASSERT_EQ(line.rfind("acquired ", 0), 0u) << line;
  const std::uint64_t holder_fence = std::stoull(line.substr(9));

  client c(client_options{server.options()});
  mutex next(c, "paused");
  EXPECT_FALSE(next.try_lock());
  holder.signal(SIGSTOP);  // a GC pause / a stalled VM: the watchdog thread stops too
  ASSERT_TRUE(next.try_lock_for(seconds(20)));  // once the paused holder's lease ran out
  EXPECT_GT(next.fencing_token(), holder_fence);
  holder.signal(SIGCONT);

  EXPECT_EQ(read_line(out[0], seconds(20)), "lost 1");
  EXPECT_EQ(read_line(out[0], seconds(20)), "release lease_expired");
  EXPECT_EQ(holder.wait_for(seconds(20)), 0);
  ::close(out[0]);
  EXPECT_TRUE(next.still_held());  // the late release did not delete the new holder's key
  EXPECT_EQ(next.release(), release_status::released);
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
  EXPECT_EQ(m.release(), release_status::lease_expired);
  EXPECT_EQ(get(admin, m.key()), "someone-else");
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
  EXPECT_GE(signal.seen.get() - before, lease);
  EXPECT_TRUE(m.lost());
  EXPECT_GE(c.watchdog().stats().failures, 1u);
  EXPECT_EQ(m.release(), release_status::lease_expired);
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
  EXPECT_EQ(m.release(), release_status::lease_expired);
  // After a loss the same object acquires afresh, not lost.
  ASSERT_TRUE(m.try_lock());
  EXPECT_FALSE(m.lost());
  EXPECT_EQ(m.release(), release_status::released);
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
  EXPECT_EQ(m.release(), release_status::lease_expired);
  m.lock();
  EXPECT_FALSE(m.lost());
  EXPECT_EQ(m.release(), release_status::released);
}
