// Fencing tokens on every lock kind: drawn on demand, strictly increasing per name across
// kinds, across the counter's expiry (or loss), and a lock name used once leaves nothing
// behind for good: no counter when nobody asked for a token, one with a TTL when someone did.
#include "eventually.hpp"
#include "server_fixture.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>

namespace test_fence_counter {

using namespace redislock;
using std::chrono::seconds;

namespace {

using FenceCounter = redislock_test::server_test;

long long dbsize(connection& admin) { return admin.command({"DBSIZE"})->integer; }

// lock, optionally draw a token, unlock: `names` distinct names of one kind.
template <class Lock, class Hold>
void use_names_once(client& c, const char* kind, int names, bool ask_token, Hold hold) {
  for (int i = 0; i < names; ++i) {
    Lock l(c, std::string(kind) + "-order-" + std::to_string(i));
    hold(l, ask_token);
  }
}

TEST_F(FenceCounter, ALockNameUsedOnceLeavesNothingBehind) {
  const auto exclusive = [](auto& l, bool token) {
    l.lock();
    if (token) {
      EXPECT_GT(l.fencing_token(), 0u);
    }
    l.unlock();
    EXPECT_EQ(l.last_release(), release_status::released);
  };
  const auto shared = [](shared_mutex& l, bool token) {
    l.lock_shared();
    if (token) {
      EXPECT_GT(l.fencing_token(), 0u);
    }
    l.unlock_shared();
    EXPECT_EQ(l.last_release(), release_status::released);
  };
  use_names_once<mutex>(*pool, "m", 1000, false, exclusive);
  use_names_once<reentrant_mutex>(*pool, "r", 1000, false, exclusive);
  use_names_once<shared_mutex>(*pool, "s", 1000, false, exclusive);
  use_names_once<shared_mutex>(*pool, "sr", 1000, false, shared);
  EXPECT_EQ(dbsize(*admin), 0) << "keys left by 4,000 lock names nobody asked a token of";

  use_names_once<mutex>(*pool, "m", 1000, true, exclusive);
  use_names_once<reentrant_mutex>(*pool, "r", 1000, true, exclusive);
  use_names_once<shared_mutex>(*pool, "s", 1000, true, exclusive);
  use_names_once<shared_mutex>(*pool, "sr", 1000, true, shared);
  // Only the counters remain, and each expires.
  EXPECT_EQ(dbsize(*admin), 4000);
  for (const std::string& key : redislock_test::all_keys(*admin)) {
    ASSERT_EQ(key.substr(key.size() - 6), ":fence") << key;
    const long long ttl = admin->command({"PTTL", key})->integer;
    ASSERT_GT(ttl, 0) << key << " never expires";
    ASSERT_LE(ttl, lock_options{}.fence_lifetime.count()) << key;
  }
}

TEST_F(FenceCounter, TokensIncreaseAcrossKindsAndAcrossTheCountersExpiry) {
  mutex m(*pool, "shared-name");
  reentrant_mutex r(*pool, "shared-name-r");
  std::uint64_t last = 0;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    m.lock();
    const std::uint64_t a = m.fencing_token();
    EXPECT_GT(a, last);
    EXPECT_EQ(m.fencing_token(), a);  // one per hold
    m.unlock();
    // As if the counter had expired (or a restart without persistence had lost it).
    admin->command({"DEL", m.key() + ":fence"});
    m.lock();
    const std::uint64_t b = m.fencing_token();
    EXPECT_GT(b, a);
    m.unlock();
    last = b;
  }
  // The reentrant kind: nested holds keep the outer hold's token; a new hold gets a larger one.
  r.lock();
  r.lock();
  const std::uint64_t outer = r.fencing_token();
  r.unlock();
  EXPECT_EQ(r.fencing_token(), outer);
  r.unlock();
  EXPECT_THROW(r.fencing_token(), lock_error);
  admin->command({"DEL", r.key() + ":fence"});
  r.lock();
  EXPECT_GT(r.fencing_token(), outer);
  r.unlock();
}

TEST_F(FenceCounter, ALeaseThatRanOutGivesNoTokenOnAnyKind) {
  reentrant_mutex r(*pool, "gone-r", lease(seconds(10)));
  shared_mutex s(*pool, "gone-s", lease(seconds(10)));
  r.lock();
  s.lock();
  admin->command({"DEL", r.key(), s.key()});  // as if both leases had run out
  EXPECT_THROW(r.fencing_token(), lock_error);
  EXPECT_TRUE(r.lost());
  EXPECT_THROW(s.fencing_token(), lock_error);
  EXPECT_TRUE(s.lost());
  EXPECT_EQ(admin->command({"EXISTS", r.key() + ":fence", s.key() + ":fence"})->integer, 0);
  r.unlock();
  s.unlock();
}

// A failover to a replica that missed the last increments (replication is asynchronous) leaves
// a counter BEHIND tokens already handed out. A token is never below the server's clock in µs,
// so the next one is still higher than every earlier one (found by the cluster torture: a
// kill -9 of a master gave repeated tokens).
TEST_F(FenceCounter, TokensIncreaseWhenTheCounterWentBackAsAfterAFailoverToALaggingReplica) {
  mutex m(*pool, "failover");
  m.lock();
  const std::uint64_t before = m.fencing_token();
  m.unlock();
  for (int i = 0; i < 5; ++i) {  // a few more tokens the replica never received
    m.lock();
    (void)m.fencing_token();
    m.unlock();
  }
  m.lock();
  const std::uint64_t last = m.fencing_token();
  m.unlock();
  // The promoted replica's copy: the counter as it was when `before` was drawn.
  admin->command({"SET", m.key() + ":fence", std::to_string(before)});
  m.lock();
  EXPECT_GT(m.fencing_token(), last) << "a token repeated after the counter went back";
  m.unlock();
  // Not a counter at all: an error, and the value is left as it was.
  admin->command({"SET", m.key() + ":fence", "not-a-number"});
  m.lock();
  EXPECT_THROW(m.fencing_token(), reply_error);
  m.unlock();
  EXPECT_EQ(std::string(admin->command({"GET", m.key() + ":fence"})->str), "not-a-number");
}

// lock_options::fence_lifetime is the counter's expiry after the draw, on every kind that
// draws: a fencing token, an election's new term (its own win, a hand-off on resignation, a
// hand-off by force_release()), and the async API's token.
TEST_F(FenceCounter, TheCounterLivesForTheDrawingHoldersFenceLifetimeOnEveryKind) {
  lock_options o;
  o.fence_lifetime = std::chrono::milliseconds(123456);
  const long long lifetime = o.fence_lifetime.count();
  auto expect_counter_lifetime = [&](const std::string& key, const char* what) {
    const long long ttl = admin->command({"PTTL", key + ":fence"})->integer;
    EXPECT_LE(ttl, lifetime) << what;
    EXPECT_GT(ttl, lifetime - 60000) << what;  // minus any time the test itself took
    admin->command({"DEL", key + ":fence"});
  };
  {
    mutex m(*pool, "life-m", o);
    m.lock();
    EXPECT_GT(m.fencing_token(), 0u);
    expect_counter_lifetime(m.key(), "mutex");
    m.unlock();
  }
  {
    // A draw never shortens the counter's life: a holder with a shorter lifetime keeps the
    // longer one that is left, and an expiry-free counter (an operator's PERSIST) stays so.
    lock_options brief = o;
    brief.fence_lifetime = std::chrono::milliseconds(1000);
    mutex longer(*pool, "life-keep", o), shorter(*pool, "life-keep", brief);
    longer.lock();
    const std::uint64_t first = longer.fencing_token();
    longer.unlock();
    shorter.lock();
    EXPECT_GT(shorter.fencing_token(), first);
    shorter.unlock();
    EXPECT_GT(admin->command({"PTTL", longer.key() + ":fence"})->integer, 1000) << "shortened by a shorter lifetime";
    admin->command({"PERSIST", longer.key() + ":fence"});
    longer.lock();
    EXPECT_GT(longer.fencing_token(), first);
    longer.unlock();
    EXPECT_EQ(admin->command({"PTTL", longer.key() + ":fence"})->integer, -1) << "an expiry-free counter got one";
    admin->command({"DEL", longer.key() + ":fence"});
  }
  {
    reentrant_mutex r(*pool, "life-r", o);
    r.lock();
    EXPECT_GT(r.fencing_token(), 0u);
    expect_counter_lifetime(r.key(), "reentrant_mutex");
    r.unlock();
  }
  {
    shared_mutex s(*pool, "life-s", o);
    s.lock_shared();
    EXPECT_GT(s.fencing_token(), 0u);
    expect_counter_lifetime(s.key(), "shared_mutex");
    s.unlock_shared();
  }
  {
    semaphore p(*pool, "life-p", 2, o);
    p.lock();
    EXPECT_GT(p.fencing_token(), 0u);
    expect_counter_lifetime(p.key(), "semaphore");
    p.unlock();
  }
  {
    election a(*pool, "life-e", o), b(*pool, "life-e", o);
    ASSERT_TRUE(a.try_lock());
    expect_counter_lifetime(a.key(), "election: a term won");
    // b campaigns (queues) on another thread; a's resignation hands leadership to it.
    const auto one_queued = [&] {
      return redislock_test::eventually(
          [&] {
            return admin->command({"ZCARD", a.key() + ":equeue"})->integer == 1;
          },
          seconds(10));
    };
    std::thread campaign([&] { b.lock(); });
    const bool queued = one_queued();
    a.unlock();
    campaign.join();
    ASSERT_TRUE(queued) << "b never queued";
    ASSERT_TRUE(b.owns_lock());
    expect_counter_lifetime(a.key(), "election: a term handed on");
    // a campaigns again; the administrator's force_release() hands leadership from b to a.
    std::thread again([&] { a.lock(); });
    const bool queued_again = one_queued();
    if (queued_again) force_release(*pool, "life-e", o);
    else b.unlock();
    again.join();
    ASSERT_TRUE(queued_again) << "a never queued";
    EXPECT_TRUE(a.owns_lock());
    expect_counter_lifetime(a.key(), "election: a term handed on by force_release()");
    a.unlock();
    b.unlock();
  }
}

TEST_F(FenceCounter, AFenceLifetimeOutsideItsRangeIsRefusedBeforeAnythingIsSent) {
  for (const auto bad : {std::chrono::milliseconds(0), std::chrono::milliseconds(-1), max_lease + seconds(1)}) {
    lock_options o;
    o.fence_lifetime = bad;
    EXPECT_THROW(mutex(*pool, "bad-life", o), invalid_argument) << bad.count();
    EXPECT_THROW(reentrant_mutex(*pool, "bad-life", o), invalid_argument) << bad.count();
    EXPECT_THROW(shared_mutex(*pool, "bad-life", o), invalid_argument) << bad.count();
    EXPECT_THROW(election(*pool, "bad-life", o), invalid_argument) << bad.count();
  }
  EXPECT_EQ(dbsize(*admin), 0);
  // Redlock's register never expires: a lifetime would mean nothing there.
  lock_options o;
  o.fence_lifetime = std::chrono::minutes(5);
  EXPECT_THROW(redlock({std::ref(*pool)}, "bad-life", o), invalid_argument);
}

}  // namespace

}  // namespace test_fence_counter
