// Cancelling a blocking wait from another thread (cancel.hpp), on every kind: the waiter wakes
// at once (every timer that could also wake it is a minute away), returns false, leaves the
// lock's queue and holds nothing, also when a hand-off races the cancel; a token cancelled
// already sends nothing. Built as C++20 where the compiler can: the std::stop_token overloads.
#include "eventually.hpp"
#include "server_fixture.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace test_cancel {

using namespace redislock;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

class CancelTest : public redislock_test::server_test {
 protected:
  // Nothing but the cancel may wake a waiter within the test's bound: the holder's lease, the
  // recheck and the backoff are all a minute or half of one.
  static lock_options slow() {
    lock_options o;
    o.lease = seconds(60);
    o.recheck_interval = seconds(60);
    return o;
  }
  long long queued(const std::string& queue_key) { return admin->command({"ZCARD", queue_key})->integer; }

  // Starts wait(token) on another thread once hold() holds the name, waits until it queued
  // (queue_key; empty: a kind that backs off instead, given time to fall asleep), cancels, and
  // checks that the wait ended with false well within the bound, left nothing queued, and
  // that release() then frees the name for good.
  void expect_cancel_ends_the_wait(const char* kind, const std::function<void()>& hold,
                                   const std::function<bool(const cancel_token&)>& wait,
                                   const std::function<void()>& release, const std::string& queue_key) {
    SCOPED_TRACE(kind);
    hold();
    cancel_source cancel;
    std::promise<bool> result;
    std::future<bool> done = result.get_future();
    std::thread waiter([&] {
      try {
        result.set_value(wait(cancel.token()));
      } catch (...) {
        result.set_exception(std::current_exception());
      }
    });
    if (!queue_key.empty()) {
      EXPECT_TRUE(redislock_test::eventually([&] { return queued(queue_key) == 1; }, seconds(10))) << "never queued";
    } else {
      EXPECT_EQ(done.wait_for(milliseconds(200)), std::future_status::timeout) << "returned before the cancel";
    }
    const steady::time_point cancelled_at = steady::now();
    cancel.cancel();
    const bool ended = done.wait_for(seconds(10)) == std::future_status::ready;
    const auto took = std::chrono::duration_cast<milliseconds>(steady::now() - cancelled_at);
    if (!ended) release();  // lets a waiter that missed the cancel finish, so the thread can be joined
    waiter.join();
    ASSERT_TRUE(ended) << "the cancel did not end the wait";
    EXPECT_FALSE(done.get()) << "a cancelled wait returned true";
    EXPECT_LT(took, seconds(5)) << "woken by something else than the cancel";
    std::cout << "[ " << kind << " ] the wait ended " << took.count() << " ms after cancel()\n";
    if (!queue_key.empty()) {
      EXPECT_EQ(queued(queue_key), 0) << "the cancelled waiter kept its place";
    }
    release();
  }
};

