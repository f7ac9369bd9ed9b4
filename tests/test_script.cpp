// Scripts go out by EVALSHA; NOSCRIPT is recovered transparently.
#include "redis_server.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

using namespace redislock;
using redislock_test::command_calls;
using redislock_test::redis_server;

namespace {
const script& echo_script() {
  static const script s("return {KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1}");
  return s;
}
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
