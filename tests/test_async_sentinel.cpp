// redislock::async_client with sentinel_options (asio.hpp, detail/asio_sentinel.hpp) against a
// real Sentinel set-up: a master, one replica and three sentinels, started once for this binary
// (a gtest Environment). The tests run in the order written and share the set-up: each waits
// (bounded) for it to be healthy, whichever node is master by then; the failover test comes last.

#include "async_fixture.hpp"
#include "eventually.hpp"
#include "fake_sentinel.hpp"
#include "sentinel_environment.hpp"
#include "sentinel_topology.hpp"

#include <redislock/asio.hpp>
#include <redislock/redislock.hpp>
#include <redislock/sentinel_client.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace test_async_sentinel {

using namespace std::chrono_literals;
using redislock::async_errc;
using redislock::async_hold;
using redislock::async_mutex;
using redislock_test::failover_seen;
using redislock_test::outcome;
using redislock_test::sentinel_topology;
using redislock_test::unlock_now;

namespace {

using redislock_test::topology;

redislock::sentinel_options options() { return redislock_test::sentinel_test_options(); }

long long ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
}

std::string endpoint(int node) { return "127.0.0.1:" + std::to_string(topology->node(node).port()); }

std::pair<std::error_code, async_hold> try_lock_for(async_mutex& m, std::chrono::milliseconds timeout) {
  return outcome<async_hold>([&](auto done) { m.async_try_lock_for(timeout, done); });
}

struct async_sentinel_test : ::testing::Test {
  void SetUp() override {
    ASSERT_TRUE(topology->wait_healthy(20s)) << "the Sentinel set-up did not become healthy";
    master = topology->master();
    ASSERT_GE(master, 0);
    admin = std::make_unique<redislock::connection>(topology->node_options(master));
    admin->command({"FLUSHALL"});
    runner = std::make_unique<redislock_test::loop>(2);
    client = std::make_unique<redislock::async_client>(runner->io.get_executor(), options());
  }
  void TearDown() override {
    client.reset();
    runner.reset();
  }
  long long queued(const std::string& key) { return admin->command({"ZCARD", key + ":queue"})->integer; }

  // A contended hand-off on the current master, woken by its notice: the client's subscriber
  // is that master's. A name of its own per call (a release lost with a killed master must not
  // keep a later call's name held).
  void expect_notified_handoff() {
    static int calls = 0;
    const std::string name = "handoff-" + std::to_string(++calls);
    redislock::connection on_master(topology->node_options(topology->master()));
    async_mutex m(*client, name);
    auto [e, h] = try_lock_for(m, 5s);
    ASSERT_FALSE(e) << e.message();
    ASSERT_TRUE(h.owns_lock());
    const auto handed_before = client->stats().handed_over;
    std::promise<std::pair<std::error_code, async_hold>> waited;
    m.async_try_lock_for(10s, [&](std::error_code e2, async_hold h2) { waited.set_value({e2, std::move(h2)}); });
    EXPECT_TRUE(redislock_test::eventually(
        [&] {
          return on_master.command({"ZCARD", m.key() + ":queue"})->integer == 1;
        },
        5s));
    redislock_test::replies_handled(*client);  // asleep until the notice
    EXPECT_FALSE(unlock_now(h));
    auto [e2, h2] = waited.get_future().get();
    EXPECT_FALSE(e2) << e2.message();
    EXPECT_TRUE(h2.owns_lock());
    EXPECT_GT(client->stats().handed_over, handed_before) << "the waiter was not woken by the master's notice";
    EXPECT_FALSE(unlock_now(h2));
  }

  int master = -1;
  std::unique_ptr<redislock::connection> admin;
  std::unique_ptr<redislock_test::loop> runner;
  std::unique_ptr<redislock::async_client> client;
};

}  // namespace

