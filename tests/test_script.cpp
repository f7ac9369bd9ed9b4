// Scripts go out by EVALSHA; NOSCRIPT is recovered transparently.
#include "redis_server.hpp"
#include "tcp_proxy.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

namespace test_script {

using namespace redislock;
using redislock_test::command_calls;
using redislock_test::redis_server;
using redislock_test::tcp_proxy;

namespace {
const script& echo_script() {
  static const script s("return {KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1}");
  return s;
}

// A proxy in front of `server` that runs SCRIPT FLUSH on it (directly) just before each of the
// next `flushes` EVALSHA requests reaches it: every load is flushed again before its retry.
struct flushing_proxy {
  flushing_proxy(redis_server& server, int flushes) : proxy(server.port()), admin(server.admin()), left(flushes) {
    proxy.set_request_hook([this](const std::string& chunk) {
      if (chunk.find("EVALSHA") == std::string::npos || left == 0) return;
      --left;
      admin.command({"SCRIPT", "FLUSH"});
    });
  }
  connection_options options(const redis_server& server) const {
    connection_options o = server.options();
    o.port = proxy.port();
    return o;
  }
  tcp_proxy proxy;
  connection admin;  // used on the proxy's thread only
  int left;
};
}  // namespace

TEST(Script, SteadyStateIsOneEvalshaPerCall) {
  redis_server server;
  connection c(server.options());
  connection admin = server.admin();
  echo_script().run(c, {"k"}, {"a", "1"});  // warm-up: NOSCRIPT, SCRIPT LOAD, EVALSHA
  admin.command({"CONFIG", "RESETSTAT"});
  for (int i = 0; i < 50; ++i) {
    reply_ptr r = echo_script().run(c, {"k"}, {"a", std::to_string(i)});
    ASSERT_EQ(r->elements, 3u);
    EXPECT_EQ(r->element[2]->integer, i + 1);
  }
  EXPECT_EQ(command_calls(admin, "evalsha"), 50);
  EXPECT_EQ(command_calls(admin, "eval"), 0);
  EXPECT_EQ(command_calls(admin, "script|load"), 0);
}

TEST(Script, RecoversFromScriptFlush) {
  redis_server server;
  connection c(server.options());
  echo_script().run(c, {"k"}, {"a", "1"});
  server.admin().command({"SCRIPT", "FLUSH"});
  reply_ptr r = echo_script().run(c, {"k"}, {"a", "41"});
  EXPECT_EQ(r->element[2]->integer, 42);
  connection admin = server.admin();
  EXPECT_EQ(command_calls(admin, "script|load"), 2);  // once at first use, once after the flush
}

// A SCRIPT FLUSH between the load and the retry, twice in a row: the call loads again
// (a bounded number of times) instead of throwing NOSCRIPT.
TEST(Script, RecoversFromAFlushBetweenTheLoadAndTheRetry) {
  redis_server server;
  flushing_proxy flusher(server, 3);  // the first EVALSHA, then the retries after two loads
  connection c(flusher.options(server));
  reply_ptr r = echo_script().run(c, {"k"}, {"a", "1"});
  EXPECT_EQ(r->element[2]->integer, 2);
  connection admin = server.admin();
  EXPECT_EQ(command_calls(admin, "script|load"), 3);
  EXPECT_EQ(command_calls(admin, "evalsha"), 4);
}

// A server whose cache is flushed before every EVALSHA: a typed error after a bounded number
// of loads, never a loop.
TEST(Script, GivesUpOnAScriptCacheFlushedEveryTime) {
  redis_server server;
  flushing_proxy flusher(server, 1000);
  connection c(flusher.options(server));
  EXPECT_THROW(echo_script().run(c, {"k"}, {"a", "1"}), reply_error);
  connection admin = server.admin();
  EXPECT_EQ(command_calls(admin, "evalsha"), 1 + script::max_loads);
}

// inspect() runs its scripts through script::run: a repeated flush does not fail it either.
TEST(Script, InspectSurvivesARepeatedScriptFlush) {
  redis_server server;
  client_options d;
  d.connection = server.options();
  client direct(d);
  redislock::mutex held(direct, "inspected");
  ASSERT_TRUE(held.try_lock());
  flushing_proxy flusher(server, 3);
  client_options o;
  o.connection = flusher.options(server);
  client through(o);
  const lock_info info = inspect(through, "inspected");
  EXPECT_TRUE(info.held());
  held.unlock();
}

TEST(Script, RecoversFromServerRestart) {
  redis_server server;
  connection c(server.options());
  echo_script().run(c, {"k"}, {"a", "1"});
  server.restart();
  EXPECT_EQ(echo_script().run(c, {"k"}, {"a", "2"})->element[2]->integer, 3);
}

TEST(Script, PipelinedCallsReportNoscriptPerReply) {
  redis_server server;
  connection c(server.options());
  for (int i = 0; i < 3; ++i) echo_script().append(c, {"k"}, {"a", "1"});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(script::is_noscript(*c.read_reply()));
  echo_script().load(c);
  for (int i = 0; i < 3; ++i) echo_script().append(c, {"k"}, {"a", "1"});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.read_reply()->element[2]->integer, 2);
}

TEST(Script, ScriptErrorsAreTyped) {
  redis_server server;
  connection c(server.options());
  static const script wrong("return redis.call('GET', KEYS[1])");
  c.command({"HSET", "h", "f", "v"});
  EXPECT_THROW(wrong.run(c, {"h"}, {}), wrong_type_error);
}

}  // namespace test_script
