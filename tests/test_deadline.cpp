// Timed calls end by their deadline when the server goes away mid-call (liveness): a waiter in
// try_lock_for whose master crashes, a try_lock_for made right after the crash, and unlock(),
// on a cluster (a master killed), behind Sentinel (the master killed) and on one server (the
// server killed, or stopped with SIGSTOP). Each test starts its own deployment: killing a node changes its layout.
// Bounds: the deadline plus one connect timeout (the stated slack), plus the clean-up's own
// budget when the call must clean up after its deadline (kCleanup: leaving the queue, releasing
// what an unanswered attempt may have taken), plus kScheduling for the threads (sanitizer
// builds included).
#include "eventually.hpp"
#include "redis_cluster.hpp"
#include "redis_keys.hpp"
#include "redis_server.hpp"
#include "sentinel_topology.hpp"

#include <redislock/cluster_client.hpp>
#include <redislock/detail/call_deadline.hpp>
#include <redislock/redislock.hpp>
#include <redislock/sentinel_client.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <string>
#include <utility>
#include <vector>

namespace test_deadline {

using namespace redislock;
using redislock_test::eventually;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

constexpr milliseconds kConnectTimeout{500};
constexpr milliseconds kCommandTimeout{1000};
constexpr milliseconds kScheduling{250};
// A clean-up after the deadline: call_deadline::cleanup_time from its start, plus the slack of
// one connect timeout for each of its waits.
constexpr milliseconds kCleanup = detail::call_deadline::cleanup_time + kConnectTimeout;

long long ms_since(steady::time_point t) { return std::chrono::duration_cast<milliseconds>(steady::now() - t).count(); }

// What a timed call did: how long it took and how it ended ("acquired", "not acquired" or
// the exception's message).
struct timed_outcome {
  long long ms = 0;
  std::string how;
};

template <class Call>
timed_outcome timed(Call&& call) {
  const auto start = steady::now();
  timed_outcome out;
  try {
    out.how = call() ? "acquired" : "not acquired";
  } catch (const error& e) {
    out.how = std::string("threw: ") + e.what();
  }
  out.ms = ms_since(start);
  return out;
}

// The scenario on any client type: `holders` holds `name`, a waiter of `waiters` is queued
// behind it in try_lock_for(1000 ms); `fail_server()` kills (or stops) the server of that lock;
// then a try_lock_for(200 ms) on the same server and the holder's unlock() are timed, and the
// waiter's call. `unlock_bound` is the client's documented bound of unlock().
template <class Client, class FailServer>
void timed_calls_end_by_their_deadline(Client& holders, Client& waiters, const std::string& name,
                                       const std::string& probe_name, FailServer&& fail_server,
                                       milliseconds unlock_bound) {
  lock_options o;
  o.lease = milliseconds(30000);
  basic_mutex<Client> holder(holders, name, o);
  basic_mutex<Client> waiter(waiters, name, o);
  basic_mutex<Client> probe(waiters, probe_name, o);
  holder.lock();
  const std::string queue = holder.key() + ":queue";
  auto waited = std::async(std::launch::async, [&] { return timed([&] { return waiter.try_lock_for(seconds(1)); }); });
  // The waiter queued on the server: it is asleep on its subscription.
  ASSERT_TRUE(eventually(
      [&] {
        return holders.run(holder.key(), [&](connection& c) { return c.command({"EXISTS", queue})->integer == 1; });
      },
      seconds(5)));
  fail_server();
  const timed_outcome probed = timed([&] { return probe.try_lock_for(milliseconds(200)); });
  const auto unlock_start = steady::now();
  holder.unlock();
  const long long unlock_ms = ms_since(unlock_start);
  const timed_outcome wait = waited.get();
  std::printf("[ measure  ] waiter try_lock_for(1000 ms): %lld ms (%s)\n", wait.ms, wait.how.c_str());
  std::printf("[ measure  ] try_lock_for(200 ms) after the failure: %lld ms (%s)\n", probed.ms, probed.how.c_str());
  std::printf("[ measure  ] unlock() after the failure: %lld ms (%s)\n", unlock_ms, to_string(holder.last_release()));
  EXPECT_LE(wait.ms, (seconds(1) + kConnectTimeout + kCleanup + kScheduling).count()) << wait.how;
  EXPECT_LE(probed.ms, (milliseconds(200) + kConnectTimeout + kCleanup + kScheduling).count()) << probed.how;
  EXPECT_LE(unlock_ms, (unlock_bound + kScheduling).count()) << to_string(holder.last_release());
  EXPECT_NE(holder.last_release(), release_status::not_held);
}

}  // namespace

