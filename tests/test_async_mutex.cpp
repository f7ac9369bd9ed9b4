// redislock::async_mutex (asio.hpp): acquisitions by callback, future, coroutine and deferred
// token; exclusion and hand-off against the blocking mutex in both directions; cancellation
// under contention; renewal and loss; many waiters on one loop thread; a multi-threaded loop.
#include "async_fixture.hpp"
#include "eventually.hpp"
#include "recording_observer.hpp"
#include "server_fixture.hpp"
#include "server_version.hpp"
#include "tcp_proxy.hpp"

#include <redislock/asio.hpp>
#include <redislock/async_with_lock.hpp>
#include <redislock/redislock.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_future.hpp>
#include <asio/version.hpp>
#if ASIO_VERSION >= 102200
#include <asio/experimental/deferred.hpp>
#endif
#if defined(__cpp_impl_coroutine) && __cpp_impl_coroutine >= 201902L
#include <asio/co_spawn.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/redirect_error.hpp>
#include <asio/detached.hpp>
#include <asio/use_awaitable.hpp>
#define REDISLOCK_TEST_COROUTINES 1
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace test_async_mutex {

using namespace redislock;
using redislock_test::eventually;
using redislock_test::loop;
using redislock_test::outcome;
using redislock_test::unlock_now;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

struct AsyncMutexTest : redislock_test::async_server_test {
  long long queued(const std::string& key) { return admin->command({"ZCARD", key + ":queue"})->integer; }
  // The server's client connections (the admin's included).
  long long connections() {
    const std::string list = redislock_test::reply_text(*admin->command({"CLIENT", "LIST"}));
    return std::count(list.begin(), list.end(), '\n');
  }
  // The mutex's release script for `token`, run by the admin connection (a release by another
  // process: it hands the lock to the head of the queue).
  void release_as(const async_mutex& m, const std::string& token) {
    admin->command({"EVAL", detail::mutex_scripts::release().source(), "4", m.key(), m.key() + ":fence",
                    m.key() + ":queue", m.key() + ":waiters", token, m.key() + ":w:"});
  }
};

TEST_F(AsyncMutexTest, LocksWithAFutureExcludesAndUnlocks) {
  async_mutex m(*client, "a");
  async_hold h = m.async_lock(asio::use_future).get();
  ASSERT_TRUE(h.owns_lock());
  EXPECT_EQ(get(m.key()), h.token());
  async_hold other = m.async_try_lock_for(milliseconds(0), asio::use_future).get();
  EXPECT_FALSE(other.owns_lock());
  release_status s{};
  EXPECT_FALSE(unlock_now(h, &s));
  EXPECT_EQ(s, release_status::released);
  EXPECT_FALSE(h.owns_lock());
  EXPECT_FALSE(exists(m.key()));
  // An empty hold reports not_held.
  std::promise<std::error_code> again;
  h.async_unlock([&](std::error_code e, release_status) { again.set_value(e); });
  EXPECT_EQ(again.get_future().get(), async_errc::not_held);
}

// async_lock(lease, token) / async_try_lock_for(timeout, lease, token): a waiter is handed the
// lock with its call's lease, the renewals send it (900 ms under options().lease of 30 s),
// async_extend() without a lease extends to it, and the next acquisition without one has
// options().lease. A bad lease throws before anything is sent.
TEST_F(AsyncMutexTest, ALeaseGivenToTheCallIsTheHolds) {
  lock_options o;
  o.lease = seconds(30);
  o.auto_renew = true;
  async_mutex m(*client, "per-call", o);
  EXPECT_THROW(m.async_lock(milliseconds(0), asio::use_future), invalid_argument);
  EXPECT_THROW(m.async_try_lock_for(seconds(1), max_lease + milliseconds(1), asio::use_future), invalid_argument);
  EXPECT_FALSE(exists(m.key()));
  auto pttl = [&] { return admin->command({"PTTL", m.key()})->integer; };
  mutex blocking(*pool, "per-call");
  blocking.lock();
  auto waiting = m.async_try_lock_for(seconds(10), milliseconds(900), asio::use_future);
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  redislock_test::replies_handled(*client);  // asleep until the notice
  blocking.unlock();
  async_hold h = waiting.get();
  ASSERT_TRUE(h.owns_lock());
  EXPECT_GT(pttl(), 0);
  EXPECT_LE(pttl(), 900) << "handed over with options().lease, not the call's";
  EXPECT_LE(*h.lease_confirmed_until(), steady::now() + milliseconds(900)) << "counted with another lease";
  auto rec = std::make_shared<redislock_test::recorder>();
  set_observer(rec);
  const bool renewed = eventually([&] { return rec->count("renewed - 1/1") >= 3; }, seconds(20));
  set_observer(nullptr);
  ASSERT_TRUE(renewed);
  EXPECT_FALSE(h.lost());
  EXPECT_GT(pttl(), 0);
  EXPECT_LE(pttl(), 900) << "renewed to options().lease";
  EXPECT_THROW(h.async_extend(milliseconds(600), asio::use_future), invalid_argument);
  EXPECT_TRUE(h.async_extend(asio::use_future).get());
  EXPECT_GT(pttl(), 0);
  EXPECT_LE(pttl(), 900) << "extended to options().lease";
  EXPECT_FALSE(unlock_now(h));
  async_hold again = m.async_lock(asio::use_future).get();
  ASSERT_TRUE(again.owns_lock());
  EXPECT_GT(pttl(), 20000) << "the next acquisition kept the earlier call's lease";
  EXPECT_FALSE(unlock_now(again));
}

TEST_F(AsyncMutexTest, TimedWaitGivesUpLeavesTheQueueAndReportsNoError) {
  async_mutex m(*client, "t");
  mutex blocking(*pool, "t");
  blocking.lock();
  const auto started = steady::now();
  async_hold h = m.async_try_lock_for(milliseconds(150), asio::use_future).get();
  EXPECT_FALSE(h.owns_lock());
  EXPECT_GE(steady::now() - started, milliseconds(150));
  EXPECT_EQ(queued(m.key()), 0);
  blocking.unlock();
  EXPECT_FALSE(exists(m.key()));  // nobody was handed the lock
}

TEST_F(AsyncMutexTest, BlockingReleaseHandsTheLockToAnAsyncWaiter) {
  mutex blocking(*pool, "h");
  async_mutex m(*client, "h");
  blocking.lock();
  auto waiting = m.async_lock(asio::use_future);
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  redislock_test::replies_handled(*client);  // asleep until the notice
  blocking.unlock();
  async_hold h = waiting.get();
  ASSERT_TRUE(h.owns_lock());
  EXPECT_EQ(get(m.key()), h.token());
  EXPECT_EQ(client->stats().handed_over, 1u);
  EXPECT_FALSE(blocking.try_lock());
  EXPECT_FALSE(unlock_now(h));
}

TEST_F(AsyncMutexTest, AsyncReleaseHandsTheLockToABlockingWaiter) {
  mutex blocking(*pool, "h2");
  async_mutex m(*client, "h2");
  async_hold h = m.async_lock(asio::use_future).get();
  std::promise<void> locked;
  std::thread waiter([&] {
    blocking.lock();
    locked.set_value();
  });
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  EXPECT_FALSE(unlock_now(h));
  locked.get_future().get();
  waiter.join();
  EXPECT_TRUE(blocking.owns_lock());
  EXPECT_FALSE(m.async_try_lock_for(milliseconds(0), asio::use_future).get().owns_lock());
  blocking.unlock();
}

TEST_F(AsyncMutexTest, TheDestructorReleasesInTheBackground) {
  std::atomic<int> released{0};
  async_client_options o{server->options()};
  o.on_background_release = [&](const std::string& name, release_status s) {
    if (name == "d" && s == release_status::released) ++released;
  };
  async_client own(runner->io.get_executor(), o);
  async_mutex m(own, "d");
  {
    async_hold h = m.async_lock(asio::use_future).get();
    async_hold moved = std::move(h);  // the hold travels with the object, not the thread
    std::thread([held = std::move(moved)]() mutable { EXPECT_TRUE(held.owns_lock()); }).join();
  }
  ASSERT_TRUE(eventually([&] { return released.load() == 1; }));
  EXPECT_FALSE(exists(m.key()));
  EXPECT_EQ(own.stats().background_released, 1u);
}

TEST_F(AsyncMutexTest, CancelledWaitersLeaveTheQueueAndNeverAcquire) {
  async_mutex m(*client, "c");
  async_hold holder = m.async_lock(asio::use_future).get();
  constexpr int kWaiters = 20;
  std::vector<asio::cancellation_signal> signals(kWaiters);
  std::vector<std::promise<std::pair<std::error_code, bool>>> results(kWaiters);
  for (int i = 0; i < kWaiters; ++i) {
    m.async_lock(asio::bind_cancellation_slot(signals[i].slot(), [&, i](std::error_code e, async_hold h) {
      results[i].set_value({e, h.owns_lock()});
    }));
  }
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == kWaiters; }));
  // Cancel every waiter from the loop (where signals are emitted), while the holder releases:
  // the grant races the cancellations.
  asio::post(runner->io, [&] {
    for (auto& s : signals) s.emit(asio::cancellation_type::terminal);
  });
  EXPECT_FALSE(unlock_now(holder));
  for (auto& r : results) {
    auto [e, held] = r.get_future().get();
    EXPECT_EQ(e, asio::error::operation_aborted);
    EXPECT_FALSE(held);
  }
  EXPECT_EQ(queued(m.key()), 0);
  EXPECT_TRUE(eventually([&] { return !exists(m.key()); }));  // a grant that raced is released
}

