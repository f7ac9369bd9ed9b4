// redislock::async_semaphore (asio.hpp): at most N async holders over many acquisitions on one
// loop thread; async and blocking semaphores of one name share the permits and hand them to
// each other both ways; cancellation under contention; renewal, loss and a forced expiry; a
// timed acquisition that runs out; the stored permit count ruling an object made with another;
// a permit handed to an abandoned token passed on; grants racing random cancellations. And
// redislock::async_shared_mutex, the other kind on the same acquisition machinery (one test
// program for both: an asio test costs a long compile in every CI variant): readers together,
// a writer alone, hand-offs with blocking holders both ways, writer preference, a cancelled
// writer letting the readers behind it in, read holds renewed on their side, abandoned
// hand-offs passed on with each side's release, grants racing random cancellations.
#include "async_fixture.hpp"
#include "eventually.hpp"

#include <redislock/asio.hpp>
#include <redislock/redislock.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_future.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace test_async_semaphore {

using namespace redislock;
using redislock_test::eventually;
using redislock_test::outcome;
using redislock_test::unlock_now;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

// Grants racing cancellations: a two-thread loop with an async_client of its own, on which run()
// starts kChains chains of kRounds acquisitions, every other one cancelled after a random 0-3 ms
// (before, during or after its grant), while a thread runs blocking_cycle(i) for i = 0, 1, ...
// start(pick, handler) starts one acquisition (pick: a random 0..2 the test may use to choose a
// side); a hold is kept for 0.5 ms between enter(pick) and leave(pick), which check the kind's
// exclusion (leave runs before the release is sent). run() returns whether every chain ended
// within 20 s; either way nothing of the chains, nor the blocking cycle, runs any more then.
struct cancellation_race {
  explicit cancellation_race(const connection_options& server)
      : trace(__FILE__, __LINE__, "seed " + std::to_string(seed)), client(two.io.get_executor(), {server}) {}

  template <class Start, class Enter, class Leave, class Cycle>
  bool run(Start start, Enter enter, Leave leave, Cycle blocking_cycle) {
    std::atomic<bool> stop{false};
    std::thread blocking([&] {
      for (int i = 0; !stop; ++i) blocking_cycle(i);
    });
    const bool ended = run_chains(start, enter, leave);
    stop = true;
    blocking.join();
    return ended;
  }

  const std::uint32_t seed = std::random_device{}();
  testing::ScopedTrace trace;
  redislock_test::loop two{2};
  async_client client;

 private:
  template <class Start, class Enter, class Leave>
  bool run_chains(Start start, Enter enter, Leave leave) {
    constexpr int kChains = 8, kRounds = 40;
    // Everything runs on the chains' strand: a signal's emit never overlaps its slot's clear,
    // and once `stopped` is set there no chain calls the test's functions again.
    struct chains {
      chains(asio::io_context& io, std::uint32_t seed) : strand(asio::make_strand(io)), rng(seed) {}
      asio::strand<asio::io_context::executor_type> strand;
      std::mt19937 rng;
      int ended = 0;
      bool stopped = false;
      std::promise<void> all;
      std::function<void(int)> go;
    };
    auto c = std::make_shared<chains>(two.io, seed);
    std::weak_ptr<chains> w = c;
    c->go = [w, start, enter, leave](int left) {
      auto c = w.lock();
      if (!c || c->stopped) return;
      if (left == 0) {
        if (++c->ended == kChains) c->all.set_value();
        return;
      }
      const int pick = static_cast<int>(c->rng() % 3);
      auto signal = std::make_shared<asio::cancellation_signal>();
      auto cancel_at = std::make_shared<asio::steady_timer>(c->strand, std::chrono::microseconds(c->rng() % 3000));
      // The signal lives until the completion (which clears its slot).
      auto on_done = [w, left, pick, signal, cancel_at, enter, leave](std::error_code, async_hold h) {
        cancel_at->cancel();
        auto c = w.lock();
        if (!c || c->stopped) return;
        if (!h.owns_lock()) return c->go(left - 1);
        enter(pick);
        auto held = std::make_shared<async_hold>(std::move(h));
        auto hold_for = std::make_shared<asio::steady_timer>(c->strand, std::chrono::microseconds(500));
        hold_for->async_wait([w, left, pick, held, hold_for, leave](std::error_code) {
          auto c = w.lock();
          if (!c || c->stopped) return;
          leave(pick);
          held->async_unlock(asio::bind_executor(c->strand, [w, left, held](std::error_code, release_status) {
            if (auto c = w.lock()) c->go(left - 1);
          }));
        });
      };
      start(pick, asio::bind_cancellation_slot(signal->slot(), asio::bind_executor(c->strand, on_done)));
      if (c->rng() % 2 == 0) {
        cancel_at->async_wait([signal](std::error_code e) {
          if (!e) signal->emit(asio::cancellation_type::terminal);
        });
      }
    };
    for (int i = 0; i < kChains; ++i) asio::post(c->strand, [c] { c->go(kRounds); });
    const bool ended = c->all.get_future().wait_for(seconds(20)) == std::future_status::ready;
    asio::post(c->strand, asio::use_future([c] { c->stopped = true; })).get();
    return ended;
  }
};

struct AsyncSemaphoreTest : redislock_test::async_server_test {
  // Waiters queued on the server for the semaphore at `key`.
  long long queued(const std::string& key) { return admin->command({"ZCARD", key + ":pqueue"})->integer; }
  // Valid holders on the server (the holders zset has one more member: the permit count).
  long long holders(const std::string& key) {
    return admin->command({"ZCOUNT", key, "1", "+inf"})->integer;  // lease ends are positive
  }
};

