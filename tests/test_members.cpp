// The members every lock kind offers (README, "Members of every lock kind"): their noexcept
// promises, unlock_and_report() (and the deprecated release() it replaces), and options a
// kind refuses because they cannot mean anything for it.
#include "eventually.hpp"
#include "server_fixture.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace test_members {

using namespace redislock;
using redislock_test::command_calls;
using std::chrono::milliseconds;

namespace {

// ---- noexcept: the members that cannot fail promise it, on every kind ----

template <class Lock>
constexpr bool common_members_noexcept() {
  Lock* l = nullptr;
  const Lock* c = nullptr;
  return noexcept(l->unlock())&& noexcept(c->owns_lock())&& noexcept(c->lost())&& noexcept(c->last_release())&& noexcept(
      c->name())&& noexcept(c->key())&& noexcept(c->options())&& noexcept(c->lease_confirmed_until());
}
static_assert(common_members_noexcept<mutex>());
static_assert(common_members_noexcept<reentrant_mutex>());
static_assert(common_members_noexcept<shared_mutex>());
static_assert(common_members_noexcept<redlock>());
static_assert(common_members_noexcept<semaphore>());
static_assert(noexcept(std::declval<semaphore&>().release()));
static_assert(common_members_noexcept<election>());
static_assert(noexcept(std::declval<election&>().resign()));

template <class Lock>
constexpr bool client_noexcept() {
  const Lock* c = nullptr;
  return noexcept(c->client());
}
static_assert(client_noexcept<mutex>() && client_noexcept<reentrant_mutex>() && client_noexcept<shared_mutex>());

// The kinds' own local-view members.
static_assert(noexcept(std::declval<const reentrant_mutex&>().hold_count()));
static_assert(noexcept(std::declval<shared_mutex&>().unlock_shared()));
static_assert(noexcept(std::declval<const shared_mutex&>().owns_shared()));
static_assert(noexcept(std::declval<const shared_mutex&>().shared_count()));
static_assert(noexcept(std::declval<const shared_mutex&>().lost_shared()));
static_assert(noexcept(std::declval<const shared_mutex&>().lease_confirmed_until_shared()));

// The reporting unlock has one name and one result type on every kind.
template <class Lock>
constexpr bool reports_release() {
  return std::is_same_v<decltype(std::declval<Lock&>().unlock_and_report()), release_status>;
}
static_assert(reports_release<mutex>() && reports_release<reentrant_mutex>() && reports_release<shared_mutex>() &&
              reports_release<redlock>() && reports_release<semaphore>() && reports_release<election>());
static_assert(std::is_same_v<decltype(std::declval<election&>().resign_and_report()), release_status>);
static_assert(std::is_same_v<decltype(std::declval<shared_mutex&>().unlock_shared_and_report()), release_status>);

struct MembersTest : redislock_test::server_test {
  std::vector<std::reference_wrapper<client>> one_master() { return {std::ref(*pool)}; }
  bool exists(const std::string& key) { return admin->command({"EXISTS", key})->integer == 1; }
};

TEST_F(MembersTest, UnlockAndReportOnTheMutex) {
  mutex m(*pool, "m");
  EXPECT_EQ(m.unlock_and_report(), release_status::not_held);  // nothing held: nothing sent
  m.lock();
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
  EXPECT_EQ(m.last_release(), release_status::released);
  EXPECT_FALSE(m.owns_lock());
  EXPECT_FALSE(exists(m.key()));
  EXPECT_EQ(m.unlock_and_report(), release_status::not_held);
}

TEST_F(MembersTest, UnlockAndReportOnTheReentrantMutex) {
  reentrant_mutex m(*pool, "r");
  m.lock();
  m.lock();
  EXPECT_EQ(m.unlock_and_report(), release_status::released);  // one of two holds
  EXPECT_TRUE(m.owns_lock());
  EXPECT_TRUE(exists(m.key()));
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
  EXPECT_FALSE(m.owns_lock());
  EXPECT_FALSE(exists(m.key()));
  EXPECT_EQ(m.unlock_and_report(), release_status::not_held);
  EXPECT_EQ(m.last_release(), release_status::not_held);
}

TEST_F(MembersTest, UnlockAndReportOnBothSidesOfTheSharedMutex) {
  shared_mutex m(*pool, "s");
  m.lock();
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
  EXPECT_EQ(m.unlock_and_report(), release_status::not_held);
  m.lock_shared();
  EXPECT_EQ(m.unlock_shared_and_report(), release_status::released);
  EXPECT_EQ(m.last_release(), release_status::released);
  EXPECT_FALSE(m.owns_shared());
  EXPECT_EQ(m.unlock_shared_and_report(), release_status::not_held);
  EXPECT_FALSE(exists(m.key()));
}

TEST_F(MembersTest, UnlockAndReportOnTheRedlock) {
  redlock r(one_master(), "rl");
  r.lock();
  EXPECT_GT(r.remaining_lease().count(), 0);  // the same name as on the other kinds: its validity
  EXPECT_EQ(r.unlock_and_report(), release_status::released);
  EXPECT_EQ(r.remaining_lease().count(), 0);
  EXPECT_FALSE(exists(r.key()));
  EXPECT_EQ(r.unlock_and_report(), release_status::not_held);
}

// The old name stays until callers moved: it unlocks (and reports) exactly like the new one.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_F(MembersTest, DeprecatedReleaseStillUnlocksOnEveryKind) {
  mutex m(*pool, "m");
  m.lock();
  EXPECT_EQ(m.release(), release_status::released);
  EXPECT_FALSE(exists(m.key()));

