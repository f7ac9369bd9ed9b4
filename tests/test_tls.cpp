// TLS for real: a redis-server with a TLS port and throwaway certificates made by the openssl
// CLI in a temporary directory. Built only with REDISLOCK_WITH_TLS (hiredis >= 1.0 with
// hiredis_ssl): scripts/test.sh runs it in the hiredis-1.2 variant.
#include "eventually.hpp"
#include "redis_server.hpp"
#include "tcp_proxy.hpp"
#include "tls_certificates.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <future>
#include <string>

namespace test_tls {

using namespace redislock;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

struct TlsTest : ::testing::Test {
  static void SetUpTestSuite() {
    certs = new redislock_test::tls_certificates();
    tls_port = redislock_test::free_port();
    server = new redislock_test::redis_server(certs->server_args(tls_port));
  }
  static void TearDownTestSuite() {
    delete server;
    delete certs;
  }
  static client_options tls(const char* ca = "ca.crt", int port = tls_port) {
    client_options o;
    o.connection.host = "127.0.0.1";
    o.connection.port = port;
    o.connection.tls = true;
    o.connection.tls_ca_file = certs->file(ca);
    o.connection.connect_timeout = 1s;
    o.connection.command_timeout = 1s;
    return o;
  }
  // One lock and unlock through `options`; throws what the connection threw.
  static void cycle(const client_options& options) {
    client c(options);
    mutex m(c, "tls");
    ASSERT_TRUE(m.try_lock());
    m.unlock();
    EXPECT_EQ(m.last_release(), release_status::released);
  }
  template <class F>
  static steady::duration timed(F&& f) {
    const steady::time_point start = steady::now();
    f();
    return steady::now() - start;
  }
  inline static redislock_test::tls_certificates* certs = nullptr;
  inline static redislock_test::redis_server* server = nullptr;
  inline static int tls_port = 0;
};

TEST_F(TlsTest, AServerVerifiedByItsCaServesEveryLockOperation) {
  cycle(tls());
  client c(tls());
  lock_options o;
  o.lease = 5s;
  reentrant_mutex r(c, "tls-r", o);
  ASSERT_TRUE(r.try_lock());
  EXPECT_GT(r.remaining_lease().count(), 0);
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::released);
}

TEST_F(TlsTest, ACertificateFromAnotherCaFailsTypedAndFast) {
  const auto took = timed([] { EXPECT_THROW(cycle(tls("other-ca.crt")), tls_error); });
  EXPECT_LT(took, 5s);
}

TEST_F(TlsTest, TheUriFormSelectsTls) {
  connection_options o = parse_uri("rediss://127.0.0.1:" + std::to_string(tls_port));
  EXPECT_TRUE(o.tls);
  o.tls_ca_file = certs->file("ca.crt");
  connection c(o);
  EXPECT_EQ(std::string(c.command({"PING"})->str), "PONG");
}

// Over TLS, hiredis encrypts and writes (SSL_write): a pipeline keeps its order, and a write
// to a connection the server closed is a connection_error, never a SIGPIPE (this test runs
// with SIGPIPE's default action: on failure the test program dies); the next call reconnects.
TEST_F(TlsTest, APipelineAndAWriteToAClosedConnectionOverTls) {
  const auto previous = std::signal(SIGPIPE, SIG_DFL);
  connection c(tls().connection);
  c.command({"DEL", "tls:n"});
  for (int i = 0; i < 100; ++i) c.append({"INCR", "tls:n"});
  for (int i = 1; i <= 100; ++i) EXPECT_EQ(c.read_reply()->integer, i);
  const long long id = c.command({"CLIENT", "ID"})->integer;
  c.append({"PING"});
  connection admin = server->admin();
  admin.command({"CLIENT", "KILL", "ID", std::to_string(id)});
  const std::string big(8 << 20, 'x');
  EXPECT_THROW(
      {
        c.append({"SET", "tls:big", big});
        c.read_reply();
        c.read_reply();
      },
      connection_error);
  std::signal(SIGPIPE, previous);
  EXPECT_EQ(std::string(c.command({"PING"})->str), "PONG");
}

TEST_F(TlsTest, MutualTlsWithAClientCertificateAndWithout) {
  const int port = redislock_test::free_port();
  redislock_test::redis_server strict(certs->server_args(port, "server", "yes"));
  client_options o = tls();
  o.connection.port = port;
  const auto took = timed([&] { EXPECT_THROW(cycle(o), connection_error); });  // no client certificate
  EXPECT_LT(took, 5s);
  o.connection.tls_cert_file = certs->file("client.crt");
  o.connection.tls_key_file = certs->file("client.key");
  cycle(o);
  o.connection.tls_key_file = certs->file("other-ca.key");  // a key that does not match the certificate
  EXPECT_THROW(cycle(o), connection_error);
}