TEST_F(AsyncSemaphoreTest, BadPermitCountsAreRefusedAndSendNothing) {
  for (std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, max_permits + 1})
    EXPECT_THROW(async_semaphore(*client, "bad", bad), invalid_argument);
  EXPECT_THROW(async_semaphore(*client, "", 2), invalid_argument);
  EXPECT_FALSE(exists("redislock:{bad}"));
}

// Twelve chains of acquisitions on the one loop thread, each holding for a 2 ms timer: never
// more than N inside at once, N at once at some point, and nothing left on the server.
TEST_F(AsyncSemaphoreTest, AtMostNHoldAtOnceOverManyAcquisitions) {
  constexpr int kPermits = 3, kChains = 12, kRounds = 10;
  async_semaphore s(*client, "n", kPermits, lease(seconds(20)));
  int inside = 0, most = 0, done = 0;  // the loop thread only
  std::promise<void> all_done;
  std::function<void(int)> go = [&](int left) {
    if (left == 0) {
      if (++done == kChains) all_done.set_value();
      return;
    }
    s.async_acquire([&, left](std::error_code e, async_hold h) {
      ASSERT_FALSE(e) << e.message();
      most = std::max(most, ++inside);
      auto held = std::make_shared<async_hold>(std::move(h));
      auto timer = std::make_shared<asio::steady_timer>(runner->io, milliseconds(2));
      timer->async_wait([&, left, held, timer](std::error_code) {
        --inside;
        held->async_unlock([&, left, held](std::error_code e, release_status st) {
          EXPECT_FALSE(e);
          EXPECT_EQ(st, release_status::released);
          go(left - 1);
        });
      });
    });
  };
  asio::post(runner->io, [&] {
    for (int i = 0; i < kChains; ++i) go(kRounds);
  });
  ASSERT_EQ(all_done.get_future().wait_for(seconds(10)), std::future_status::ready);
  EXPECT_EQ(most, kPermits);
  EXPECT_EQ(client->stats().acquired, static_cast<std::uint64_t>(kChains * kRounds));
  EXPECT_EQ(queued(s.key()), 0);
  EXPECT_FALSE(exists(s.key()));  // an idle semaphore leaves no key
}

// Two permits: one async and one blocking holder fill them; then a blocking release hands its
// permit to an async waiter, and an async release hands its permit to a blocking waiter.
TEST_F(AsyncSemaphoreTest, AsyncAndBlockingHoldersShareThePermitsAndHandOffBothWays) {
  const lock_options o = lease(seconds(20));
  async_semaphore s(*client, "mixed", 2, o);
  client_options other_options = options();
  redislock::client other(other_options);
  semaphore b1(*pool, "mixed", 2, o), b2(other, "mixed", 2, o);
  async_hold a1 = s.async_acquire(asio::use_future).get();
  ASSERT_TRUE(a1.owns_lock());
  ASSERT_TRUE(b1.try_acquire());
  EXPECT_EQ(holders(s.key()), 2);
  EXPECT_FALSE(s.async_try_acquire_for(milliseconds(0), asio::use_future).get().owns_lock());
  EXPECT_FALSE(b2.try_acquire());

  // Blocking -> async.
  auto waiting = s.async_acquire(asio::use_future);
  ASSERT_TRUE(eventually([&] { return queued(s.key()) == 1; }));
  redislock_test::replies_handled(*client);  // asleep until the notice
  b1.release();
  EXPECT_EQ(b1.last_release(), release_status::released);
  ASSERT_EQ(waiting.wait_for(seconds(5)), std::future_status::ready);
  async_hold a2 = waiting.get();
  ASSERT_TRUE(a2.owns_lock());
  EXPECT_EQ(client->stats().handed_over, 1u);
  EXPECT_EQ(holders(s.key()), 2);

  // Async -> blocking.
  std::promise<void> acquired;
  std::thread waiter([&] {
    b2.acquire();
    acquired.set_value();
  });
  ASSERT_TRUE(eventually([&] { return queued(s.key()) == 1; }));
  EXPECT_FALSE(unlock_now(a1));
  ASSERT_EQ(acquired.get_future().wait_for(seconds(5)), std::future_status::ready);
  waiter.join();
  EXPECT_TRUE(b2.owns_lock());
  EXPECT_EQ(holders(s.key()), 2);
  EXPECT_FALSE(s.async_try_acquire_for(milliseconds(0), asio::use_future).get().owns_lock());

  EXPECT_FALSE(unlock_now(a2));
  b2.release();
  EXPECT_EQ(queued(s.key()), 0);
  EXPECT_FALSE(exists(s.key()));
}

// Both permits held, ten waiters queued; every waiter is cancelled from the loop while both
// holders release (their hand-offs race the cancellations): every waiter completes aborted
// and empty, the queue is empty, and no permit stays held.
TEST_F(AsyncSemaphoreTest, CancelledWaitersLeaveTheQueueAndHoldNoPermit) {
  async_semaphore s(*client, "c", 2, lease(seconds(20)));
  async_hold h1 = s.async_acquire(asio::use_future).get();
  async_hold h2 = s.async_acquire(asio::use_future).get();
  constexpr int kWaiters = 10;
  std::vector<asio::cancellation_signal> signals(kWaiters);
  std::vector<std::promise<std::pair<std::error_code, bool>>> results(kWaiters);
  for (int i = 0; i < kWaiters; ++i) {
    s.async_acquire(asio::bind_cancellation_slot(signals[i].slot(), [&, i](std::error_code e, async_hold h) {
      results[i].set_value({e, h.owns_lock()});
    }));
  }
  ASSERT_TRUE(eventually([&] { return queued(s.key()) == kWaiters; }));
  asio::post(runner->io, [&] {
    for (auto& sig : signals) sig.emit(asio::cancellation_type::terminal);
  });
  EXPECT_FALSE(unlock_now(h1));
  EXPECT_FALSE(unlock_now(h2));
  for (auto& r : results) {
    auto f = r.get_future();
    ASSERT_EQ(f.wait_for(seconds(5)), std::future_status::ready);
    auto [e, held] = f.get();
    EXPECT_EQ(e, asio::error::operation_aborted);
    EXPECT_FALSE(held);
  }
  EXPECT_EQ(queued(s.key()), 0);
  EXPECT_TRUE(eventually([&] { return !exists(s.key()); }));  // a grant that raced is released
}

