// A server that may evict keys with a TTL can delete a held lock: a client finds out on its
// first connection (client::eviction()) and warns once through client_options::on_warning.
#include "redis_server.hpp"
#include "server_version.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace test_eviction {

using namespace redislock;
using redislock_test::acl_channel_rules;
using redislock_test::redis_server;

namespace {

struct warnings {
  std::vector<std::string> lines;
  client_options options(const redis_server& s) {
    client_options o{s.options()};
    o.on_warning = [this](const std::string& m) { lines.push_back(m); };
    return o;
  }
};

// What a user does first: take and release a lock.
void use(client& c) {
  mutex m(c, "eviction");
  ASSERT_TRUE(m.try_lock());
  m.unlock();
  ASSERT_EQ(m.last_release(), release_status::released);
}

TEST(Eviction, AVolatilePolicyWithAMemoryLimitIsReportedOnceWithTheFirstConnection) {
  redis_server server({"--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"});
  warnings w;
  client c(w.options(server));
  EXPECT_EQ(c.eviction().risk, eviction_risk::unknown);  // nothing asked before first use
  use(c);
  use(c);
  const eviction_check e = c.eviction();
  EXPECT_EQ(e.risk, eviction_risk::evicts_locks);
  EXPECT_EQ(e.policy, "volatile-lru");
  EXPECT_EQ(e.maxmemory, 100ull * 1024 * 1024);
  ASSERT_EQ(w.lines.size(), 1u);
  EXPECT_NE(w.lines[0].find("volatile-lru"), std::string::npos) << w.lines[0];
  EXPECT_NE(w.lines[0].find(server.options().endpoint()), std::string::npos) << w.lines[0];
}

TEST(Eviction, EveryEvictingPolicyIsRiskyOnlyUnderAMemoryLimit) {
  redis_server server;
  connection admin = server.admin();
  for (const char* policy : {"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lfu", "volatile-random",
                             "volatile-ttl", "noeviction"}) {
    SCOPED_TRACE(policy);
    admin.command({"CONFIG", "SET", "maxmemory-policy", policy});
    admin.command({"CONFIG", "SET", "maxmemory", "0"});
    EXPECT_EQ(check_eviction(admin).risk, eviction_risk::none);  // no limit: nothing is evicted
    admin.command({"CONFIG", "SET", "maxmemory", "1gb"});
    EXPECT_EQ(check_eviction(admin).risk,
              std::string(policy) == "noeviction" ? eviction_risk::none : eviction_risk::evicts_locks);
  }
}

TEST(Eviction, ASafeServerGivesNoWarning) {
  redis_server server({"--maxmemory", "100mb", "--maxmemory-policy", "noeviction"});
  warnings w;
  client c(w.options(server));
  use(c);
  EXPECT_EQ(c.eviction().risk, eviction_risk::none);
  EXPECT_TRUE(w.lines.empty());
}

TEST(Eviction, AUserWithoutConfigRightsStillLocksAndTheRiskIsUnknown) {
  redis_server server({"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"});
  connection admin = server.admin();
  std::vector<std::string> acl = {"ACL",     "SETUSER",      "app",   "reset",  "on",
                                  ">app-pw", "~redislock:*", "+@all", "-config"};
  for (const std::string& rule : acl_channel_rules(admin, "redislock:*")) acl.push_back(rule);
  admin.command(std::vector<std::string_view>(acl.begin(), acl.end()));
  warnings w;
  client_options o = w.options(server);
  o.connection.user = "app";
  o.connection.password = "app-pw";
  client c(o);
  use(c);
  EXPECT_EQ(c.eviction().risk, eviction_risk::unknown);
  EXPECT_TRUE(c.eviction().policy.empty());
  EXPECT_TRUE(w.lines.empty());
}

TEST(Eviction, AThrowingWarningHookDoesNotFailTheLockCall) {
  redis_server server({"--maxmemory", "100mb", "--maxmemory-policy", "volatile-ttl"});
  client_options o{server.options()};
  int calls = 0;
  o.on_warning = [&](const std::string&) {
    ++calls;
    throw std::runtime_error("logger down");
  };
  client c(o);
  use(c);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(c.eviction().risk, eviction_risk::evicts_locks);
}

}  // namespace

}  // namespace test_eviction
