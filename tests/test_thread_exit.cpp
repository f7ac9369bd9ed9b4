// Holds of reentrant and shared locks belong to threads (like std::recursive_mutex): an
// unlock() from another thread changes nothing and says so (not_held), and a hold whose thread
// exits without unlocking is no longer renewed, so it ends with its lease instead of living
// as long as the lock object.
#include "server_fixture.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

namespace test_thread_exit {

using namespace redislock;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

using ThreadExit = redislock_test::server_test;

lock_options renewed(milliseconds lease) {
  lock_options o;
  o.lease = lease;
  o.auto_renew = true;
  return o;
}

// Locks on a thread that then exits; the guard's unlock runs on the calling thread; another
// owner must get the lock once the abandoned hold's lease (300 ms) has run out.
template <class Lock, class LockIt, class UnlockIt, class TakeIt>
void abandoned_hold_ends_with_its_lease(redislock::client& pool, const char* name, LockIt lock_it, UnlockIt unlock_it,
                                        TakeIt take_it) {
  Lock l(pool, name, renewed(milliseconds(300)));
  std::thread([&] {
    lock_it(l);
    // Renewed while its thread lives.
    EXPECT_TRUE(pool.watchdog().wait_for_stats(seconds(5), [](const watchdog_stats& s) { return s.renewals >= 2; }));
  }).join();
  unlock_it(l);  // from a thread that holds nothing
  EXPECT_EQ(l.last_release(), release_status::not_held);
  Lock other(pool, name, renewed(milliseconds(300)));
  const steady::time_point start = steady::now();
  EXPECT_TRUE(take_it(other)) << "the abandoned hold is renewed forever";
  EXPECT_LT(steady::now() - start, seconds(3));
}

TEST_F(ThreadExit, AReentrantHoldWhoseThreadExitedEndsWithItsLease) {
  abandoned_hold_ends_with_its_lease<reentrant_mutex>(
      *pool, "exit-r", [](reentrant_mutex& l) { l.lock(); }, [](reentrant_mutex& l) { l.unlock(); },
      [](reentrant_mutex& l) {
        const bool got = l.try_lock_for(seconds(5));
        if (got) l.unlock();
        return got;
      });
}

TEST_F(ThreadExit, ASharedWriteHoldWhoseThreadExitedEndsWithItsLease) {
  abandoned_hold_ends_with_its_lease<shared_mutex>(
      *pool, "exit-w", [](shared_mutex& l) { l.lock(); }, [](shared_mutex& l) { l.unlock(); },
      [](shared_mutex& l) {
        const bool got = l.try_lock_for(seconds(5));
        if (got) l.unlock();
        return got;
      });
}

TEST_F(ThreadExit, ASharedReadHoldWhoseThreadExitedEndsWithItsLease) {
  abandoned_hold_ends_with_its_lease<shared_mutex>(
      *pool, "exit-sr", [](shared_mutex& l) { l.lock_shared(); }, [](shared_mutex& l) { l.unlock_shared(); },
      [](shared_mutex& l) {
        const bool got = l.try_lock_for(seconds(5));  // a writer: needs the reader gone
        if (got) l.unlock();
        return got;
      });
}

TEST_F(ThreadExit, AThreadThatExitsAfterItsObjectIsGoneIsHarmless) {
  std::thread t;
  {
    reentrant_mutex l(*pool, "exit-late", renewed(milliseconds(300)));
    std::promise<void> locked, go;
    t = std::thread([&, f = go.get_future()]() mutable {
      l.lock();
      l.unlock();
      l.lock();  // still held when the object is destroyed below
      locked.set_value();
      f.wait();
    });
    locked.get_future().wait();
    go.set_value();
    t.join();  // exits while holding: renewal stops
  }            // the object releases what is left and goes
  std::thread([&] {
    reentrant_mutex l(*pool, "exit-late-2");
    l.lock();
    l.unlock();
  }).join();  // exits after its object is gone: nothing to tell
  EXPECT_EQ(admin->command({"EXISTS", "redislock:{exit-late}"})->integer, 0);
}

}  // namespace

}  // namespace test_thread_exit
