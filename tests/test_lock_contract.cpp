// What every lock kind promises alike, one typed suite over them all (mutex, fair mutex,
// reentrant mutex, both sides of the shared mutex, a semaphore of one permit and an election): round trips per
// uncontended cycle, deadlines kept to the millisecond, destruction releases, stale and idle releases, lost reporting,
// extend rules, hand-off under contention, bad input, fencing tokens, and the queued hand-off (QueuedHandOff, below).
// What differs between kinds is data in the kind structs (round trips, recursion, whether the side is exclusive), never
// the test. Per-kind suites (test_mutex.cpp, test_reentrant_mutex.cpp, ...) keep what is their own.
#include "eventually.hpp"
#include "lost_signal.hpp"
#include "redis_keys.hpp"
#include "redis_stats.hpp"
#include "server_fixture.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace test_lock_contract {

using namespace redislock;
using redislock_test::command_monitor;
using redislock_test::eventually;
using redislock_test::key_dump;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

// One way of taking a lock: which class, which side, which options.
//   take / try_take / wait / wait_until / give / report / extend / lost / remaining: the kind's
//   own side (the read side for shared_read_kind);
//   hold / drop / shorten: the side that blocks it (the write side), taken by a rival.
// report() is the one call of the outcome-returning release (to be renamed
// unlock_and_report(): one line per kind).
template <class Lock, bool Recursive>
struct exclusive_kind {
  using lock_type = Lock;
  static constexpr bool recursive = Recursive;
  static constexpr bool exclusive = true;      // two holders of this side never overlap
  static constexpr int cycle_round_trips = 2;  // commands sent per uncontended lock + unlock
  static void adjust(lock_options&) {}
  static void hold(lock_type& l) { l.lock(); }
  static void drop(lock_type& l) { l.unlock(); }
  static void take(lock_type& l) { l.lock(); }
  static bool try_take(lock_type& l) { return l.try_lock(); }
  template <class Timeout>
  static bool wait(lock_type& l, Timeout t) {
    return l.try_lock_for(t);
  }
  template <class Deadline>
  static bool wait_until(lock_type& l, Deadline t) {
    return l.try_lock_until(t);
  }
  static void give(lock_type& l) { l.unlock(); }
  static release_status report(lock_type& l) { return l.unlock_and_report(); }
  static bool extend(lock_type& l, milliseconds lease) { return l.extend(lease); }
  static bool extend_to_hold_lease(lock_type& l) { return l.extend(); }
  // The acquisitions with a lease of their own.
  static void take_leased(lock_type& l, milliseconds lease) { l.lock(lease); }
  template <class Timeout>
  static bool wait_leased(lock_type& l, Timeout t, milliseconds lease) {
    return l.try_lock_for(t, lease);
  }
  static bool lost(const lock_type& l) { return l.lost(); }
  static milliseconds remaining(lock_type& l) { return l.remaining_lease(); }
  static std::optional<steady::time_point> confirmed_until(const lock_type& l) { return l.lease_confirmed_until(); }
  static bool shorten(lock_type& l, milliseconds lease) { return l.extend(lease); }
};
// SET NX GET PX, then the release script.
using mutex_kind = exclusive_kind<mutex, false>;
// The queue script's "try" (fair mode never jumps the queue), then the release script.
struct fair_mutex_kind : mutex_kind {
  static void adjust(lock_options& o) { o.fair = true; }
};
using reentrant_kind = exclusive_kind<reentrant_mutex, true>;   // two scripts
using shared_write_kind = exclusive_kind<shared_mutex, false>;  // two scripts
struct shared_read_kind : shared_write_kind {                   // two scripts
  static constexpr bool recursive = true;                       // reads nest
  static constexpr bool exclusive = false;                      // readers share
  static void take(lock_type& l) { l.lock_shared(); }
  static bool try_take(lock_type& l) { return l.try_lock_shared(); }
  template <class Timeout>
  static bool wait(lock_type& l, Timeout t) {
    return l.try_lock_shared_for(t);
  }
  template <class Deadline>
  static bool wait_until(lock_type& l, Deadline t) {
    return l.try_lock_shared_until(t);
  }
  static void give(lock_type& l) { l.unlock_shared(); }
  static release_status report(lock_type& l) { return l.unlock_shared_and_report(); }
  static bool extend(lock_type& l, milliseconds lease) { return l.extend_shared(lease); }
  static bool extend_to_hold_lease(lock_type& l) { return l.extend_shared(); }
  static void take_leased(lock_type& l, milliseconds lease) { l.lock_shared(lease); }
  template <class Timeout>
  static bool wait_leased(lock_type& l, Timeout t, milliseconds lease) {
    return l.try_lock_shared_for(t, lease);
  }
  static bool lost(const lock_type& l) { return l.lost_shared(); }
  static milliseconds remaining(lock_type& l) { return l.remaining_shared_lease(); }
  static std::optional<steady::time_point> confirmed_until(const lock_type& l) {
    return l.lease_confirmed_until_shared();
  }
};

// A semaphore of one permit is an exclusive lock: every promise applies (N > 1: test_semaphore.cpp).
struct one_permit_semaphore : semaphore {
  one_permit_semaphore(redislock::client& c, std::string name, lock_options o = {})
      : semaphore(c, std::move(name), 1, std::move(o)) {}
};
using semaphore_kind = exclusive_kind<one_permit_semaphore, false>;  // two scripts
// An election: lock() campaigns with an empty value, unlock() resigns; the leadership is an
// exclusive hold (test_election.cpp has what is its own).
using election_kind = exclusive_kind<election, false>;  // two scripts