// The grant races the cancellation, deterministically: on the (blocked) loop thread the waiter
// is cancelled first, then the holder's release hands it the lock (run by the admin
// connection); the waiter's "leave" finds the lock its own and releases it.
TEST_F(AsyncMutexTest, ACancellationThatRacedWithAGrantReleasesIt) {
  async_mutex m(*client, "race");
  async_hold holder = m.async_lock(asio::use_future).get();
  asio::cancellation_signal signal;
  std::promise<std::pair<std::error_code, bool>> result;
  m.async_lock(asio::bind_cancellation_slot(signal.slot(), [&](std::error_code e, async_hold h) {
    result.set_value({e, h.owns_lock()});
  }));
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  std::promise<void> handed;
  asio::post(runner->io, [&] {
    signal.emit(asio::cancellation_type::terminal);  // runs on the client's strand after this task
    release_as(m, holder.token());
    handed.set_value();
  });
  handed.get_future().wait();
  EXPECT_NE(get(m.key()), holder.token());  // handed to the waiter
  auto [e, held] = result.get_future().get();
  EXPECT_EQ(e, asio::error::operation_aborted);
  EXPECT_FALSE(held);
  EXPECT_EQ(client->stats().released_after_cancel, 1u);
  EXPECT_FALSE(exists(m.key()));
  EXPECT_EQ(queued(m.key()), 0);
  release_status s{};
  EXPECT_FALSE(unlock_now(holder, &s));
  EXPECT_EQ(s, release_status::lease_expired);  // the holder's release above was not its own
}

// A grant races the deadline: the waiter's deadline passes while the loop is blocked, and the
// holder's release hands it the lock meanwhile. Whichever the waiter sees first (its timer, then
// "leave" finds the lock its own; or the notice), the acquisition succeeds with the hold.
TEST_F(AsyncMutexTest, AGrantThatRacedWithTheDeadlineIsKept) {
  async_mutex m(*client, "deadline-race");
  async_hold holder = m.async_lock(asio::use_future).get();
  auto waiting = m.async_try_lock_for(milliseconds(100), asio::use_future);
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  std::promise<void> handed;
  asio::post(runner->io, [&] {
    std::this_thread::sleep_for(milliseconds(150));  // past the waiter's deadline
    release_as(m, holder.token());
    handed.set_value();
  });
  handed.get_future().wait();
  async_hold h = waiting.get();
  ASSERT_TRUE(h.owns_lock());
  EXPECT_EQ(get(m.key()), h.token());
  EXPECT_FALSE(unlock_now(h));
  EXPECT_EQ(queued(m.key()), 0);
}

// A hold moves between threads while its renewals are in flight: renewal belongs to the
// acquisition, so it goes on, and the hold is released once, by its last owner.
TEST_F(AsyncMutexTest, AHoldMovedWhileItsRenewalIsInFlightKeepsItsLease) {
  lock_options o;
  o.lease = milliseconds(300);
  o.auto_renew = true;
  async_mutex m(*client, "moving", o);
  async_hold h = m.async_lock(asio::use_future).get();
  const auto until = steady::now() + milliseconds(500);
  while (steady::now() < until) {
    std::thread([&] {
      async_hold mine = std::move(h);
      EXPECT_TRUE(mine.owns_lock());
      std::this_thread::sleep_for(milliseconds(10));
      h = std::move(mine);
    }).join();
  }
  EXPECT_FALSE(h.lost());
  EXPECT_EQ(get(m.key()), h.token());
  release_status s{};
  EXPECT_FALSE(unlock_now(h, &s));
  EXPECT_EQ(s, release_status::released);
  EXPECT_EQ(client->stats().background_released + client->stats().background_failed, 0u);
}

TEST_F(AsyncMutexTest, ATimerCancelsOneWaitAmongOthers) {
  async_mutex m(*client, "tc");
  async_hold holder = m.async_lock(asio::use_future).get();
  asio::cancellation_signal signal;
  asio::steady_timer timer(runner->io, milliseconds(100));
  std::promise<std::error_code> cancelled;
  m.async_lock(asio::bind_cancellation_slot(signal.slot(), [&](std::error_code e, async_hold h) {
    EXPECT_FALSE(h.owns_lock());
    cancelled.set_value(e);
  }));
  timer.async_wait([&](std::error_code) { signal.emit(asio::cancellation_type::terminal); });
  auto next = m.async_lock(asio::use_future);
  EXPECT_EQ(cancelled.get_future().get(), asio::error::operation_aborted);
  EXPECT_EQ(queued(m.key()), 1);
  EXPECT_FALSE(unlock_now(holder));
  async_hold h = next.get();
  EXPECT_TRUE(h.owns_lock());
  EXPECT_FALSE(unlock_now(h));
}

TEST_F(AsyncMutexTest, RenewsTheLeaseOnTheLoopAndReportsItsLoss) {
  lock_options o;
  o.lease = milliseconds(300);
  o.auto_renew = true;
  std::promise<void> lost;
  o.on_lost = [&](const std::string&) { lost.set_value(); };
  async_mutex m(*client, "r", o);
  async_hold h = m.async_lock(asio::use_future).get();
  std::this_thread::sleep_for(milliseconds(700));  // more than two leases: renewed meanwhile
  EXPECT_FALSE(h.lost());
  EXPECT_EQ(get(m.key()), h.token());
  ASSERT_TRUE(h.lease_confirmed_until().has_value());
  EXPECT_GT(*h.lease_confirmed_until(), steady::now());
  admin->command({"SET", m.key(), "someone-else"});
  ASSERT_EQ(lost.get_future().wait_for(seconds(5)), std::future_status::ready);
  EXPECT_TRUE(h.lost());
  release_status s{};
  EXPECT_FALSE(unlock_now(h, &s));
  EXPECT_EQ(s, release_status::lease_expired);
  EXPECT_EQ(get(m.key()), "someone-else");
}

// With auto_renew, async_extend(L) sets the lease the renewals send (as every kind's extend):
// the hold's confirmed lease then reaches past what options().lease could give.
TEST_F(AsyncMutexTest, ALongerExtendWithAutoRenewIsKeptByTheRenewals) {
  lock_options o;
  o.lease = milliseconds(300);
  o.auto_renew = true;
  async_mutex m(*client, "extend-renewed", o);
  async_hold h = m.async_lock(asio::use_future).get();
  ASSERT_TRUE(h.async_extend(milliseconds(1500), asio::use_future).get());
  // Only a renewal that sent 1.5 s can confirm more than 1 s ahead (the extend itself moves
  // nothing; a renewal to 300 ms confirms at most 300 ms ahead).
  ASSERT_TRUE(eventually(
      [&] {
        const auto confirmed = h.lease_confirmed_until();
        return confirmed && *confirmed > steady::now() + milliseconds(1000);
      },
      seconds(5)));
  EXPECT_GT(admin->command({"PTTL", m.key()})->integer, 900);
  EXPECT_FALSE(h.lost());
  EXPECT_FALSE(unlock_now(h));
}

TEST_F(AsyncMutexTest, FencingTokensExtendAndRemainingLease) {
  async_mutex m(*client, "f");
  async_hold h = m.async_lock(asio::use_future).get();
  const std::uint64_t f1 = h.async_fencing_token(asio::use_future).get();
  EXPECT_GT(f1, 0u);
  EXPECT_EQ(h.async_fencing_token(asio::use_future).get(), f1);
  EXPECT_TRUE(h.async_extend(seconds(60), asio::use_future).get());
  EXPECT_GT(h.async_remaining_lease(asio::use_future).get(), seconds(50));
  EXPECT_FALSE(unlock_now(h));
  mutex blocking(*pool, "f");
  blocking.lock();
  EXPECT_GT(blocking.fencing_token(), f1);
  blocking.unlock();
  // Lost: extend says so, fencing_token refuses.
  async_hold g = m.async_lock(asio::use_future).get();
  admin->command({"DEL", m.key()});
  EXPECT_FALSE(g.async_extend(asio::use_future).get());
  EXPECT_TRUE(g.lost());
  EXPECT_EQ(outcome<std::uint64_t>([&](auto cb) { g.async_fencing_token(cb); }).first, async_errc::lease_lost);
}

