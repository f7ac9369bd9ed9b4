// redislock::with_lock (with_lock.hpp): the function runs under the lock, renewed, and the lock
// is released when it returns or throws; the scope's loss signal fires when the server dropped
// the hold (a renewal found it gone) and, by the lease clock, when renewals cannot get through;
// a lock that is not renewed is refused. On every blocking kind, and on Redlock.
#include "redis_server.hpp"
#include "server_fixture.hpp"
#include "tcp_proxy.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace test_with_lock {

using namespace redislock;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

// Blocks until `s` signals (a wait, given the scope's token, on a name that another object of
// `c` holds), at most 10 s; fails the test when the wait ended without the signal.
void until_signalled(client& c, const hold_scope& s) {
  mutex holder(c, "with-lock-blocker"), blocker(c, "with-lock-blocker");
  holder.lock();
  EXPECT_FALSE(blocker.try_lock_for(seconds(10), s.stop_token()));
  EXPECT_TRUE(s.stop_token().cancelled()) << "the wait ended without the scope's signal";
  holder.unlock();
}

lock_options renewed(milliseconds lease) {
  lock_options o;
  o.lease = lease;
  o.auto_renew = true;
  return o;
}

struct one_permit_semaphore : semaphore {
  one_permit_semaphore(redislock::client& c, std::string name, lock_options o = {})
      : semaphore(c, std::move(name), 1, std::move(o)) {}
};

template <class Lock>
struct WithLock : redislock_test::server_test {
  bool key_exists(const Lock& l) { return admin->command({"EXISTS", l.key()})->integer == 1; }
};

using Kinds = ::testing::Types<mutex, reentrant_mutex, shared_mutex, one_permit_semaphore, election>;
TYPED_TEST_SUITE(WithLock, Kinds);

TYPED_TEST(WithLock, RunsTheFunctionUnderTheLockAndReleasesIt) {
  TypeParam l(*this->pool, "wl-runs", renewed(seconds(5)));
  const int answer = with_lock(l, [&](const hold_scope& s) {
    EXPECT_TRUE(l.owns_lock());
    EXPECT_TRUE(this->key_exists(l));
    EXPECT_FALSE(s.lost());
    EXPECT_FALSE(s.stop_token().cancelled());
    EXPECT_GT(s.fencing_token(), 0u);
    return 42;
  });
  EXPECT_EQ(answer, 42);
  EXPECT_FALSE(l.owns_lock());
  EXPECT_EQ(l.last_release(), release_status::released);
  TypeParam other(*this->pool, "wl-runs", renewed(seconds(5)));
  EXPECT_TRUE(other.try_lock()) << "with_lock left the lock held";
  other.unlock();
}

// A 900 ms lease, renewed three times while the function runs (the watchdog's own count): the
// scope is not lost, and the release is clean.
TYPED_TEST(WithLock, RenewsWhileTheFunctionRuns) {
  TypeParam l(*this->pool, "wl-renews", renewed(milliseconds(900)));
  with_lock(l, [&](const hold_scope& s) {
    const std::uint64_t before = this->pool->watchdog().stats().renewals;
    EXPECT_TRUE(this->pool->watchdog().wait_for_stats(
        seconds(10), [&](const watchdog_stats& st) { return st.renewals >= before + 3; }));
    EXPECT_FALSE(s.lost());
  });
  EXPECT_EQ(l.last_release(), release_status::released);
}

// The server dropped the hold (its key deleted): the next renewal finds it gone (or, on a machine
// too loaded to send it in time, the lease clock ends it), and the scope's signal ends the
// function's blocking wait; the release reports it. Which of the two came first is a race this
// test does not judge: the watchdog's tests show a renewal finding the loss.
TYPED_TEST(WithLock, SignalsALossThatARenewalFound) {
  TypeParam l(*this->pool, "wl-dropped", renewed(seconds(3)));
  with_lock(l, [&](const hold_scope& s) {
    this->admin->command({"DEL", l.key()});
    until_signalled(*this->pool, s);
    EXPECT_TRUE(s.lost());
  });
  EXPECT_EQ(l.last_release(), release_status::lease_expired);
}

// A loss the function's own call found (an extend() that found the key gone, a fencing_token()
// that threw) is the scope's at once, without waiting for the watcher.
TYPED_TEST(WithLock, ALossTheFunctionFoundIsTheScopesAtOnce) {
  TypeParam l(*this->pool, "wl-found", renewed(seconds(30)));
  with_lock(l, [&](const hold_scope& s) {
    this->admin->command({"DEL", l.key()});
    EXPECT_FALSE(l.extend());
    EXPECT_TRUE(s.lost());
    EXPECT_TRUE(s.stop_token().cancelled());
  });
  TypeParam m(*this->pool, "wl-found-token", renewed(seconds(30)));
  with_lock(m, [&](const hold_scope& s) {
    this->admin->command({"DEL", m.key()});
    EXPECT_THROW(s.fencing_token(), lock_error);
    EXPECT_TRUE(s.lost());
  });
}