template <class Kind>
struct LockContract : redislock_test::server_test {
  using lock_type = typename Kind::lock_type;
  lock_options opts(milliseconds lease_ms) {
    lock_options o = lease(lease_ms);
    Kind::adjust(o);
    return o;
  }
  // Waiters registered on the server for `l`'s name: the longest queue among the lock's sorted
  // sets (every kind queues its waiters: P{N}:queue, :rqueue, :squeue).
  long long waiting(const lock_type& l) {
    long long queued = 0;
    redislock::reply_ptr keys = admin->command({"KEYS", l.key() + ":*"});
    for (std::size_t i = 0; i < keys->elements; ++i) {
      const std::string k = redislock_test::reply_text(*keys->element[i]);
      if (redislock_test::reply_text(*admin->command({"TYPE", k})) == "zset")
        queued = std::max(queued, admin->command({"ZCARD", k})->integer);
    }
    return queued;
  }
  bool someone_waits(const lock_type& l) { return waiting(l) > 0; }
  // Waits on `waiter` with wait(waiter) on another thread while `holder` holds; returns how
  // long the wait took once `free_it()` (called when the waiter is registered) frees the lock.
  // The waiting thread releases what it got (holds of the hash kinds belong to a thread).
  template <class Wait, class FreeIt>
  steady::duration wait_then_free(lock_type& waiter, Wait wait, FreeIt free_it, bool& acquired) {
    auto waited = std::async(std::launch::async, [&] {
      const bool got = wait(waiter);
      if (got) Kind::give(waiter);
      return got;
    });
    EXPECT_TRUE(eventually([&] { return someone_waits(waiter); })) << "the waiter never waited";
    const steady::time_point freed = steady::now();
    free_it();
    const bool done = waited.wait_for(seconds(30)) == std::future_status::ready;
    EXPECT_TRUE(done);
    acquired = done && waited.get();
    return steady::now() - freed;
  }

  // Lets the watchdog renew a witness lock three times (a whole 300 ms lease passes): a
  // renewal that was still to report something has done so by then.
  void let_the_watchdog_turn() {
    lock_options o = lease(milliseconds(300));
    o.auto_renew = true;
    mutex witness(*pool, "witness", o);
    witness.lock();
    const std::uint64_t before = pool->watchdog().stats().renewals;
    EXPECT_TRUE(pool->watchdog().wait_for_stats(seconds(10),
                                                [&](const watchdog_stats& st) { return st.renewals >= before + 3; }));
    witness.unlock();
  }
};

using Kinds = ::testing::Types<mutex_kind, fair_mutex_kind, reentrant_kind, shared_write_kind, shared_read_kind,
                               semaphore_kind, election_kind>;
TYPED_TEST_SUITE(LockContract, Kinds);

// --- cost -----------------------------------------------------------------------------------

TYPED_TEST(LockContract, AnUncontendedCycleCostsTheKindsRoundTrips) {
  using K = TypeParam;
  typename K::lock_type l(*this->pool, "cost", this->opts(seconds(10)));
  K::take(l);  // warm-up: loads the scripts
  K::give(l);
  command_monitor monitor(this->server->options());
  monitor.take(*this->admin);
  constexpr int cycles = 20;
  for (int i = 0; i < cycles; ++i) {
    K::take(l);
    K::give(l);
  }
  const std::vector<std::string> sent = monitor.take(*this->admin);
  EXPECT_EQ(sent.size(), static_cast<std::size_t>(cycles * K::cycle_round_trips))
      << (sent.empty() ? std::string() : sent.front());
  for (const auto& s : sent) EXPECT_EQ(s.find("\"EVAL\""), std::string::npos) << "scripts run by their SHA: " << s;
  EXPECT_EQ(l.last_release(), release_status::released);
  // A lease of the call's own costs nothing more: the same commands, another argument.
  for (int i = 0; i < cycles; ++i) {
    K::take_leased(l, milliseconds(4000));
    K::give(l);
  }
  EXPECT_EQ(monitor.take(*this->admin).size(), static_cast<std::size_t>(cycles * K::cycle_round_trips));
}

// --- deadlines ------------------------------------------------------------------------------