TEST_F(TlsTest, AHandOffAndRenewalsWorkOverTls) {
  client holder_client(tls()), waiter_client(tls());
  lock_options o;
  o.lease = 600ms;
  o.auto_renew = true;
  mutex holder(holder_client, "tls-wait", o), waiter(waiter_client, "tls-wait", o);
  holder.lock();
  auto waited = std::async(std::launch::async, [&] { return waiter.try_lock_for(10s); });
  connection admin = server->admin();
  ASSERT_TRUE(redislock_test::eventually([&] {
    return admin.command({"EXISTS", holder.key() + ":queue"})->integer == 1;
  }));
  // Held past two leases: only renewals over TLS keep it.
  ASSERT_TRUE(holder_client.watchdog().wait_for_stats(10s, [](const watchdog_stats& s) { return s.renewals >= 3; }));
  EXPECT_FALSE(holder.lost());
  holder.unlock();
  EXPECT_EQ(holder.last_release(), release_status::released);
  ASSERT_TRUE(waited.get());
  EXPECT_GE(waiter_client.wait_stats().wakeups, 1u);  // handed over by notice, over TLS
  waiter.unlock();
}

TEST_F(TlsTest, APeerThatNeverAnswersTheHandshakeTimesOutWithinTheConnectTimeout) {
  // Accepts the connection and forwards nothing: the TLS handshake gets no answer. The
  // handshake is part of connecting: connect_timeout bounds it, not the (longer) command_timeout.
  redislock_test::tcp_proxy silent(tls_port);
  silent.set_stalled(true);
  client_options o = tls();
  o.connection.port = silent.port();
  o.connection.connect_timeout = 300ms;
  o.connection.command_timeout = 10s;
  const auto took = timed([&] { EXPECT_THROW(connection{o.connection}, timeout_error); });
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
}

TEST_F(TlsTest, TheTestCertificatesCarryTheirSubjectAltNames) {
  const std::string server =
      redislock_test::output_of("openssl x509 -noout -text -in '" + certs->file("server.crt") + "'");
  EXPECT_NE(server.find("IP Address:127.0.0.1"), std::string::npos) << server;
  EXPECT_NE(server.find("DNS:localhost"), std::string::npos) << server;
  const std::string other =
      redislock_test::output_of("openssl x509 -noout -text -in '" + certs->file("other.crt") + "'");
  EXPECT_NE(other.find("DNS:other.example"), std::string::npos) << other;
  EXPECT_EQ(other.find("127.0.0.1"), std::string::npos) << other;
}

// A server presenting a certificate (from the trusted CA) for "other.example" only.
struct TlsOtherNameTest : TlsTest {
  static void SetUpTestSuite() {
    TlsTest::SetUpTestSuite();
    other_port = redislock_test::free_port();
    other_server = new redislock_test::redis_server(certs->server_args(other_port, "other"));
  }
  static void TearDownTestSuite() {
    delete other_server;
    TlsTest::TearDownTestSuite();
  }
  inline static redislock_test::redis_server* other_server = nullptr;
  inline static int other_port = 0;
};

TEST_F(TlsOtherNameTest, ACertificateForAnotherNameIsRejectedTypedAndFast) {
  for (const char* host : {"127.0.0.1", "localhost"}) {
    SCOPED_TRACE(host);
    client_options o = tls("ca.crt", other_port);
    o.connection.host = host;
    const auto took = timed([&] {
      try {
        connection c(o.connection);
        ADD_FAILURE() << "connected to a server whose certificate is for other.example";
      } catch (const tls_error& e) {
        EXPECT_NE(std::string(e.what()).find("mismatch"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(host), std::string::npos) << e.what();
      }
    });
    EXPECT_LT(took, 5s);
  }
}

TEST_F(TlsOtherNameTest, ACertificateWhoseNamesMatchIsAccepted) {
  client_options o = tls();  // IP SAN 127.0.0.1
  cycle(o);
  o.connection.host = "localhost";  // DNS SAN localhost
  cycle(o);
}

TEST_F(TlsOtherNameTest, TlsServerNameOverridesTheNameVerified) {
  client_options o = tls("ca.crt", other_port);    // connects to 127.0.0.1 ...
  o.connection.tls_server_name = "other.example";  // ... and verifies "other.example"
  cycle(o);
  o.connection.port = tls_port;  // the server's certificate names 127.0.0.1 and localhost, not other.example
  EXPECT_THROW(cycle(o), tls_error);
  o.connection.tls_server_name = "localhost";
  cycle(o);
}

}  // namespace

}  // namespace test_tls