TEST_F(CancelTest, ACancelEndsTheWaitOfEveryKindAtOnceAndLeavesItsQueue) {
  const lock_options o = slow();
  lock_options fair = o;
  fair.fair = true;
  {
    mutex a(*pool, "m", o), b(*pool, "m", o);
    expect_cancel_ends_the_wait(
        "mutex", [&] { a.lock(); }, [&](const cancel_token& t) { return b.lock(t); }, [&] { a.unlock(); },
        detail::mutex_scripts::keys("m", o).queue);
  }
  {
    mutex a(*pool, "fm", fair), b(*pool, "fm", fair);
    expect_cancel_ends_the_wait(
        "fair mutex", [&] { a.lock(); }, [&](const cancel_token& t) { return b.try_lock_for(seconds(120), t); },
        [&] { a.unlock(); }, detail::mutex_scripts::keys("fm", fair).queue);
  }
  {
    reentrant_mutex a(*pool, "r", o), b(*pool, "r", o);
    expect_cancel_ends_the_wait(
        "reentrant_mutex", [&] { a.lock(); }, [&](const cancel_token& t) { return b.lock(t); }, [&] { a.unlock(); },
        detail::reentrant_scripts::keys("r", o).queue);
  }
  {
    shared_mutex a(*pool, "s", o), b(*pool, "s", o);
    expect_cancel_ends_the_wait(
        "shared_mutex write", [&] { a.lock_shared(); }, [&](const cancel_token& t) { return b.lock(t); },
        [&] { a.unlock_shared(); }, detail::shared_scripts::keys("s", o).queue);
    expect_cancel_ends_the_wait(
        "shared_mutex read", [&] { a.lock(); },
        [&](const cancel_token& t) { return b.try_lock_shared_until(steady::now() + seconds(120), t); },
        [&] { a.unlock(); }, detail::shared_scripts::keys("s", o).queue);
  }
  {
    semaphore a(*pool, "p", 1, o), b(*pool, "p", 1, o);
    expect_cancel_ends_the_wait(
        "semaphore", [&] { a.lock(); }, [&](const cancel_token& t) { return b.lock(t); }, [&] { a.unlock(); },
        detail::semaphore_scripts::keys("p", o).queue);
  }
  {
    election a(*pool, "e", o), b(*pool, "e", o);
    expect_cancel_ends_the_wait(
        "election", [&] { a.lock(); }, [&](const cancel_token& t) { return b.lock(t); }, [&] { a.unlock(); },
        detail::election_scripts::keys("e", o).queue);
  }
  {
    // Redlock backs off (no queue): its sleeps are half a minute here.
    lock_options backoff;
    backoff.lease = seconds(60);
    backoff.retry_min = backoff.retry_max = seconds(30);
    redlock a({std::ref(*pool)}, "rl", backoff), b({std::ref(*pool)}, "rl", backoff);
    expect_cancel_ends_the_wait(
        "redlock", [&] { a.lock(); }, [&](const cancel_token& t) { return b.lock(t); }, [&] { a.unlock(); }, "");
  }
  {
    latch_options lo;
    lo.lease = seconds(60);
    lo.recheck_interval = seconds(60);
    latch l(*pool, "l", 1, lo), waiting(*pool, "l", 1, lo);
    expect_cancel_ends_the_wait(
        "latch", [] {}, [&](const cancel_token& t) { return waiting.wait(t); }, [&] { l.count_down(); }, "");
    EXPECT_TRUE(waiting.wait(cancel_token())) << "a token never cancelled waits as wait()";
  }
}

// Two threads on one object: the second waits on the object's local gate, not in Redis.
TEST_F(CancelTest, ACancelEndsAWaitOnTheObjectsLocalGate) {
  mutex shared(*pool, "gate", slow());
  std::promise<void> held, release;
  std::thread holder([&] {
    shared.lock();
    held.set_value();
    release.get_future().wait();
    shared.unlock();
  });
  held.get_future().wait();
  expect_cancel_ends_the_wait(
      "local gate", [] {}, [&](const cancel_token& t) { return shared.try_lock_for(seconds(120), t); },
      [&] { release.set_value(); }, "");
  holder.join();
  EXPECT_EQ(admin->command({"EXISTS", shared.key()})->integer, 0);
}

TEST_F(CancelTest, ATokenCancelledAlreadyReturnsFalseAndSendsNothing) {
  cancel_source cancel;
  cancel.cancel();
  cancel.cancel();  // idempotent
  EXPECT_TRUE(cancel.cancelled());
  EXPECT_TRUE(cancel.token().cancelled());
  EXPECT_FALSE(cancel_token().cancelled());
  mutex m(*pool, "early");
  shared_mutex s(*pool, "early-s");
  reset_stats();
  EXPECT_FALSE(m.lock(cancel.token()));
  EXPECT_FALSE(m.try_lock_for(seconds(1), cancel.token()));
  EXPECT_FALSE(s.lock_shared(cancel.token()));
  EXPECT_FALSE(m.owns_lock());
  EXPECT_EQ(redislock_test::command_calls(*admin, "set") + evalsha(), 0) << "a cancelled token sent commands";
  EXPECT_EQ(admin->command({"DBSIZE"})->integer, 0);
}