// The grant races the cancellation, deterministically: on the (blocked) loop thread the waiter
// is cancelled first, then the holder's release hands it the permit (run by the admin
// connection: a release by another process); the waiter's "leave" finds the permit its own and
// releases it.
TEST_F(AsyncSemaphoreTest, ACancellationThatRacedWithAGrantReleasesThePermit) {
  async_semaphore s(*client, "race", 1, lease(seconds(20)));
  async_hold holder = s.async_acquire(asio::use_future).get();
  asio::cancellation_signal signal;
  std::promise<std::pair<std::error_code, bool>> result;
  s.async_acquire(asio::bind_cancellation_slot(signal.slot(), [&](std::error_code e, async_hold h) {
    result.set_value({e, h.owns_lock()});
  }));
  ASSERT_TRUE(eventually([&] { return queued(s.key()) == 1; }));
  const std::string& k = s.key();
  std::promise<void> handed;
  asio::post(runner->io, [&] {
    signal.emit(asio::cancellation_type::terminal);  // runs on the client's strand after this task
    admin->command({"EVAL", detail::semaphore_scripts::release().source(), "4", k, k + ":fence", k + ":pqueue",
                    k + ":pwaiters", holder.token(), k + ":w:", "1"});
    handed.set_value();
  });
  handed.get_future().wait();
  auto [e, held] = result.get_future().get();
  EXPECT_EQ(e, asio::error::operation_aborted);
  EXPECT_FALSE(held);
  EXPECT_EQ(client->stats().released_after_cancel, 1u);
  EXPECT_EQ(queued(k), 0);
  EXPECT_FALSE(exists(k));  // no permit held
  release_status st{};
  EXPECT_FALSE(unlock_now(holder, &st));
  EXPECT_EQ(st, release_status::lease_expired);  // the release above was not its own
}

// auto_renew renews on the loop; a permit taken away on the server is reported lost by the next
// renewal (on_lost, once), and the release then says lease_expired.
TEST_F(AsyncSemaphoreTest, RenewsOnTheLoopAndReportsALostLease) {
  lock_options o;
  o.lease = milliseconds(300);
  o.auto_renew = true;
  std::promise<void> lost;
  std::atomic<int> reports{0};
  o.on_lost = [&](const std::string& name) {
    EXPECT_EQ(name, "r");
    if (++reports == 1) lost.set_value();
  };
  async_semaphore s(*client, "r", 2, o);
  async_hold h = s.async_acquire(asio::use_future).get();
  ASSERT_TRUE(h.lease_confirmed_until().has_value());
  const auto first = *h.lease_confirmed_until();
  ASSERT_TRUE(eventually([&] { return *h.lease_confirmed_until() > first; }, seconds(1)));  // renewed
  EXPECT_FALSE(h.lost());
  EXPECT_GT(h.async_remaining_lease(asio::use_future).get(), milliseconds(0));
  admin->command({"ZREM", s.key(), h.token()});
  ASSERT_EQ(lost.get_future().wait_for(seconds(2)), std::future_status::ready);
  EXPECT_TRUE(h.lost());
  release_status st{};
  EXPECT_FALSE(unlock_now(h, &st));
  EXPECT_EQ(st, release_status::lease_expired);
  EXPECT_EQ(reports.load(), 1);
}

// Fencing tokens, extend and remaining lease on a permit; then its lease end is forced into the
// past on the server: extend says false, fencing_token refuses, unlock reports lease_expired.
TEST_F(AsyncSemaphoreTest, FencingExtendAndUnlockAfterAForcedExpiry) {
  async_semaphore s(*client, "f", 2);
  semaphore blocking(*pool, "f", 2);
  async_hold h = s.async_acquire(asio::use_future).get();
  const std::uint64_t f1 = h.async_fencing_token(asio::use_future).get();
  EXPECT_GT(f1, 0u);
  EXPECT_EQ(h.async_fencing_token(asio::use_future).get(), f1);
  ASSERT_TRUE(blocking.try_acquire());
  EXPECT_GT(blocking.fencing_token(), f1);  // one counter per name, async and blocking
  blocking.release();
  EXPECT_TRUE(h.async_extend(seconds(60), asio::use_future).get());
  EXPECT_GT(h.async_remaining_lease(asio::use_future).get(), seconds(50));

  async_hold g = s.async_acquire(asio::use_future).get();
  admin->command({"ZADD", s.key(), "XX", "1", g.token()});  // its lease ended long ago
  EXPECT_EQ(g.async_remaining_lease(asio::use_future).get(), milliseconds(0));
  EXPECT_EQ(outcome<std::uint64_t>([&](auto cb) { g.async_fencing_token(cb); }).first, async_errc::lease_lost);
  EXPECT_FALSE(g.async_extend(asio::use_future).get());
  EXPECT_TRUE(g.lost());
  release_status st{};
  EXPECT_FALSE(unlock_now(g, &st));
  EXPECT_EQ(st, release_status::lease_expired);
  EXPECT_FALSE(unlock_now(h, &st));
  EXPECT_EQ(st, release_status::released);
  EXPECT_FALSE(exists(s.key()));
}