// The async token's draw keeps the counter for the lock's fence_lifetime, as the blocking one's.
TEST_F(AsyncMutexTest, TheFencingCounterLivesForTheLocksFenceLifetime) {
  lock_options o;
  o.fence_lifetime = milliseconds(98765);
  async_mutex m(*client, "f-life", o);
  async_hold h = m.async_lock(asio::use_future).get();
  EXPECT_GT(h.async_fencing_token(asio::use_future).get(), 0u);
  const long long ttl = admin->command({"PTTL", m.key() + ":fence"})->integer;
  EXPECT_LE(ttl, 98765);
  EXPECT_GT(ttl, 98765 - 60000);
  EXPECT_FALSE(unlock_now(h));
}

#if ASIO_VERSION >= 102200
TEST_F(AsyncMutexTest, DeferredTokenStartsOnlyWhenInvoked) {
  async_mutex m(*client, "df");
  auto op = m.async_lock(asio::experimental::deferred);
  EXPECT_FALSE(exists(m.key()));
  std::promise<bool> got;
  std::move(op)([&](std::error_code e, async_hold h) { got.set_value(!e && h.owns_lock()); });
  EXPECT_TRUE(got.get_future().get());
}
#endif

#ifdef REDISLOCK_TEST_COROUTINES
TEST_F(AsyncMutexTest, CoroutinesTakeTurnsWithCoAwait) {
  async_mutex m(*client, "co");
  std::atomic<int> inside{0}, overlaps{0}, done{0};
  constexpr int kCoroutines = 8;
  for (int i = 0; i < kCoroutines; ++i) {
    asio::co_spawn(
        runner->io,
        [&]() -> asio::awaitable<void> {
          async_hold h = co_await m.async_lock(asio::use_awaitable);
          if (++inside > 1) ++overlaps;
          asio::steady_timer t(co_await asio::this_coro::executor, milliseconds(2));
          co_await t.async_wait(asio::use_awaitable);
          --inside;
          co_await h.async_unlock(asio::use_awaitable);
          ++done;
        },
        asio::detached);
  }
  ASSERT_TRUE(eventually([&] { return done.load() == kCoroutines; }, seconds(20)));
  EXPECT_EQ(overlaps.load(), 0);
}
#endif

#ifdef REDISLOCK_TEST_COROUTINES
lock_options renewed_for(milliseconds lease) {
  lock_options o;
  o.lease = lease;
  o.auto_renew = true;
  return o;
}

// async_with_lock (async_with_lock.hpp): the coroutine runs under the lock, its result and the
// release's outcome come back through the completion token, and the lock is released.
TEST_F(AsyncMutexTest, AsyncWithLockRunsTheCoroutineUnderTheLockAndReleasesIt) {
  async_mutex m(*client, "awl-runs", renewed_for(seconds(5)));
  auto done = async_with_lock(
      m,
      [&](async_hold_scope& s) -> asio::awaitable<int> {
        EXPECT_TRUE(s.hold().owns_lock());
        EXPECT_EQ(admin->command({"EXISTS", m.key()})->integer, 1);
        EXPECT_FALSE(s.lost());
        const std::uint64_t token = co_await s.fencing_token();
        EXPECT_GT(token, 0u);
        co_return 42;
      },
      asio::use_future);
  ASSERT_EQ(done.wait_for(seconds(10)), std::future_status::ready);
  const auto [answer, released] = done.get();
  EXPECT_EQ(answer, 42);
  EXPECT_EQ(released, release_status::released);
  EXPECT_EQ(admin->command({"EXISTS", m.key()})->integer, 0);
  EXPECT_THROW(async_with_lock(
                   *std::make_unique<async_mutex>(*client, "awl-unrenewed"),
                   [](async_hold_scope&) -> asio::awaitable<void> { co_return; }, asio::detached),
               invalid_argument);
}

// The server dropped the hold (its key deleted): the next renewal finds it gone (or the lease
// clock's end passes first on a loaded machine: a race this test does not judge), and the scope
// cancels the coroutine's awaited 10 s timer; the release says lease_expired.
TEST_F(AsyncMutexTest, AsyncWithLockCancelsTheCoroutineWhenTheHoldIsLost) {
  async_mutex m(*client, "awl-dropped", renewed_for(seconds(3)));
  auto done = async_with_lock(
      m,
      [&](async_hold_scope& s) -> asio::awaitable<std::error_code> {
        admin->command({"DEL", m.key()});
        asio::steady_timer t(co_await asio::this_coro::executor, seconds(10));
        std::error_code e;
        co_await t.async_wait(asio::redirect_error(asio::use_awaitable, e));
        EXPECT_TRUE(s.lost());
        co_return e;
      },
      asio::use_future);
  ASSERT_EQ(done.wait_for(seconds(20)), std::future_status::ready);
  const auto [waited, released] = done.get();
  EXPECT_EQ(waited, asio::error::operation_aborted) << "the timer ran out: the scope never cancelled it";
  EXPECT_EQ(released, release_status::lease_expired);
}

