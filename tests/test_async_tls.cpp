// The async client (asio.hpp) over TLS: a redis-server with a TLS port and throwaway
// certificates (tests/harness/tls_certificates.hpp). Built only with REDISLOCK_WITH_TLS and asio:
// scripts/test.sh runs it in the hiredis-1.2 variant.
#include "async_fixture.hpp"
#include "eventually.hpp"
#include "redis_server.hpp"
#include "tcp_proxy.hpp"
#include "tls_certificates.hpp"

#include <redislock/asio.hpp>
#include <redislock/redislock.hpp>

#include <asio/io_context.hpp>
#include <asio/use_future.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>

namespace test_async_tls {

using namespace redislock;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

struct AsyncTlsTest : ::testing::Test {
  static void SetUpTestSuite() {
    certs = new redislock_test::tls_certificates();
    tls_port = redislock_test::free_port();
    server = new redislock_test::redis_server(certs->server_args(tls_port));
  }
  static void TearDownTestSuite() {
    delete server;
    delete certs;
  }
  void SetUp() override {
    work.emplace(asio::make_work_guard(io));
    runner = std::thread([this] { io.run(); });
  }
  void TearDown() override {
    clients.clear();  // closes their connections on the loop
    work.reset();
    runner.join();
  }
  static async_client_options tls(const char* ca = "ca.crt", int port = tls_port) {
    async_client_options o;
    o.connection.host = "127.0.0.1";
    o.connection.port = port;
    o.connection.tls = true;
    o.connection.tls_ca_file = certs->file(ca);
    o.connection.connect_timeout = 1s;
    o.connection.command_timeout = 1s;
    return o;
  }
  async_client& make_client(async_client_options o) {
    clients.push_back(std::make_unique<async_client>(io.get_executor(), std::move(o)));
    return *clients.back();
  }
  // The outcome of one acquisition (errors as codes: see test_async_mutex.cpp's outcome()).
  static std::pair<std::error_code, async_hold> try_lock(async_mutex& m, steady::duration wait) {
    std::promise<std::pair<std::error_code, async_hold>> p;
    m.async_try_lock_for(std::chrono::duration_cast<std::chrono::milliseconds>(wait),
                         [&](std::error_code e, async_hold h) {
                           p.set_value({e, std::move(h)});
                         });
    return p.get_future().get();
  }
  static release_status unlock(async_hold& h) {
    std::promise<release_status> p;
    h.async_unlock([&](std::error_code, release_status s) { p.set_value(s); });
    return p.get_future().get();
  }

  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread runner;
  std::vector<std::unique_ptr<async_client>> clients;
  inline static redislock_test::tls_certificates* certs = nullptr;
  inline static redislock_test::redis_server* server = nullptr;
  inline static int tls_port = 0;
};

// Acquisition, renewal past two leases, a hand-off notice on the subscriber connection, fencing
// and release: every connection the async client opens speaks TLS.
TEST_F(AsyncTlsTest, AServerVerifiedByItsCaServesLockRenewalAndHandOff) {
  async_client& c = make_client(tls());
  lock_options o;
  o.lease = 600ms;
  o.auto_renew = true;
  async_mutex holder(c, "tls-async", o), waiter(c, "tls-async", o);
  auto [e, held] = try_lock(holder, 0ms);
  ASSERT_FALSE(e) << e.message();
  ASSERT_TRUE(held.owns_lock());
  EXPECT_GT(held.async_fencing_token(asio::use_future).get(), 0u);
  connection admin = server->admin();
  // Renewed past two leases from now: only renewals over TLS can confirm that.
  const steady::time_point two_leases_on = steady::now() + 2 * o.lease;
  ASSERT_TRUE(redislock_test::eventually(
      [&] { return held.lease_confirmed_until().value_or(steady::time_point{}) > two_leases_on; }, 10s));
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(admin.command({"GET", holder.key()})->str, held.token());
  // Queued just before the release: the notice then comes well within the lease it carries.
  std::promise<std::pair<std::error_code, async_hold>> handed;
  waiter.async_try_lock_for(10s, [&](std::error_code we, async_hold h) { handed.set_value({we, std::move(h)}); });
  ASSERT_TRUE(redislock_test::eventually([&] {
    return admin.command({"ZCARD", holder.key() + ":queue"})->integer == 1;
  }));
  redislock_test::replies_handled(c);  // asleep until the notice
  EXPECT_EQ(unlock(held), release_status::released);
  auto [we, next] = handed.get_future().get();
  ASSERT_FALSE(we) << we.message();
  ASSERT_TRUE(next.owns_lock());
  EXPECT_GE(c.stats().handed_over, 1u);  // by the release's notice, over TLS
  EXPECT_EQ(unlock(next), release_status::released);
}

TEST_F(AsyncTlsTest, ACertificateFromAnotherCaFailsTheAcquisitionFast) {
  async_client& c = make_client(tls("other-ca.crt"));
  async_mutex m(c, "tls-async-ca");
  const steady::time_point start = steady::now();
  auto [e, h] = try_lock(m, 0ms);
  EXPECT_EQ(e, async_errc::connection_failed);
  EXPECT_FALSE(h.owns_lock());
  EXPECT_LT(steady::now() - start, 3s);
  connection admin = server->admin();
  EXPECT_EQ(admin.command({"EXISTS", m.key()})->integer, 0);
}

TEST_F(AsyncTlsTest, ACertificateForAnotherNameIsRejectedAndTlsServerNameSelectsTheName) {
  async_client_options o = tls();
  o.connection.tls_server_name = "other.example";  // the server's certificate names 127.0.0.1 and localhost
  async_mutex wrong(make_client(o), "tls-async-name");
  EXPECT_EQ(try_lock(wrong, 0ms).first, async_errc::connection_failed);
  o.connection.tls_server_name = "localhost";
  async_mutex right(make_client(o), "tls-async-name");
  auto [e, h] = try_lock(right, 0ms);
  ASSERT_FALSE(e) << e.message();
  EXPECT_EQ(unlock(h), release_status::released);
}

TEST_F(AsyncTlsTest, APeerThatNeverAnswersTheHandshakeFailsWithinTheConnectTimeout) {
  // Accepts the connection and forwards nothing: the TCP connect succeeds, the handshake gets no
  // answer. connect_timeout bounds the handshake too, not the (longer) command_timeout.
  redislock_test::tcp_proxy silent(tls_port);
  silent.set_stalled(true);
  async_client_options o = tls("ca.crt", silent.port());
  o.connection.connect_timeout = 300ms;
  o.connection.command_timeout = 10s;
  async_mutex m(make_client(o), "tls-async-silent");
  const steady::time_point start = steady::now();
  EXPECT_EQ(try_lock(m, 5s).first, async_errc::connection_failed);
  const auto took = steady::now() - start;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
}

TEST_F(AsyncTlsTest, BadCertificateFilesAreRefusedTypedAtConstruction) {
  async_client_options o = tls();
  o.connection.tls_cert_file = certs->file("client.crt");  // without its key
  EXPECT_THROW(async_client(io.get_executor(), o), invalid_argument);
  o = tls();
  o.connection.tls_ca_file = certs->file("no-such-ca.crt");
  EXPECT_THROW(async_client(io.get_executor(), o), tls_error);
}

TEST_F(AsyncTlsTest, MutualTlsWithAClientCertificate) {
  const int port = redislock_test::free_port();
  redislock_test::redis_server strict(certs->server_args(port, "server", "yes"));
  async_client_options o = tls("ca.crt", port);
  async_mutex refused(make_client(o), "tls-async-mutual");  // no client certificate
  EXPECT_EQ(try_lock(refused, 0ms).first, async_errc::connection_failed);
  o.connection.tls_cert_file = certs->file("client.crt");
  o.connection.tls_key_file = certs->file("client.key");
  async_mutex accepted(make_client(o), "tls-async-mutual");
  auto [e, h] = try_lock(accepted, 0ms);
  ASSERT_FALSE(e) << e.message();
  EXPECT_EQ(unlock(h), release_status::released);
}

}  // namespace

}  // namespace test_async_tls
