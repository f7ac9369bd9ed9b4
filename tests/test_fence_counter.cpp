// Fencing tokens on every lock kind: drawn on demand, strictly increasing per name across
// kinds, across the counter's expiry (or loss), and a lock name used once leaves nothing
// behind for good: no counter when nobody asked for a token, one with a TTL when someone did.
#include "server_fixture.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <string>

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
    ASSERT_LE(ttl, detail::kFenceTtlMs) << key;
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

}  // namespace