// A coroutine whose awaited operations complete on their own (the scope's signal is then
// cleared, never emitted at an operation that is gone); a coroutine that throws: the exception
// comes back, after the release.
TEST_F(AsyncMutexTest, AsyncWithLockReleasesAfterAVoidCoroutineAndAThrowingOne) {
  async_mutex m(*client, "awl-void", renewed_for(seconds(5)));
  auto done = async_with_lock(
      m,
      [&](async_hold_scope& s) -> asio::awaitable<void> {
        for (int i = 0; i < 3; ++i) {
          asio::steady_timer t(co_await asio::this_coro::executor, milliseconds(20));
          co_await t.async_wait(asio::use_awaitable);
        }
        EXPECT_FALSE(s.lost());
      },
      asio::use_future);
  ASSERT_EQ(done.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_EQ(done.get(), release_status::released);
  EXPECT_FALSE(exists(m.key()));
  // Errors as values, not exceptions through a future (async_fixture.hpp: outcome()).
  auto threw = std::make_shared<std::promise<bool>>();
  async_with_lock(
      m,
      [](async_hold_scope&) -> asio::awaitable<void> {
        throw std::runtime_error("boom");
        co_return;
      },
      [threw](std::exception_ptr e, release_status) { threw->set_value(e != nullptr); });
  auto f = threw->get_future();
  ASSERT_EQ(f.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(f.get());
  EXPECT_FALSE(exists(m.key())) << "not released after the throw";
}

// The caller's operation cancelled while the coroutine runs: the coroutine finishes (its
// cancellation is the scope's, not the caller's) and the hold is released all the same.
TEST_F(AsyncMutexTest, AsyncWithLockReleasesWhenTheCallerIsCancelled) {
  async_mutex m(*client, "awl-caller", renewed_for(seconds(5)));
  asio::cancellation_signal caller;
  std::atomic<bool> running{false};
  auto finished = std::make_shared<std::promise<release_status>>();
  asio::co_spawn(
      runner->io,
      [&, finished]() -> asio::awaitable<void> {
        const release_status r = co_await async_with_lock(
            m,
            [&](async_hold_scope&) -> asio::awaitable<void> {
              running = true;
              asio::steady_timer t(co_await asio::this_coro::executor, milliseconds(300));
              co_await t.async_wait(asio::use_awaitable);
            },
            asio::bind_cancellation_slot(caller.slot(), asio::use_awaitable));
        finished->set_value(r);
      },
      asio::detached);
  ASSERT_TRUE(eventually([&] { return running.load(); }));
  asio::post(runner->io, [&] { caller.emit(asio::cancellation_type::terminal); });
  auto f = finished->get_future();
  ASSERT_EQ(f.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(), release_status::released);
  EXPECT_FALSE(exists(m.key())) << "a cancelled caller left the lock held";
}
#endif

// One loop thread drives many waiters over several names while a blocking client holds and
// releases each name: every waiter is served, in arrival order (fair mode), and the loop stays
// responsive (an unrelated 1 ms timer's lateness is measured and printed).
TEST_F(AsyncMutexTest, OneLoopThreadServesManyFairWaitersInOrder) {
  constexpr int kNames = 20, kPerName = 50;
  lock_options o;
  o.fair = true;
  o.lease = seconds(10);
  std::vector<std::unique_ptr<async_mutex>> mutexes;
  std::vector<std::unique_ptr<mutex>> blockers;
  for (int n = 0; n < kNames; ++n) {
    mutexes.push_back(std::make_unique<async_mutex>(*client, "many" + std::to_string(n), o));
    blockers.push_back(std::make_unique<mutex>(*pool, "many" + std::to_string(n), o));
    blockers.back()->lock();
  }
  std::mutex order_mutex;
  std::map<int, std::vector<int>> served;  // name -> waiter indices in the order served
  std::atomic<int> finished{0};
  // Queue the waiters of each name one after the other (each waits for the previous one's
  // place), so arrival order is known.
  std::function<void(int, int)> enqueue = [&](int n, int i) {
    if (i == kPerName) return;
    mutexes[n]->async_lock([&, n, i](std::error_code e, async_hold h) {
      EXPECT_FALSE(e) << e.message();
      {
        std::lock_guard<std::mutex> g(order_mutex);
        served[n].push_back(i);
      }
      h.async_unlock([&](std::error_code, release_status) { ++finished; });
    });
  };
  for (int n = 0; n < kNames; ++n)
    for (int i = 0; i < kPerName; ++i) {
      enqueue(n, i);
      ASSERT_TRUE(eventually([&] { return queued(mutexes[n]->key()) == i + 1; }));
    }
  // An unrelated periodic timer on the same loop: its worst lateness.
  std::atomic<bool> stop{false};
  std::atomic<long long> worst_us{0};
  std::promise<void> ticking_stopped;
  asio::steady_timer tick(runner->io);
  std::function<void(steady::time_point)> arm = [&](steady::time_point due) {
    tick.expires_at(due);
    tick.async_wait([&, due](std::error_code) {
      const long long late = std::chrono::duration_cast<std::chrono::microseconds>(steady::now() - due).count();
      if (late > worst_us.load()) worst_us.store(late);
      if (stop.load()) return ticking_stopped.set_value();
      arm(steady::now() + milliseconds(1));
    });
  };
  asio::post(runner->io, [&] { arm(steady::now() + milliseconds(1)); });
  for (auto& b : blockers) b->unlock();
  const bool all_served = eventually([&] { return finished.load() == kNames * kPerName; }, seconds(60));
  stop = true;
  ticking_stopped.get_future().wait();  // the timer is not destroyed under its handler
  ASSERT_TRUE(all_served);
  for (int n = 0; n < kNames; ++n) {
    std::vector<int> expected(kPerName);
    for (int i = 0; i < kPerName; ++i) expected[i] = i;
    EXPECT_EQ(served[n], expected) << "name " << n;
    EXPECT_EQ(queued(mutexes[n]->key()), 0);
  }
  std::printf("[ info ] %d waiters over %d names on one loop thread; worst lateness of a 1 ms timer: %lld us\n",
              kNames * kPerName, kNames, worst_us.load());
}

// Several threads run the io_context; acquisitions from all of them exclude each other.
TEST_F(AsyncMutexTest, AMultiThreadedLoopKeepsExclusion) {
  auto threaded = std::make_unique<loop>(4);
  {
    async_client c(threaded->io.get_executor(), async_client_options{server->options()});
    async_mutex a(c, "mt"), b(c, "mt");
    std::atomic<int> inside{0}, overlaps{0}, done{0};
    constexpr int kRounds = 200;
    std::function<void(async_mutex&, int)> go = [&](async_mutex& m, int left) {
      if (left == 0) return;
      m.async_lock([&, left](std::error_code e, async_hold h) {
        ASSERT_FALSE(e);
        if (++inside > 1) ++overlaps;
        --inside;
        auto shared = std::make_shared<async_hold>(std::move(h));
        shared->async_unlock([&, left, shared](std::error_code, release_status) {
          ++done;
          go(m, left - 1);
        });
      });
    };
    for (int i = 0; i < 4; ++i) go(i % 2 ? a : b, kRounds / 4);
    ASSERT_TRUE(eventually([&] { return done.load() == kRounds; }, seconds(30)));
    EXPECT_EQ(overlaps.load(), 0);
  }
  threaded.reset();
}

// The subscriber connection is killed while a waiter sleeps: the waiter subscribes again at
// once and queues again, so the next release hands it the lock (no wait for recheck_interval).
TEST_F(AsyncMutexTest, AWaiterWhoseSubscriptionWasKilledSubscribesAgain) {
  mutex blocking(*pool, "kill");
  lock_options o;
  o.recheck_interval = seconds(30);
  async_mutex m(*client, "kill", o);
  blocking.lock();
  auto waiting = m.async_lock(asio::use_future);
  auto channels = [&] { return admin->command({"PUBSUB", "CHANNELS", m.key() + ":w:*"})->elements; };
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1 && channels() == 1; }));
  admin->command({"CLIENT", "KILL", "TYPE", "pubsub"});
  ASSERT_TRUE(eventually([&] { return channels() == 1; }));
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  blocking.unlock();
  ASSERT_EQ(waiting.wait_for(seconds(5)), std::future_status::ready);
  async_hold h = waiting.get();
  EXPECT_TRUE(h.owns_lock());
  EXPECT_FALSE(unlock_now(h));
}

// The loop stops while a hold and a waiter are alive; they and the client are destroyed while
// it is stopped, then the io_context without running again: nothing crashes or leaks, the
// posted release never runs and the lease ends on the server. The loop is stopped after each
// step of the acquisitions in turn (one handler at a time: a command sent and its reply still
// due, a subscription unconfirmed, the waiter queued, a renewal in flight), so the orders that
// leaked (an unanswered command's callback, or an acquisition waiting for its subscription,
// owning the client that owns them) come every time. Checked in every build: the client's and
// the lock's state are freed (they keep a copy of a callback given in their options) and
// every connection is closed; the sanitizer builds also check the memory.
TEST_F(AsyncMutexTest, TheLoopStopsWithAHoldAndAWaiterAlive) {
  const long long before = connections();
  std::vector<std::string> keys;
  int settled = -1;  // the first step count that had the hold and the waiter queued
  // Past that, enough steps for a renewal (a third of the lease) and its reply.
  for (int steps = 0; settled < 0 ? steps < 400 : steps <= settled + 16; ++steps) {
    auto io = std::make_unique<asio::io_context>();
    auto kept = std::make_shared<int>(0);
    const std::weak_ptr<int> freed = kept;
    {
      async_client_options co{server->options()};
      co.on_background_release = [kept](const std::string&, release_status) {};
      lock_options o;
      o.lease = milliseconds(300);
      o.auto_renew = true;
      o.on_lost = [kept](const std::string&) {};
      kept.reset();
      async_client c(io->get_executor(), co);
      async_mutex m(c, "stopped-" + std::to_string(steps), o);
      keys.push_back(m.key());
      std::optional<async_hold> hold;
      m.async_lock([&](std::error_code e, async_hold h) {
        EXPECT_FALSE(e);
        hold.emplace(std::move(h));
      });
      m.async_lock([](std::error_code, async_hold) {});  // a waiter, never served
      for (int i = 0; i < steps; ++i) {
        if (io->run_one_for(seconds(2)) == 0) break;  // bounded: a renewal is due within 100 ms
      }
      if (settled < 0 && hold.has_value() && queued(m.key()) == 1) settled = steps;
      io->stop();
    }
    io.reset();
    ASSERT_TRUE(freed.expired()) << "the client or the lock left alive by the loop stopped after " << steps << " steps";
    ASSERT_TRUE(eventually([&] { return connections() == before; }, seconds(2)))
        << "a connection left open by the loop stopped after " << steps << " steps";
  }
  ASSERT_GE(settled, 0) << "the hold and the queued waiter never came";
  EXPECT_TRUE(eventually([&] {  // their leases ran out, no longer renewed
    return std::none_of(keys.begin(), keys.end(), [&](const std::string& k) { return exists(k); });
  }));
}

// The acquiring SET runs on the server but its reply is lost with the connection: the
// acquisition fails with connection_failed and, on a fresh connection, releases the lock its
// lost reply took (owner-checked), rather than leaving it blocked for the whole lease.
TEST_F(AsyncMutexTest, AnAcquisitionWhoseReplyWasLostReleasesWhatItTook) {
  redislock_test::tcp_proxy proxy(server->port());
  connection_options o = server->options();
  o.port = proxy.port();
  async_client c(runner->io.get_executor(), async_client_options{o});
  async_mutex m(c, "lost-reply");
  proxy.set_cut_after_request(true);  // every command runs, every reply is lost
  auto [e, h] = outcome<async_hold>([&](auto cb) { m.async_lock(cb); });
  EXPECT_EQ(e, async_errc::connection_failed);
  EXPECT_FALSE(h.owns_lock());
  EXPECT_TRUE(eventually([&] { return !exists(m.key()); }, seconds(2)));
  proxy.heal();
}

