// The async client on Redis Cluster (redislock/asio.hpp, detail/asio_cluster.hpp) against a real
// 3-master cluster on loopback, started once for this binary: routing by slot to every master,
// hand-offs between async and blocking cluster clients in both directions (sharded notices),
// a live migration of a held lock's slot while an async waiter waits, and unreachable seeds.
#include "async_fixture.hpp"
#include "eventually.hpp"
#include "redis_cluster.hpp"

#include <redislock/asio.hpp>
#include <redislock/cluster_client.hpp>
#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace test_async_cluster {

using namespace redislock;
using redislock_test::loop;
using redislock_test::outcome;
using redislock_test::redis_cluster;
using redislock_test::unlock_now;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

redis_cluster* cluster = nullptr;

struct cluster_environment : ::testing::Environment {
  void SetUp() override {
    try {
      cluster = new redis_cluster(3, 0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cannot start the test cluster: %s\n", e.what());
      std::exit(1);
    }
  }
  void TearDown() override {
    delete cluster;
    cluster = nullptr;
  }
};
[[maybe_unused]] ::testing::Environment* const environment =
    ::testing::AddGlobalTestEnvironment(new cluster_environment);

long long ms_since(steady::time_point t) { return std::chrono::duration_cast<milliseconds>(steady::now() - t).count(); }

// A name whose lock lives on the master listening on `port`.
std::string name_on(cluster_client& c, int port, const std::string& base) {
  for (int i = 0; i < 1000; ++i) {
    const std::string name = base + std::to_string(i);
    if (c.node_of("{" + name + "}") == "127.0.0.1:" + std::to_string(port)) return name;
  }
  return {};
}

bool exists_on(int port, const std::string& key) {
  return redis_cluster::admin(port).command({"EXISTS", key})->integer == 1;
}

struct AsyncClusterTest : ::testing::Test {
  void SetUp() override {
    blocking = std::make_unique<cluster_client>(cluster->options());
    blocking->refresh();
    runner = std::make_unique<loop>();
    async_client_options o;
    o.cluster = cluster->options();
    client = std::make_unique<async_client>(runner->io.get_executor(), o);
  }
  void TearDown() override {
    client.reset();
    runner.reset();
    blocking.reset();
  }
  std::pair<std::error_code, async_hold> lock_within(async_mutex& m, milliseconds t) {
    return outcome<async_hold>([&](auto cb) { m.async_try_lock_for(t, cb); });
  }

