// Every public operation has a defined behaviour when Redis is unreachable (stopped) or stalls
// (server SIGSTOPped, or a proxy that stops forwarding): a typed error within the configured
// timeouts, no hang, no crash, no thread left behind, and unlock() never throws.
#include "redis_server.hpp"
#include "tcp_proxy.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <dirent.h>

#include <chrono>
#include <functional>
#include <memory>

namespace test_redis_down {

using namespace redislock;
using redislock_test::redis_server;
using redislock_test::tcp_proxy;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

constexpr milliseconds timeout{300};
// Generous: one operation may wait for the pool, connect and one command timeout, on a loaded
// machine. What matters is that it ends (no hang), not how fast.
constexpr seconds bound{10};

int thread_count() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

client_options fast_failing(int port) {
  client_options o;
  o.connection.port = port;
  o.connection.connect_timeout = timeout;
  o.connection.command_timeout = timeout;
  o.pool_wait_timeout = timeout;
  return o;
}

/// Runs f, which must throw E, within `bound`.
template <class E>
void expect_typed_and_bounded(const char* what, const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  try {
    f();
    ADD_FAILURE() << what << ": did not throw";
  } catch (const E&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw the wrong type: " << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, bound) << what;
}

/// The outage under test: `begin` makes Redis unreachable or stalled, `end` undoes it.
struct outage {
  std::function<void()> begin, end;
};

/// Every public operation during an outage; `E` is the error type expected.
template <class E>
void check_every_operation(int port, const outage& o) {
  const int threads_before = thread_count();
  {
    client c(fast_failing(port));
    mutex held(c, "down-held"), other(c, "down-other");
    ASSERT_TRUE(held.try_lock());  // acquired while Redis was fine
    o.begin();

    expect_typed_and_bounded<E>("client::command", [&] { c.command({"PING"}); });
    expect_typed_and_bounded<E>("lock", [&] { other.lock(); });
    expect_typed_and_bounded<E>("try_lock", [&] { other.try_lock(); });
    expect_typed_and_bounded<E>("try_lock_for", [&] { other.try_lock_for(seconds(2)); });
    EXPECT_FALSE(other.owns_lock());
    expect_typed_and_bounded<E>("extend", [&] { held.extend(); });
    expect_typed_and_bounded<E>("remaining_lease", [&] { held.remaining_lease(); });
    expect_typed_and_bounded<E>("release", [&] { held.unlock_and_report(); });
    EXPECT_FALSE(held.owns_lock());
    EXPECT_EQ(held.last_release(), release_status::failed);

    ASSERT_TRUE(other.owns_lock() == false);
    mutex third(c, "down-third");
    EXPECT_NO_THROW(third.unlock());  // not held: nothing sent
    EXPECT_EQ(third.last_release(), release_status::not_held);

    o.end();
    // Usable again once Redis is back; unlock() after an outage stays quiet.
    EXPECT_TRUE(third.try_lock_for(seconds(10)));
    o.begin();
    const auto start = std::chrono::steady_clock::now();
    static_assert(noexcept(third.unlock()));
    third.unlock();
    EXPECT_LT(std::chrono::steady_clock::now() - start, bound);
    EXPECT_EQ(third.last_release(), release_status::failed);
    o.end();
  }
  EXPECT_EQ(thread_count(), threads_before) << "a thread outlived the client";
}

}  // namespace

TEST(RedisDown, StoppedServerGivesConnectionErrors) {
  auto server = std::make_unique<redis_server>();
  const int port = server->port();
  // A stopped server cannot be resumed on the same object; "end" starts a new one on the port.
  check_every_operation<connection_error>(port, outage{[&] { server->stop(); }, [&] { server->restart(); }});
}

TEST(RedisDown, SigstoppedServerGivesTimeoutErrors) {
  redis_server server;
  check_every_operation<timeout_error>(server.port(), outage{[&] { server.pause(); }, [&] { server.resume(); }});
}

TEST(RedisDown, ProxyThatStopsForwardingGivesTimeoutErrors) {
  redis_server server;
  tcp_proxy proxy(server.port());
  check_every_operation<timeout_error>(proxy.port(),
                                       outage{[&] { proxy.set_stalled(true); }, [&] { proxy.set_stalled(false); }});
  EXPECT_GT(proxy.accepted(), 0u);
}

TEST(RedisDown, ProxyThatRefusesConnectionsGivesConnectionErrors) {
  redis_server server;
  tcp_proxy proxy(server.port());
  check_every_operation<connection_error>(proxy.port(), outage{[&] {
                                                                 proxy.set_refusing(true);
                                                                 proxy.cut_all();
                                                               },
                                                               [&] { proxy.set_refusing(false); }});
}

TEST(RedisDown, LatencyBelowTheTimeoutIsOnlySlow) {
  redis_server server;
  tcp_proxy proxy(server.port());
  proxy.set_delay(milliseconds(20));
  client c(fast_failing(proxy.port()));
  mutex m(c, "slow");
  ASSERT_TRUE(m.try_lock_for(seconds(10)));
  EXPECT_TRUE(m.extend());
  EXPECT_GT(m.remaining_lease().count(), 0);
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
}

}  // namespace test_redis_down
