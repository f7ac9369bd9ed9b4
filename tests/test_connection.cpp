// redislock::connection against a real, throwaway redis-server.
#include "redis_server.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <thread>

namespace test_connection {

using namespace redislock;
using redislock_test::redis_server;
using std::chrono::milliseconds;
using clock_type = std::chrono::steady_clock;

namespace {

std::string text(const reply_ptr& r) { return std::string(r->str, r->len); }

// Has the server close `c` (CLIENT KILL from `admin`, no command on `c` meanwhile) and waits,
// at most 5 s, until the close has reached c's socket.
void close_from_the_server(connection& c, const std::string& id, connection& admin) {
  ASSERT_EQ(admin.command({"CLIENT", "KILL", "ID", id})->integer, 1);
  pollfd p{c.native_handle()->fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1) << "the server did not close the connection";
}

std::string client_id(connection& c) { return std::to_string(c.command({"CLIENT", "ID"})->integer); }

// A connection with the given idle_check_after, and an admin connection to kill it with.
struct connection_and_admin {
  connection c, admin;
  connection_and_admin(const redislock_test::redis_server& server, std::chrono::microseconds idle_check_after)
      : c(with_idle_check(server.options(), idle_check_after)), admin(server.admin()) {}
  static connection_options with_idle_check(connection_options o, std::chrono::microseconds idle_check_after) {
    o.idle_check_after = idle_check_after;
    return o;
  }
};

struct ConnectionTest : ::testing::Test {
  static void SetUpTestSuite() { server = new redis_server(); }
  static void TearDownTestSuite() {
    delete server;
    server = nullptr;
  }
  static redis_server* server;
};
redis_server* ConnectionTest::server = nullptr;

}  // namespace

TEST_F(ConnectionTest, CommandsAreBinarySafe) {
  connection c(server->options());
  const std::string key("bin\0key", 7), value("a\0b\r\nc", 6);
  c.command({"SET", key, value});
  EXPECT_EQ(text(c.command({"GET", key})), value);
}

// A program that forks and execs (the redislock tool runs its command so) must not hand its
// authenticated connection to the new program: the socket is close-on-exec.
TEST_F(ConnectionTest, TheSocketIsClosedOnExec) {
  connection c(server->options());
  c.command({"PING"});
  const int flags = ::fcntl(c.native_handle()->fd, F_GETFD);
  ASSERT_NE(flags, -1);
  EXPECT_NE(flags & FD_CLOEXEC, 0) << "the connection's socket would be inherited by an exec'd program";
}

TEST_F(ConnectionTest, PipelinesManyCommands) {
  connection c(server->options());
  c.command({"DEL", "pipeline:n"});
  for (int i = 0; i < 100; ++i) c.append({"INCR", "pipeline:n"});
  EXPECT_EQ(c.pending(), 100u);
  for (int i = 1; i <= 100; ++i) EXPECT_EQ(c.read_reply()->integer, i);
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(ConnectionTest, SelectsTheDatabaseFromTheUri) {
  connection db2(parse_uri(server->uri() + "/2"));
  db2.command({"SET", "select:k", "in-db-2"});
  connection db0(server->options());
  EXPECT_EQ(db0.command({"EXISTS", "select:k"})->integer, 0);
  EXPECT_EQ(text(db2.command({"GET", "select:k"})), "in-db-2");
}

TEST_F(ConnectionTest, ErrorRepliesAreTypedWithTheServersText) {
  connection c(server->options());
  c.command({"HSET", "typed:hash", "f", "v"});
  try {
    c.command({"GET", "typed:hash"});
    FAIL();
  } catch (const wrong_type_error& e) {
    EXPECT_EQ(e.server_message().rfind("WRONGTYPE", 0), 0u);
  }
  EXPECT_THROW(c.command({"NOSUCHCOMMAND"}), reply_error);
  // An error reply leaves the connection usable.
  EXPECT_EQ(text(c.command({"PING"})), "PONG");
}

TEST_F(ConnectionTest, ReconnectsAfterClientKill) {
  connection c(server->options());
  c.command({"CLIENT", "SETNAME", "victim"});
  connection admin = server->admin();
  EXPECT_EQ(admin.command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"})->integer, 1);
  // Idle for longer than idle_check_after (100 µs): the kill is noticed before sending (no
  // round trip lost), and the call succeeds.
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(text(c.command({"PING"})), "PONG");
}

// idle_check_after = 0 checks before every command, however recent the last one.
TEST_F(ConnectionTest, WithoutAnIdleWindowEveryCommandChecksForAClose) {
  connection_and_admin t(*server, std::chrono::microseconds(0));
  for (int round = 0; round < 20; ++round) {
    ASSERT_NO_FATAL_FAILURE(close_from_the_server(t.c, client_id(t.c), t.admin));
    EXPECT_EQ(text(t.c.command({"PING"})), "PONG") << round;
  }
}

// A connection used within idle_check_after is trusted: no poll before its command. A close
// by the server in that window fails that one command with connection_error (it never hangs,
// never raises SIGPIPE), and the next command reconnects.
TEST_F(ConnectionTest, ACloseWithinTheIdleWindowFailsOneCommandAndTheNextReconnects) {
  connection_and_admin t(*server, std::chrono::hours(1));  // the window covers the whole test
  ASSERT_NO_FATAL_FAILURE(close_from_the_server(t.c, client_id(t.c), t.admin));
  EXPECT_THROW(t.c.command({"PING"}), connection_error);
  EXPECT_EQ(text(t.c.command({"PING"})), "PONG");
}

// ensure_ready() checks once for the next command (callers set a socket timeout between the
// two, which a reconnect in the command would lose): even with idle_check_after = 0, the
// command right after it is sent without a second check.
TEST_F(ConnectionTest, TheCommandAfterEnsureReadyIsNotCheckedAgain) {
  connection_and_admin t(*server, std::chrono::microseconds(0));
  const std::string id = client_id(t.c);
  t.c.ensure_ready();
  ASSERT_NO_FATAL_FAILURE(close_from_the_server(t.c, id, t.admin));
  EXPECT_THROW(t.c.command({"PING"}), connection_error);
  EXPECT_EQ(text(t.c.command({"PING"})), "PONG");  // checked again: reconnected
}

TEST_F(ConnectionTest, ANegativeIdleCheckIsRejected) {
  connection_options o = server->options();
  o.idle_check_after = std::chrono::microseconds(-1);
  EXPECT_THROW(connection{o}, invalid_argument);
}

// A write to a connection the server closed fails with connection_error; it never raises
// SIGPIPE, whose default action would end the whole process (a killed or restarted Redis must
// not kill its clients, and the library may not change the process's signal handling: this
// test runs with SIGPIPE's default action, so on failure the test program dies). The second,
// large command of a pipeline skips the idle check and needs several write() calls: the first
// reaches the closed socket (the server answers with a reset), the next fails with EPIPE.
TEST_F(ConnectionTest, AWriteToAConnectionTheServerClosedIsAnErrorNotASigpipe) {
  const auto previous = std::signal(SIGPIPE, SIG_DFL);
  connection c(server->options());
  const long long id = c.command({"CLIENT", "ID"})->integer;
  c.append({"PING"});  // checked and found alive; nothing sent yet
  connection admin = server->admin();
  admin.command({"CLIENT", "KILL", "ID", std::to_string(id)});
  const std::string big(8 << 20, 'x');
  EXPECT_THROW(
      {
        c.append({"SET", "sigpipe", big});  // a pipeline: no idle check
        c.read_reply();
        c.read_reply();
      },
      connection_error);
  std::signal(SIGPIPE, previous);
  EXPECT_EQ(text(c.command({"PING"})), "PONG");  // and the next call reconnects
}

TEST_F(ConnectionTest, ConnectionRefusedIsAConnectionErrorNotAHang) {
  connection_options o;
  o.port = redislock_test::free_port();  // nobody listens there
  const auto start = clock_type::now();
  EXPECT_THROW(connection{o}, connection_error);
  EXPECT_LT(clock_type::now() - start, std::chrono::seconds(5));
}

TEST_F(ConnectionTest, ConnectTimeoutIsATimeoutError) {
  // A listener whose accept queue is full: the kernel drops further SYNs, so connect hangs
  // like against an unreachable host, and only the connect timeout ends it.
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener, 0), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    fillers.push_back(fd);
  }
  connection_options o;
  o.port = ntohs(a.sin_port);
  o.connect_timeout = milliseconds(300);
  const auto start = clock_type::now();
  EXPECT_THROW(connection{o}, timeout_error);
  const auto took = clock_type::now() - start;
  EXPECT_GE(took, milliseconds(250));
  EXPECT_LT(took, std::chrono::seconds(5));
  for (int fd : fillers) ::close(fd);
  ::close(listener);
}

TEST_F(ConnectionTest, StalledServerGivesATimeoutErrorThenRecovers) {
  connection_options o = server->options();
  o.command_timeout = milliseconds(200);
  connection c(o);
  server->pause();
  const auto start = clock_type::now();
  EXPECT_THROW(c.command({"PING"}), timeout_error);
  const auto took = clock_type::now() - start;
  server->resume();
  EXPECT_GE(took, milliseconds(150));
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_TRUE(c.broken());
  EXPECT_EQ(text(c.command({"PING"})), "PONG");  // reconnected
}

TEST(ConnectionRestart, ReconnectsAfterServerRestart) {
  redis_server server;
  connection c(server.options());
  c.command({"SET", "k", "v"});
  server.restart();
  EXPECT_EQ(c.command({"EXISTS", "k"})->integer, 0);  // no persistence: data is gone
}

TEST(ConnectionDown, ServerGoneIsAConnectionError) {
  auto server = std::make_unique<redis_server>();
  connection_options o = server->options();
  connection c(o);
  server.reset();
  EXPECT_THROW(c.command({"PING"}), connection_error);
  EXPECT_THROW(c.command({"PING"}), connection_error);  // reconnect fails: still typed
}

TEST(ConnectionUnix, ConnectsOverAUnixSocket) {
  char path[] = "/tmp/redislock-test-XXXXXX";
  ASSERT_NE(::mkdtemp(path), nullptr);
  const std::string sock = std::string(path) + "/redis.sock";
  {
    redis_server server({"--unixsocket", sock, "--unixsocketperm", "700"});
    connection c(parse_uri("unix://" + sock + "?db=1"));
    EXPECT_EQ(text(c.command({"PING"})), "PONG");
    c.command({"SET", "u", "1"});
    connection tcp(parse_uri(server.uri() + "/1"));
    EXPECT_EQ(text(tcp.command({"GET", "u"})), "1");
  }
  std::remove(sock.c_str());
  ::rmdir(path);
}

TEST(ConnectionAuth, PasswordRequired) {
  redis_server server({"--requirepass", "s3cret-pw"});
  EXPECT_EQ(
      text(connection(parse_uri("redis://:s3cret-pw@127.0.0.1:" + std::to_string(server.port()))).command({"PING"})),
      "PONG");
  try {
    connection bad(parse_uri("redis://:wrong-pw@127.0.0.1:" + std::to_string(server.port())));
    FAIL();
  } catch (const auth_error& e) {
    EXPECT_EQ(std::string(e.what()).find("wrong-pw"), std::string::npos);
  }
  connection none(server.options());
  EXPECT_THROW(none.command({"PING"}), auth_error);  // NOAUTH
}

TEST(ConnectionAuth, AclUserAndPassword) {
  redis_server server;
  connection admin = server.admin();
  admin.command({"ACL", "SETUSER", "locker", "on", ">locker-pw", "~*", "+@all"});
  connection_options o = server.options();
  o.user = "locker";
  o.password = "locker-pw";
  connection c(o);
  EXPECT_EQ(text(c.command({"ACL", "WHOAMI"})), "locker");
  o.password = "not-it";
  try {
    connection bad(o);
    FAIL();
  } catch (const auth_error& e) {
    EXPECT_EQ(std::string(e.what()).find("not-it"), std::string::npos);
  }
}

TEST(ConnectionTls, WithoutTlsSupportRedissIsAClearError) {
#if !defined(REDISLOCK_WITH_TLS)
  EXPECT_THROW(connection(parse_uri("rediss://127.0.0.1:1")), invalid_argument);
#else
  GTEST_SKIP() << "built with TLS support";
#endif
}

}  // namespace test_connection