  std::unique_ptr<cluster_client> blocking;
  std::unique_ptr<loop> runner;
  std::unique_ptr<async_client> client;
};

// Each master serves some lock: every async lock's keys go to the master of its slot.
TEST_F(AsyncClusterTest, LocksOnEveryMasterGoToTheirSlotsOwner) {
  for (int port : cluster->masters()) {
    const std::string name = name_on(*blocking, port, "async-route-");
    ASSERT_FALSE(name.empty());
    async_mutex m(*client, name);
    auto [e, hold] = lock_within(m, seconds(2));
    ASSERT_FALSE(e) << e.message();
    ASSERT_TRUE(hold.owns_lock());
    EXPECT_TRUE(exists_on(port, m.key())) << name;
    auto [fe, fence] = outcome<std::uint64_t>([&](auto cb) { hold.async_fencing_token(cb); });
    EXPECT_FALSE(fe);
    EXPECT_GT(fence, 0u);
    release_status st{};
    EXPECT_FALSE(unlock_now(hold, &st));
    EXPECT_EQ(st, release_status::released);
    EXPECT_FALSE(exists_on(port, m.key()));
  }
}

// An async waiter is handed the lock by a blocking cluster_client holder's release (a sharded
// notice on the slot's master), and the reverse.
TEST_F(AsyncClusterTest, HandOffsBetweenBlockingAndAsyncClusterClients) {
  const std::vector<int> masters = cluster->masters();
  const std::string name = name_on(*blocking, masters[1], "async-handoff-");
  basic_mutex<cluster_client> blocking_mutex(*blocking, name);
  async_mutex m(*client, name);

  blocking_mutex.lock();
  auto got = std::make_shared<std::promise<std::pair<std::error_code, async_hold>>>();
  m.async_try_lock_for(seconds(5), [got](std::error_code e, async_hold h) { got->set_value({e, std::move(h)}); });
  // Wait until the async waiter is queued on the slot's master (it subscribes first, then
  // queues: subscribed alone, a release may find nobody queued) and has read that reply, so
  // it sleeps until the notice.
  auto queued = [&] { return redis_cluster::admin(masters[1]).command({"ZCARD", m.key() + ":queue"})->integer; };
  ASSERT_TRUE(redislock_test::eventually([&] { return queued() == 1; }));
  redislock_test::replies_handled(*client, name_on(*blocking, masters[1], "async-handoff-barrier-"));
  const auto released = steady::now();
  EXPECT_EQ(blocking_mutex.unlock_and_report(), release_status::released);
  auto [e, hold] = got->get_future().get();
  ASSERT_FALSE(e) << e.message();
  ASSERT_TRUE(hold.owns_lock());
  EXPECT_LT(ms_since(released), 500);
  EXPECT_EQ(client->stats().handed_over, 1u);  // by the notice, not by a timer

  // The reverse: a blocking waiter, handed the lock by the async holder's release once queued
  // (a notice that comes before its wait reads it is still kept for it).
  auto waiter = std::async(std::launch::async, [&] {
    const bool ok = blocking_mutex.try_lock_for(seconds(5));
    const auto at = steady::now();
    if (ok) blocking_mutex.unlock();
    return std::make_pair(ok, at);
  });
  ASSERT_TRUE(redislock_test::eventually([&] { return queued() == 1; }));
  const auto unlocked = steady::now();
  EXPECT_FALSE(unlock_now(hold));
  auto [ok, at] = waiter.get();
  EXPECT_TRUE(ok);
  EXPECT_LT(std::chrono::duration_cast<milliseconds>(at - unlocked).count(), 500);
  EXPECT_GE(blocking->wait_stats().wakeups, 1u);
}

std::size_t shard_channels(int port, const std::string& name) {
  return redis_cluster::admin(port).command({"PUBSUB", "SHARDCHANNELS", "*{" + name + "}*"})->elements;
}

template <class Condition>
bool within(milliseconds bound, Condition&& done) {
  const auto until = steady::now() + bound;
  while (!done()) {
    if (steady::now() >= until) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// While an async waiter waits (subscribed on the slot's master), the held lock's slot migrates
// to another master: the old master ends the subscription, the waiter subscribes on the new
// owner (following MOVED), the holder's extend follows MOVED to where its key now is, and the
// holder's release hands the lock to the waiter by a notice (it was not stranded).
TEST_F(AsyncClusterTest, WaiterFollowsALiveMigrationOfTheHeldSlot) {
  const std::vector<int> masters = cluster->masters();
  const int from = masters[0], to = masters[1];
  const std::string name = name_on(*blocking, from, "async-migrate-");
  const int slot = detail::key_slot("{" + name + "}");
  async_client_options o;
  o.cluster = cluster->options();
  async_client holder_client(runner->io.get_executor(), o);
  async_mutex held(holder_client, name), waited(*client, name);
  auto [he, hold] = outcome<async_hold>([&](auto cb) { held.async_try_lock_for(seconds(2), cb); });
  ASSERT_FALSE(he) << he.message();
  auto got = std::make_shared<std::promise<std::pair<std::error_code, async_hold>>>();
  waited.async_try_lock_for(seconds(8), [got](std::error_code e, async_hold h) { got->set_value({e, std::move(h)}); });
  ASSERT_TRUE(within(seconds(3), [&] { return shard_channels(from, name) == 1; }));
  // Scripts run on the new owner: only the waiter runs one there before the extend below.
  auto scripts_on_to = [&] {
    connection c = redis_cluster::admin(to);
    return redislock_test::command_calls(c, "evalsha") + redislock_test::command_calls(c, "eval");
  };
  const long long scripts_before = scripts_on_to();

  cluster->migrate_slot(slot, from, to);
  EXPECT_TRUE(exists_on(to, held.key()));
  ASSERT_TRUE(within(seconds(3), [&] { return shard_channels(to, name) == 1; })) << "the waiter did not follow";
  EXPECT_EQ(shard_channels(from, name), 0u);
  // Subscribed on the new owner, the waiter waits there again (its place came with the slot)
  // and has read that reply: it sleeps until the notice, which the release below then hands
  // it the lock by.
  ASSERT_TRUE(within(seconds(3), [&] { return scripts_on_to() > scripts_before; }))
      << "the waiter did not wait again on the new owner";
  redislock_test::replies_handled(*client, name_on(*blocking, to, "async-migrate-barrier-"));

  auto [ee, extended] = outcome<bool>([&](auto cb) { hold.async_extend(cb); });
  EXPECT_FALSE(ee) << ee.message();
  EXPECT_TRUE(extended);
  const auto released = steady::now();
  EXPECT_FALSE(unlock_now(hold));
  auto [e, h] = got->get_future().get();
  ASSERT_FALSE(e) << e.message();
  ASSERT_TRUE(h.owns_lock());
  EXPECT_LT(ms_since(released), 500);
  EXPECT_EQ(client->stats().handed_over, 1u);
  EXPECT_TRUE(exists_on(to, waited.key()));
  EXPECT_FALSE(unlock_now(h));

  // Back, seen through (move_slot_to waits until every node knows the first move's epoch: a
  // second move before that can leave two masters each naming the other as the owner).
  EXPECT_EQ(cluster->move_slot_to(slot, from, seconds(10)), "");
}

// An acquisition on a slot caught mid-migration, its keys not on the source: ASK sends it to
// the importing master (ASKING first), where the lock is taken; once the slot is moved, the
// release follows MOVED there.
TEST_F(AsyncClusterTest, AcquisitionFollowsAskDuringAMigration) {
  const std::vector<int> masters = cluster->masters();
  const int from = masters[0], to = masters[2];
  const std::string name = name_on(*blocking, from, "async-ask-");
  const std::string s = std::to_string(detail::key_slot("{" + name + "}"));
  const std::string from_id = redis_cluster::node_id(from), to_id = redis_cluster::node_id(to);
  redis_cluster::admin(to).command({"CLUSTER", "SETSLOT", s, "IMPORTING", from_id});
  redis_cluster::admin(from).command({"CLUSTER", "SETSLOT", s, "MIGRATING", to_id});
  async_mutex m(*client, name);
  auto [e, hold] = lock_within(m, seconds(2));
  ASSERT_FALSE(e) << e.message();
  ASSERT_TRUE(hold.owns_lock());
  {
    connection target = redis_cluster::admin(to);  // the slot is not its own yet: ASKING first
    target.command({"ASKING"});
    EXPECT_EQ(target.command({"EXISTS", m.key()})->integer, 1);
  }
  for (int port : masters) redis_cluster::admin(port).command({"CLUSTER", "SETSLOT", s, "NODE", to_id});
  release_status st{};
  EXPECT_FALSE(unlock_now(hold, &st));
  EXPECT_EQ(st, release_status::released);
  EXPECT_FALSE(exists_on(to, m.key()));
  EXPECT_EQ(cluster->move_slot_to(std::stoi(s), from, seconds(10)), "");  // back, seen through (as above)
}

// The semaphore and both sides of the read/write lock route like the mutex, each to its
// name's master.
TEST_F(AsyncClusterTest, SemaphoreAndSharedMutexGoToTheirSlotsOwner) {
  const std::vector<int> masters = cluster->masters();
  const std::string sname = name_on(*blocking, masters[1], "async-sem-");
  const std::string rname = name_on(*blocking, masters[2], "async-rw-");
  async_semaphore sem(*client, sname, 2);
  async_shared_mutex rw(*client, rname);
  auto [e1, p1] = outcome<async_hold>([&](auto cb) { sem.async_try_acquire_for(seconds(2), cb); });
  auto [e2, p2] = outcome<async_hold>([&](auto cb) { sem.async_try_acquire_for(seconds(2), cb); });
  auto [e3, p3] = outcome<async_hold>([&](auto cb) { sem.async_try_acquire_for(milliseconds(50), cb); });
  ASSERT_FALSE(e1 || e2 || e3);
  EXPECT_TRUE(p1.owns_lock() && p2.owns_lock());
  EXPECT_FALSE(p3.owns_lock());  // two permits
  EXPECT_TRUE(exists_on(masters[1], sem.key()));
  auto [e4, r1] = outcome<async_hold>([&](auto cb) { rw.async_try_lock_shared_for(seconds(2), cb); });
  auto [e5, w1] = outcome<async_hold>([&](auto cb) { rw.async_try_lock_for(milliseconds(50), cb); });
  ASSERT_FALSE(e4 || e5);
  EXPECT_TRUE(r1.owns_lock());
  EXPECT_FALSE(w1.owns_lock());  // a reader holds
  EXPECT_TRUE(exists_on(masters[2], rw.key()));
  for (async_hold* h : {&p1, &p2, &r1}) {
    release_status st{};
    EXPECT_FALSE(unlock_now(*h, &st));
    EXPECT_EQ(st, release_status::released);
  }
}

// The first seed is down: the map comes from the next one.
TEST(AsyncClusterSeeds, ALaterSeedServesWhenTheFirstIsDown) {
  loop runner;
  async_client_options o;
  o.cluster.emplace();
  connection_options dead;
  dead.host = "127.0.0.1";
  dead.port = redislock_test::free_port();
  dead.connect_timeout = milliseconds(500);
  o.cluster->seeds.push_back(dead);
  o.cluster->seeds.push_back(cluster->options().seeds.front());
  auto client = std::make_unique<async_client>(runner.io.get_executor(), o);
  async_mutex m(*client, "later-seed");
  auto [e, hold] = outcome<async_hold>([&](auto cb) { m.async_try_lock_for(seconds(2), cb); });
  ASSERT_FALSE(e) << e.message();
  EXPECT_TRUE(hold.owns_lock());
  EXPECT_FALSE(unlock_now(hold));
  client.reset();
}

// Options a cluster cannot take are refused when the client is made.
TEST(AsyncClusterSeeds, BadClusterOptionsAreRefused) {
  loop runner;
  async_client_options o;
  o.cluster.emplace();
  EXPECT_THROW(async_client(runner.io.get_executor(), o), invalid_argument);  // no seed
  connection_options seed;
  seed.db = 1;
  o.cluster->seeds.push_back(seed);
  EXPECT_THROW(async_client(runner.io.get_executor(), o), invalid_argument);  // database 1
  o.cluster->seeds.front().db = 0;
  o.cluster->seeds.front().unix_path = "/tmp/redis.sock";
  EXPECT_THROW(async_client(runner.io.get_executor(), o), invalid_argument);  // a unix socket
}

// A replica joins the master on `master` (a node of its own, outside the harness's list): its
// port once it is linked, 0 when that did not happen within 10 s.
int add_replica(redislock_test::redis_server& node, int master) {
  const std::string master_id = redis_cluster::node_id(master);
  // A full sync starts at once (diskless, Redis 7's default, waits 5 s for more replicas).
  redis_cluster::admin(master).command({"CONFIG", "SET", "repl-diskless-sync-delay", "0"});
  redis_cluster::admin(node.port()).command({"CLUSTER", "MEET", "127.0.0.1", std::to_string(master)});
  const auto end = steady::now() + seconds(10);
  auto knows_master = [&] {
    return redis_cluster::text(redis_cluster::admin(node.port()).command({"CLUSTER", "NODES"})).find(master_id) !=
           std::string::npos;
  };
  if (!redis_cluster::poll_until(knows_master, end)) return 0;
  redis_cluster::admin(node.port()).command({"CLUSTER", "REPLICATE", master_id});
  auto linked = [&] {
    return redis_cluster::text(redis_cluster::admin(node.port()).command({"INFO", "replication"}))
               .find("master_link_status:up") != std::string::npos;
  };
  if (!redis_cluster::poll_until(linked, end)) return 0;
  // Every node knows it as that master's replica (a takeover claimed before that is lost).
  const std::string id = redis_cluster::node_id(node.port());
  auto known = [&] {
    for (std::size_t i = 0; i < cluster->size(); ++i) {
      const std::string nodes = redis_cluster::text(cluster->node(i).admin().command({"CLUSTER", "NODES"}));
      const std::size_t at = nodes.find(id);
      const std::string line = at == std::string::npos ? std::string() : nodes.substr(at, nodes.find('\n', at) - at);
      if (line.find("slave " + master_id) == std::string::npos) return false;
    }
    return true;
  };
  return redis_cluster::poll_until(known, end) ? node.port() : 0;
}

// The value of `field` in an INFO reply ("field:value\r\n" lines); "0" if absent.
std::string info_value(const std::string& info, const std::string& field) {
  const std::size_t at = info.find("\n" + field + ":");
  if (at == std::string::npos) return "0";
  const std::size_t from = at + field.size() + 2;
  return info.substr(from, info.find_first_of("\r\n", from) - from);
}

// Whether the replica on `replica` has applied every write its master on `master` took before
// this call (its own offset, not the master's view of its acknowledgements, which come once a
// second); false after 5 s.
bool caught_up(int master, int replica) {
  const std::string info = redis_cluster::text(redis_cluster::admin(master).command({"INFO", "replication"}));
  const long long target = std::atoll(info_value(info, "master_repl_offset").c_str());
  return redis_cluster::poll_until(
      [&] {
        const std::string r = redis_cluster::text(redis_cluster::admin(replica).command({"INFO", "replication"}));
        return std::atoll(info_value(r, "slave_repl_offset").c_str()) >= target;
      },
      // A demoted master first reconnects to its new master and resyncs: under TSan on a
      // loaded 2-core machine that took more than 5 s once (the fail-back below).
      steady::now() + seconds(20));
}

// A master is replaced by its replica (CLUSTER FAILOVER TAKEOVER): the holder's extend reaches
// the promoted replica through the demoted master's MOVED (the hold was replicated: still
// ours), and the waiter, subscribed on the demoted master where no release counts it, is not
// stranded: it wakes by recheck_interval, follows MOVED and takes the released lock. Then the
// shard fails back and the extra node leaves, for the tests after this one.
TEST_F(AsyncClusterTest, HoldAndWaiterFollowAFailover) {
  const int master = cluster->masters()[2];
  redislock_test::redis_server extra(
      {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}, true);
  const int replica = add_replica(extra, master);
  ASSERT_NE(replica, 0) << "the replica did not join";
  const std::string name = name_on(*blocking, master, "async-failover-");
  async_client_options o;
  o.cluster = cluster->options();
  async_client holder_client(runner->io.get_executor(), o);
  lock_options waiting;
  waiting.recheck_interval = milliseconds(100);
  async_mutex held(holder_client, name), waited(*client, name, waiting);
  auto [he, hold] = outcome<async_hold>([&](auto cb) { held.async_try_lock_for(seconds(2), cb); });
  ASSERT_FALSE(he) << he.message();
  auto got = std::make_shared<std::promise<std::pair<std::error_code, async_hold>>>();
  waited.async_try_lock_for(seconds(8), [got](std::error_code e, async_hold h) { got->set_value({e, std::move(h)}); });
  ASSERT_TRUE(within(seconds(3), [&] { return shard_channels(master, name) == 1; }));
  ASSERT_TRUE(caught_up(master, replica));

  ASSERT_TRUE(redis_cluster::takeover(replica, master, seconds(10)))
      << redis_cluster::text(redis_cluster::admin(replica).command({"INFO", "replication"})) << "\n"
      << redis_cluster::text(redis_cluster::admin(master).command({"INFO", "replication"})) << "\n"
      << redis_cluster::text(redis_cluster::admin(replica).command({"CLUSTER", "NODES"}));
  auto [ee, extended] = outcome<bool>([&](auto cb) { hold.async_extend(cb); });
  EXPECT_FALSE(ee) << ee.message();
  EXPECT_TRUE(extended);
  const auto released = steady::now();
  EXPECT_FALSE(unlock_now(hold));
  auto [e, h] = got->get_future().get();
  ASSERT_FALSE(e) << e.message();
  ASSERT_TRUE(h.owns_lock());
  EXPECT_LT(ms_since(released), 1500);
  EXPECT_TRUE(exists_on(replica, waited.key()));
  EXPECT_FALSE(unlock_now(h));

  // Fail back, and forget the extra node (FORGET keeps it out for a minute) before it stops.
  EXPECT_TRUE(caught_up(replica, master));
  EXPECT_TRUE(redis_cluster::takeover(master, replica, seconds(10)));
  const std::string extra_id = redis_cluster::node_id(replica);
  for (std::size_t i = 0; i < cluster->size(); ++i)
    redis_cluster::admin(cluster->node(i).port()).command({"CLUSTER", "FORGET", extra_id});
  extra.stop();
  EXPECT_TRUE(cluster->wait_until_stable(seconds(10))) << cluster->unstable_because();
}

// A sharded subscriber connection (detail::async_redis) on one master, as the client uses it:
// what it hears, in order, and whether it broke. Channels are picked by the master of their slot.
struct AsyncClusterShardedSubscriber : ::testing::Test {
  void SetUp() override {
    blocking = std::make_unique<cluster_client>(cluster->options());
    blocking->refresh();
    port = cluster->master_of(0);
    for (int i = 0; i < 10000 && (mine.size() < 4 || foreign.empty()); ++i) {
      const std::string c = "sharded-test-" + std::to_string(i);
      (blocking->node_of(c) == "127.0.0.1:" + std::to_string(port) ? mine : foreign).push_back(c);
    }
    connection_options o = cluster->options().seeds.front();
    o.port = port;
    subscriber = std::make_shared<detail::async_redis>(strand, o, true, nullptr, true);
    subscriber->set_sinks(
        [this](std::string_view type, std::string_view channel, std::string_view payload) {
          std::lock_guard<std::mutex> g(m);
          heard.push_back(std::string(type) + " " + std::string(channel) + " " +
                          std::string(payload.substr(0, std::min<std::size_t>(payload.size(), 5))));
        },
        [this](std::uint64_t) { broken = true; });
  }
  void TearDown() override {
    std::promise<void> closed;
    asio::post(strand, [&] {
      subscriber->close();
      closed.set_value();
    });
    closed.get_future().wait();
  }
  // Runs `f` on the strand and waits for it.
  template <class F>
  void on_strand(F&& f) {
    std::promise<void> done;
    asio::post(strand, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }
  std::vector<std::string> heard_now() {
    std::lock_guard<std::mutex> g(m);
    return heard;
  }
  bool heard_count(std::size_t n) {
    return redislock_test::eventually([&] { return heard_now().size() >= n; }, seconds(3));
  }

  std::unique_ptr<cluster_client> blocking;
  loop runner;
  const detail::async_strand strand{asio::make_strand(runner.io.get_executor())};
  int port = 0;
  std::vector<std::string> mine, foreign;
  std::shared_ptr<detail::async_redis> subscriber;
  std::mutex m;
  std::vector<std::string> heard;
  std::atomic<bool> broken{false};
};

// A refusal (MOVED) answered between confirmations, in one read: the refused channel is told,
// the others confirmed, and the connection stays (it keeps hearing its channels).
TEST_F(AsyncClusterShardedSubscriber, RefusalBetweenConfirmationsKeepsTheConnection) {
  on_strand([&] { EXPECT_TRUE(subscriber->pubsub("SSUBSCRIBE", mine[0])); });
  ASSERT_TRUE(heard_count(1));
  on_strand([&] {
    EXPECT_TRUE(subscriber->pubsub("SSUBSCRIBE", mine[1]));
    EXPECT_TRUE(subscriber->pubsub("SSUBSCRIBE", foreign[0]));  // MOVED
    EXPECT_TRUE(subscriber->pubsub("SSUBSCRIBE", mine[2]));
  });
  ASSERT_TRUE(heard_count(4)) << ::testing::PrintToString(heard_now());
  redis_cluster::admin(port).command({"SPUBLISH", mine[0], "after"});
  ASSERT_TRUE(heard_count(5)) << ::testing::PrintToString(heard_now());
  const std::vector<std::string> expected{"subscribe " + mine[0] + " ", "subscribe " + mine[1] + " ",
                                          "refused " + foreign[0] + " MOVED", "subscribe " + mine[2] + " ",
                                          "message " + mine[0] + " after"};
  EXPECT_EQ(heard_now(), expected);
  EXPECT_FALSE(broken.load());
}

// A message that takes several reads to arrive (a large payload): the messages after it are
// still heard.
TEST_F(AsyncClusterShardedSubscriber, MessageSpreadOverReadsLosesNothingAfter) {
  on_strand([&] { EXPECT_TRUE(subscriber->pubsub("SSUBSCRIBE", mine[0])); });
  ASSERT_TRUE(heard_count(1));
  redis_cluster::admin(port).command({"SPUBLISH", mine[0], std::string(1 << 20, 'x')});
  ASSERT_TRUE(heard_count(2));
  for (int i = 0; i < 3; ++i) redis_cluster::admin(port).command({"SPUBLISH", mine[0], "n" + std::to_string(i)});
  on_strand([&] { EXPECT_TRUE(subscriber->pubsub("SSUBSCRIBE", mine[1])); });
  ASSERT_TRUE(heard_count(6)) << ::testing::PrintToString(heard_now());
  const std::vector<std::string> expected{"subscribe " + mine[0] + " ", "message " + mine[0] + " xxxxx",
                                          "message " + mine[0] + " n0", "message " + mine[0] + " n1",
                                          "message " + mine[0] + " n2", "subscribe " + mine[1] + " "};
  EXPECT_EQ(heard_now(), expected);
  EXPECT_FALSE(broken.load());
}

// Contended locks on every master, on a 4-thread io_context (the client's strand orders its
// work; TSan checks it): every acquisition completes, one holder at a time per lock.
TEST(AsyncClusterThreads, ContendedLocksOnEveryMasterFromFourThreads) {
  auto blocking = std::make_unique<cluster_client>(cluster->options());
  blocking->refresh();
  loop runner(4);
  async_client_options o;
  o.cluster = cluster->options();
  auto client = std::make_unique<async_client>(runner.io.get_executor(), o);
  constexpr int workers_per_lock = 3, rounds = 4;
  struct lock_state {
    std::unique_ptr<async_mutex> m;
    std::atomic<int> inside{0}, overlaps{0}, acquired{0};
  };
  std::vector<std::unique_ptr<lock_state>> locks;
  for (int port : cluster->masters()) {
    auto l = std::make_unique<lock_state>();
    const std::string name = name_on(*blocking, port, "async-threads-");
    ASSERT_FALSE(name.empty());
    l->m = std::make_unique<async_mutex>(*client, name);
    locks.push_back(std::move(l));
  }
  std::mutex m;
  std::condition_variable cv;
  int finished = 0, failures = 0;
  auto finish = [&](bool ok) {
    std::lock_guard<std::mutex> g(m);
    ++finished;
    if (!ok) ++failures;
    cv.notify_all();
  };
  std::function<void(lock_state*, int)> round = [&](lock_state* l, int left) {
    if (left == 0) return finish(true);
    l->m->async_try_lock_for(seconds(5), [&, l, left](std::error_code e, async_hold h) {
      if (e || !h.owns_lock()) return finish(false);
      if (l->inside.fetch_add(1) != 0) l->overlaps.fetch_add(1);
      l->acquired.fetch_add(1);
      l->inside.fetch_sub(1);
      auto held = std::make_shared<async_hold>(std::move(h));
      held->async_unlock([&, l, left, held](std::error_code, release_status) { round(l, left - 1); });
    });
  };
  for (auto& l : locks)
    for (int w = 0; w < workers_per_lock; ++w) round(l.get(), rounds);
  const int total = static_cast<int>(locks.size()) * workers_per_lock;
  {
    std::unique_lock<std::mutex> g(m);
    ASSERT_TRUE(cv.wait_for(g, seconds(20), [&] { return finished == total; })) << finished << " of " << total;
  }
  EXPECT_EQ(failures, 0);
  for (auto& l : locks) {
    EXPECT_EQ(l->overlaps.load(), 0);
    EXPECT_EQ(l->acquired.load(), workers_per_lock * rounds);
  }
  client.reset();
}

// A seed nobody listens on: the first operation fails with connection_failed, within the
// connect timeout.
TEST(AsyncClusterSeeds, UnreachableSeedFailsWithConnectionFailed) {
  loop runner;
  async_client_options o;
  o.cluster.emplace();
  connection_options seed;
  seed.host = "127.0.0.1";
  seed.port = redislock_test::free_port();
  seed.connect_timeout = milliseconds(500);
  o.cluster->seeds.push_back(seed);
  auto client = std::make_unique<async_client>(runner.io.get_executor(), o);
  async_mutex m(*client, "unreachable");
  const auto started = steady::now();
  auto [e, hold] = outcome<async_hold>([&](auto cb) { m.async_try_lock_for(seconds(5), cb); });
  EXPECT_EQ(e, async_errc::connection_failed);
  EXPECT_FALSE(hold.owns_lock());
  EXPECT_LT(ms_since(started), 1500);
  client.reset();
}

}  // namespace

}  // namespace test_async_cluster