TEST(async_sentinel_options, bad_options_are_invalid_argument) {
  asio::io_context io;
  redislock::sentinel_options o;
  EXPECT_THROW(redislock::async_client(io.get_executor(), o), redislock::invalid_argument);  // no sentinel
  o.sentinels.push_back({});
  EXPECT_THROW(redislock::async_client(io.get_executor(), o), redislock::invalid_argument);  // no service name
  o.service_name = "m";
  o.retries = -1;
  EXPECT_THROW(redislock::async_client(io.get_executor(), o), redislock::invalid_argument);
  o.retries = 0;
  redislock::async_client ok(io.get_executor(), o);  // sends nothing
  EXPECT_EQ(ok.master_endpoint(), "");
}

TEST_F(async_sentinel_test, locks_on_the_master_and_excludes_a_blocking_sentinel_client) {
  async_mutex m(*client, "shared");
  auto [e, h] = try_lock_for(m, 2s);
  ASSERT_FALSE(e) << e.message();
  ASSERT_TRUE(h.owns_lock());
  EXPECT_EQ(client->master_endpoint(), endpoint(master));
  EXPECT_EQ(admin->command({"GET", m.key()})->str, h.token());

  redislock::sentinel_client blocking(options());
  redislock::basic_mutex<redislock::sentinel_client> b(blocking, "shared");
  EXPECT_FALSE(b.try_lock());
  // The blocking waiter gets it from the async release, then the async waiter from the blocking one.
  std::atomic<bool> got{false};
  std::thread waiter([&] { got = b.try_lock_for(10s); });
  EXPECT_TRUE(redislock_test::eventually([&] { return queued(m.key()) == 1; }, 5s));
  EXPECT_FALSE(unlock_now(h));
  waiter.join();
  ASSERT_TRUE(got);
  std::promise<std::pair<std::error_code, async_hold>> waited;
  m.async_try_lock_for(10s, [&](std::error_code e2, async_hold h2) { waited.set_value({e2, std::move(h2)}); });
  EXPECT_TRUE(redislock_test::eventually([&] { return queued(m.key()) == 1; }, 5s));
  redislock_test::replies_handled(*client);  // asleep until the notice
  b.unlock();
  auto [e2, h2] = waited.get_future().get();
  EXPECT_FALSE(e2) << e2.message();
  ASSERT_TRUE(h2.owns_lock());
  EXPECT_GE(client->stats().handed_over, 1u) << "woken by the blocking release's notice";
  EXPECT_FALSE(unlock_now(h2));
}

TEST_F(async_sentinel_test, a_dead_first_sentinel_is_skipped) {
  auto o = options();
  o.sentinels.insert(o.sentinels.begin(), redislock::sentinel_endpoint{"127.0.0.1", redislock_test::free_port()});
  redislock::async_client c(runner->io.get_executor(), o);
  async_mutex m(c, "skip");
  const auto t0 = std::chrono::steady_clock::now();
  auto [e, h] = try_lock_for(m, 0ms);
  EXPECT_FALSE(e) << e.message();
  EXPECT_TRUE(h.owns_lock());
  EXPECT_LT(ms_since(t0), 1000);
  EXPECT_EQ(c.master_endpoint(), endpoint(master));
  EXPECT_FALSE(unlock_now(h));
}

TEST_F(async_sentinel_test, no_live_sentinel_is_connection_failed_within_the_timeouts) {
  auto o = options();
  o.sentinels = {{"127.0.0.1", redislock_test::free_port()}, {"127.0.0.1", redislock_test::free_port()}};
  o.connection.connect_timeout = 200ms;
  o.connection.command_timeout = 200ms;
  o.retries = 1;
  o.retry_backoff = 10ms;
  redislock::async_client c(runner->io.get_executor(), o);
  async_mutex m(c, "nobody");
  const auto t0 = std::chrono::steady_clock::now();
  auto [e, h] = try_lock_for(m, 10s);
  EXPECT_EQ(e, async_errc::connection_failed) << e.message();
  EXPECT_FALSE(h.owns_lock());
  EXPECT_LT(ms_since(t0), 1000);
  // An unknown service name: the sentinels answer, none names a master.
  o = options();
  o.service_name = "nosuchmaster";
  o.retries = 0;
  redislock::async_client unknown(runner->io.get_executor(), o);
  async_mutex u(unknown, "nobody");
  auto [e2, h2] = try_lock_for(u, 10s);
  EXPECT_EQ(e2, async_errc::connection_failed) << e2.message();
  EXPECT_LT(ms_since(t0), 2000);
}

