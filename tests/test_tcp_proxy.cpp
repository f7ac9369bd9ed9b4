// The fault-injecting proxy of the test harness (harness/tcp_proxy.hpp), each fault on its own:
// a raw RESP client talks to a real redis-server through the proxy, and a direct connection
// looks at what the server did. Negative checks ("no reply") wait a bounded 300 ms.
#include "eventually.hpp"
#include "redis_server.hpp"
#include "tcp_proxy.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace test_tcp_proxy {

using redislock_test::redis_server;
using redislock_test::tcp_proxy;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;
using direction = tcp_proxy::direction;

namespace {

constexpr milliseconds silence{300};    // how long "no reply" is watched for
constexpr milliseconds patience{5000};  // bound on every expected reply

/// A blocking-free RESP client on one socket: sends raw commands, reads whole lines.
class raw_client {
 public:
  explicit raw_client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      throw std::runtime_error("raw_client: cannot connect");
  }
  ~raw_client() { ::close(fd_); }
  raw_client(const raw_client&) = delete;
  raw_client& operator=(const raw_client&) = delete;

  void send(const std::string& inline_command) {
    const std::string line = inline_command + "\r\n";
    ASSERT_EQ(::send(fd_, line.data(), line.size(), MSG_NOSIGNAL), static_cast<ssize_t>(line.size()));
  }
  /// One reply line ("+PONG", ":3", ...), "" when nothing came within `wait`, "<closed>" on
  /// EOF or reset.
  std::string line(milliseconds wait) {
    const auto deadline = steady::now() + wait;
    for (;;) {
      const auto end = buffer_.find("\r\n");
      if (end != std::string::npos) {
        std::string l = buffer_.substr(0, end);
        buffer_.erase(0, end + 2);
        return l;
      }
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady::now()).count();
      if (left <= 0) return "";
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return "<closed>";
      buffer_.append(buf, static_cast<std::size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  std::string buffer_;
};

struct TcpProxy : ::testing::Test {
  static void SetUpTestSuite() { server = new redis_server(); }
  static void TearDownTestSuite() {
    delete server;
    server = nullptr;
  }
  void SetUp() override { admin().command({"FLUSHALL"}); }
  static redislock::connection admin() { return server->admin(); }
  static std::string get(const std::string& key) {
    auto r = admin().command({"GET", key});
    return r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : "<nil>";
  }
  // The server ran the command after all (it may come late: the proxy forwards asynchronously).
  static bool eventually_set(const std::string& key, const std::string& value) {
    const auto deadline = steady::now() + patience;
    while (steady::now() < deadline) {
      if (get(key) == value) return true;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return false;
  }
  static milliseconds round_trip(raw_client& c) {
    const auto start = steady::now();
    c.send("PING");
    EXPECT_EQ(c.line(patience), "+PONG");
    return std::chrono::duration_cast<milliseconds>(steady::now() - start);
  }
  inline static redis_server* server = nullptr;
};

TEST_F(TcpProxy, DelaysEachDirectionOnItsOwn) {
  tcp_proxy proxy(server->port());
  raw_client c(proxy.port());
  EXPECT_LT(round_trip(c), milliseconds(100));
  proxy.set_delay(milliseconds(150), milliseconds(0), direction::to_server);
  EXPECT_GE(round_trip(c), milliseconds(150));
  proxy.set_delay(milliseconds(0), milliseconds(0), direction::to_server);
  proxy.set_delay(milliseconds(600), milliseconds(0), direction::to_client);
  // The request arrives at once (the server runs it) while its reply is held back 600 ms.
  const auto sent = steady::now();
  c.send("SET k v");
  ASSERT_TRUE(eventually_set("k", "v"));
  if (steady::now() - sent < milliseconds(500)) {  // unless the machine stalled
    EXPECT_EQ(c.line(milliseconds(0)), "");
  }
  EXPECT_EQ(c.line(patience), "+OK");
  EXPECT_GE(steady::now() - sent, milliseconds(600));
}

TEST_F(TcpProxy, JitterKeepsTheOrderOfAConnection) {
  tcp_proxy proxy(server->port(), 7);
  proxy.set_delay(milliseconds(0), milliseconds(40));
  raw_client c(proxy.port());
  // Separate sends, so that each is its own chunk with its own jittered due time.
  for (int i = 1; i <= 20; ++i) {
    c.send("INCR n");
    std::this_thread::sleep_for(milliseconds(1));
  }
  for (int i = 1; i <= 20; ++i) EXPECT_EQ(c.line(patience), ":" + std::to_string(i));
}

TEST_F(TcpProxy, StalledRequestRunsLateAfterItsCallerHungUp) {
  tcp_proxy proxy(server->port());
  {
    raw_client c(proxy.port());
    EXPECT_EQ(round_trip(c) < patience, true);
    proxy.set_stalled(true, direction::to_server);
    c.send("SET late yes");
    EXPECT_EQ(c.line(silence), "");  // the caller gives up and closes its connection
  }
  EXPECT_EQ(get("late"), "<nil>");
  proxy.set_stalled(false, direction::to_server);
  EXPECT_TRUE(eventually_set("late", "yes"));
}

TEST_F(TcpProxy, BlackHoledRequestsNeverRun) {
  tcp_proxy proxy(server->port());
  raw_client c(proxy.port());
  round_trip(c);
  proxy.set_black_hole(true, direction::to_server);
  c.send("SET dropped yes");
  EXPECT_EQ(c.line(silence), "");
  ASSERT_TRUE(redislock_test::eventually([&] { return proxy.dropped() > 0; }));
  EXPECT_EQ(get("dropped"), "<nil>");
  proxy.set_black_hole(false, direction::to_server);
  EXPECT_EQ(c.line(patience), "<closed>");  // its stream has a gap: reset, never resumed
  raw_client again(proxy.port());
  EXPECT_LT(round_trip(again), patience);
  EXPECT_EQ(get("dropped"), "<nil>");
}

TEST_F(TcpProxy, BlackHoledRepliesAreLostButTheCommandRuns) {
  tcp_proxy proxy(server->port());
  raw_client c(proxy.port());
  round_trip(c);
  proxy.set_black_hole(true, direction::to_client);
  c.send("SET ran yes");
  EXPECT_TRUE(eventually_set("ran", "yes"));
  EXPECT_EQ(c.line(silence), "");
  ASSERT_TRUE(redislock_test::eventually([&] { return proxy.dropped() > 0; }));
  proxy.set_black_hole(false, direction::to_client);
  // +OK was dropped: the connection is reset rather than handing PING's reply on in its place.
  EXPECT_EQ(c.line(patience), "<closed>");
  raw_client again(proxy.port());
  EXPECT_LT(round_trip(again), patience);
}

TEST_F(TcpProxy, CutAfterRequestLosesTheReplyOfACommandThatRan) {
  tcp_proxy proxy(server->port());
  raw_client c(proxy.port());
  round_trip(c);
  proxy.set_cut_after_request(true);
  c.send("SET cut yes");
  EXPECT_EQ(c.line(patience), "<closed>");
  EXPECT_TRUE(eventually_set("cut", "yes"));
  EXPECT_EQ(proxy.cut_after_request_count(), 1u);
  proxy.set_cut_after_request(false);
  raw_client again(proxy.port());
  EXPECT_LT(round_trip(again), patience);
}

TEST_F(TcpProxy, PartitionSilencesOldAndNewConnectionsUntilHealed) {
  tcp_proxy proxy(server->port());
  raw_client old(proxy.port()), idle(proxy.port());
  round_trip(old);
  round_trip(idle);
  proxy.partition(true);
  raw_client fresh(proxy.port());  // accepted, but nothing passes
  old.send("SET a 1");
  fresh.send("SET b 1");
  EXPECT_EQ(old.line(silence), "");
  EXPECT_EQ(fresh.line(milliseconds(10)), "");
  EXPECT_EQ(get("a"), "<nil>");
  EXPECT_EQ(get("b"), "<nil>");
  ASSERT_TRUE(redislock_test::eventually([&] { return proxy.dropped() >= 2 * std::string("SET a 1\r\n").size(); }));
  proxy.heal();
  // The connections whose requests were dropped are reset; the one that sent nothing carries on.
  EXPECT_EQ(old.line(patience), "<closed>");
  EXPECT_EQ(fresh.line(patience), "<closed>");
  EXPECT_LT(round_trip(idle), patience);
  raw_client after(proxy.port());
  EXPECT_LT(round_trip(after), patience);
}

TEST_F(TcpProxy, TheLibraryTimesOutThroughAPartitionAndRecoversAfter) {
  tcp_proxy proxy(server->port());
  redislock::connection_options o = server->options();
  o.port = proxy.port();
  o.command_timeout = milliseconds(200);
  redislock::connection c(o);
  c.command({"PING"});
  proxy.partition(true);
  EXPECT_THROW(c.command({"PING"}), redislock::timeout_error);
  proxy.heal();
  o.command_timeout = patience;  // the recovery, not the machine's speed, is under test
  redislock::connection again(o);
  EXPECT_NO_THROW(again.command({"PING"}));
}

}  // namespace

}  // namespace test_tcp_proxy