// All permits held by a blocking holder: a timed acquisition gives up by its deadline with an
// empty hold and no error, leaves the queue, and is handed nothing afterwards.
TEST_F(AsyncSemaphoreTest, TryAcquireForTimesOutEmpty) {
  async_semaphore s(*client, "t", 1);
  semaphore blocking(*pool, "t", 1);
  ASSERT_TRUE(blocking.try_acquire());
  const auto started = steady::now();
  auto [e, h] = outcome<async_hold>([&](auto cb) { s.async_try_acquire_for(milliseconds(150), cb); });
  EXPECT_FALSE(e);
  EXPECT_FALSE(h.owns_lock());
  EXPECT_GE(steady::now() - started, milliseconds(150));
  EXPECT_EQ(queued(s.key()), 0);
  blocking.release();
  EXPECT_FALSE(exists(s.key()));  // nobody was handed the permit
}

// The permit count lives on the server: an async semaphore made with 3 meets a blocking one that
// holds with 1, waits, is handed its permit, and the stored count (1) still rules while it holds.
TEST_F(AsyncSemaphoreTest, AnotherPermitCountYieldsToTheStoredOne) {
  const lock_options o = lease(seconds(20));
  async_semaphore s(*client, "count", 3, o);
  semaphore blocking(*pool, "count", 1, o);
  ASSERT_TRUE(blocking.try_acquire());
  EXPECT_FALSE(s.async_try_acquire_for(milliseconds(0), asio::use_future).get().owns_lock());
  auto waiting = s.async_acquire(asio::use_future);
  ASSERT_TRUE(eventually([&] { return queued(s.key()) == 1; }));
  blocking.release();
  ASSERT_EQ(waiting.wait_for(seconds(5)), std::future_status::ready);
  async_hold h = waiting.get();
  ASSERT_TRUE(h.owns_lock());
  EXPECT_EQ(admin->command({"ZSCORE", s.key(), "#permits"})->str, std::string("-1"));
  EXPECT_FALSE(s.async_try_acquire_for(milliseconds(0), asio::use_future).get().owns_lock());
  EXPECT_EQ(holders(s.key()), 1);
  EXPECT_FALSE(unlock_now(h));
  EXPECT_FALSE(exists(s.key()));
}

// A permit handed to a token of ours that no acquisition waits for (queued here by another
// connection under our channel's id) is passed on with the semaphore's release: the permit is
// free at once, not held until its lease ends.
TEST_F(AsyncSemaphoreTest, APermitHandedToAnAbandonedTokenIsPassedOn) {
  async_semaphore s(*client, "pass", 1, lease(seconds(20)));
  async_hold h = s.async_acquire(asio::use_future).get();
  ASSERT_TRUE(h.owns_lock());
  // One timed wait subscribes the object's channel (it stays subscribed).
  EXPECT_FALSE(s.async_try_acquire_for(milliseconds(30), asio::use_future).get().owns_lock());
  const std::string& k = s.key();
  const std::string abandoned = h.token().substr(0, h.token().rfind(':')) + ":999";
  admin->command({"EVAL", detail::semaphore_scripts::acquire().source(), "4", k, k + ":fence", k + ":pqueue",
                  k + ":pwaiters", abandoned, k + ":w:", "1", "20000", "wait", "0", "20000"});
  ASSERT_EQ(queued(k), 1);
  EXPECT_FALSE(unlock_now(h));  // hands the permit to the abandoned token
  ASSERT_TRUE(eventually([&] { return !exists(k); }));
  EXPECT_EQ(client->stats().passed_on, 1u);
  EXPECT_EQ(queued(k), 0);
}

// Grants racing cancellations, async holders of two objects made with different counts and a
// blocking holder: never more holders than the stored count (the semaphore is never idle: an
// anchor holds throughout, so no object's own count seeds it), nothing left afterwards.
TEST_F(AsyncSemaphoreTest, RacingCancellationsNeverExceedThePermits) {
  cancellation_race race(server->options());
  const lock_options o = lease(seconds(20));  // a leaked grant would stall the chains past their bound
  constexpr int kPermits = 3;                 // the anchor's and two more
  semaphore anchor(*pool, "race", kPermits, o), blocking(*pool, "race", kPermits, o);
  ASSERT_TRUE(anchor.try_acquire());
  async_semaphore s(race.client, "race", kPermits, o), other(race.client, "race", kPermits + 3, o);
  std::atomic<int> inside{1}, excess{0};
  auto enter = [&](int) {
    if (++inside > kPermits) ++excess;
  };
  auto leave = [&](int) { --inside; };
  ASSERT_TRUE(race.run([&](int pick, auto handler) { (pick == 0 ? other : s).async_acquire(std::move(handler)); },
                       enter, leave,
                       [&](int) {
                         blocking.acquire();
                         enter(0);
                         leave(0);
                         blocking.release();
                       }));
  EXPECT_EQ(excess.load(), 0);
  anchor.release();
  EXPECT_TRUE(eventually([&] { return !exists(s.key()); }));  // a grant that raced is released
  EXPECT_EQ(queued(s.key()), 0);
}

struct AsyncSharedMutexTest : redislock_test::async_server_test {
  long long queued(const std::string& key) { return admin->command({"ZCARD", key + ":squeue"})->integer; }
};