  reentrant_mutex r(*pool, "r");
  r.lock();
  EXPECT_EQ(r.release(), release_status::released);
  EXPECT_FALSE(exists(r.key()));

  shared_mutex s(*pool, "s");
  s.lock();
  EXPECT_EQ(s.release(), release_status::released);
  s.lock_shared();
  EXPECT_EQ(s.release_shared(), release_status::released);
  EXPECT_FALSE(exists(s.key()));

  redlock l(one_master(), "rl");
  l.lock();
  EXPECT_EQ(l.release(), release_status::released);
  EXPECT_FALSE(exists(l.key()));
}
#pragma GCC diagnostic pop

// Redlock has no server-side queue and no release notice: wait_lease and recheck_interval
// (like fair and min_replicas) cannot mean anything for it, so setting them is a typed error
// before anything is sent, not a silently ignored wish.
TEST_F(MembersTest, RedlockRefusesOptionsThatMeanNothingForIt) {
  std::vector<std::pair<const char*, std::function<void(lock_options&)>>> cases = {
      {"wait_lease", [](lock_options& o) { o.wait_lease = milliseconds(5000); }},
      {"recheck_interval", [](lock_options& o) { o.recheck_interval = milliseconds(50); }},
      {"fair", [](lock_options& o) { o.fair = true; }},
      {"min_replicas", [](lock_options& o) { o.min_replicas = 1; }},
  };
  reset_stats();
  for (auto& [option, set] : cases) {
    lock_options o;
    set(o);
    EXPECT_THROW(redlock(one_master(), "rl", o), invalid_argument) << option;
  }
  EXPECT_EQ(command_calls(*admin, "set"), 0);
  EXPECT_EQ(admin->command({"DBSIZE"})->integer, 0);
}

// The same options mean something for the single-deployment kinds: accepted there.
TEST_F(MembersTest, SingleDeploymentKindsAcceptWaitOptions) {
  lock_options o;
  o.wait_lease = milliseconds(5000);
  o.recheck_interval = milliseconds(50);
  EXPECT_NO_THROW(mutex(*pool, "m", o));
  EXPECT_NO_THROW(reentrant_mutex(*pool, "r", o));
  EXPECT_NO_THROW(shared_mutex(*pool, "s", o));
  EXPECT_NO_THROW(semaphore(*pool, "p", 2, o));
}