// The server stops answering while a hold is renewed: on_lost runs when the last confirmed
// lease ends, by the clock alone, not when the command timeout finally breaks the connection.
TEST_F(AsyncMutexTest, AStalledServerMakesTheHoldLostWhenItsLeaseEnds) {
  redislock_test::tcp_proxy proxy(server->port());
  connection_options co = server->options();
  co.port = proxy.port();
  co.command_timeout = seconds(30);
  async_client c(runner->io.get_executor(), async_client_options{co});
  lock_options o;
  o.lease = milliseconds(300);
  o.auto_renew = true;
  auto lost = std::make_shared<std::promise<steady::time_point>>();  // outlives a failed test
  o.on_lost = [lost](const std::string&) { lost->set_value(steady::now()); };
  async_mutex m(c, "stalled", o);
  async_hold h = m.async_lock(asio::use_future).get();
  proxy.set_stalled(true);
  auto reported = lost->get_future();
  ASSERT_EQ(reported.wait_for(seconds(5)), std::future_status::ready);
  const steady::time_point at = reported.get();
  ASSERT_TRUE(h.lease_confirmed_until().has_value());
  EXPECT_GE(at, *h.lease_confirmed_until());  // never before the lease may have ended
  EXPECT_TRUE(h.lost());
  proxy.heal();
}

// The server may run an async_extend() the moment it is sent: while a shorter extend's reply is
// held up, the hold already counts with the shorter lease (detail/lease_clock.hpp), and its
// on_lost runs once that runs out, without waiting for a reply or the command timeout.
TEST_F(AsyncMutexTest, AShorterExtendCountsFromItsSendWhileItsReplyIsHeldUp) {
  for (const bool renewed : {false, true}) {
    SCOPED_TRACE(renewed ? "auto_renew" : "not renewed");
    redislock_test::tcp_proxy proxy(server->port());
    connection_options co = server->options();
    co.port = proxy.port();
    co.command_timeout = seconds(30);
    async_client c(runner->io.get_executor(), async_client_options{co});
    lock_options o;
    o.lease = renewed ? milliseconds(300) : seconds(20);  // auto_renew refuses extends below options().lease
    o.auto_renew = renewed;
    auto lost = std::make_shared<std::promise<steady::time_point>>();  // outlives a failed test
    o.on_lost = [lost](const std::string&) { lost->set_value(steady::now()); };
    async_mutex m(c, renewed ? "held-up-renewed" : "held-up", o);
    async_hold h = m.async_lock(asio::use_future).get();
    ASSERT_TRUE(h.async_extend(seconds(20), asio::use_future).get());  // its script is loaded
    proxy.set_stalled(true, redislock_test::tcp_proxy::direction::to_client);
    const steady::time_point sent = steady::now();
    auto extended = std::make_shared<std::promise<bool>>();
    h.async_extend(milliseconds(300), [extended](std::error_code, bool ok) { extended->set_value(ok); });
    ASSERT_TRUE(eventually([&] {
      const long long pttl = admin->command({"PTTL", m.key()})->integer;
      return pttl <= 300;  // -2: it ran, and the key has run out already
    }));
    const std::optional<steady::time_point> counted = h.lease_confirmed_until();
    ASSERT_TRUE(counted.has_value());
    EXPECT_LE(*counted, steady::now() + milliseconds(300))
        << "counts on " << std::chrono::duration_cast<milliseconds>(*counted - steady::now()).count()
        << " ms while the server keeps the key at most 300 ms";
    auto reported = lost->get_future();
    ASSERT_EQ(reported.wait_for(seconds(5)), std::future_status::ready) << "on_lost waited for a reply";
    EXPECT_GE(reported.get(), sent + milliseconds(300));
    EXPECT_TRUE(h.lost());
    proxy.heal();
    EXPECT_EQ(extended->get_future().wait_for(seconds(5)), std::future_status::ready);
  }
}

// A reply dropped by a black hole: the connection then lost part of its stream, so the proxy
// resets it once the hole is lifted. The extend whose reply was dropped fails (it did run), and
// the reply of a later command on that connection is never taken for it.
TEST_F(AsyncMutexTest, AReplyLostInABlackHoleIsNeverTakenFromALaterCommand) {
  redislock_test::tcp_proxy proxy(server->port());
  connection_options co = server->options();
  co.port = proxy.port();
  co.command_timeout = seconds(2);  // bounds the stranded call on a proxy that keeps the stream
  async_client c(runner->io.get_executor(), async_client_options{co});
  lock_options o;
  o.lease = seconds(10);
  async_mutex m(c, "holed", o);
  async_hold h = m.async_lock(asio::use_future).get();
  // Both scripts cached first: each call below is one EVALSHA with one reply.
  ASSERT_TRUE(h.async_extend(asio::use_future).get());
  ASSERT_GT(h.async_remaining_lease(asio::use_future).get(), milliseconds(0));
  proxy.set_black_hole(true, redislock_test::tcp_proxy::direction::to_client);
  auto extended = std::make_shared<std::promise<std::pair<std::error_code, bool>>>();
  h.async_extend(seconds(60), [extended](std::error_code e, bool ok) { extended->set_value({e, ok}); });
  ASSERT_TRUE(eventually([&] { return proxy.dropped() > 0; }));  // it ran; its reply is gone
  proxy.set_black_hole(false, redislock_test::tcp_proxy::direction::to_client);
  auto later = std::make_shared<std::promise<std::pair<std::error_code, milliseconds>>>();
  h.async_remaining_lease([later](std::error_code e, milliseconds left) { later->set_value({e, left}); });
  auto outcome_of_extend = extended->get_future();
  ASSERT_EQ(outcome_of_extend.wait_for(seconds(5)), std::future_status::ready);
  const auto [e, ok] = outcome_of_extend.get();
  EXPECT_EQ(e, async_errc::connection_failed);
  EXPECT_FALSE(ok);
  EXPECT_FALSE(h.lost());
  auto outcome_of_later = later->get_future();
  ASSERT_EQ(outcome_of_later.wait_for(seconds(5)), std::future_status::ready);
  const auto [later_error, left] = outcome_of_later.get();
  if (!later_error) {
    EXPECT_GT(left, seconds(50));  // its own reply, when it passed before the reset
  }
  EXPECT_GT(h.async_remaining_lease(asio::use_future).get(), seconds(50));  // the extend ran
}

// A command sent from the failure callback of a broken connection (a background release does
// so) opens a new connection; the old connection's other failed commands must not take its
// place in the command timeout's queue: it still times out when its reply never comes. (With
// hiredis 1.x; hiredis 0.14 fails such a command at once, on the dying connection.)
TEST_F(AsyncMutexTest, ACommandSentWhileABrokenConnectionFailsItsCommandsStillTimesOut) {
  redislock_test::tcp_proxy proxy(server->port());
  connection_options co = server->options();
  co.port = proxy.port();
  co.command_timeout = milliseconds(300);
  const detail::async_strand strand(runner->io.get_executor());
  auto redis = std::make_shared<detail::async_redis>(strand, co, false);
  auto sent_after = std::make_shared<std::promise<bool>>();  // true: got a reply
  auto first_failed = std::make_shared<std::promise<void>>();
  asio::post(strand, [&] {
    redis->command({"PING"}, [](redisReply*) {});  // opens the connection
  });
  ASSERT_TRUE(eventually([&] { return proxy.accepted() == 1; }));
  auto blpops = std::make_shared<std::atomic<int>>(0);
  proxy.set_request_hook([blpops](const std::string& chunk) {
    for (auto at = chunk.find("BLPOP"); at != std::string::npos; at = chunk.find("BLPOP", at + 1)) ++*blpops;
  });
  proxy.set_stalled(true);  // both ways, new connections included
  asio::post(strand, [&, redis] {
    redis->command({"BLPOP", "nothing", "0"}, [redis, sent_after, first_failed](redisReply* r) {
      if (r != nullptr) return;
      first_failed->set_value();
      redis->command({"PING"}, [sent_after](redisReply* r2) { sent_after->set_value(r2 != nullptr); });
    });
    redis->command({"BLPOP", "nothing", "0"}, [](redisReply*) {});
  });
  ASSERT_TRUE(eventually([&] { return blpops->load() == 2; }));  // both sent on the first connection
  proxy.cut_all();  // both fail with no reply, the first one's callback sends PING
  ASSERT_EQ(first_failed->get_future().wait_for(seconds(5)), std::future_status::ready);
  auto answered = sent_after->get_future();
  const bool timed_out = answered.wait_for(seconds(3)) == std::future_status::ready;
  proxy.set_request_hook({});
  proxy.heal();
  EXPECT_TRUE(timed_out);  // by command_timeout (300 ms), not by the proxy's heal
  if (timed_out) {
    EXPECT_FALSE(answered.get());
  }
  std::promise<void> closed;
  asio::post(strand, [&] {
    redis->close();
    closed.set_value();
  });
  closed.get_future().wait();
}