// A wait against a held lock ends at its deadline: never before, and 5 ms after at most (the
// last attempt's round trip and the wake-up): measured idle under 1 ms (4 ms at worst), on a
// loaded machine medians of 3-4 ms. The test prints the median and worst overshoot beside a
// plain sleep_until's lateness at the same moment; it asserts only what does not depend on the
// scheduler (never early) and that the wait ends (within 500 ms), because on a loaded CI
// machine (four builds on 2 cores, sanitizers) the scheduler alone wakes threads 5-20 ms late.
TYPED_TEST(LockContract, ADeadlineIsKeptToTheMillisecond) {
  using K = TypeParam;
  client other(this->options());
  typename K::lock_type holder(*this->pool, "deadline", this->opts(seconds(20)));
  typename K::lock_type waiter(other, "deadline", this->opts(seconds(20)));
  K::hold(holder);
  EXPECT_FALSE(K::try_take(waiter));  // loads the scripts
  const milliseconds ends_within(500);
  std::vector<double> overshoots, scheduler;
  const auto ms = [](steady::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  auto check = [&](const char* what, steady::time_point deadline, auto&& wait) {
    SCOPED_TRACE(what);
    EXPECT_FALSE(wait());
    const steady::time_point end = steady::now();
    EXPECT_GE(end, deadline) << "gave up early";
    EXPECT_LE(end - deadline, ends_within) << "overshoot " << ms(end - deadline) << " ms";
    overshoots.push_back(ms(end - deadline));
    // The scheduler's own lateness at this moment, for comparison.
    const steady::time_point wake = steady::now() + milliseconds(10);
    std::this_thread::sleep_until(wake);
    scheduler.push_back(ms(steady::now() - wake));
  };
  for (const int t_ms : {30, 120, 250}) {
    const milliseconds t(t_ms);
    steady::time_point start = steady::now();
    check("try_lock_for", start + t, [&] { return K::wait(waiter, t); });
    const steady::time_point dl = steady::now() + t;
    check("try_lock_until (steady)", dl, [&] { return K::wait_until(waiter, dl); });
    const auto sys = std::chrono::system_clock::now() + t;
    start = steady::now();
    // The system clock's deadline as the steady clock sees it (both read within microseconds).
    check("try_lock_until (system)", start + t, [&] { return K::wait_until(waiter, sys); });
  }
  std::sort(overshoots.begin(), overshoots.end());
  std::sort(scheduler.begin(), scheduler.end());
  std::printf(
      "[ measured ] deadline overshoot: median %.2f ms, worst %.2f ms (sleep_until lateness: median %.2f ms, "
      "worst %.2f ms)\n",
      overshoots[overshoots.size() / 2], overshoots.back(), scheduler[scheduler.size() / 2], scheduler.back());
  K::drop(holder);
}

// --- releases -------------------------------------------------------------------------------

TYPED_TEST(LockContract, DestructionReleasesOnTheServerAtOnce) {
  using K = TypeParam;
  for (const bool renewed : {false, true}) {
    SCOPED_TRACE(renewed ? "auto_renew" : "plain");
    lock_options o = this->opts(seconds(20));
    o.auto_renew = renewed;
    std::string key;
    {
      typename K::lock_type l(*this->pool, "destroyed", o);
      key = l.key();
      K::take(l);
      if (K::recursive) K::take(l);  // nested holds go too
      ASSERT_EQ(this->admin->command({"EXISTS", key})->integer, 1);
    }
    EXPECT_EQ(this->admin->command({"EXISTS", key})->integer, 0);
    EXPECT_EQ(this->pool->watchdog().stats().registered, 0u);
    // Free for anyone, at once.
    typename K::lock_type next(*this->pool, "destroyed", this->opts(seconds(20)));
    EXPECT_TRUE(next.try_lock());
    next.unlock();
  }
}

TYPED_TEST(LockContract, AStaleReleaseReportsLeaseExpiredAndLeavesTheNextHolderAlone) {
  using K = TypeParam;
  client other(this->options());
  typename K::lock_type slow(*this->pool, "stale", this->opts(milliseconds(200)));
  typename K::lock_type next(other, "stale", this->opts(seconds(20)));
  K::take(slow);
  ASSERT_TRUE(next.try_lock_for(seconds(5)));  // the rival's write side, once slow's lease ran out
  const std::vector<std::string> before = key_dump(*this->admin);
  EXPECT_EQ(K::remaining(slow), milliseconds(0));
  EXPECT_THROW(slow.fencing_token(), lock_error);  // tokens are only given while the lease runs
  EXPECT_TRUE(K::lost(slow));                      // ... and asking found it lost
  EXPECT_EQ(K::report(slow), release_status::lease_expired);
  EXPECT_EQ(slow.last_release(), release_status::lease_expired);
  EXPECT_EQ(key_dump(*this->admin), before) << "the stale release wrote";
  EXPECT_TRUE(next.still_held());
  EXPECT_GT(next.fencing_token(), 0u);
  next.unlock();
  EXPECT_EQ(next.last_release(), release_status::released);
}

TYPED_TEST(LockContract, ReleasingWhatIsNotHeldReportsNotHeldAndSendsNothing) {
  using K = TypeParam;
  typename K::lock_type l(*this->pool, "idle", this->opts(seconds(10)));
  command_monitor monitor(this->server->options());
  EXPECT_EQ(K::report(l), release_status::not_held);  // never held
  K::give(l);
  EXPECT_EQ(l.last_release(), release_status::not_held);
  K::take(l);
  K::give(l);
  EXPECT_EQ(l.last_release(), release_status::released);
  monitor.take(*this->admin);
  EXPECT_EQ(K::report(l), release_status::not_held);  // one release too many
  K::give(l);
  EXPECT_EQ(l.last_release(), release_status::not_held);
  EXPECT_EQ(monitor.take(*this->admin), std::vector<std::string>{});
}

// --- lost -----------------------------------------------------------------------------------

TYPED_TEST(LockContract, ExtendAnsweringFalseMarksTheHoldLost) {
  using K = TypeParam;
  typename K::lock_type l(*this->pool, "extend-lost", this->opts(seconds(10)));
  K::take(l);
  EXPECT_FALSE(K::lost(l));
  this->admin->command({"DEL", l.key()});  // as if the lease had run out
  EXPECT_FALSE(K::extend(l, seconds(10)));
  EXPECT_TRUE(K::lost(l));
  EXPECT_EQ(K::remaining(l), milliseconds(0));
  EXPECT_EQ(K::report(l), release_status::lease_expired);
  K::take(l);  // the next hold starts afresh
  EXPECT_FALSE(K::lost(l));
  EXPECT_EQ(K::report(l), release_status::released);
}

TYPED_TEST(LockContract, AutoRenewReportsADeletedOrTakenOverHoldLostOnce) {
  using K = TypeParam;
  for (const bool taken_over : {false, true}) {
    SCOPED_TRACE(taken_over ? "taken over" : "deleted");
    redislock_test::lost_signal signal;
    client other(this->options());
    typename K::lock_type l(*this->pool, "renewed", signal.options(this->opts(milliseconds(300))));
    typename K::lock_type rival(other, "renewed", this->opts(seconds(20)));
    K::take(l);
    EXPECT_FALSE(K::lost(l));
    this->admin->command({"DEL", l.key()});
    if (taken_over) {
      ASSERT_TRUE(rival.try_lock());
    }
    ASSERT_TRUE(signal.wait()) << "on_lost never ran";
    EXPECT_TRUE(K::lost(l));
    this->let_the_watchdog_turn();
    EXPECT_EQ(signal.calls.load(), 1);
    const std::vector<std::string> before = key_dump(*this->admin);
    EXPECT_EQ(K::report(l), release_status::lease_expired);
    EXPECT_EQ(key_dump(*this->admin), before);
    if (taken_over) {
      EXPECT_TRUE(rival.still_held());
      rival.unlock();
    }
  }
}

// Without auto_renew the holder still knows when its lease may be gone: the acquisition's send
// time plus the lease, moved by each confirmed extend (shorter leases too). lost() turns true
// then, and on_lost runs then (the client's watchdog thread watches it), never after the
// server could have handed the lock to someone else.
TYPED_TEST(LockContract, AHoldWithoutRenewalIsLostByTheClockWhenItsLeaseRunsOut) {
  using K = TypeParam;
  for (const bool with_on_lost : {true, false}) {
    SCOPED_TRACE(with_on_lost ? "on_lost set" : "no on_lost");
    redislock_test::lost_signal signal;
    lock_options o = this->opts(milliseconds(200));
    if (with_on_lost) o = signal.options(o, false);
    typename K::lock_type l(*this->pool, "unrenewed", o);
    const steady::time_point before = steady::now();
    K::take(l);
    const steady::time_point after = steady::now();
    std::optional<steady::time_point> counted = K::confirmed_until(l);
    ASSERT_TRUE(counted.has_value()) << "the lease sent is forgotten";
    EXPECT_GE(*counted, before + milliseconds(200));
    EXPECT_LE(*counted, after + milliseconds(200));
    EXPECT_FALSE(K::lost(l));
    // A longer extend moves the end later, a shorter one earlier, each from its own send.
    for (const milliseconds lease : {milliseconds(600), milliseconds(250)}) {
      SCOPED_TRACE(lease.count());
      const steady::time_point sent = steady::now();
      ASSERT_TRUE(K::extend(l, lease));
      const steady::time_point answered = steady::now();
      counted = K::confirmed_until(l);
      ASSERT_TRUE(counted.has_value());
      EXPECT_GE(*counted, sent + lease);
      EXPECT_LE(*counted, answered + lease);
      const long long pttl = this->admin->command({"PTTL", l.key()})->integer;
      EXPECT_LE(*counted, steady::now() + milliseconds(pttl) + milliseconds(5)) << "more optimistic than the server";
    }
    if (with_on_lost) {
      ASSERT_TRUE(signal.wait()) << "on_lost never ran";
      EXPECT_GE(signal.at, *counted);
      EXPECT_EQ(signal.name, "unrenewed");
    } else {
      std::this_thread::sleep_until(*counted);
    }
    EXPECT_TRUE(K::lost(l));
    EXPECT_EQ(K::report(l), release_status::lease_expired);
    EXPECT_EQ(signal.calls.load(), with_on_lost ? 1 : 0);
    EXPECT_FALSE(K::confirmed_until(l).has_value());  // nothing held
  }
}

// --- extend ---------------------------------------------------------------------------------

TYPED_TEST(LockContract, ExtendRules) {
  using K = TypeParam;
  typename K::lock_type l(*this->pool, "extend", this->opts(milliseconds(500)));
  EXPECT_THROW(K::extend(l, seconds(1)), lock_error);  // not held
  K::take(l);
  const std::vector<std::string> before = key_dump(*this->admin);
  command_monitor monitor(this->server->options());
  for (const milliseconds bad : {milliseconds(0), milliseconds(-1), max_lease + milliseconds(1)}) {
    SCOPED_TRACE(bad.count());
    EXPECT_THROW(K::extend(l, bad), invalid_argument);
  }
  EXPECT_EQ(monitor.take(*this->admin), std::vector<std::string>{});
  EXPECT_EQ(key_dump(*this->admin), before);
  EXPECT_FALSE(K::lost(l));
  // It renews the lease on the server.
  ASSERT_TRUE(K::extend(l, seconds(20)));
  EXPECT_GT(this->admin->command({"PTTL", l.key()})->integer, 19000);
  EXPECT_GT(K::remaining(l), seconds(19));
  K::give(l);
  EXPECT_EQ(l.last_release(), release_status::released);
  EXPECT_THROW(K::extend(l, seconds(1)), lock_error);  // released
}

// With auto_renew, extend(L) sets the lease the renewals send: a longer lease outlives the next
// renewal instead of being cut back to options().lease (the renewals come every L/3 then).
TYPED_TEST(LockContract, ALongerExtendWithAutoRenewIsKeptByTheRenewals) {
  using K = TypeParam;
  lock_options o = this->opts(milliseconds(300));
  o.auto_renew = true;
  typename K::lock_type l(*this->pool, "extend-renewed", o);
  K::take(l);
  ASSERT_TRUE(K::extend(l, milliseconds(1500)));
  const std::uint64_t before = this->pool->watchdog().stats().renewals;
  ASSERT_TRUE(this->pool->watchdog().wait_for_stats(
      seconds(20), [&](const watchdog_stats& st) { return st.renewals >= before + 1; }));
  EXPECT_GT(K::remaining(l), milliseconds(900));  // a renewal to 300 ms would have left at most that
  EXPECT_FALSE(K::lost(l));
  K::give(l);
  EXPECT_EQ(l.last_release(), release_status::released);
}

// A nested acquisition sets the lease to options().lease again, from the server's now: after a
// longer extend() with auto_renew, what the holder counts on must follow it down, never stay
// with the extend's lease while the server's key runs out first.
TYPED_TEST(LockContract, ANestedAcquisitionAfterALongerExtendIsNotCountedWithTheExtendsLease) {
  using K = TypeParam;
  if constexpr (K::recursive) {
    lock_options o = this->opts(milliseconds(300));
    o.auto_renew = true;
    typename K::lock_type l(*this->pool, "extend-nested", o);
    K::take(l);
    ASSERT_TRUE(K::extend(l, seconds(6)));  // the next renewal comes 2 s later
    K::take(l);                             // nested: the server's lease is 300 ms again
    const std::optional<steady::time_point> counted = K::confirmed_until(l);
    const long long pttl = this->admin->command({"PTTL", l.key()})->integer;
    const steady::time_point server_end = steady::now() + milliseconds(pttl);
    ASSERT_TRUE(counted.has_value());
    EXPECT_LE(*counted, server_end + milliseconds(50))
        << "counted on " << std::chrono::duration_cast<milliseconds>(*counted - steady::now()).count()
        << " ms, the server keeps the key " << pttl << " ms";
    K::give(l);
    K::give(l);
  }
}

// --- a lease per call ------------------------------------------------------------------------

// lock(lease): the hold has that lease on the server and in lease_confirmed_until(), extend()
// without an argument renews to it, and the next acquisition without one has options().lease.
TYPED_TEST(LockContract, ALeaseGivenToTheCallIsTheHoldsUntilItsRelease) {
  using K = TypeParam;
  typename K::lock_type l(*this->pool, "per-call", this->opts(seconds(30)));
  K::take_leased(l, milliseconds(4000));
  const steady::time_point returned = steady::now();  // the acquisition was sent before
  EXPECT_LE(K::remaining(l), milliseconds(4000));
  EXPECT_GT(K::remaining(l), milliseconds(3000));
  const std::optional<steady::time_point> until = K::confirmed_until(l);
  ASSERT_TRUE(until.has_value());
  EXPECT_LE(*until, returned + milliseconds(4000)) << "counted with options().lease";
  ASSERT_TRUE(K::extend_to_hold_lease(l));
  EXPECT_LE(K::remaining(l), milliseconds(4000)) << "extend() went to options().lease, not the hold's";
  EXPECT_GT(K::remaining(l), milliseconds(3000));
  K::give(l);
  EXPECT_EQ(l.last_release(), release_status::released);
  K::take(l);
  EXPECT_GT(K::remaining(l), seconds(20)) << "the next acquisition kept the earlier call's lease";
  K::give(l);
}

// A waiter that queued with its own lease is handed the lock with that lease, not with the
// releasing holder's nor options().lease (the queue keeps each waiter's lease).
TYPED_TEST(LockContract, AWaiterHandedTheLockHoldsItWithItsCallsLease) {
  using K = TypeParam;
  typename K::lock_type holder(*this->pool, "per-call-handoff", this->opts(seconds(20)));
  client other(this->options());
  typename K::lock_type waiter(other, "per-call-handoff", this->opts(seconds(20)));
  K::hold(holder);
  auto left = std::async(std::launch::async, [&] {
    if (!K::wait_leased(waiter, seconds(10), milliseconds(3000))) return milliseconds(-1);
    // The holder's own count (the lease clock) follows the call's lease too.
    const std::optional<steady::time_point> until = K::confirmed_until(waiter);
    EXPECT_TRUE(until.has_value() && *until <= steady::now() + milliseconds(3000)) << "counted with another lease";
    const milliseconds remaining = K::remaining(waiter);
    K::give(waiter);
    return remaining;
  });
  EXPECT_TRUE(eventually([&] { return this->someone_waits(waiter); })) << "the waiter never queued";
  K::drop(holder);
  ASSERT_EQ(left.wait_for(seconds(20)), std::future_status::ready);
  const milliseconds remaining = left.get();
  EXPECT_GT(remaining, milliseconds(0)) << "not acquired";
  EXPECT_LE(remaining, milliseconds(3000)) << "handed over with another lease than the waiter's";
}

// A re-entry (a nested read) with a lease of its own sets the hold's lease to it, as an
// extend() would, and extend() then renews to it; one without sets options().lease again.
TYPED_TEST(LockContract, ANestedAcquisitionWithALeaseSetsTheHoldsLease) {
  using K = TypeParam;
  if constexpr (K::recursive) {
    typename K::lock_type l(*this->pool, "per-call-nested", this->opts(seconds(30)));
    K::take_leased(l, milliseconds(20000));
    K::take_leased(l, milliseconds(4000));
    EXPECT_LE(K::remaining(l), milliseconds(4000));
    EXPECT_GT(K::remaining(l), milliseconds(3000));
    ASSERT_TRUE(K::extend_to_hold_lease(l));
    EXPECT_LE(K::remaining(l), milliseconds(4000)) << "extend() went back to the outer call's lease";
    K::take(l);
    EXPECT_GT(K::remaining(l), seconds(25));
    K::give(l);
    K::give(l);
    K::give(l);
    EXPECT_EQ(l.last_release(), release_status::released);
  }
}

// With auto_renew the renewals send the call's lease (900 ms under options().lease of 30 s):
// the hold outlives several leases, and an extend() shorter than the hold's lease is refused.
TYPED_TEST(LockContract, RenewalsSendTheCallsLease) {
  using K = TypeParam;
  lock_options o = this->opts(seconds(30));
  o.auto_renew = true;
  typename K::lock_type l(*this->pool, "per-call-renewed", o);
  K::take_leased(l, milliseconds(900));
  const std::uint64_t before = this->pool->watchdog().stats().renewals;
  ASSERT_TRUE(this->pool->watchdog().wait_for_stats(
      seconds(20), [&](const watchdog_stats& st) { return st.renewals >= before + 3; }));
  EXPECT_FALSE(K::lost(l));
  EXPECT_GT(K::remaining(l), milliseconds(0));
  EXPECT_LE(K::remaining(l), milliseconds(900)) << "renewed to options().lease";
  const std::optional<steady::time_point> until = K::confirmed_until(l);
  EXPECT_TRUE(until.has_value() && *until <= steady::now() + milliseconds(900)) << "counted with another lease";
  EXPECT_THROW(K::extend(l, milliseconds(600)), invalid_argument);
  EXPECT_TRUE(K::extend(l, milliseconds(1200)));
  K::give(l);
  EXPECT_EQ(l.last_release(), release_status::released);
}

// A call's lease is checked as options().lease is, before anything is sent.
TYPED_TEST(LockContract, ABadLeaseForTheCallIsATypedErrorAndSendsNothing) {
  using K = TypeParam;
  lock_options replicated = this->opts(seconds(20));
  replicated.min_replicas = 1;
  replicated.replica_timeout = milliseconds(1000);
  typename K::lock_type l(*this->pool, "per-call-bad", this->opts(seconds(20)));
  typename K::lock_type r(*this->pool, "per-call-bad", replicated);
  const std::vector<std::string> before = key_dump(*this->admin);
  command_monitor monitor(this->server->options());
  for (const milliseconds bad : {milliseconds(0), milliseconds(-1), max_lease + milliseconds(1)}) {
    SCOPED_TRACE(bad.count());
    EXPECT_THROW(K::take_leased(l, bad), invalid_argument);
    EXPECT_THROW(K::wait_leased(l, seconds(1), bad), invalid_argument);
  }
  EXPECT_THROW(K::take_leased(r, milliseconds(1000)), invalid_argument) << "not longer than replica_timeout";
  EXPECT_EQ(monitor.take(*this->admin), std::vector<std::string>{});
  EXPECT_EQ(key_dump(*this->admin), before);
}

// --- contention -----------------------------------------------------------------------------

// N waiters, each in its own client, all behind a holder: each gets the lock exactly once, no
// two exclusive holders overlap (no reader overlaps the writer), all within a bound.
TYPED_TEST(LockContract, AContendedHandOffServesEveryWaiterOnceInTurn) {
  using K = TypeParam;
  constexpr int waiters = 4;
  typename K::lock_type holder(*this->pool, "contended", this->opts(seconds(20)));
  std::atomic<int> inside{0}, overlaps{0}, acquired{0};
  std::atomic<bool> writer_inside{true};
  K::hold(holder);
  std::vector<std::unique_ptr<client>> clients;
  std::vector<std::unique_ptr<typename K::lock_type>> locks;
  for (int i = 0; i < waiters; ++i) {
    clients.push_back(std::make_unique<client>(this->options()));
    locks.push_back(std::make_unique<typename K::lock_type>(*clients.back(), "contended", this->opts(seconds(20))));
  }
  const steady::time_point start = steady::now();
  std::vector<std::future<bool>> done;
  for (int i = 0; i < waiters; ++i)
    done.push_back(std::async(std::launch::async, [&, i] {
      connection c(this->server->options());
      if (!K::wait(*locks[i], seconds(10))) return false;
      if (writer_inside.load()) overlaps.fetch_add(1);
      if (K::exclusive && inside.fetch_add(1) != 0) overlaps.fetch_add(1);
      // A read-modify-write on the server while holding (a round trip inside the hold).
      redislock::reply_ptr r = c.command({"GET", "contended:count"});
      const int value = r->type == REDIS_REPLY_NIL ? 0 : std::stoi(redislock_test::reply_text(*r));
      c.command({"SET", "contended:count", std::to_string(value + 1)});
      if (K::exclusive) inside.fetch_sub(1);
      acquired.fetch_add(1);
      K::give(*locks[i]);
      return true;
    }));
  EXPECT_TRUE(eventually([&] {
    for (auto& c : clients)
      if (c->wait_stats().subscriptions == 0) return false;
    return true;
  })) << "not every waiter waited";
  writer_inside = false;
  K::drop(holder);
  for (auto& d : done) {
    ASSERT_EQ(d.wait_for(seconds(10)), std::future_status::ready);
    EXPECT_TRUE(d.get());
  }
  EXPECT_LT(steady::now() - start, seconds(5));
  EXPECT_EQ(acquired.load(), waiters);
  EXPECT_EQ(overlaps.load(), 0);
  if (K::exclusive) {
    EXPECT_EQ(this->get("contended:count"), std::to_string(waiters));
  }
  EXPECT_EQ(this->admin->command({"EXISTS", holder.key()})->integer, 0);
}

// --- bad input ------------------------------------------------------------------------------

TYPED_TEST(LockContract, BadInputIsATypedErrorAndSendsNothing) {
  using K = TypeParam;
  typename K::lock_type existing(*this->pool, "kept", this->opts(seconds(20)));
  K::take(existing);
  const std::vector<std::string> before = key_dump(*this->admin);
  command_monitor monitor(this->server->options());
  struct {
    const char* what;
    std::string name;
    std::function<void(lock_options&)> change;
  } cases[] = {
      {"empty name", "", [](lock_options&) {}},
      {"name starting with '}'", "}x", [](lock_options&) {}},
      {"prefix with {}", "x", [](lock_options& o) { o.key_prefix = "a{}"; }},
      {"zero lease", "x", [](lock_options& o) { o.lease = milliseconds(0); }},
      {"negative lease", "x", [](lock_options& o) { o.lease = milliseconds(-5); }},
      {"lease over max_lease", "x", [](lock_options& o) { o.lease = max_lease + milliseconds(1); }},
      {"retry_min 0", "x", [](lock_options& o) { o.retry_min = milliseconds(0); }},
      {"retry_max < retry_min", "x",
       [](lock_options& o) { o.retry_min = milliseconds(50), o.retry_max = milliseconds(10); }},
      {"wait_lease 2 ms", "x", [](lock_options& o) { o.wait_lease = milliseconds(2); }},
      {"recheck_interval 5 ms", "x", [](lock_options& o) { o.recheck_interval = milliseconds(5); }},
      {"recheck_interval over max_lease", "x",
       [](lock_options& o) { o.recheck_interval = max_lease + milliseconds(1); }},
      {"min_replicas -1", "x", [](lock_options& o) { o.min_replicas = -1; }},
      {"min_replicas 101", "x", [](lock_options& o) { o.min_replicas = 101; }},
      {"replica_timeout >= lease", "x", [](lock_options& o) { o.min_replicas = 1, o.replica_timeout = o.lease; }},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c.what);
    lock_options o = this->opts(seconds(20));
    c.change(o);
    EXPECT_THROW(typename K::lock_type(*this->pool, c.name, o), invalid_argument);
  }
  // A bad extend on a held lock, and extend / fencing_token on one not held.
  for (const milliseconds bad : {milliseconds(0), milliseconds(-1), max_lease + milliseconds(1)})
    EXPECT_THROW(K::extend(existing, bad), invalid_argument);
  typename K::lock_type idle(*this->pool, "idle", this->opts(seconds(20)));
  EXPECT_THROW(K::extend(idle, seconds(1)), lock_error);
  EXPECT_THROW(idle.fencing_token(), lock_error);
  EXPECT_EQ(monitor.take(*this->admin), std::vector<std::string>{});
  EXPECT_EQ(key_dump(*this->admin), before);
  K::give(existing);
}