// Within a timed call a command's reply is waited for until the deadline plus one connect
// timeout, not command_timeout; after a cut command the socket has command_timeout again (the
// watchdog and Redlock set their own timeout for one command and restore that one).
TEST(Deadline, ACommandIsCutToTheCallsDeadlineAndTheSocketTimeoutRestored) {
  redislock_test::redis_server server;
  connection_options o = server.options();
  o.connect_timeout = kConnectTimeout;
  o.command_timeout = milliseconds(3000);
  connection c(o);
  auto receive_timeout = [&] {
    timeval tv{};
    socklen_t size = sizeof tv;
    EXPECT_EQ(::getsockopt(c.native_handle()->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &size), 0);
    return std::chrono::duration_cast<milliseconds>(seconds(tv.tv_sec) + std::chrono::microseconds(tv.tv_usec));
  };
  {
    const detail::call_deadline call(steady::now() + milliseconds(100));
    EXPECT_EQ(c.command({"PING"})->type, REDIS_REPLY_STATUS);
    EXPECT_EQ(receive_timeout().count(), o.command_timeout.count());
    const auto start = steady::now();
    EXPECT_THROW(c.command({"BLPOP", "nothing-comes", "2"}), timeout_error);  // the server answers after 2 s
    EXPECT_LE(ms_since(start), (milliseconds(100) + kConnectTimeout + kScheduling).count());
    EXPECT_GE(ms_since(start), (milliseconds(100) + kConnectTimeout - milliseconds(50)).count());
  }
  EXPECT_EQ(c.command({"PING"})->type, REDIS_REPLY_STATUS);  // reconnected, without a deadline
  EXPECT_EQ(receive_timeout().count(), o.command_timeout.count());
}

// A 3-master cluster (one replica each, cluster-node-timeout 2 s): the lock's master is killed
// while a waiter sleeps. The cluster promotes the replica after about 3 s, longer than every
// deadline here; unlock() may wait it out for up to retry_timeout.
TEST(Deadline, ClusterMasterCrashMidWait) {
  redislock_test::redis_cluster cluster(3, 1);
  cluster_options o = cluster.options();
  o.seeds.front().connect_timeout = kConnectTimeout;
  o.seeds.front().command_timeout = kCommandTimeout;
  cluster_client holders(o), waiters(o);
  const std::string name = "deadline";
  const std::string victim = holders.node_of("{" + name + "}");
  std::size_t victim_index = cluster.size();
  for (std::size_t i = 0; i < cluster.size(); ++i)
    if ("127.0.0.1:" + std::to_string(cluster.node(i).port()) == victim) victim_index = i;
  ASSERT_LT(victim_index, cluster.size());
  std::string probe_name;  // a lock on the same master
  for (int i = 0; probe_name.empty() && i < 1000; ++i)
    if (holders.node_of("{probe-" + std::to_string(i) + "}") == victim) probe_name = "probe-" + std::to_string(i);
  ASSERT_FALSE(probe_name.empty());
  timed_calls_end_by_their_deadline(
      holders, waiters, name, probe_name, [&] { cluster.node(victim_index).kill(); },
      o.retry_timeout + kConnectTimeout);
}