TEST_F(async_sentinel_test, sentinel_credentials_are_separate_from_the_data_nodes) {
  auto o = options();
  o.connection.password = sentinel_topology::sentinel_password;  // does not open the data nodes
  o.retries = 0;
  redislock::async_client c(runner->io.get_executor(), o);
  async_mutex m(c, "auth");
  auto [e, h] = try_lock_for(m, 1s);
  EXPECT_EQ(e, async_errc::connection_failed) << e.message();
  EXPECT_FALSE(h.owns_lock());
  EXPECT_EQ(c.master_endpoint(), "") << "a node that refused the credentials was not checked as master";
}

// Fake sentinels (tests/harness/fake_sentinel.hpp) in front of two standalone servers: which
// node "Sentinel" names is the test's choice, without Sentinel demoting the other one.
struct async_fake_sentinel_test : ::testing::Test {
  redislock::sentinel_options options_for(std::initializer_list<const redislock_test::fake_sentinel*> fakes) {
    redislock::sentinel_options o;
    for (const auto* f : fakes) o.sentinels.push_back({"127.0.0.1", f->port()});
    o.service_name = "fake";
    o.connection.connect_timeout = 300ms;
    o.connection.command_timeout = 300ms;
    o.retries = 0;
    return o;
  }
  redislock_test::redis_server a, b;
  redislock_test::loop runner{2};  // two threads: the strand, not the loop, orders the client
};

// A sentinel that never answers is given up after command_timeout; one that names a replica
// is not believed (ROLE); the next one's master is used.
TEST_F(async_fake_sentinel_test, a_silent_sentinel_and_one_naming_a_replica_are_passed_over) {
  redislock::connection(b.options()).command({"REPLICAOF", "127.0.0.1", std::to_string(a.port())});
  redislock_test::fake_sentinel silent, names_replica, names_master;
  silent.go_silent();
  names_replica.name_master(b.port());
  names_master.name_master(a.port());
  redislock::async_client c(runner.io.get_executor(), options_for({&silent, &names_replica, &names_master}));
  async_mutex m(c, "passed-over");
  const auto t0 = std::chrono::steady_clock::now();
  auto [e, h] = try_lock_for(m, 2s);
  ASSERT_FALSE(e) << e.message();
  EXPECT_TRUE(h.owns_lock());
  EXPECT_LT(ms_since(t0), 1000);
  EXPECT_EQ(c.master_endpoint(), "127.0.0.1:" + std::to_string(a.port()));
  EXPECT_FALSE(unlock_now(h));
}

// A client destroyed while its first look-up waits on a silent sentinel: the waiting
// acquisition completes once, at once, with an error; the look-up's late end (the sentinel's
// command_timeout, after the client is gone) touches nothing freed.
TEST_F(async_fake_sentinel_test, a_client_closed_during_a_look_up_fails_the_waiting_acquisition_once) {
  redislock_test::fake_sentinel silent;
  silent.go_silent();
  auto c = std::make_unique<redislock::async_client>(runner.io.get_executor(), options_for({&silent}));
  auto m = std::make_unique<async_mutex>(*c, "closed");
  std::atomic<int> completions{0};
  std::promise<std::error_code> first;
  m->async_try_lock_for(10s, [&](std::error_code e, async_hold) {
    if (completions++ == 0) first.set_value(e);
  });
  ASSERT_TRUE(redislock_test::eventually([&] { return silent.requests() >= 1; }, 2s)) << "no look-up started";
  const auto t0 = std::chrono::steady_clock::now();
  m.reset();
  c.reset();
  auto done = first.get_future();
  ASSERT_EQ(done.wait_for(2s), std::future_status::ready) << "the acquisition was left waiting";
  EXPECT_TRUE(done.get()) << "completed without an error";
  EXPECT_LT(ms_since(t0), 250) << "it waited for the sentinel's timeout";
  // Past the sentinel's command_timeout: the look-up ends with nobody left.
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(completions.load(), 1);
}