// One lease check for every kind: extend() refuses a lease outside (0, max_lease] (and, with
// auto_renew, below options().lease) before anything is sent, even on a lock not held.
TEST_F(MembersTest, ExtendChecksItsLeaseTheSameWayOnEveryKind) {
  mutex m(*pool, "m");
  reentrant_mutex r(*pool, "r");
  shared_mutex s(*pool, "s");
  redlock l(one_master(), "rl");
  semaphore p(*pool, "p", 2);
  for (milliseconds bad : {milliseconds(0), milliseconds(-1), max_lease + milliseconds(1)}) {
    EXPECT_THROW(p.extend(bad), invalid_argument);
    EXPECT_THROW(m.extend(bad), invalid_argument);
    EXPECT_THROW(r.extend(bad), invalid_argument);
    EXPECT_THROW(s.extend(bad), invalid_argument);
    EXPECT_THROW(s.extend_shared(bad), invalid_argument);
    EXPECT_THROW(l.extend(bad), invalid_argument);
  }
  EXPECT_THROW(m.extend(), lock_error);  // a valid lease on a lock not held
  EXPECT_THROW(r.extend(), lock_error);
  EXPECT_THROW(s.extend(), lock_error);
  EXPECT_THROW(l.extend(), lock_error);
  EXPECT_THROW(p.extend(), lock_error);
}

// lease_confirmed_until(): while renewed, the send time of the last confirmed acquisition or
// renewal plus the lease (redlock: its validity's end); it moves forward with the renewals;
// nullopt when nothing is held or without auto_renew.
template <class Lock, class Unlock, class Until>
void check_confirmed_until(Lock&& lock, Unlock&& unlock, Until&& until, milliseconds lease, milliseconds drift,
                           bool renewed = true) {
  using clock = std::chrono::steady_clock;
  EXPECT_FALSE(until().has_value()) << "nothing held";
  const clock::time_point before = clock::now();
  lock();
  const clock::time_point after = clock::now();
  const auto first = until();
  ASSERT_TRUE(first.has_value());
  EXPECT_GE(*first, before + lease - drift);
  EXPECT_LE(*first, after + lease);
  if (renewed) {
    EXPECT_TRUE(redislock_test::eventually([&] { return until().value_or(*first) > *first; })) << "renewed";
  } else {
    EXPECT_EQ(until(), first) << "moved with nothing sent";
  }
  unlock();
  EXPECT_FALSE(until().has_value()) << "released";
}

TEST_F(MembersTest, LeaseConfirmedUntilOnEveryKind) {
  lock_options o;
  o.lease = milliseconds(600);
  o.auto_renew = true;
  mutex m(*pool, "m", o);
  check_confirmed_until([&] { m.lock(); }, [&] { m.unlock(); }, [&] { return m.lease_confirmed_until(); }, o.lease,
                        milliseconds(0));
  reentrant_mutex r(*pool, "r", o);
  check_confirmed_until([&] { r.lock(); }, [&] { r.unlock(); }, [&] { return r.lease_confirmed_until(); }, o.lease,
                        milliseconds(0));
  shared_mutex s(*pool, "s", o);
  check_confirmed_until([&] { s.lock(); }, [&] { s.unlock(); }, [&] { return s.lease_confirmed_until(); }, o.lease,
                        milliseconds(0));
  check_confirmed_until([&] { s.lock_shared(); }, [&] { s.unlock_shared(); },
                        [&] { return s.lease_confirmed_until_shared(); }, o.lease, milliseconds(0));
  semaphore p(*pool, "p", 2, o);
  check_confirmed_until([&] { p.acquire(); }, [&] { p.release(); }, [&] { return p.lease_confirmed_until(); }, o.lease,
                        milliseconds(0));
  redlock l(one_master(), "rl", o);
  check_confirmed_until([&] { l.lock(); }, [&] { l.unlock(); }, [&] { return l.lease_confirmed_until(); }, o.lease,
                        l.drift());

  // Nothing renews the lease: it still counts from the acquisition's send (detail/lease_clock.hpp).
  o.auto_renew = false;
  mutex plain(*pool, "plain", o);
  check_confirmed_until([&] { plain.lock(); }, [&] { plain.unlock(); }, [&] { return plain.lease_confirmed_until(); },
                        o.lease, milliseconds(0), false);
  redlock plain_redlock(one_master(), "plain_rl", o);
  check_confirmed_until([&] { plain_redlock.lock(); }, [&] { plain_redlock.unlock(); },
                        [&] { return plain_redlock.lease_confirmed_until(); }, o.lease, plain_redlock.drift(), false);
}

}  // namespace

}  // namespace test_members