// One server, killed while a waiter sleeps: every call fails at once (connection refused).
TEST(Deadline, SingleServerCrashMidWait) {
  redislock_test::redis_server server;
  client_options o{server.options()};
  o.connection.connect_timeout = kConnectTimeout;
  o.connection.command_timeout = kCommandTimeout;
  client holders(o), waiters(o);
  timed_calls_end_by_their_deadline(
      holders, waiters, "deadline", "probe", [&] { server.kill(); }, kConnectTimeout + kCommandTimeout);
}

// One server that stops answering (SIGSTOP: its connections stay open, nothing is refused)
// while a waiter sleeps: each command waits for its reply, which a timed call cuts to end by
// its deadline plus one connect timeout instead of command_timeout (2 s here).
TEST(Deadline, SingleServerStallMidWait) {
  redislock_test::redis_server server;
  struct resume_at_exit {
    pid_t pid;
    ~resume_at_exit() { ::kill(pid, SIGCONT); }
  } resume{server.pid()};
  client_options o{server.options()};
  o.connection.connect_timeout = kConnectTimeout;
  o.connection.command_timeout = milliseconds(2000);
  client holders(o), waiters(o);
  timed_calls_end_by_their_deadline(
      holders, waiters, "deadline", "probe", [&] { ::kill(server.pid(), SIGSTOP); },
      kConnectTimeout + o.connection.command_timeout);
}

// Behind Sentinel (down-after 500 ms): the master is killed while a waiter sleeps; calls
// retry on the master Sentinel names (sentinel_options::retries, pausing 0.5, 1 and 1 s)
// until the failover. unlock() spends those pauses; its tries are refused at once here.
TEST(Deadline, SentinelMasterCrashMidWait) {
  redislock_test::sentinel_topology topology;
  sentinel_options o = parse_sentinel_uri(topology.uri());
  o.connection.connect_timeout = kConnectTimeout;
  o.connection.command_timeout = kCommandTimeout;
  o.retry_backoff = milliseconds(500);
  sentinel_client holders(o), waiters(o);
  const int master = topology.master();
  ASSERT_GE(master, 0);
  const milliseconds pauses(500 + 1000 + 1000);
  timed_calls_end_by_their_deadline(
      holders, waiters, "deadline", "probe", [&] { topology.node(master).kill(); },
      pauses + kConnectTimeout + kCommandTimeout);
}

// ---- clean-up after the deadline (issue 39, item 5) ------------------------------------------
// A timed call's clean-up (leaving the queue, releasing what it took when min_replicas fail)
// has its own budget (call_deadline::cleanup_budget): the call's deadline does not cut it, so
// the server keeps nothing of a call that gave up. With connect_timeout 0 a timed call has no
// slack at all: every wait of the call ends at its deadline, and a command that would start
// after it is not sent. The clean-up then starts after the deadline every time.

namespace {

client_options without_slack(const redislock_test::redis_server& server) {
  client_options o{server.options()};
  o.connection.connect_timeout = milliseconds(0);  // none: a timed call's waits end at its deadline
  return o;
}

// Runs `call` (a timed acquisition that must not succeed) and returns what the server keeps
// afterwards (every key), with how the call ended.
template <class Call>
std::pair<std::vector<std::string>, std::string> keys_left_by(connection& admin, Call&& call) {
  const timed_outcome out = timed(call);
  return {redislock_test::all_keys(admin), out.how + " after " + std::to_string(out.ms) + " ms"};
}

}  // namespace