// A recheck asks the sentinel that answered last first: once the first one hangs, the next
// to answer (naming the same master) is asked first from then on, not the hung one again at
// every recheck (each would hold the command that found it due for command_timeout).
TEST_F(async_fake_sentinel_test, a_recheck_starts_with_the_sentinel_that_answered_last) {
  redislock_test::fake_sentinel first, second;
  first.name_master(a.port());
  second.name_master(a.port());
  auto o = options_for({&first, &second});
  o.recheck_interval = 50ms;
  redislock::async_client c(runner.io.get_executor(), o);
  redislock::lock_options lease;
  lease.lease = 10s;
  async_mutex m(c, "preferred", lease);
  auto [e, h] = try_lock_for(m, 2s);
  ASSERT_TRUE(h.owns_lock()) << e.message();
  ASSERT_EQ(first.requests(), 1);
  first.go_silent();
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(60ms);  // recheck_interval passes: the next command rechecks
    auto [xe, renewed] = outcome<bool>([&](auto done) { h.async_extend(done); });
    EXPECT_TRUE(!xe && renewed) << xe.message();
  }
  EXPECT_EQ(first.requests(), 2) << "the hung sentinel was asked first again";
  EXPECT_EQ(second.requests(), 3);
  EXPECT_FALSE(unlock_now(h));
}

// Once recheck_interval has passed, the command that finds the recheck due goes to the master
// the sentinels name now, as sentinel_client's does: a renewal confirmed by a node they no
// longer name (a master cut off from them, or not yet demoted) would make the client believe
// a hold the master in charge does not back.
TEST_F(async_fake_sentinel_test, a_renewal_due_for_a_recheck_is_sent_to_the_master_named_now) {
  redislock_test::fake_sentinel sentinel;
  sentinel.name_master(a.port());
  auto o = options_for({&sentinel});
  o.recheck_interval = 50ms;
  redislock::async_client c(runner.io.get_executor(), o);
  redislock::lock_options lease;
  lease.lease = 10s;
  async_mutex m(c, "recheck", lease);
  auto [e, h] = try_lock_for(m, 0ms);
  ASSERT_FALSE(e) << e.message();
  ASSERT_TRUE(h.owns_lock());
  sentinel.name_master(b.port());  // b is a master too, without the lock
  // The recheck's answer comes after a's reply would: the renewal must wait for it.
  sentinel.delay_answers(100ms);
  std::this_thread::sleep_for(60ms);  // recheck_interval passes: the next command rechecks
  auto [xe, renewed] = outcome<bool>([&](auto done) { h.async_extend(done); });
  EXPECT_FALSE(!xe && renewed) << "renewed, says the client; no such lock, says the master the sentinels name";
  EXPECT_EQ(c.master_endpoint(), "127.0.0.1:" + std::to_string(b.port()));
  EXPECT_FALSE(redislock::connection(b.options()).command({"EXISTS", m.key()})->integer);
}