// --- fencing --------------------------------------------------------------------------------

TYPED_TEST(LockContract, FencingTokensIncreaseAcrossHoldsAndNeedAHold) {
  using K = TypeParam;
  client other(this->options());
  typename K::lock_type a(*this->pool, "fence", this->opts(seconds(10)));
  typename K::lock_type b(other, "fence", this->opts(seconds(10)));
  EXPECT_THROW(a.fencing_token(), lock_error);
  std::uint64_t last = 0;
  for (int i = 0; i < 6; ++i) {
    typename K::lock_type& l = i % 3 == 2 ? b : a;
    K::take(l);
    const std::uint64_t token = l.fencing_token();
    EXPECT_GT(token, last);
    EXPECT_EQ(l.fencing_token(), token);  // the same for the whole hold
    last = token;
    K::give(l);
    EXPECT_THROW(l.fencing_token(), lock_error);
  }
}

// --- waiting --------------------------------------------------------------------------------

TYPED_TEST(LockContract, TheHolderAskingAgainGetsLockErrorAtOnceUnlessTheKindIsRecursive) {
  using K = TypeParam;
  typename K::lock_type l(*this->pool, "again", this->opts(seconds(10)));
  K::hold(l);
  const steady::time_point start = steady::now();
  if constexpr (K::recursive) {
    EXPECT_TRUE(K::wait(l, seconds(5)));
    K::give(l);
  } else {
    EXPECT_THROW(K::wait(l, seconds(5)), lock_error);
    EXPECT_THROW(l.lock(), lock_error);
    EXPECT_THROW(l.try_lock(), lock_error);
  }
  EXPECT_LT(steady::now() - start, seconds(2)) << "it waited for itself";
  K::drop(l);
  EXPECT_EQ(l.last_release(), release_status::released);
  // Released: the same thread takes it again normally.
  K::hold(l);
  K::drop(l);
}

