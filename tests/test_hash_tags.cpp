// Every key of one lock must share one cluster slot, whatever the lock's name: a name whose
// braces would break the {hash tag} is rejected. Runs against a one-node cluster-enabled
// server that owns all slots, so Redis itself refuses any script whose keys span slots
// (CROSSSLOT).
#include "eventually.hpp"
#include "redis_server.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace test_hash_tags {

using namespace redislock;
using namespace std::chrono_literals;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/redislock-cluster-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

struct HashTags : ::testing::Test {
  static void SetUpTestSuite() {
    dir = new std::string(temp_dir());
    server = new redislock_test::redis_server(
        {"--cluster-enabled", "yes", "--cluster-config-file", *dir + "/nodes.conf", "--dir", *dir});
    connection admin = server->admin();
    std::vector<std::string> addslots = {"CLUSTER", "ADDSLOTS"};  // every server (ADDSLOTSRANGE: Redis 7)
    for (int slot = 0; slot < 16384; ++slot) addslots.push_back(std::to_string(slot));
    admin.command(std::vector<std::string_view>(addslots.begin(), addslots.end()));
    const bool ok = redislock_test::eventually(
        [&] {
          reply_ptr r = admin.command({"CLUSTER", "INFO"});
          return std::string(r->str, r->len).find("cluster_state:ok") != std::string::npos;
        },
        10s);
    if (!ok) throw std::runtime_error("one-node cluster did not reach cluster_state:ok");
  }
  static void TearDownTestSuite() {
    delete server;
    server = nullptr;
    std::system(("rm -rf '" + *dir + "'").c_str());
    delete dir;
  }
  void SetUp() override {
    admin = std::make_unique<connection>(server->options());
    admin->command({"FLUSHALL"});
  }
  long long slot(const std::string& key) { return admin->command({"CLUSTER", "KEYSLOT", key})->integer; }
  long long keys() { return admin->command({"DBSIZE"})->integer; }

  inline static std::string* dir = nullptr;
  inline static redislock_test::redis_server* server = nullptr;
  std::unique_ptr<connection> admin;
};

// Names with braces in every position that keeps a non-empty tag.
const std::vector<std::string> kAwkwardNames = {"{", "{}", "a{b", "a{b}c", "a}b", "x}", "x{y}z", "{{}}"};

TEST_F(HashTags, EveryKeyOfALockSharesOneSlotForNamesWithBraces) {
  client c(client_options{server->options()});
  for (const std::string& name : kAwkwardNames) {
    SCOPED_TRACE("name '" + name + "'");
    mutex m(c, name);
    const long long s = slot(m.key());
    for (const char* suffix : {":fence", ":queue", ":waiters", ":w:0123abcd", ":released", ":squeue", ":swaiters",
                               ":w:0123abcd:7", ":pqueue", ":pwaiters"})
      EXPECT_EQ(slot(m.key() + suffix), s) << suffix;
  }
}

TEST_F(HashTags, EveryLockKindWorksOnAClusterNodeForNamesWithBraces) {
  client c(client_options{server->options()});
  lock_options o;
  o.lease = 5s;
  for (const std::string& name : kAwkwardNames) {
    SCOPED_TRACE("name '" + name + "'");
    {
      mutex holder(c, name, o), waiter(c, name, o);
      ASSERT_TRUE(holder.try_lock());
      EXPECT_GT(holder.fencing_token(), 0u);
      bool got = false;
      std::thread t([&] { got = waiter.try_lock_for(5s); });
      // Release once the waiter queued, so the release script hands the lock over.
      EXPECT_TRUE(redislock_test::eventually([&] {
        return admin->command({"EXISTS", holder.key() + ":queue"})->integer == 1;
      }));
      holder.unlock();
      t.join();
      EXPECT_TRUE(got);
      EXPECT_EQ(holder.last_release(), release_status::released);
      waiter.unlock();
      EXPECT_EQ(waiter.last_release(), release_status::released);
    }
    {
      reentrant_mutex r(c, name + "/r", o);
      ASSERT_TRUE(r.try_lock());
      ASSERT_TRUE(r.try_lock());
      EXPECT_TRUE(r.extend());
      r.unlock();
      r.unlock();
      EXPECT_EQ(r.last_release(), release_status::released);
    }
    {
      shared_mutex s(c, name + "/s", o);
      ASSERT_TRUE(s.try_lock_shared());
      EXPECT_TRUE(s.extend_shared());
      s.unlock_shared();
      ASSERT_TRUE(s.try_lock());
      s.unlock();
      EXPECT_EQ(s.last_release(), release_status::released);
    }
    {
      semaphore holder(c, name + "/p", 1, o), waiter(c, name + "/p", 1, o);
      ASSERT_TRUE(holder.try_acquire());
      EXPECT_GT(holder.fencing_token(), 0u);
      EXPECT_TRUE(holder.extend());
      bool got = false;
      std::thread t([&] { got = waiter.try_acquire_for(5s); });
      EXPECT_TRUE(redislock_test::eventually([&] {
        return admin->command({"EXISTS", holder.key() + ":pqueue"})->integer == 1;
      }));
      holder.set_permits(2);  // hands the new permit to the waiter
      t.join();
      EXPECT_TRUE(got);
      holder.release();
      waiter.release();
      EXPECT_EQ(waiter.last_release(), release_status::released);
    }
  }
}

TEST_F(HashTags, NamesThatWouldBreakTheTagAreRejectedAndRedisIsUnchanged) {
  client c(client_options{server->options()});
  for (const std::string name : {"}", "}x", "}}", "}{", "}{x}"}) {
    SCOPED_TRACE("name '" + name + "'");
    EXPECT_THROW(mutex(c, name), invalid_argument);
    EXPECT_THROW(reentrant_mutex(c, name), invalid_argument);
    EXPECT_THROW(shared_mutex(c, name), invalid_argument);
    EXPECT_THROW(semaphore(c, name, 2), invalid_argument);
  }
  // A prefix with an empty tag of its own breaks every name.
  lock_options bad_prefix;
  bad_prefix.key_prefix = "app{}:";
  EXPECT_THROW(mutex(c, "orders", bad_prefix), invalid_argument);
  // A prefix with a tag of its own puts all locks in one slot: legal, and consistent.
  lock_options tagged_prefix;
  tagged_prefix.key_prefix = "app{locks}:";
  mutex m(c, "orders", tagged_prefix);
  EXPECT_EQ(slot(m.key() + ":queue"), slot(m.key()));
  EXPECT_EQ(keys(), 0);
}

}  // namespace

}  // namespace test_hash_tags