// Its own server with a password: AUTH goes first on both connections, and a contended wait
// (the subscriber connection) keeps working past command_timeout.
TEST(AsyncMutexAuth, AuthenticatesBothConnections) {
  redislock_test::redis_server server({"--requirepass", "pw"});
  connection_options o = server.options();
  o.password = "pw";
  o.command_timeout = milliseconds(200);
  loop runner;
  {
    async_client c(runner.io.get_executor(), async_client_options{o});
    async_mutex m(c, "auth");
    async_hold h = m.async_lock(asio::use_future).get();
    auto waiting = m.async_lock(asio::use_future);
    connection admin(o);
    ASSERT_TRUE(eventually([&] { return admin.command({"ZCARD", m.key() + ":queue"})->integer == 1; }));
    redislock_test::replies_handled(c);              // subscribed, queued, asleep until the notice
    std::this_thread::sleep_for(milliseconds(400));  // the subscriber connection idle beyond command_timeout
    EXPECT_FALSE(unlock_now(h));
    async_hold next = waiting.get();
    EXPECT_TRUE(next.owns_lock());
    EXPECT_EQ(c.stats().handed_over, 1u);
    EXPECT_FALSE(unlock_now(next));
    // A wrong password fails the acquisition, it does not hang.
    connection_options bad = o;
    bad.password = "wrong";
    async_client wrong(runner.io.get_executor(), async_client_options{bad});
    async_mutex w(wrong, "auth");
    EXPECT_EQ(outcome<async_hold>([&](auto cb) { w.async_lock(cb); }).first, async_errc::connection_failed);
  }
}

TEST(AsyncMutexDown, AnUnreachableServerFailsTheAcquisition) {
  connection_options o;
  o.port = redislock_test::free_port();  // nothing listens there
  loop runner;
  {
    async_client c(runner.io.get_executor(), async_client_options{o});
    async_mutex m(c, "down");
    auto [e, h] = outcome<async_hold>([&](auto cb) { m.async_lock(cb); });
    EXPECT_EQ(e, async_errc::connection_failed);
    EXPECT_FALSE(h.owns_lock());
  }
}

// The client goes away while an acquisition waits: it completes with connection_failed.
TEST_F(AsyncMutexTest, DestroyingTheClientEndsItsWaits) {
  mutex blocking(*pool, "gone");
  blocking.lock();
  std::promise<std::error_code> waited;
  {
    async_client c(runner->io.get_executor(), async_client_options{server->options()});
    async_mutex m(c, "gone");
    m.async_lock([&](std::error_code e, async_hold) { waited.set_value(e); });
    ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  }
  auto waiting = waited.get_future();
  ASSERT_EQ(waiting.wait_for(seconds(5)), std::future_status::ready);
  EXPECT_EQ(waiting.get(), async_errc::connection_failed);
  blocking.unlock();
}

// ---- Review findings (each test fails on the current code; see the commit message) ----

// The natural RAII order, {client, mutex, hold} destroyed innermost first, while the loop keeps
// running: the hold's release is posted first, the client's close second, and close() frees
// the command connection before hiredis ever wrote the release. The lock stays blocked for the
// whole lease (on_background_release reports `failed`), although nothing had broken.
TEST_F(AsyncMutexTest, AHoldDestroyedJustBeforeItsClientIsStillReleased) {
  lock_options o;
  o.lease = seconds(20);
  std::string key;
  auto failed = std::make_shared<std::atomic<int>>(0);
  {
    async_client_options co{server->options()};
    co.on_background_release = [failed](const std::string&, release_status s) {
      if (s == release_status::failed) ++*failed;
    };
    async_client c(runner->io.get_executor(), co);
    async_mutex m(c, "raii", o);
    key = m.key();
    async_hold h = m.async_lock(asio::use_future).get();
    ASSERT_TRUE(h.owns_lock());
  }  // h, then m, then c
  EXPECT_TRUE(eventually([&] { return !exists(key); }, seconds(2)))
      << "the lock stays held for its lease; background releases failed: " << failed->load();
}

// A completion "runs on the handler's associated executor (for a plain callback, the client's
// io_context)" (docs/async.md). A hold that was already unlocked completes a second call on
// asio's system executor instead: a thread the application never runs, concurrently with its
// single loop thread.
TEST_F(AsyncMutexTest, AnEmptyHoldCompletesOnTheLoopNotOnAForeignThread) {
  async_mutex m(*client, "where");
  async_hold h = m.async_lock(asio::use_future).get();
  EXPECT_FALSE(unlock_now(h));
  std::promise<std::thread::id> where;
  h.async_extend([&](std::error_code, bool) { where.set_value(std::this_thread::get_id()); });
  EXPECT_EQ(where.get_future().get(), runner->runners[0].get_id());
}

// A timed acquisition against a stalled server: the blocking mutex's try_lock_for ends by its
// deadline plus connect_timeout (options.hpp); the async one ignores its deadline while an
// attempt is in flight and completes only when command_timeout breaks the connection.
TEST_F(AsyncMutexTest, ATimedAcquisitionEndsByItsDeadlineWhenTheServerStalls) {
  redislock_test::tcp_proxy proxy(server->port());
  connection_options co = server->options();
  co.port = proxy.port();
  co.connect_timeout = milliseconds(500);
  co.command_timeout = seconds(3);
  async_client c(runner->io.get_executor(), async_client_options{co});
  async_mutex m(c, "stalled-try");
  async_hold first = m.async_lock(asio::use_future).get();  // the connection is open
  EXPECT_FALSE(unlock_now(first));
  proxy.set_stalled(true);
  const auto started = steady::now();
  auto [e, h] = outcome<async_hold>([&](auto cb) { m.async_try_lock_for(milliseconds(200), cb); });
  const auto took = std::chrono::duration_cast<milliseconds>(steady::now() - started);
  EXPECT_FALSE(h.owns_lock());
  EXPECT_LT(took, milliseconds(1500)) << "deadline 200 ms + connect_timeout 500 ms; completed with: " << e.message();
  proxy.heal();
}

// The subscriber connection dies while a queued waiter's "wait" is in flight. The waiter is
// not sleeping then, so on_subscribed(false) does not wake it; its reply then puts it to sleep
// with nobody subscribed to its channel. The next release counts no listener, drops its place
// and frees the lock, while the waiter sleeps on (up to recheck_interval, or the old holder's
// lease). The blocking waiter checks its subscription after every attempt (wake_wait.hpp).
TEST_F(AsyncMutexTest, AWaitInFlightWhenTheSubscriberDiesIsNotPassedOver) {
  redislock_test::tcp_proxy proxy(server->port());
  connection_options co = server->options();
  co.port = proxy.port();
  async_client c(runner->io.get_executor(), async_client_options{co});
  lock_options o;
  o.recheck_interval = seconds(30);
  async_mutex m(c, "inflight", o), watcher(c, "inflight-watcher", o);
  // A sleeping waiter on another name: its re-subscription (a new proxied connection) shows
  // that the client has handled the subscriber's death.
  admin->command({"SET", watcher.key(), "x", "PX", "60000"});
  watcher.async_lock([](std::error_code, async_hold) {});
  ASSERT_TRUE(eventually([&] { return queued(watcher.key()) == 1; }));
  // Our waiter sleeps until the holder's lease (1 s) ends, then sends a "wait".
  admin->command({"SET", m.key(), "holder", "PX", "1000"});
  asio::cancellation_signal signal;
  auto result = std::make_shared<std::promise<std::pair<std::error_code, bool>>>();
  m.async_lock(asio::bind_cancellation_slot(signal.slot(), [result](std::error_code e, async_hold h) {
    result->set_value({e, h.owns_lock()});
  }));
  auto done = result->get_future();
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  auto wait_sent = std::make_shared<std::atomic<bool>>(false);
  proxy.set_request_hook([wait_sent](const std::string& chunk) {
    if (chunk.find("\r\nwait\r\n") != std::string::npos) *wait_sent = true;
  });
  proxy.set_stalled(true, redislock_test::tcp_proxy::direction::to_server);
  admin->command({"PEXPIRE", m.key(), "60000"});                           // the holder keeps it after all
  ASSERT_TRUE(eventually([&] { return wait_sent->load(); }, seconds(3)));  // in flight, held by the proxy
  const auto connections = proxy.accepted();
  admin->command({"CLIENT", "KILL", "TYPE", "pubsub"});
  ASSERT_TRUE(eventually([&] { return proxy.accepted() > connections; }));  // the watcher subscribes again
  const auto place = [&] {
    auto r = admin->command({"HGETALL", m.key() + ":waiters"});  // the reply owns the string
    return std::string(r->element[1]->str, r->element[1]->len);
  };
  const std::string before = place();
  proxy.set_request_hook({});
  proxy.heal();
  ASSERT_TRUE(eventually([&] { return place() != before; }));  // our "wait" ran
  release_as(m, "holder");                                     // hands the lock to our waiter, or frees it
  const bool served = done.wait_for(seconds(3)) == std::future_status::ready;
  EXPECT_TRUE(served) << "the waiter sleeps on; the lock is " << (exists(m.key()) ? "held" : "free")
                      << ", its queue has " << queued(m.key()) << " place(s)";
  if (!served) asio::post(runner->io, [&] { signal.emit(asio::cancellation_type::terminal); });
  auto [e, held] = done.get();
  if (served) {
    EXPECT_FALSE(e);
    EXPECT_TRUE(held);
  }
}