TYPED_TEST(LockContract, AHugeTimeoutWaitsIndefinitelyInsteadOfOverflowing) {
  using K = TypeParam;
  client other(this->options());
  typename K::lock_type holder(*this->pool, "huge", this->opts(seconds(10)));
  typename K::lock_type waiter(other, "huge", this->opts(seconds(10)));
  struct {
    const char* what;
    std::function<bool(typename K::lock_type&)> wait;
  } waits[] = {
      {"hours::max()", [](auto& l) { return K::wait(l, std::chrono::hours::max()); }},
      {"nanoseconds::max()", [](auto& l) { return K::wait(l, std::chrono::nanoseconds::max()); }},
      {"system_clock max", [](auto& l) { return K::wait_until(l, std::chrono::system_clock::time_point::max()); }},
      {"steady time_point in hours, max",
       [](auto& l) { return K::wait_until(l, std::chrono::time_point<steady, std::chrono::hours>::max()); }},
  };
  for (auto& w : waits) {
    SCOPED_TRACE(w.what);
    K::hold(holder);
    bool acquired = false;
    this->wait_then_free(
        waiter, w.wait, [&] { K::drop(holder); }, acquired);
    EXPECT_TRUE(acquired);
  }
  // And the far past is "now": one attempt.
  K::hold(holder);
  EXPECT_FALSE(K::wait_until(waiter, std::chrono::system_clock::time_point::min()));
  EXPECT_FALSE(K::wait(waiter, std::chrono::hours::min()));
  K::drop(holder);
}