// A hand-off notice heard on the subscriber of a master the sentinels no longer name (once
// a recheck is due) is not believed by itself: the wait is decided by an attempt, which goes
// to the master named now. The client never believes a hold that master does not back.
TEST_F(async_fake_sentinel_test, a_notice_heard_once_a_recheck_is_due_is_confirmed_on_the_master_named_now) {
  redislock_test::fake_sentinel sentinel;
  sentinel.name_master(a.port());
  auto o = options_for({&sentinel});
  o.recheck_interval = 50ms;
  redislock::async_client c(runner.io.get_executor(), o);
  redislock::lock_options lease;
  lease.lease = 10s;
  async_mutex m(c, "noticed", lease);
  redislock::client on_a(redislock::client_options{a.options()});
  redislock::mutex holder(on_a, "noticed", lease);
  ASSERT_TRUE(holder.try_lock());
  std::promise<std::pair<std::error_code, async_hold>> waited;
  m.async_try_lock_for(5s, [&](std::error_code e, async_hold h) { waited.set_value({e, std::move(h)}); });
  redislock::connection admin_a(a.options());
  ASSERT_TRUE(redislock_test::eventually(
      [&] {
        return admin_a.command({"ZCARD", m.key() + ":queue"})->integer == 1;
      },
      2s));
  sentinel.name_master(b.port());     // b is a master too, without the lock
  std::this_thread::sleep_for(60ms);  // recheck_interval passes
  holder.unlock();                    // on a: hands the lock to the waiter, told by notice
  auto [e, h] = waited.get_future().get();
  ASSERT_FALSE(e) << e.message();
  ASSERT_TRUE(h.owns_lock()) << "b is free: the wait takes it there";
  redislock::reply_ptr v = redislock::connection(b.options()).command({"GET", m.key()});
  ASSERT_EQ(v->type, REDIS_REPLY_STRING) << "held, says the client; absent, says the master the sentinels name";
  EXPECT_EQ(std::string(v->str, v->len), h.token());
  EXPECT_FALSE(unlock_now(h));
}

// The master drops the client's connections (as Sentinel's CLIENT KILL does on demotion,
// here by ID, sparing the sentinels' own): the next command looks the master up again and
// goes on; a waiter whose subscription went with them subscribes again and is served.
TEST_F(async_sentinel_test, killed_connections_are_replaced_and_a_waiter_is_still_served) {
  async_mutex m(*client, "killed");
  auto [e, h] = try_lock_for(m, 2s);
  ASSERT_TRUE(h.owns_lock()) << e.message();
  std::promise<std::pair<std::error_code, async_hold>> waited;
  m.async_try_lock_for(10s, [&](std::error_code e2, async_hold h2) { waited.set_value({e2, std::move(h2)}); });
  ASSERT_TRUE(redislock_test::eventually([&] { return queued(m.key()) == 1; }, 5s));
  const long long own = admin->command({"CLIENT", "ID"})->integer;
  int killed = 0;
  for (const char* type : {"normal", "pubsub"}) {
    redislock::reply_ptr list = admin->command({"CLIENT", "LIST", "TYPE", type});
    const std::string text(list->str, list->len);
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t end = std::min(text.find('\n', at), text.size());
      const std::string line = text.substr(at, end - at);
      at = end + 1;
      const std::size_t id_at = line.find("id="), name_at = line.find(" name=");
      if (id_at != 0 || name_at == std::string::npos) continue;
      const std::string id = line.substr(3, line.find(' ') - 3);
      if (line.compare(name_at + 6, 9, "sentinel-") == 0 || std::stoll(id) == own) continue;
      admin->command({"CLIENT", "KILL", "ID", id});
      ++killed;
    }
  }
  EXPECT_GE(killed, 2) << "the client's command and subscriber connections";
  // A command sent before the client saw its connection end fails (connection_failed); the
  // next one looks the master up again.
  bool extended = false;
  for (int i = 0; i < 5 && !extended; ++i) {
    auto [xe, ok] = outcome<bool>([&](auto done) { h.async_extend(done); });
    extended = !xe && ok;
  }
  EXPECT_TRUE(extended) << "no command went through after the kill";
  EXPECT_FALSE(unlock_now(h));
  auto [e2, h2] = waited.get_future().get();
  EXPECT_FALSE(e2) << e2.message();
  EXPECT_TRUE(h2.owns_lock()) << "the waiter whose subscription was killed was never served";
  EXPECT_FALSE(unlock_now(h2));
  EXPECT_EQ(client->master_changes(), 0u);
}

