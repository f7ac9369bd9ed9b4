// TLS for real: a redis-server with a TLS port and throwaway certificates made by the openssl
// CLI in a temporary directory. Built only with REDISLOCK_WITH_TLS (hiredis >= 1.0 with
// hiredis_ssl): scripts/test.sh runs it in the hiredis-1.2 variant.
#include "eventually.hpp"
#include "redis_server.hpp"
#include "tcp_proxy.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>

using namespace redislock;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

void run(const std::string& command) {
  if (std::system((command + " > /dev/null 2>&1").c_str()) != 0) throw std::runtime_error("failed: " + command);
}

// A CA, a server certificate for 127.0.0.1 signed by it, a client certificate signed by it,
// and a second CA that signed nothing of this server's.
struct certificates {
  std::string dir;
  certificates() {
    char tmpl[] = "/tmp/redislock-tls-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir = tmpl;
    const std::string d = "'" + dir + "'";
    for (const char* ca : {"ca", "other-ca"})
      run("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=redislock-test-" + std::string(ca) + " -keyout " +
          d + "/" + ca + ".key -out " + d + "/" + ca + ".crt");
    for (const char* leaf : {"server", "client"}) {
      const std::string l = d + "/" + leaf;
      run("openssl req -newkey rsa:2048 -nodes -subj /CN=" + std::string(leaf) + " -keyout " + l + ".key -out " + l +
          ".csr");
      run("printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > " + l + ".ext");
      run("openssl x509 -req -in " + l + ".csr -CA " + d + "/ca.crt -CAkey " + d + "/ca.key -CAcreateserial -days 2 -out " +
          l + ".crt -extfile " + l + ".ext");
    }
  }
  ~certificates() { std::system(("rm -rf '" + dir + "'").c_str()); }
  std::string file(const char* name) const { return dir + "/" + name; }
};

struct TlsTest : ::testing::Test {
  static void SetUpTestSuite() {
    certs = new certificates();
    tls_port = redislock_test::free_port();
    server = new redislock_test::redis_server(
        {"--tls-port", std::to_string(tls_port), "--tls-cert-file", certs->file("server.crt"), "--tls-key-file",
         certs->file("server.key"), "--tls-ca-cert-file", certs->file("ca.crt"), "--tls-auth-clients", "optional"});
  }
  static void TearDownTestSuite() {
    delete server;
    delete certs;
  }
  static client_options tls(const char* ca = "ca.crt") {
    client_options o;
    o.connection.host = "127.0.0.1";
    o.connection.port = tls_port;
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
  inline static certificates* certs = nullptr;
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
  const auto took = timed([] { EXPECT_THROW(cycle(tls("other-ca.crt")), connection_error); });
  EXPECT_LT(took, 5s);
}

TEST_F(TlsTest, TheUriFormSelectsTls) {
  connection_options o = parse_uri("rediss://127.0.0.1:" + std::to_string(tls_port));
  EXPECT_TRUE(o.tls);
  o.tls_ca_file = certs->file("ca.crt");
  connection c(o);
  EXPECT_EQ(std::string(c.command({"PING"})->str), "PONG");
}

TEST_F(TlsTest, MutualTlsWithAClientCertificateAndWithout) {
  const int port = redislock_test::free_port();
  redislock_test::redis_server strict({"--tls-port", std::to_string(port), "--tls-cert-file", certs->file("server.crt"),
                                       "--tls-key-file", certs->file("server.key"), "--tls-ca-cert-file",
                                       certs->file("ca.crt"), "--tls-auth-clients", "yes"});
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
  ASSERT_TRUE(redislock_test::eventually([&] { return admin.command({"EXISTS", holder.key() + ":queue"})->integer == 1; }));
  // Held past two leases: only renewals over TLS keep it.
  ASSERT_TRUE(holder_client.watchdog().wait_for_stats(10s, [](const watchdog_stats& s) { return s.renewals >= 3; }));
  EXPECT_FALSE(holder.lost());
  holder.unlock();
  EXPECT_EQ(holder.last_release(), release_status::released);
  ASSERT_TRUE(waited.get());
  EXPECT_GE(waiter_client.wait_stats().wakeups, 1u);  // handed over by notice, over TLS
  waiter.unlock();
}

TEST_F(TlsTest, APeerThatNeverAnswersTheHandshakeTimesOut) {
  // Accepts the connection and forwards nothing: the TLS handshake gets no answer.
  redislock_test::tcp_proxy silent(tls_port);
  silent.set_stalled(true);
  client_options o = tls();
  o.connection.port = silent.port();
  const auto took = timed([&] { EXPECT_THROW(cycle(o), connection_error); });
  EXPECT_LT(took, o.connection.connect_timeout + o.connection.command_timeout + 3s);
}

}  // namespace