// Two async readers at once and a blocking reader with them; writers (async or blocking) stay
// out; a queued async writer keeps a new reader out (writer preference) and gets the lock when
// the last reader leaves; its release admits a blocking reader.
TEST_F(AsyncSharedMutexTest, ReadersShareWritersExcludeAndHandOffBothWays) {
  const lock_options o = lease(seconds(20));
  async_shared_mutex m(*client, "rw", o);
  shared_mutex blocking(*pool, "rw", o);
  async_hold r1 = m.async_lock_shared(asio::use_future).get();
  async_hold r2 = m.async_lock_shared(asio::use_future).get();
  ASSERT_TRUE(r1.owns_lock() && r2.owns_lock());
  EXPECT_FALSE(blocking.try_lock());
  ASSERT_TRUE(blocking.try_lock_shared());
  blocking.unlock_shared();
  EXPECT_FALSE(m.async_try_lock_for(milliseconds(0), asio::use_future).get().owns_lock());

  auto writing = m.async_lock(asio::use_future);
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  redislock_test::replies_handled(*client);  // asleep until the notice
  EXPECT_FALSE(m.async_try_lock_shared_for(milliseconds(0), asio::use_future).get().owns_lock());
  EXPECT_FALSE(unlock_now(r1));
  EXPECT_FALSE(unlock_now(r2));
  ASSERT_EQ(writing.wait_for(seconds(5)), std::future_status::ready);
  async_hold w = writing.get();
  ASSERT_TRUE(w.owns_lock());
  EXPECT_EQ(client->stats().handed_over, 1u);
  EXPECT_FALSE(blocking.try_lock_shared());

  std::promise<release_status> reading;  // a read hold belongs to its thread: released there
  std::thread reader([&] {
    blocking.lock_shared();
    blocking.unlock_shared();
    reading.set_value(blocking.last_release());
  });
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  EXPECT_FALSE(unlock_now(w));
  auto read = reading.get_future();
  ASSERT_EQ(read.wait_for(seconds(5)), std::future_status::ready);
  reader.join();
  EXPECT_EQ(read.get(), release_status::released);
  EXPECT_FALSE(exists(m.key()));
}

// A blocking writer's release admits the async readers queued behind it, all together.
TEST_F(AsyncSharedMutexTest, ABlockingWritersReleaseAdmitsTheAsyncReadersTogether) {
  const lock_options o = lease(seconds(20));
  async_shared_mutex m(*client, "admit", o);
  shared_mutex blocking(*pool, "admit", o);
  blocking.lock();
  constexpr int kReaders = 3;
  std::vector<std::future<async_hold>> waiting;
  for (int i = 0; i < kReaders; ++i) waiting.push_back(m.async_lock_shared(asio::use_future));
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == kReaders; }));
  redislock_test::replies_handled(*client);  // all asleep until the notice
  blocking.unlock();
  std::vector<async_hold> held;
  for (auto& f : waiting) {
    ASSERT_EQ(f.wait_for(seconds(5)), std::future_status::ready);
    held.push_back(f.get());
    EXPECT_TRUE(held.back().owns_lock());
  }
  EXPECT_EQ(client->stats().handed_over, static_cast<std::uint64_t>(kReaders));
  for (auto& h : held) EXPECT_FALSE(unlock_now(h));
  EXPECT_FALSE(exists(m.key()));
}

// A reader holds, a writer waits, a second reader waits behind the writer: cancelling the
// writer leaves the queue, which admits the reader behind it at once; nothing stays queued.
TEST_F(AsyncSharedMutexTest, ACancelledWriterLetsTheReadersBehindItIn) {
  lock_options o = lease(seconds(20));
  o.recheck_interval = seconds(30);  // only the hand-off ends the reader's wait in time
  async_shared_mutex m(*client, "cancel", o);
  async_hold r1 = m.async_lock_shared(asio::use_future).get();
  asio::cancellation_signal signal;
  std::promise<std::pair<std::error_code, bool>> writer;
  m.async_lock(asio::bind_cancellation_slot(signal.slot(), [&](std::error_code e, async_hold h) {
    writer.set_value({e, h.owns_lock()});
  }));
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 1; }));
  auto reading = m.async_lock_shared(asio::use_future);
  ASSERT_TRUE(eventually([&] { return queued(m.key()) == 2; }));
  asio::post(runner->io, [&] { signal.emit(asio::cancellation_type::terminal); });
  auto [e, held] = writer.get_future().get();
  EXPECT_EQ(e, asio::error::operation_aborted);
  EXPECT_FALSE(held);
  ASSERT_EQ(reading.wait_for(seconds(5)), std::future_status::ready);
  async_hold r2 = reading.get();
  EXPECT_TRUE(r2.owns_lock());
  EXPECT_EQ(queued(m.key()), 0);
  EXPECT_FALSE(unlock_now(r1));
  EXPECT_FALSE(unlock_now(r2));
  EXPECT_FALSE(exists(m.key()));
}