// A token kept past the scope says the hold is over; try_with_lock_for runs f only when it
// takes the lock in time.
TYPED_TEST(WithLock, TheTokenOutlivesNoHoldAndTheTimedFormRunsOnlyWhenItTakesTheLock) {
  TypeParam l(*this->pool, "wl-timed", renewed(seconds(5))), other(*this->pool, "wl-timed", renewed(seconds(5)));
  cancel_token kept;
  EXPECT_EQ(try_with_lock_for(l, milliseconds(100),
                              [&](const hold_scope& s) {
                                kept = s.stop_token();
                                EXPECT_FALSE(kept.cancelled());
                                return 7;
                              }),
            std::optional<int>(7));
  EXPECT_TRUE(kept.cancelled()) << "the scope ended, its token did not say so";
  ASSERT_TRUE(other.try_lock());
  bool ran = false;
  EXPECT_FALSE(try_with_lock_for(l, milliseconds(100), [&](const hold_scope&) { ran = true; }));
  EXPECT_FALSE(ran);
  other.unlock();
}

TYPED_TEST(WithLock, ReleasesWhenTheFunctionThrows) {
  TypeParam l(*this->pool, "wl-throws", renewed(seconds(5)));
  EXPECT_THROW(with_lock(l, [](const hold_scope&) -> int { throw std::runtime_error("boom"); }), std::runtime_error);
  EXPECT_FALSE(l.owns_lock());
  EXPECT_FALSE(this->key_exists(l));
  EXPECT_EQ(l.last_release(), release_status::released);
}

TYPED_TEST(WithLock, RefusesALockThatIsNotRenewed) {
  TypeParam l(*this->pool, "wl-unrenewed");
  bool ran = false;
  EXPECT_THROW(with_lock(l, [&](const hold_scope&) { ran = true; }), invalid_argument);
  EXPECT_FALSE(ran);
  EXPECT_FALSE(l.owns_lock());
  EXPECT_FALSE(this->key_exists(l));
}

// The read side of a shared mutex: the scope watches the calling thread's read hold.
TEST(WithSharedLock, WatchesTheReadHold) {
  redislock_test::redis_server server;
  client c(client_options{server.options()});
  connection admin(server.options());
  shared_mutex l(c, "wl-shared", renewed(seconds(3)));
  const bool read = with_shared_lock(l, [&](const hold_scope& s) {
    EXPECT_TRUE(l.owns_shared());
    EXPECT_FALSE(s.lost());
    admin.command({"DEL", l.key()});
    until_signalled(c, s);
    return s.lost();
  });
  EXPECT_TRUE(read);
  EXPECT_FALSE(l.owns_shared());
  EXPECT_EQ(l.last_release(), release_status::lease_expired);
}

// Renewals that cannot get through (the connection stalls in a proxy after the acquisition):
// the scope's signal fires by the lease clock, stop_margin() before the local time until which
// the server certainly keeps the lease (printed: how long before it the function saw the
// signal, and the server's PTTL then; timing is not asserted: a loaded machine may see it late).
TEST(WithLockClock, SignalsTheLossByTheLeaseClockWhenRenewalsCannotGetThrough) {
  redislock_test::redis_server server;
  redislock_test::tcp_proxy proxy(server.port());
  client_options via{server.options()};
  via.connection.port = proxy.port();
  via.connection.command_timeout = seconds(10);  // a renewal waits: only the clock can tell
  client through(via), direct(client_options{server.options()});
  connection admin(server.options());
  const milliseconds lease(1000);
  mutex l(through, "wl-clock", renewed(lease));
  with_lock(l, [&](const hold_scope& s) {
    const std::optional<steady::time_point> until = l.lease_confirmed_until();
    ASSERT_TRUE(until.has_value());
    proxy.set_stalled(true);
    until_signalled(direct, s);  // its wait goes to the server directly
    const steady::time_point seen = steady::now();
    const long long pttl = admin.command({"PTTL", l.key()})->integer;
    ASSERT_TRUE(s.lost()) << "no signal within 10 s";
    std::printf("signal seen %lld ms before the lease clock's end; the server's PTTL then: %lld ms\n",
                static_cast<long long>(std::chrono::duration_cast<milliseconds>(*until - seen).count()), pttl);
    proxy.set_stalled(false);  // the renewal queued in the proxy may still be in time: the
  });                          // scope said "may be gone", the release says what the server had
  EXPECT_FALSE(l.owns_lock());
}

// Redlock: the same scope over three masters of its own.
TEST(WithLockRedlock, RunsUnderARenewedRedlockAndSignalsAMajorityLoss) {
  std::vector<std::unique_ptr<redislock_test::redis_server>> servers;
  std::vector<std::unique_ptr<client>> clients;
  std::vector<std::reference_wrapper<client>> refs;
  for (int i = 0; i < 3; ++i) {
    servers.push_back(std::make_unique<redislock_test::redis_server>());
    clients.push_back(std::make_unique<client>(client_options{servers.back()->options()}));
    refs.emplace_back(*clients.back());
  }
  redlock l(refs, "wl-redlock", renewed(seconds(3)));
  const std::uint64_t token = with_lock(l, [&](const hold_scope& s) {
    EXPECT_TRUE(l.owns_lock());
    EXPECT_FALSE(s.lost());
    return s.fencing_token();
  });
  EXPECT_GT(token, 0u);
  EXPECT_EQ(l.last_release(), release_status::released);
  with_lock(l, [&](const hold_scope& s) {
    for (int i = 0; i < 2; ++i) connection(servers[static_cast<std::size_t>(i)]->options()).command({"DEL", l.key()});
    until_signalled(*clients[2], s);
    EXPECT_TRUE(s.lost()) << "a hold that lost the majority was not signalled";
  });
  EXPECT_EQ(l.last_release(), release_status::lease_expired);
}

}  // namespace

}  // namespace test_with_lock