// Under contention: of three queued waiters the middle one is cancelled; the other two are
// served in arrival order by the next releases, and the cancelled one never.
TEST_F(CancelTest, ACancelledWaiterLeavesTheQueueAndTheOthersAreServedInOrder) {
  lock_options o = slow();
  o.fair = true;  // strict arrival order, so the order is checked exactly
  const std::string queue = detail::mutex_scripts::keys("line", o).queue;
  mutex holder(*pool, "line", o), first(*pool, "line", o), middle(*pool, "line", o), last(*pool, "line", o);
  holder.lock();
  cancel_source cancel;
  std::mutex order_mutex;
  std::vector<std::string> order;
  auto wait_in_line = [&](mutex& m, const char* who, long long place, const cancel_token& t) {
    std::future<bool> f = std::async(std::launch::async, [&m, &order_mutex, &order, who, t] {
      const bool got = m.lock(t);
      if (got) {
        std::lock_guard<std::mutex> g(order_mutex);
        order.emplace_back(who);
      }
      return got;
    });
    EXPECT_TRUE(redislock_test::eventually([&] { return queued(queue) == place; }, seconds(10))) << who;
    return f;
  };
  std::future<bool> a = wait_in_line(first, "first", 1, cancel_token());
  std::future<bool> b = wait_in_line(middle, "middle", 2, cancel.token());
  std::future<bool> c = wait_in_line(last, "last", 3, cancel_token());
  cancel.cancel();
  ASSERT_EQ(b.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_FALSE(b.get());
  EXPECT_EQ(queued(queue), 2) << "the cancelled waiter kept its place, or took another's";
  holder.unlock();
  ASSERT_EQ(a.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(a.get());
  first.unlock();
  ASSERT_EQ(c.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(c.get());
  last.unlock();
  EXPECT_EQ(order, (std::vector<std::string>{"first", "last"}));
  EXPECT_FALSE(middle.owns_lock());
}

// A release that hands the lock to the waiter at the moment it is cancelled: either the wait
// returns true and holds it, or it returns false and the hand-off was passed on (nobody else
// waits here, so the name is free). Never false with our token on the key.
TEST_F(CancelTest, AHandOffRacingTheCancelIsKeptOrReleasedNeverLeftOnTheKey) {
  const lock_options o = slow();
  mutex a(*pool, "race", o), b(*pool, "race", o);
  const std::string queue = detail::mutex_scripts::keys("race", o).queue;
  int kept = 0, passed_on = 0;
  for (int round = 0; round < 60; ++round) {
    SCOPED_TRACE(round);
    a.lock();
    cancel_source cancel;
    std::future<bool> done = std::async(std::launch::async, [&] { return b.lock(cancel.token()); });
    ASSERT_TRUE(redislock_test::eventually([&] { return queued(queue) == 1; }, seconds(10)));
    std::promise<void> go;
    std::shared_future<void> start = go.get_future().share();
    std::thread releaser([&] {
      start.wait();
      a.unlock();
    });
    // Even rounds: the cancel and the release at once. Odd rounds: the cancel once the release
    // has run, so the server has handed the lock to the waiter, which may not have heard yet.
    std::promise<void> released;
    std::thread canceller([&, odd = round % 2 == 1, after = released.get_future()] {
      start.wait();
      if (odd) after.wait();
      cancel.cancel();
    });
    go.set_value();
    releaser.join();
    released.set_value();
    canceller.join();
    ASSERT_EQ(done.wait_for(seconds(10)), std::future_status::ready);
    if (done.get()) {
      ++kept;
      EXPECT_TRUE(b.owns_lock());
      b.unlock();
      EXPECT_EQ(b.last_release(), release_status::released);
    } else {
      ++passed_on;
      EXPECT_FALSE(b.owns_lock());
      EXPECT_EQ(admin->command({"EXISTS", a.key()})->integer, 0) << "a cancelled waiter left the hand-off on the key";
    }
    EXPECT_EQ(queued(queue), 0);
  }
  std::cout << "[ race ] hand-off kept " << kept << ", passed on after the cancel " << passed_on << "\n";
}

#if defined(__cpp_lib_jthread)
TEST_F(CancelTest, AStopRequestEndsTheWaitOfTheStdStopTokenOverloads) {
  mutex a(*pool, "stop", slow()), b(*pool, "stop", slow());
  a.lock();
  std::promise<bool> result;
  std::future<bool> done = result.get_future();
  std::jthread waiter([&](std::stop_token stop) { result.set_value(b.lock(stop)); });
  ASSERT_TRUE(redislock_test::eventually([&] { return queued(detail::mutex_scripts::keys("stop", slow()).queue) == 1; },
                                         seconds(10)));
  waiter.request_stop();
  ASSERT_EQ(done.wait_for(seconds(5)), std::future_status::ready);
  EXPECT_FALSE(done.get());
  waiter.join();
  a.unlock();
  std::stop_source never;
  EXPECT_TRUE(b.try_lock_for(seconds(5), never.get_token()));
  b.unlock();
}
#endif

}  // namespace

}  // namespace test_cancel