// Fencing token, extend and remaining lease on both sides; a read hold removed on the server is
// reported by extend (lost) and by the release (lease_expired); with auto_renew, a write hold
// removed on the server is reported by on_lost.
TEST_F(AsyncSharedMutexTest, HoldMembersOnBothSidesAndALostLease) {
  lock_options o;
  o.lease = milliseconds(300);
  o.auto_renew = true;
  std::promise<void> lost;
  std::atomic<int> reports{0};  // the read hold's renewal may report its loss too
  o.on_lost = [&](const std::string&) {
    if (++reports == 1) lost.set_value();
  };
  async_shared_mutex m(*client, "members", o);
  async_hold w = m.async_lock(asio::use_future).get();
  const std::uint64_t f1 = w.async_fencing_token(asio::use_future).get();
  EXPECT_GT(f1, 0u);
  // The renewals follow a confirmed extend: the next one comes a third of its lease after it.
  EXPECT_TRUE(w.async_extend(milliseconds(1500), asio::use_future).get());
  EXPECT_GT(w.async_remaining_lease(asio::use_future).get(), seconds(1));
  admin->command({"HDEL", m.key(), "@w", "@wx"});  // the write hold is gone on the server
  ASSERT_EQ(lost.get_future().wait_for(seconds(2)), std::future_status::ready);
  EXPECT_TRUE(w.lost());
  release_status st{};
  EXPECT_FALSE(unlock_now(w, &st));
  EXPECT_EQ(st, release_status::lease_expired);

  async_hold r = m.async_try_lock_shared_for(seconds(1), asio::use_future).get();
  ASSERT_TRUE(r.owns_lock());
  // The read hold renews on its own side: the loop's renewal and an explicit extend.
  ASSERT_TRUE(r.lease_confirmed_until().has_value());
  const auto first = *r.lease_confirmed_until();
  ASSERT_TRUE(eventually([&] { return *r.lease_confirmed_until() > first; }, seconds(1)));
  EXPECT_TRUE(r.async_extend(seconds(60), asio::use_future).get());
  EXPECT_FALSE(r.lost());
  EXPECT_EQ(reports.load(), 1);
  EXPECT_GT(r.async_fencing_token(asio::use_future).get(), f1);
  EXPECT_GT(r.async_remaining_lease(asio::use_future).get(), milliseconds(0));
  admin->command({"HDEL", m.key(), "r:" + r.token(), "x:" + r.token(), "g:" + r.token()});
  EXPECT_FALSE(r.async_extend(asio::use_future).get());
  EXPECT_TRUE(r.lost());
  EXPECT_FALSE(unlock_now(r, &st));
  EXPECT_EQ(st, release_status::lease_expired);
}

// Hand-offs to tokens of ours that no acquisition waits for, on both sides: the writer's notice
// ("<owner> w1") is passed on with the write release, which admits the reader behind it, whose
// notice ("<owner> r1") is passed on with the read release. Nothing stays held or queued.
TEST_F(AsyncSharedMutexTest, HandOffsToAbandonedTokensArePassedOnPerSide) {
  const lock_options o = lease(seconds(20));
  async_shared_mutex m(*client, "pass", o);
  shared_mutex blocking(*pool, "pass", o);
  auto id_of = [](const async_hold& h) { return h.token().substr(0, h.token().rfind(':')); };
  async_hold w = m.async_lock(asio::use_future).get();
  const std::string writer_id = id_of(w);
  EXPECT_FALSE(unlock_now(w));
  async_hold r = m.async_lock_shared(asio::use_future).get();
  const std::string reader_id = id_of(r);
  EXPECT_FALSE(unlock_now(r));
  blocking.lock();
  // One timed wait on each side subscribes its channel (they stay subscribed).
  auto wt = m.async_try_lock_for(milliseconds(30), asio::use_future);
  auto rt = m.async_try_lock_shared_for(milliseconds(30), asio::use_future);
  EXPECT_FALSE(wt.get().owns_lock());
  EXPECT_FALSE(rt.get().owns_lock());
  const std::string& k = m.key();
  auto queue = [&](const std::string& owner, const char* side) {
    admin->command({"EVAL", detail::shared_scripts::acquire().source(), "4", k, k + ":fence", k + ":squeue",
                    k + ":swaiters", owner, k + ":w:", "20000", "wait", "0", "20000", side, "1", "1", ""});
  };
  queue(writer_id + ":999", "w");
  queue(reader_id + ":999", "r");
  ASSERT_EQ(queued(k), 2);
  blocking.unlock();  // admits the abandoned writer
  ASSERT_TRUE(eventually([&] { return !exists(k); }));
  EXPECT_EQ(client->stats().passed_on, 2u);
  EXPECT_EQ(queued(k), 0);
}

// Grants racing cancellations on both sides, with a blocking writer and reader: never a writer
// with anyone else inside, nothing left afterwards.
TEST_F(AsyncSharedMutexTest, RacingCancellationsKeepWritersAlone) {
  cancellation_race race(server->options());
  const lock_options o = lease(seconds(20));  // a leaked grant would stall the chains past their bound
  async_shared_mutex m(race.client, "race", o);
  shared_mutex blocking(*pool, "race", o);  // used by the blocking cycle's thread only
  std::atomic<int> readers{0}, writers{0}, overlaps{0};
  auto enter = [&](int pick) {
    if (pick == 0 ? ++writers != 1 || readers.load() != 0 : (++readers, writers.load() != 0)) ++overlaps;
  };
  auto leave = [&](int pick) { pick == 0 ? --writers : --readers; };
  ASSERT_TRUE(race.run(
      [&](int pick, auto handler) {
        if (pick == 0) m.async_lock(std::move(handler));
        else m.async_lock_shared(std::move(handler));
      },
      enter, leave,
      [&](int i) {
        const int pick = i % 2;  // a writer, then a reader
        if (pick == 0) blocking.lock();
        else blocking.lock_shared();
        enter(pick);
        leave(pick);
        if (pick == 0) blocking.unlock();
        else blocking.unlock_shared();
      }));
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_TRUE(eventually([&] { return !exists(m.key()); }));
  EXPECT_EQ(queued(m.key()), 0);
}

}  // namespace

namespace {

std::int64_t counted(redislock::async_semaphore& s, bool available) {
  auto [e, n] = outcome<std::int64_t>([&](auto done) {
    if (available) s.async_available(done);
    else s.async_permits(done);
  });
  EXPECT_FALSE(e) << e.message();
  return n;
}

std::error_code set_permits(redislock::async_semaphore& s, std::int64_t n) {
  std::promise<std::error_code> p;
  s.async_set_permits(n, [&](std::error_code e) { p.set_value(e); });
  return p.get_future().get();
}

}  // namespace