// SENTINEL FAILOVER: the old master stays up (Sentinel demotes it and kills its clients a few
// seconds later). Through it: a waiter queued before is served on the new master (not left
// subscribed on the old one), new acquisitions land on the new master, and a hold taken
// before either renews there or is reported lost; never believed held while the new master
// says otherwise.
TEST_F(async_sentinel_test, a_failover_moves_holds_waiters_and_new_acquisitions_to_the_new_master) {
  auto seen = std::make_shared<failover_seen>();
  redislock::set_observer(seen);
  expect_notified_handoff();
  const std::string new_endpoint = endpoint(1 - master);
  redislock::lock_options renewed;
  renewed.lease = 1s;
  renewed.auto_renew = true;
  async_mutex held(*client, "held", renewed);
  auto [he, hold] = try_lock_for(held, 2s);
  ASSERT_FALSE(he) << he.message();
  ASSERT_TRUE(hold.owns_lock());
  // A waiter behind a holder that renews through the failover and releases after it: the
  // release on the new master serves the waiter (a waiter left subscribed on the old master
  // would hear nothing until its recheck).
  redislock::lock_options short_lease = renewed;
  async_mutex across(*client, "across", short_lease);
  auto [ae, holder] = try_lock_for(across, 2s);
  ASSERT_TRUE(holder.owns_lock());
  std::atomic<bool> waiter_got{false};
  std::atomic<int> waiter_errors{0};
  std::thread waiter([&] {
    async_mutex w(*client, "across", short_lease);
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < until) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      auto [e, h] = try_lock_for(w, std::max(left, 0ms));
      if (h.owns_lock()) {
        waiter_got = true;
        unlock_now(h);
        return;
      }
      if (!e) return;   // the deadline passed
      ++waiter_errors;  // a call during the failover: try again
    }
  });
  EXPECT_TRUE(redislock_test::eventually([&] { return queued(across.key()) == 1; }, 5s)) << "the waiter never queued";

  // A client that learns of the failover only from the old master's READONLY (no recheck),
  // subscribed on the old master by a wait served before the failover.
  redislock::sentinel_options stale_options = options();
  stale_options.recheck_interval = 1h;
  redislock::async_client stale(runner->io.get_executor(), stale_options);
  async_mutex stranded(stale, "stranded");
  {
    async_mutex first(*client, "stranded");
    auto [fe, before] = try_lock_for(first, 2s);
    ASSERT_TRUE(before.owns_lock()) << fe.message();
    std::promise<std::pair<std::error_code, async_hold>> served;
    stranded.async_try_lock_for(10s, [&](std::error_code e2, async_hold h2) { served.set_value({e2, std::move(h2)}); });
    ASSERT_TRUE(redislock_test::eventually([&] { return queued(stranded.key()) == 1; }, 5s));
    EXPECT_FALSE(unlock_now(before));
    auto [se, h] = served.get_future().get();
    ASSERT_TRUE(h.owns_lock()) << se.message();
    EXPECT_FALSE(unlock_now(h));
  }

  redislock::connection sentinel(topology->sentinel_options(0));
  const auto t0 = std::chrono::steady_clock::now();
  const bool asked = redislock_test::eventually(
      [&] {
        try {
          sentinel.command({"SENTINEL", "FAILOVER", sentinel_topology::service});
          return true;
        } catch (const redislock::reply_error&) {  // INPROG: the last failover is being wrapped up
          return false;
        }
      },
      20s);
  ASSERT_TRUE(asked);
  // New acquisitions reach the new master (the recheck finds it within recheck_interval of the
  // sentinels naming it).
  // A name per attempt: a release lost in the failover (sent to the old master after the
  // promotion) leaves its name held on the new master for the lease.
  long long recovery = -1;
  int errors = 0;
  for (int attempt = 0; ms_since(t0) < 20000; ++attempt) {
    async_mutex fresh(*client, "fresh-" + std::to_string(attempt));
    auto [e, h] = try_lock_for(fresh, 0ms);
    if (e) ++errors;
    const bool on_new = h.owns_lock() && client->master_endpoint() == new_endpoint;
    if (h.owns_lock()) unlock_now(h);
    if (on_new) {
      recovery = ms_since(t0);
      break;
    }
    std::this_thread::sleep_for(5ms);  // one attempt per 5 ms: the measure's resolution
  }
  if (recovery < 0) topology->describe();
  ASSERT_GE(recovery, 0) << "no acquisition on the new master within 20 s";
  const auto moved = std::chrono::steady_clock::now();  // commands go to the new master from here
  std::printf("[ async sentinel ] SENTINEL FAILOVER: first acquisition on the new master after %lld ms (%d failed)\n",
              recovery, errors);
  EXPECT_EQ(client->master_changes(), 1u);
  {
    std::lock_guard<std::mutex> g(seen->m);
    EXPECT_EQ(seen->count, 1) << "one move, told once";
    EXPECT_EQ(seen->from, endpoint(master));
    EXPECT_EQ(seen->to, new_endpoint);
  }
  unlock_now(holder);  // on the new master: hands the lock to the waiter, or finds the lease gone
  waiter.join();
  EXPECT_TRUE(waiter_got) << "the waiter queued before the failover was never served";
  std::printf("[ async sentinel ] the waiter across the failover: %d calls failed\n", waiter_errors.load());

  // The hold taken before the failover: renewed on the new master, or reported lost. Until
  // the client moved, its renewals went to the old master (still a master, for seconds), and
  // the new master's copy may have run out meanwhile (the failover may lose a lock): what
  // counts is a renewal sent after the move.
  redislock::connection on_new(topology->node_options(1 - master));
  EXPECT_TRUE(redislock_test::eventually(
      [&] {
        if (hold.lost()) return true;
        auto until = hold.lease_confirmed_until();
        return until && *until > moved + renewed.lease;
      },
      5s));
  if (!hold.lost()) {
    redislock::reply_ptr v = on_new.command({"GET", held.key()});
    ASSERT_EQ(v->type, REDIS_REPLY_STRING) << "held, says the client; absent, says the new master";
    EXPECT_EQ(std::string(v->str, v->len), hold.token());
  }
  std::printf("[ async sentinel ] the hold taken before the failover: lost() %d\n", hold.lost() ? 1 : 0);
  unlock_now(hold);

  // The old master demoted as Sentinel will demote it seconds later, but without its CLIENT
  // KILL: the stale client's connections stay, and the old master refuses their writes with
  // READONLY. Its next wait moves to the new master (the refused attempt is sent again there)
  // and listens there: a release on the new master hands it the lock by notice, not left to
  // a subscription on a replica that hears nothing.
  ASSERT_EQ(topology->master(), 1 - master);
  redislock::connection old_master(topology->node_options(master));
  old_master.command({"REPLICAOF", "127.0.0.1", std::to_string(topology->node(1 - master).port())});
  async_mutex holder_on_new(*client, "stranded");
  auto [ne, on_new_hold] = try_lock_for(holder_on_new, 2s);
  ASSERT_TRUE(on_new_hold.owns_lock()) << ne.message();
  const auto handed_before = stale.stats().handed_over;
  std::promise<std::pair<std::error_code, async_hold>> stale_waited;
  stranded.async_try_lock_for(10s, [&](std::error_code e2, async_hold h2) {
    stale_waited.set_value({e2, std::move(h2)});
  });
  EXPECT_TRUE(redislock_test::eventually(
      [&] {
        return on_new.command({"ZCARD", stranded.key() + ":queue"})->integer == 1;
      },
      5s))
      << "the stale client's waiter never queued on the new master";
  EXPECT_FALSE(unlock_now(on_new_hold));
  auto [swe, stale_hold] = stale_waited.get_future().get();
  EXPECT_FALSE(swe) << swe.message();
  EXPECT_TRUE(stale_hold.owns_lock());
  EXPECT_GT(stale.stats().handed_over, handed_before) << "the waiter was not woken by the new master's notice";
  EXPECT_EQ(stale.master_changes(), 1u);
  unlock_now(stale_hold);
  redislock::set_observer(nullptr);
  {
    std::lock_guard<std::mutex> g(seen->m);
    EXPECT_EQ(seen->count, 2) << "the stale client's move, told too";
    EXPECT_GT(seen->recovered_in, std::chrono::nanoseconds(0)) << "it found the old master gone (READONLY) first";
  }

  // The subscriber moved too: a release on the new master wakes a waiter by its notice (the
  // old master need not be reconfigured yet, which Sentinel does seconds later).
  expect_notified_handoff();
}

}  // namespace test_async_sentinel