TYPED_TEST(LockContract, ALockFreedWithoutAReleaseIsNoticedWithinTheRecheckInterval) {
  using K = TypeParam;
  client other(this->options());
  lock_options o = this->opts(seconds(10));
  typename K::lock_type holder(*this->pool, "gone", o);
  typename K::lock_type waiter(other, "gone", o);
  const auto wait = [](auto& l) { return K::wait(l, seconds(8)); };
  // The bound is recheck_interval (1 s) plus a round trip; 4 s leaves room for a loaded
  // machine and sanitizers, and stays far below the 10 s lease the waiter saw.
  const auto bound = o.recheck_interval + seconds(3);
  {
    SCOPED_TRACE("the holder shortened its lease and vanished");
    K::hold(holder);
    bool acquired = false;
    // The holder stops renewing and never releases: only the shortened lease ends its hold.
    const auto took = this->wait_then_free(
        waiter, wait, [&] { ASSERT_TRUE(K::shorten(holder, milliseconds(200))); }, acquired);
    EXPECT_TRUE(acquired);
    EXPECT_LT(took, bound);
    K::drop(holder);  // the late release of the vanished holder changes nothing
    EXPECT_EQ(holder.last_release(), release_status::lease_expired);
  }
  {
    SCOPED_TRACE("an operator deleted the key");
    K::hold(holder);
    bool acquired = false;
    const auto took = this->wait_then_free(
        waiter, wait,
        [&] {
          this->admin->command({"DEL", holder.key()});
        },
        acquired);
    EXPECT_TRUE(acquired);
    EXPECT_LT(took, bound);
    K::drop(holder);
    EXPECT_EQ(holder.last_release(), release_status::lease_expired);
  }
}