// async_permits / async_available / async_set_permits: the blocking semaphore's permits(),
// available() and set_permits(), on the same scripts: the stored count rules while anyone
// holds (async or blocking), growing hands the new permits to the waiters at once, shrinking
// revokes nothing.
TEST_F(AsyncSemaphoreTest, PermitsAvailableAndSetPermitsAsTheBlockingSemaphore) {
  async_semaphore s(*client, "counted", 1);
  EXPECT_EQ(counted(s, false), 1);  // idle: this object's own count
  EXPECT_EQ(counted(s, true), 1);
  auto [e, first] = outcome<async_hold>([&](auto done) { s.async_try_acquire_for(milliseconds(0), done); });
  ASSERT_TRUE(first.owns_lock());
  EXPECT_EQ(counted(s, true), 0);
  redislock::client blocking_client(redislock::client_options{server->options()});
  redislock::semaphore blocking(blocking_client, "counted", 5);
  EXPECT_EQ(blocking.permits(), 1) << "the stored count rules while anyone holds";
  // A waiter, then growing to 2: it gets the new permit at once (handed on by the script).
  std::promise<std::pair<std::error_code, async_hold>> waited;
  s.async_acquire([&](std::error_code e2, async_hold h2) { waited.set_value({e2, std::move(h2)}); });
  EXPECT_TRUE(eventually([&] { return queued(s.key()) == 1; }));
  EXPECT_FALSE(set_permits(s, 2));
  auto [e2, second] = waited.get_future().get();
  EXPECT_FALSE(e2) << e2.message();
  ASSERT_TRUE(second.owns_lock());
  EXPECT_EQ(blocking.permits(), 2);
  EXPECT_EQ(counted(s, true), 0);
  // Shrinking revokes nothing: two holders stay over a count of 1, nobody else gets in.
  EXPECT_FALSE(set_permits(s, 1));
  EXPECT_EQ(counted(s, false), 1);
  EXPECT_EQ(counted(s, true), 0);
  EXPECT_FALSE(blocking.try_acquire());
  EXPECT_FALSE(first.lost());
  EXPECT_FALSE(unlock_now(first));
  EXPECT_EQ(counted(s, true), 0) << "still one holder for one permit";
  EXPECT_FALSE(unlock_now(second));
  EXPECT_EQ(counted(s, true), 1);
  // Bad counts are refused before anything is sent.
  EXPECT_THROW(s.async_set_permits(0, [](std::error_code) {}), redislock::invalid_argument);
  EXPECT_THROW(s.async_set_permits(max_permits + 1, [](std::error_code) {}), redislock::invalid_argument);
  // Idle: nothing stored; the object's own count is the last one it set.
  EXPECT_FALSE(set_permits(s, 3));
  EXPECT_EQ(counted(s, false), 3);
  EXPECT_EQ(blocking.permits(), 5) << "the blocking object's own count: the idle semaphore stores none";
}

// ---- the lease clock of every async kind (detail/lease_clock.hpp, the blocking kinds' rule) ----

namespace {

// One async kind: how to take a hold of `name`, and whether a blocking rival that needs what the
// hold has could take it now.
struct async_kind_case {
  const char* kind;
  std::function<async_hold(async_client&, const std::string&, const lock_options&)> take;
  std::function<bool(redislock::client&, const std::string&)> rival_gets_in;
};

std::vector<async_kind_case> async_kind_cases() {
  auto mutex_take = [](async_client& c, const std::string& n, const lock_options& o) {
    return async_mutex(c, n, o).async_lock(asio::use_future).get();
  };
  auto semaphore_take = [](async_client& c, const std::string& n, const lock_options& o) {
    return async_semaphore(c, n, 1, o).async_acquire(asio::use_future).get();
  };
  auto write_take = [](async_client& c, const std::string& n, const lock_options& o) {
    return async_shared_mutex(c, n, o).async_lock(asio::use_future).get();
  };
  auto read_take = [](async_client& c, const std::string& n, const lock_options& o) {
    return async_shared_mutex(c, n, o).async_lock_shared(asio::use_future).get();
  };
  auto try_once = [](auto&& lock) {
    const bool got = lock.try_lock();
    if (got) lock.unlock();
    return got;
  };
  return {
      {"mutex", mutex_take,
       [=](redislock::client& c, const std::string& n) { return try_once(redislock::mutex(c, n)); }},
      {"semaphore", semaphore_take,
       [=](redislock::client& c, const std::string& n) { return try_once(redislock::semaphore(c, n, 1)); }},
      {"shared write", write_take,
       [=](redislock::client& c, const std::string& n) { return try_once(redislock::shared_mutex(c, n)); }},
      {"shared read", read_take,
       [=](redislock::client& c, const std::string& n) { return try_once(redislock::shared_mutex(c, n)); }},
  };
}

}  // namespace

// A confirmed async_extend() counts from its own send with the lease it sent, shorter ones too,
// and the renewals go on from there (safety review 4, item 1): an auto_renew hold extended to
// 20 s and back to the options' 300 ms, with a renewal of the 20 s between, used to count on
// 19.7 s while the server dropped the key 300 ms later, and renewed only 6.7 s later.
TEST_F(AsyncSemaphoreTest, EveryAsyncKindCountsAShorterExtendAndRenewsFromIt) {
  for (const async_kind_case& k : async_kind_cases()) {
    SCOPED_TRACE(k.kind);
    const std::string name = std::string("extend-back-") + k.kind;
    lock_options o;
    o.lease = milliseconds(300);
    o.auto_renew = true;
    async_hold h = k.take(*client, name, o);
    ASSERT_TRUE(h.async_extend(seconds(20), asio::use_future).get());
    // Past the first renewal the acquisition scheduled (100 ms in): it sent the extend's 20 s.
    std::this_thread::sleep_for(milliseconds(250));
    ASSERT_TRUE(h.async_extend(asio::use_future).get());  // back to options().lease
    const milliseconds server_left = h.async_remaining_lease(asio::use_future).get();
    const std::optional<steady::time_point> counted = h.lease_confirmed_until();
    ASSERT_TRUE(counted.has_value());
    EXPECT_LE(*counted, steady::now() + server_left + milliseconds(5))
        << "counts on " << std::chrono::duration_cast<milliseconds>(*counted - steady::now()).count()
        << " ms; the server keeps it " << server_left.count() << " ms";
    // Over two leases the renewals (every 100 ms now) have kept it: nobody else got in.
    const steady::time_point later = steady::now() + milliseconds(700);
    while (steady::now() < later) {
      EXPECT_FALSE(k.rival_gets_in(*pool, name)) << "the server dropped a hold the client renews";
      std::this_thread::sleep_for(milliseconds(100));
    }
    EXPECT_FALSE(h.lost());
    release_status s{};
    EXPECT_FALSE(unlock_now(h, &s));
    EXPECT_EQ(s, release_status::released);
  }
}