// A hand-off counts its lease from the waiter's last "wait", which can be older than the lease
// (the waiter sleeps up to recheck_interval, or the holder's remaining lease). The server gave
// the waiter a full lease at the release, yet with auto_renew the fresh hold is lost() at
// once and on_lost runs: renew() checks the clock before it tries the extend. The blocking
// mutex renews once in that case (object_hold.hpp, start_renewal).
TEST_F(AsyncMutexTest, AHandOffAfterALongSleepIsNotLostAtOnce) {
  lock_options o;
  o.lease = milliseconds(300);
  o.auto_renew = true;
  o.recheck_interval = seconds(5);
  auto lost = std::make_shared<std::atomic<int>>(0);
  o.on_lost = [lost](const std::string&) { ++*lost; };
  async_mutex m(*client, "long-sleep", o);
  mutex blocking(*pool, "long-sleep", lease(seconds(10)));
  blocking.lock();
  auto waiting = m.async_lock(asio::use_future);
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  std::this_thread::sleep_for(milliseconds(500));  // longer than our lease since our "wait"
  blocking.unlock();                               // hands us a full 300 ms lease from now
  async_hold h = waiting.get();
  ASSERT_TRUE(h.owns_lock());
  EXPECT_EQ(get(m.key()), h.token());
  EXPECT_GT(admin->command({"PTTL", m.key()})->integer, 100);
  EXPECT_FALSE(h.lost()) << "on_lost calls: " << lost->load();
  EXPECT_FALSE(unlock_now(h));
}

// A hand-off to a token no acquisition waits for any more (one that could not leave the queue)
// is passed on with one owner-checked release, sent once: when that release is lost with its
// connection, nothing sends it again, and the lock stays
// with a token nobody uses for the whole lease it was handed.
TEST_F(AsyncMutexTest, APassedOnHandOffIsReleasedEvenWhenTheFirstTryIsLost) {
  redislock_test::tcp_proxy proxy(server->port());
  connection_options co = server->options();
  co.port = proxy.port();
  co.command_timeout = milliseconds(300);
  async_client c(runner->io.get_executor(), async_client_options{co});
  async_mutex m(c, "pass-on");
  admin->command({"SET", m.key(), "holder", "PX", "60000"});
  // One wait that gives up: the mutex stays subscribed to its channel.
  EXPECT_FALSE(m.async_try_lock_for(milliseconds(50), asio::use_future).get().owns_lock());
  auto channels = admin->command({"PUBSUB", "CHANNELS", m.key() + ":w:*"});
  ASSERT_EQ(channels->elements, 1u);
  const std::string channel(channels->element[0]->str, channels->element[0]->len);
  // A place left by an acquisition of this mutex that failed before it could leave.
  const std::string stale = channel.substr((m.key() + ":w:").size()) + ":999999";
  admin->command({"ZADD", m.key() + ":queue", "1", stale});
  admin->command({"HSET", m.key() + ":waiters", stale, "99999999999999:20000"});
  auto release_sent = std::make_shared<std::atomic<bool>>(false);
  proxy.set_request_hook([release_sent, stale](const std::string& chunk) {
    if (chunk.find(stale) != std::string::npos) *release_sent = true;
  });
  proxy.set_stalled(true, redislock_test::tcp_proxy::direction::to_server);
  release_as(m, "holder");  // hands the lock to the stale token; our client passes it on
  EXPECT_EQ(get(m.key()), stale);
  ASSERT_TRUE(eventually([&] { return release_sent->load(); }));  // the pass-on release, held by the proxy
  EXPECT_EQ(c.stats().passed_on, 1u);
  proxy.cut_all();  // ... and lost with its connection
  proxy.set_request_hook({});
  proxy.heal();
  EXPECT_TRUE(eventually([&] { return get(m.key()) != stale; }, seconds(3)))
      << "the lock stays with the stale token for " << admin->command({"PTTL", m.key()})->integer << " ms";
}

// A hand-off notice is trusted with the send time of the waiter's LAST "wait" as its lease's
// start. The notice travels on the subscriber connection, the attempts' replies on the command
// connection: nothing orders them. Here the notice lags (2.3 s, replies of the connections
// read meanwhile); the lease it announced (1.5 s) runs out, a blocking client takes the lock,
// and then the waiter's next "wait" (not acquired) is answered before the notice arrives. The
// notice then makes a holder whose lease counts from that "wait": lost() false and
// lease_confirmed_until() 1.2 s ahead, while the blocking client holds the lock (and the
// blocking waiter does the same, object_hold.hpp: queue_sent_).
TEST_F(AsyncMutexTest, AStaleHandOffNoticeMakesNoSecondHolder) {
  redislock_test::tcp_proxy proxy(server->port());
  connection_options co = server->options();
  co.port = proxy.port();
  async_client c(runner->io.get_executor(), async_client_options{co});
  lock_options o;
  o.lease = milliseconds(1500);
  o.auto_renew = true;
  o.recheck_interval = seconds(30);
  async_mutex m(c, "stale-notice", o), probe(c, "stale-notice-probe");
  mutex first(*pool, "stale-notice", lease(milliseconds(2000)));
  mutex other(*pool, "stale-notice", lease(seconds(60)));
  first.lock();  // our waiter's "wait" sees 2 s left: it sleeps that long, then asks again
  struct seen {
    bool owns = false, lost = true;
    long long confirmed_ahead_ms = 0;
    std::error_code e;
  };
  auto result = std::make_shared<std::promise<seen>>();
  asio::cancellation_signal signal;
  m.async_lock(asio::bind_cancellation_slot(signal.slot(), [result](std::error_code e, async_hold h) {
    seen s;
    s.e = e;
    s.owns = h.owns_lock();
    s.lost = h.lost();
    if (auto until = h.lease_confirmed_until())
      s.confirmed_ahead_ms = std::chrono::duration_cast<milliseconds>(*until - steady::now()).count();
    result->set_value(s);
  }));
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  async_hold p = probe.async_lock(asio::use_future).get();  // after our "wait"'s reply, same connection
  EXPECT_FALSE(unlock_now(p));
  proxy.set_delay(milliseconds(2300), milliseconds(0), redislock_test::tcp_proxy::direction::to_client);
  first.unlock();  // hands our waiter the lock (1.5 s lease); its notice lags
  ASSERT_TRUE(eventually([&] { return !exists(m.key()); }, seconds(3)));  // that lease ran out
  proxy.set_delay(milliseconds(0), milliseconds(0), redislock_test::tcp_proxy::direction::to_client);
  ASSERT_TRUE(other.try_lock());
  auto outcome_of_wait = result->get_future();
  if (outcome_of_wait.wait_for(seconds(3)) != std::future_status::ready)
    asio::post(runner->io, [&] { signal.emit(asio::cancellation_type::terminal); });
  const seen s = outcome_of_wait.get();
  EXPECT_TRUE(other.still_held());  // the blocking client held the lock throughout
  EXPECT_FALSE(s.owns && !s.lost && s.confirmed_ahead_ms > 0)
      << "a second holder: lost() false, lease confirmed for " << s.confirmed_ahead_ms << " ms more";
  other.unlock();
}

// A user the server lets lock but not SUBSCRIBE (an ACL without the lock's channels): the
// blocking waiter backs off and polls (wake_wait.hpp: "a refusal, e.g. by ACL"), and gets the
// lock when the holder's lease ends. The async waiter's refused SUBSCRIBE is never confirmed:
// command_timeout breaks the subscriber connection and the acquisition fails.
TEST_F(AsyncMutexTest, AWaiterThatMayNotSubscribeStillGetsTheLock) {
  if (redislock_test::server_version(*admin) < 60200) GTEST_SKIP() << "Redis < 6.2 has no channel permissions";
  admin->command({"ACL", "SETUSER", "nosub", "on", ">pw", "~*", "resetchannels", "+@all"});
  connection_options co = server->options();
  co.user = "nosub";
  co.password = "pw";
  async_client c(runner->io.get_executor(), async_client_options{co});
  async_mutex m(c, "no-subscribe");
  mutex holder(*pool, "no-subscribe", lease(milliseconds(1500)));
  holder.lock();  // never released: its lease runs out
  auto [e, h] = outcome<async_hold>([&](auto cb) { m.async_try_lock_for(seconds(5), cb); });
  EXPECT_FALSE(e) << e.message();
  EXPECT_TRUE(h.owns_lock());
  admin->command({"ACL", "DELUSER", "nosub"});
}