// --- queued hand-off ------------------------------------------------------------------------

// The mutex's queued hand-off, promised by every kind: waiters queue on the server and sleep
// (no commands, however long the hold); a release hands the lock to the head waiter alone (the
// others are not woken) or, for readers queued behind a writer, to the run of readers at the
// head together (each told once, none asking). The reentrant and shared kinds broadcast
// "released" to every waiter until their queues land (branches rqueue / squeue): their
// instances fail here until then.
template <class Kind>
struct QueuedHandOff : LockContract<Kind> {};
TYPED_TEST_SUITE(QueuedHandOff, Kinds);

TYPED_TEST(QueuedHandOff, AReleaseWakesOnlyTheHeadWaiterAndWaitingSendsNothing) {
  using K = TypeParam;
  constexpr int waiters = 3;
  lock_options o = this->opts(seconds(20));
  o.recheck_interval = seconds(60);  // no look on a timer within the test: only the release wakes
  typename K::lock_type holder(*this->pool, "queued", o);
  K::hold(holder);  // warm-up: the release script is loaded (no NOSCRIPT round trips below)
  K::drop(holder);
  K::hold(holder);
  std::vector<std::unique_ptr<client>> clients;
  std::vector<std::unique_ptr<typename K::lock_type>> locks;
  std::vector<std::promise<void>> leave(waiters);
  std::atomic<int> first{-1}, inside{0};
  std::vector<std::future<bool>> done;
  for (int i = 0; i < waiters; ++i) {
    clients.push_back(std::make_unique<client>(this->options()));
    locks.push_back(std::make_unique<typename K::lock_type>(*clients.back(), "queued", o));
    done.push_back(std::async(std::launch::async, [&, i, may_leave = leave[i].get_future()]() mutable {
      if (!K::wait(*locks[i], seconds(15))) return false;
      int none = -1;
      first.compare_exchange_strong(none, i);
      inside.fetch_add(1);
      may_leave.wait_for(seconds(15));
      K::give(*locks[i]);
      return true;
    }));
    // One at a time: the arrival order is the queue's order.
    ASSERT_TRUE(eventually([&] { return this->waiting(holder) == i + 1; })) << "waiter " << i << " never waited";
  }
  command_monitor monitor(this->server->options());
  monitor.take(*this->admin);
  // An observation window: nothing is expected to happen in it (so nothing to wait for).
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(monitor.take(*this->admin), std::vector<std::string>{}) << "waiting sent commands";
  K::drop(holder);
  ASSERT_TRUE(eventually([&] { return first.load() >= 0; })) << "nobody got the lock";
  if constexpr (K::exclusive) {
    EXPECT_EQ(first.load(), 0) << "the head waiter did not get it";
    // The others stay asleep: none is woken, none asks.
    const auto woken_others = [&] {
      for (int i = 1; i < waiters; ++i)
        if (clients[i]->wait_stats().wakeups != 0) return true;
      return false;
    };
    EXPECT_FALSE(eventually(woken_others, milliseconds(300))) << "a release woke more than the head";
  } else {
    EXPECT_TRUE(eventually([&] { return inside.load() == waiters; })) << "the readers were not admitted together";
  }
  const std::vector<std::string> sent = monitor.take(*this->admin);
  std::string listing;
  for (const auto& s : sent) listing += "\n  " + s;
  // The release, and at most one attempt of the head (none for a hand-off).
  EXPECT_LE(sent.size(), 2u) << "sent after the release:" << listing;
  for (auto& l : leave) l.set_value();
  for (auto& d : done) {
    ASSERT_EQ(d.wait_for(seconds(20)), std::future_status::ready);
    EXPECT_TRUE(d.get());
  }
}

TEST(LockOptionsRecheck, OutOfRangeIntervalsAreRejected) {
  client c(client_options{parse_uri("redis://127.0.0.1:1")});
  lock_options o;
  o.recheck_interval = milliseconds(5);
  EXPECT_THROW(mutex(c, "x", o), invalid_argument);
  EXPECT_THROW(reentrant_mutex(c, "x", o), invalid_argument);
  EXPECT_THROW(shared_mutex(c, "x", o), invalid_argument);
  o.recheck_interval = max_lease + milliseconds(1);
  EXPECT_THROW(mutex(c, "x", o), invalid_argument);
}

}  // namespace

}  // namespace test_lock_contract