// min_replicas on one server without replicas: WAIT answers 0 after its floor of 100 ms, past
// the 20 ms deadline, so the WAIT is cut and the acquisition must release what it took after
// its deadline. Every kind that checks min_replicas, each side of the shared mutex.
TEST(Deadline, ATimedAcquisitionWhoseReplicasFailReleasesItsHoldAfterTheDeadline) {
  redislock_test::redis_server server;
  client c(without_slack(server));
  connection admin(server.options());
  lock_options o;
  o.lease = seconds(30);
  o.min_replicas = 1;
  o.replica_timeout = milliseconds(200);
  const std::vector<std::string> none;
  mutex m(c, "m", o);
  semaphore s(c, "s", 2, o);
  reentrant_mutex r(c, "r", o);
  shared_mutex w(c, "w", o), rd(c, "rd", o);
  const std::vector<std::pair<const char*, std::function<bool()>>> kinds = {
      {"mutex", [&] { return m.try_lock_for(milliseconds(20)); }},
      {"semaphore", [&] { return s.try_lock_for(milliseconds(20)); }},
      {"reentrant_mutex", [&] { return r.try_lock_for(milliseconds(20)); }},
      {"shared_mutex (write)", [&] { return w.try_lock_for(milliseconds(20)); }},
      {"shared_mutex (read)", [&] { return rd.try_lock_shared_for(milliseconds(20)); }},
  };
  for (const auto& [kind, call] : kinds) {
    const auto [left, how] = keys_left_by(admin, call);
    EXPECT_EQ(left, none) << kind << ": " << how;
    EXPECT_EQ(how.rfind("acquired", 0), std::string::npos) << kind << ": " << how;
    admin.command({"FLUSHALL"});
  }
}

// A waiter queued behind a holder whose try_lock_for deadline passes: its "leave" is sent after
// the deadline and must still reach the server (no queue entry is left for wait_lease). Every
// kind with a wait queue; the waiter waits on a thread of its own (the reentrant and shared
// mutexes' owners are threads).
TEST(Deadline, AQueuedWaiterLeavesTheQueueAfterItsDeadline) {
  redislock_test::redis_server server;
  client holders{client_options{server.options()}}, waiters(without_slack(server));
  connection admin(server.options());
  lock_options o;
  o.lease = seconds(30);
  lock_options fair = o;
  fair.fair = true;
  struct kind {
    const char* name;
    std::function<void()> hold, release;
    std::function<bool()> wait;
  };
  mutex m1(holders, "m", o), m2(waiters, "m", o);
  mutex f1(holders, "f", fair), f2(waiters, "f", fair);
  semaphore s1(holders, "s", 1, o), s2(waiters, "s", 1, o);
  reentrant_mutex r1(holders, "r", o), r2(waiters, "r", o);
  shared_mutex w1(holders, "w", o), w2(waiters, "w", o);
  shared_mutex rd1(holders, "rd", o), rd2(waiters, "rd", o);
  const milliseconds wait(300);
  const std::vector<kind> kinds = {
      {"mutex", [&] { m1.lock(); }, [&] { m1.unlock(); }, [&] { return m2.try_lock_for(wait); }},
      {"mutex (fair)", [&] { f1.lock(); }, [&] { f1.unlock(); }, [&] { return f2.try_lock_for(wait); }},
      {"semaphore", [&] { s1.lock(); }, [&] { s1.unlock(); }, [&] { return s2.try_lock_for(wait); }},
      {"reentrant_mutex", [&] { r1.lock(); }, [&] { r1.unlock(); }, [&] { return r2.try_lock_for(wait); }},
      {"shared_mutex (write)", [&] { w1.lock(); }, [&] { w1.unlock(); }, [&] { return w2.try_lock_for(wait); }},
      {"shared_mutex (read)", [&] { rd1.lock(); }, [&] { rd1.unlock(); },
       [&] { return rd2.try_lock_shared_for(wait); }},
  };
  for (const kind& k : kinds) {
    k.hold();
    const std::vector<std::string> held = redislock_test::all_keys(admin);
    // Queued: the waiter's "wait" is on the server until its deadline passes.
    const auto [left, how] = std::async(std::launch::async, [&] { return keys_left_by(admin, k.wait); }).get();
    EXPECT_EQ(how.rfind("not acquired", 0), 0u) << k.name << ": " << how;
    EXPECT_EQ(left, held) << k.name << ": the waiter's queue entry was left (" << how << ")";
    k.release();
    EXPECT_EQ(redislock_test::all_keys(admin), std::vector<std::string>{}) << k.name;
    admin.command({"FLUSHALL"});
  }
}

}  // namespace test_deadline