#if !(defined(REDISLOCK_WITH_TLS) && HIREDIS_MAJOR >= 1)
// A build without TLS refuses it when the client is made (it would otherwise speak plain RESP to
// a TLS port): test_async_tls.cpp covers the builds with it.
TEST_F(AsyncMutexTest, TlsAskedOfABuildWithoutItIsRefusedAtConstruction) {
  async_client_options o{server->options()};
  o.connection.tls = true;
  EXPECT_THROW(async_client(runner->io.get_executor(), o), invalid_argument);
}
#endif

// A name held by another kind fails with server_error; the observer's error names the lock,
// the kind that holds it and the kind asked for, as the blocking kinds' wrong_type_error does.
TEST_F(AsyncMutexTest, AnotherKindsNameFailsAndTheObserverHearsWhichKinds) {
  struct errors : lock_observer {
    std::mutex m;
    std::vector<std::string> seen;
    void on_not_acquired(const not_acquired_event& e) override {
      const std::lock_guard<std::mutex> g(m);
      seen.push_back(std::string(e.error));
    }
  };
  auto heard = std::make_shared<errors>();
  semaphore p(*pool, "clash", 2);
  ASSERT_TRUE(p.try_acquire());
  reentrant_mutex r(*pool, "clash-r");
  ASSERT_TRUE(r.try_lock());
  set_observer(heard);
  async_mutex m(*client, "clash");
  auto [e1, h1] = outcome<async_hold>([&](auto cb) { m.async_try_lock_for(milliseconds(0), cb); });
  lock_options fair;
  fair.fair = true;
  async_mutex f(*client, "clash", fair);  // by its script, not SET NX GET
  auto [e2, h2] = outcome<async_hold>([&](auto cb) { f.async_try_lock_for(milliseconds(0), cb); });
  async_shared_mutex s(*client, "clash");
  auto [e3, h3] = outcome<async_hold>([&](auto cb) { s.async_try_lock_shared_for(milliseconds(0), cb); });
  async_semaphore q(*client, "clash-r", 2);
  auto [e4, h4] = outcome<async_hold>([&](auto cb) { q.async_try_acquire_for(milliseconds(0), cb); });
  set_observer(nullptr);
  for (const std::error_code& e : {e1, e2, e3, e4}) EXPECT_EQ(e, make_error_code(async_errc::server_error));
  EXPECT_FALSE(h1.owns_lock() || h2.owns_lock() || h3.owns_lock() || h4.owns_lock());
  const std::lock_guard<std::mutex> g(heard->m);
  EXPECT_EQ(heard->seen, (std::vector<std::string>{"'clash' is a semaphore; a mutex cannot use it",
                                                   "'clash' is a semaphore; a mutex cannot use it",
                                                   "'clash' is a semaphore; a shared mutex cannot use it",
                                                   "'clash-r' is a reentrant mutex; a semaphore cannot use it"}));
}

// The observer (observe.hpp) hears the async kinds as it hears the blocking ones: an attempt,
// then acquired (direct, or by a release's hand-off after waking on its notice) or not
// acquired, the fencing token, renewals, a loss once, and the release with its hold's number.
struct AsyncObservedTest : AsyncMutexTest {
  void SetUp() override {
    AsyncMutexTest::SetUp();
    set_observer(rec);
  }
  void TearDown() override {
    AsyncMutexTest::TearDown();
    set_observer(nullptr);
  }
  // Releases `h` and waits until the observer heard it (it is told before the completion runs).
  void release(async_hold& h, release_status expected) {
    release_status s{};
    EXPECT_FALSE(unlock_now(h, &s));
    EXPECT_EQ(s, expected);
  }
  std::shared_ptr<redislock_test::recorder> rec = std::make_shared<redislock_test::recorder>();
};

TEST_F(AsyncObservedTest, AcquisitionsFencingHandOffTimeoutAndReleaseAreReported) {
  async_mutex m(*client, "obs");
  async_hold h = m.async_lock(asio::use_future).get();
  EXPECT_GT(h.async_fencing_token(asio::use_future).get(), 0u);
  EXPECT_GT(h.async_fencing_token(asio::use_future).get(), 0u);  // kept: not reported again
  async_hold none = m.async_try_lock_for(milliseconds(0), asio::use_future).get();
  EXPECT_FALSE(none.owns_lock());
  auto waiting = m.async_lock(asio::use_future);
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  redislock_test::replies_handled(*client);  // asleep until the notice: woken by it, handed the lock
  release(h, release_status::released);
  async_hold next = waiting.get();
  release(next, release_status::released);
  // Up to the waiter's attempt, in this order; then the release and the waiter's wake-up on the
  // notice, in either order (one arrives as a reply, the other on the subscriber connection).
  const std::vector<std::string> in_order = {
      "attempt obs mutex/exclusive wait",         "acquired obs mutex/exclusive direct attempts=1",
      "fenced obs mutex/exclusive token=",        "attempt obs mutex/exclusive try",
      "not_acquired obs mutex/exclusive timeout", "attempt obs mutex/exclusive wait",
      "acquired obs mutex/exclusive handoff",     "released obs mutex/exclusive released",
  };
  const std::vector<std::string> lines = rec->snapshot();
  std::size_t at = 0;  // each line above in this order (others may come between: attempts, wake-ups, a release)
  for (const auto& want : in_order) {
    while (at < lines.size() && lines[at].rfind(want, 0) != 0) ++at;
    EXPECT_LT(at, lines.size()) << "missing, in order: " << want << "\nall:\n" << ::testing::PrintToString(lines);
    ++at;
  }
  EXPECT_EQ(rec->count("released obs mutex/exclusive released"), 2);
  EXPECT_EQ(rec->count("woken obs mutex/exclusive notice"), 1);
  EXPECT_EQ(rec->count("fenced"), 1);
  EXPECT_EQ(rec->count("bad_"), 0) << ::testing::PrintToString(lines);  // hold numbers paired, hold times set
}

TEST_F(AsyncObservedTest, RenewalsAndALossAreReportedOnceAndTheKindsAreNamed) {
  lock_options o;
  o.lease = milliseconds(300);
  o.auto_renew = true;
  async_mutex m(*client, "obs-renewed", o);
  async_hold h = m.async_lock(asio::use_future).get();
  ASSERT_TRUE(eventually([&] { return rec->count("renewed - 1/1") >= 2; }));
  admin->command({"SET", m.key(), "someone-else"});
  ASSERT_TRUE(eventually([&] { return h.lost(); }));
  EXPECT_TRUE(h.lost());  // asked again: still one lost event
  release(h, release_status::lease_expired);
  EXPECT_EQ(rec->count("lost obs-renewed mutex/exclusive"), 1);
  EXPECT_EQ(rec->count("released obs-renewed mutex/exclusive lease_expired"), 1);

  async_semaphore permits(*client, "obs-sem", 2);
  async_hold p = permits.async_acquire(asio::use_future).get();
  release(p, release_status::released);
  async_shared_mutex rw(*client, "obs-rw");
  async_hold r = rw.async_lock_shared(asio::use_future).get();
  release(r, release_status::released);
  EXPECT_EQ(rec->count("acquired obs-sem semaphore/exclusive direct"), 1);
  EXPECT_EQ(rec->count("released obs-sem semaphore/exclusive released"), 1);
  EXPECT_EQ(rec->count("acquired obs-rw shared_mutex/shared direct"), 1);
  EXPECT_EQ(rec->count("released obs-rw shared_mutex/shared released"), 1);
  EXPECT_EQ(rec->count("bad_"), 0) << ::testing::PrintToString(rec->snapshot());
}

}  // namespace

// The async kinds send no WAIT after an acquisition: min_replicas is refused at construction
// (naming the option), never ignored.
TEST(AsyncOptions, MinReplicasIsRefusedAtConstruction) {
  asio::io_context io;
  async_client c(io.get_executor());  // sends nothing
  lock_options o;
  o.min_replicas = 1;
  try {
    async_mutex m(c, "replicated", o);
    ADD_FAILURE() << "min_replicas accepted by async_mutex";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("min_replicas"), std::string::npos) << e.what();
  }
  EXPECT_THROW(async_semaphore(c, "replicated", 2, o), invalid_argument);
  EXPECT_THROW(async_shared_mutex(c, "replicated", o), invalid_argument);
}

}  // namespace test_async_mutex