// Without auto_renew an async hold still counts its lease: the acquisition's send plus the lease,
// moved by each confirmed async_extend() (earlier too); lost() turns true then and on_lost runs
// then (safety review 4, item 2). With auto_renew, a confirmed extend moves it the same way.
TEST_F(AsyncSemaphoreTest, EveryAsyncKindCountsItsLeaseRenewedOrNotAndTellsWhenItEnds) {
  for (const async_kind_case& k : async_kind_cases()) {
    for (const bool renew : {false, true}) {
      SCOPED_TRACE(std::string(k.kind) + (renew ? ", auto_renew" : ", not renewed"));
      const std::string name = std::string("counted-") + k.kind + (renew ? "-renewed" : "");
      std::promise<steady::time_point> lost_at;
      std::atomic<int> lost_calls{0};
      lock_options o;
      o.lease = milliseconds(200);
      o.auto_renew = renew;
      o.on_lost = [&](const std::string&) {
        if (lost_calls.fetch_add(1) == 0) lost_at.set_value(steady::now());
      };
      const steady::time_point before = steady::now();
      async_hold h = k.take(*client, name, o);
      const steady::time_point after = steady::now();
      std::optional<steady::time_point> counted = h.lease_confirmed_until();
      ASSERT_TRUE(counted.has_value()) << "the lease sent is forgotten";
      EXPECT_GE(*counted, before + milliseconds(200));
      EXPECT_LE(*counted, after + milliseconds(renew ? 300 : 200));  // a renewal may have come
      for (const milliseconds lease : {milliseconds(900), milliseconds(250)}) {
        SCOPED_TRACE(lease.count());
        const steady::time_point sent = steady::now();
        ASSERT_TRUE(h.async_extend(lease, asio::use_future).get());
        const steady::time_point answered = steady::now();
        counted = h.lease_confirmed_until();
        ASSERT_TRUE(counted.has_value());
        EXPECT_GE(*counted, sent + lease);
        if (!renew) {
          EXPECT_LE(*counted, answered + lease);
        }
      }
      if (renew) {
        EXPECT_FALSE(h.lost());
        (void)unlock_now(h);
        EXPECT_EQ(lost_calls.load(), 0);
        continue;
      }
      auto seen = lost_at.get_future();
      ASSERT_EQ(seen.wait_for(seconds(5)), std::future_status::ready) << "on_lost never ran";
      EXPECT_GE(seen.get(), *counted);
      EXPECT_TRUE(h.lost());
      release_status s{};
      (void)unlock_now(h, &s);
      EXPECT_EQ(s, release_status::lease_expired);
      EXPECT_EQ(lost_calls.load(), 1);
      EXPECT_FALSE(h.lease_confirmed_until().has_value());
    }
  }
}

namespace {

// The semaphore's and the read/write lock's forms with a lease for the hold: the server keeps
// the call's lease (under options().lease of 30 s), and async_extend() without one keeps it.
TEST_F(AsyncSemaphoreTest, AndTheReadWriteLockTakeALeasePerCall) {
  lock_options o;
  o.lease = seconds(30);
  async_semaphore s(*client, "per-call", 2, o);
  async_shared_mutex rw(*client, "per-call-rw", o);
  auto pttl = [&](const std::string& key) { return admin->command({"PTTL", key})->integer; };
  async_hold permit = s.async_acquire(milliseconds(4000), asio::use_future).get();
  ASSERT_TRUE(permit.owns_lock());
  EXPECT_GT(pttl(s.key()), 0);
  EXPECT_LE(pttl(s.key()), 4000);
  EXPECT_TRUE(permit.async_extend(asio::use_future).get());
  EXPECT_GT(pttl(s.key()), 0);
  EXPECT_LE(pttl(s.key()), 4000);
  async_hold second = s.async_try_acquire_for(seconds(1), milliseconds(3000), asio::use_future).get();
  ASSERT_TRUE(second.owns_lock());
  EXPECT_FALSE(unlock_now(permit));
  EXPECT_FALSE(unlock_now(second));
  async_hold read = rw.async_lock_shared(milliseconds(4000), asio::use_future).get();
  ASSERT_TRUE(read.owns_lock());
  EXPECT_GT(pttl(rw.key()), 0);
  EXPECT_LE(pttl(rw.key()), 4000);
  EXPECT_FALSE(unlock_now(read));
  async_hold write = rw.async_try_lock_for(seconds(1), milliseconds(4000), asio::use_future).get();
  ASSERT_TRUE(write.owns_lock());
  EXPECT_GT(pttl(rw.key()), 0);
  EXPECT_LE(pttl(rw.key()), 4000);
  EXPECT_FALSE(unlock_now(write));
  EXPECT_THROW(rw.async_try_lock_shared_for(seconds(1), milliseconds(0), asio::use_future), invalid_argument);
}

}  // namespace

}  // namespace test_async_semaphore
