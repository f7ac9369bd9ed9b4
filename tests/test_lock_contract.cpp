// What every lock kind promises alike: the thread that holds a non-recursive lock gets
// lock_error when it asks again (instead of waiting for itself), a huge timeout means "wait
// indefinitely" (no overflow), and a lock that becomes free without a release is noticed
// within lock_options::recheck_interval, whatever the holder's old lease.
#include "eventually.hpp"
#include "server_fixture.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>

using namespace redislock;
using redislock_test::eventually;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

// One way of taking a lock: which class, which side, which options. The holder always takes
// the side that blocks the waiter (a writer, for a waiting reader).
template <class Lock, bool Recursive>
struct exclusive_kind {
  using lock_type = Lock;
  static constexpr bool recursive = Recursive;
  static void adjust(lock_options&) {}
  static void hold(lock_type& l) { l.lock(); }
  static void drop(lock_type& l) { l.unlock(); }
  template <class Timeout>
  static bool wait(lock_type& l, Timeout t) {
    return l.try_lock_for(t);
  }
  template <class Deadline>
  static bool wait_until(lock_type& l, Deadline t) {
    return l.try_lock_until(t);
  }
  static void drop_waited(lock_type& l) { l.unlock(); }
  static bool shorten(lock_type& l, milliseconds lease) { return l.extend(lease); }
};
using mutex_kind = exclusive_kind<mutex, false>;
struct fair_mutex_kind : mutex_kind {
  static void adjust(lock_options& o) { o.fair = true; }
};
using reentrant_kind = exclusive_kind<reentrant_mutex, true>;
using shared_write_kind = exclusive_kind<shared_mutex, false>;
struct shared_read_kind : shared_write_kind {
  static constexpr bool recursive = true;  // reads nest
  template <class Timeout>
  static bool wait(lock_type& l, Timeout t) {
    return l.try_lock_shared_for(t);
  }
  template <class Deadline>
  static bool wait_until(lock_type& l, Deadline t) {
    return l.try_lock_shared_until(t);
  }
  static void drop_waited(lock_type& l) { l.unlock_shared(); }
};

template <class Kind>
struct LockContract : redislock_test::server_test {
  using lock_type = typename Kind::lock_type;
  lock_options opts(milliseconds lease_ms) {
    lock_options o = lease(lease_ms);
    Kind::adjust(o);
    return o;
  }
  // A waiter of any kind is queued on the server (P{N}:queue, :rqueue or :squeue).
  bool someone_waits(const lock_type& l) {
    return admin->command({"EXISTS", l.key() + ":queue", l.key() + ":rqueue", l.key() + ":squeue"})->integer >= 1;
  }
  // Waits on `waiter` with wait(waiter) on another thread while `holder` holds; returns how
  // long the wait took once `free_it()` (called when the waiter is registered) frees the lock.
  // The waiting thread releases what it got (holds of the hash kinds belong to a thread).
  template <class Wait, class FreeIt>
  steady::duration wait_then_free(lock_type& waiter, Wait wait, FreeIt free_it, bool& acquired) {
    auto waited = std::async(std::launch::async, [&] {
      const bool got = wait(waiter);
      if (got) Kind::drop_waited(waiter);
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
};

using Kinds = ::testing::Types<mutex_kind, fair_mutex_kind, reentrant_kind, shared_write_kind, shared_read_kind>;
TYPED_TEST_SUITE(LockContract, Kinds);

TYPED_TEST(LockContract, TheHolderAskingAgainGetsLockErrorAtOnceUnlessTheKindIsRecursive) {
  using K = TypeParam;
  typename K::lock_type l(*this->pool, "again", this->opts(seconds(10)));
  K::hold(l);
  const steady::time_point start = steady::now();
  if constexpr (K::recursive) {
    EXPECT_TRUE(K::wait(l, seconds(5)));
    K::drop_waited(l);
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
