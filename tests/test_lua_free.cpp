// The Lua-free path (docs/servers.md): a server that runs no scripts for the connection (an ACL
// user without @scripting; Valkey without Lua, built so or with its lua module unloaded) still
// serves basic_mutex with plain commands, refuses what needs a script with a typed error, and
// a Lua-free holder excludes a scripted one. And where the server has SET IFEQ, renewals use it.
// On a server without SET IFEQ and DELEX/DELIFEQ (Redis before 8.4) only the refusals are
// tested; without Valkey's lua module or a Lua-less build (scripts/servers.sh valkey9-nolua)
// those ways of losing scripting are skipped, saying so.
#include "eventually.hpp"
#include "mutex_access.hpp"
#include "redis_server.hpp"
#include "redis_stats.hpp"
#include "server_version.hpp"
#include "tcp_proxy.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace test_lua_free {

using namespace redislock;
using redislock_test::command_monitor;
using redislock_test::eventually;
using redislock_test::redis_server;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

enum class lua_off { acl_user, module_unloaded, built_without };

std::string text(const reply_ptr& r) { return r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : ""; }

/// Commands the monitor saw that run a script.
std::size_t scripted(const std::vector<std::string>& sent) {
  std::size_t n = 0;
  for (const auto& s : sent)
    if (s.find("\"EVALSHA\"") != std::string::npos || s.find("\"EVAL\"") != std::string::npos ||
        s.find("\"SCRIPT\"") != std::string::npos)
      ++n;
  return n;
}

bool any_of(const std::vector<std::string>& sent, const std::string& part) {
  for (const auto& s : sent)
    if (s.find(part) != std::string::npos) return true;
  return false;
}

/// A server, its admin connection (the default user, who runs scripts unless the server has no
/// Lua) and a client (`locker`) that the server runs no scripts for.
struct lua_free_master {
  std::unique_ptr<redis_server> server;
  std::unique_ptr<connection> admin;
  std::unique_ptr<client> locker;
};

/// A throwaway server and a client (`locker`) that the server runs no scripts for, by the way
/// the test parameter names; `features`: what the server offers (found as the default user).
struct LuaFree : ::testing::TestWithParam<lua_off> {
  void SetUp() override {
    const lua_off how = GetParam();
    server = std::make_unique<redis_server>();
    admin = std::make_unique<connection>(server->options());
    features = admin->features();
    switch (how) {
      case lua_off::acl_user:
        if (!features.scripting) GTEST_SKIP() << "the server runs no scripts for anyone: see built_without";
        break;
      case lua_off::module_unloaded:
        if (features.server != "valkey" || !features.scripting)
          GTEST_SKIP() << "only Valkey unloads its Lua engine at run time (this is " << features.describe() << ")";
        break;
      case lua_off::built_without:
        if (features.scripting)
          GTEST_SKIP() << features.describe()
                       << " runs Lua; a server built without it: REDISLOCK_REDIS_SERVER=$(scripts/servers.sh --bin "
                          "valkey9-nolua)/redis-server";
        break;
    }
    lua_free_master m = another_master(std::move(server));
    server = std::move(m.server);
    admin = std::move(m.admin);
    locker = std::move(m.locker);
    features = admin->features();
    ASSERT_FALSE(features.scripting && how != lua_off::acl_user);
    lua_free_path = features.set_ifeq && features.compare_and_delete();
  }

  /// A master like the fixture's (on `started` when given, unless the Lua module must be
  /// unloaded: MODULE needs enable-module-command, which servers before Redis 7.0 do not know).
  lua_free_master another_master(std::unique_ptr<redis_server> started = nullptr) const {
    lua_free_master m;
    const bool unload = GetParam() == lua_off::module_unloaded;
    if (unload) m.server = std::make_unique<redis_server>(std::vector<std::string>{"--enable-module-command", "yes"});
    else m.server = started ? std::move(started) : std::make_unique<redis_server>();
    m.admin = std::make_unique<connection>(m.server->options());
    client_options o{m.server->options()};
    if (GetParam() == lua_off::acl_user) {
      std::vector<std::string> rule = {"ACL", "SETUSER", "locker", "on", ">locker-pw", "~*"};
      for (const auto& c : redislock_test::acl_channel_rules(*m.admin, "*")) rule.push_back(c);
      rule.push_back("+@all");
      rule.push_back("-@scripting");
      m.admin->command(std::vector<std::string_view>(rule.begin(), rule.end()));
      o.connection.user = "locker";
      o.connection.password = "locker-pw";
    }
    if (unload) {
      m.admin->append({"MODULE", "UNLOAD", "lua"});
      reply_ptr r = m.admin->read_reply();
      EXPECT_NE(r->type, REDIS_REPLY_ERROR) << r->str;
      m.admin->close();  // found again: now without scripting
    }
    m.locker = std::make_unique<client>(o);
    return m;
  }

  std::string without_lua_free_path() const {
    return features.describe() + " has no SET IFEQ with DELEX/DELIFEQ (Redis 8.4+, Valkey 9.0+)";
  }

  std::string get(const std::string& key) { return text(admin->command({"GET", key})); }

  /// Redlock's masters: the fixture's (master 0) and `n` - 1 more like it, each reached by its
  /// own `locker` (master 0's through `first` when given).
  std::vector<std::reference_wrapper<client>> redlock_masters(std::size_t n, client* first = nullptr) {
    while (more.size() + 1 < n) more.push_back(another_master());
    std::vector<std::reference_wrapper<client>> out{first ? *first : *locker};
    for (std::size_t i = 0; i + 1 < n; ++i) out.emplace_back(*more[i].locker);
    return out;
  }
  connection& admin_of(std::size_t i) { return i == 0 ? *admin : *more.at(i - 1).admin; }
  std::string value_on(std::size_t i, const std::string& key) { return text(admin_of(i).command({"GET", key})); }
  long long pttl_on(std::size_t i, const std::string& key) { return admin_of(i).command({"PTTL", key})->integer; }
  /// Whether every one of the first n masters comes to hold `value` at `key` (a round returns
  /// with a majority; the other answers may still be on the way).
  bool everywhere(std::size_t n, const std::string& key, const std::string& value) {
    for (std::size_t i = 0; i < n; ++i)
      if (!eventually([&] { return value_on(i, key) == value; })) {
        ADD_FAILURE() << "master " << i << " holds '" << value_on(i, key) << "', not '" << value << "'";
        return false;
      }
    return true;
  }
  /// Whether every master's DBSIZE is 0 (waiting, bounded, for answers still on the way).
  bool all_empty(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      if (!eventually([&] { return admin_of(i).command({"DBSIZE"})->integer == 0; })) return false;
    return true;
  }

  std::vector<lua_free_master> more;  // redlock's other masters
  std::unique_ptr<redis_server> server;
  std::unique_ptr<connection> admin;
  detail::server_features features;
  std::unique_ptr<client> locker;
  bool lua_free_path = false;
};

std::string name_of(const ::testing::TestParamInfo<lua_off>& p) {
  switch (p.param) {
    case lua_off::acl_user: return "AclUserWithoutScripting";
    case lua_off::module_unloaded: return "ValkeyLuaModuleUnloaded";
    case lua_off::built_without: return "ServerBuiltWithoutLua";
  }
  return "unknown";
}

INSTANTIATE_TEST_SUITE_P(Servers, LuaFree,
                         ::testing::Values(lua_off::acl_user, lua_off::module_unloaded, lua_off::built_without),
                         name_of);

TEST_P(LuaFree, TheConnectionFindsThatNoScriptRuns) {
  connection c(locker->options().connection);
  EXPECT_FALSE(c.features().scripting);
  EXPECT_EQ(c.features().server, features.server);
  EXPECT_EQ(c.features().major, features.major);
}

TEST_P(LuaFree, AMutexLocksExtendsAndReleasesWithPlainCommands) {
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  mutex m(*locker, "plain", lock_options{});
  ASSERT_TRUE(m.try_lock());  // first use: the connection finds the server (not monitored)
  m.unlock();
  command_monitor monitor(server->options());
  monitor.take(*admin);
  ASSERT_TRUE(m.try_lock());
  EXPECT_EQ(admin->command({"EXISTS", "redislock:{plain}"})->integer, 1);
  EXPECT_TRUE(m.extend(seconds(20)));
  const long long pttl = admin->command({"PTTL", "redislock:{plain}"})->integer;
  EXPECT_GT(pttl, 10000);
  EXPECT_LE(pttl, 20000);
  const milliseconds left = m.remaining_lease();
  EXPECT_GT(left.count(), 10000);
  EXPECT_LE(left.count(), 20000);
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
  EXPECT_EQ(admin->command({"EXISTS", "redislock:{plain}"})->integer, 0);
  const std::vector<std::string> sent = monitor.take(*admin);
  EXPECT_EQ(scripted(sent), 0u);
  EXPECT_TRUE(any_of(sent, "\"IFEQ\"")) << "extend is SET IFEQ";
  EXPECT_TRUE(any_of(sent, features.delex ? "\"DELEX\"" : "\"DELIFEQ\""));
}

// An earlier attempt set the key but its reply was lost: the next attempt finds our own token,
// takes the lock and restarts the lease from its own send time (SET IFEQ PX).
TEST_P(LuaFree, AnAttemptWhoseReplyWasLostIsOursAndItsLeaseRestarts) {
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  mutex m(*locker, "lost-reply", lock_options{});
  const std::string token = detail::mutex_test_access::token(m);
  admin->command({"SET", "redislock:{lost-reply}", token, "PX", "2000"});
  ASSERT_TRUE(m.try_lock());
  EXPECT_GT(admin->command({"PTTL", "redislock:{lost-reply}"})->integer, 20000);  // the default lease: 30 s
  EXPECT_EQ(get("redislock:{lost-reply}"), token);
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
}

TEST_P(LuaFree, WithoutTheLuaFreeCommandsTheMutexIsRefusedAtFirstUseAndWritesNothing) {
  if (lua_free_path) GTEST_SKIP() << features.describe() << " has the Lua-free commands";
  mutex m(*locker, "refused");  // constructing sends nothing
  try {
    (void)m.try_lock();
    ADD_FAILURE() << "acquired without scripts, SET IFEQ or DELEX";
  } catch (const scripting_unavailable_error& e) {
    EXPECT_NE(std::string(e.what()).find("SET IFEQ"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(m.owns_lock());
  EXPECT_EQ(admin->command({"DBSIZE"})->integer, 0);
}

// The server version says DELEX/DELIFEQ exist, not that this user may run them: a user refused
// the release by ACL is refused before its SET writes anything, rather than left holding a key
// it cannot release for a lease (failed on the old code: try_lock() took the lock and unlock()
// threw NOPERM, leaving the key). The same object locks and releases once it is allowed again.
TEST_P(LuaFree, AUserRefusedTheReleaseIsRefusedBeforeItWritesAnything) {
  if (GetParam() != lua_off::acl_user) GTEST_SKIP() << "refused by ACL only";
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  const std::string release = features.delex ? "delex" : "delifeq";
  admin->command({"ACL", "SETUSER", "locker", "-" + release});
  mutex m(*locker, "no-release");
  const std::string key = "redislock:{no-release}";
  for (const bool wait : {false, true}) {
    try {
      const bool took = wait ? (m.lock(), true) : m.try_lock();
      ADD_FAILURE() << (wait ? "lock()" : "try_lock()") << " returned " << took << " for a user refused " << release;
      if (took) {
        try {
          m.unlock();
        } catch (const error& e) {
          ADD_FAILURE() << "and its unlock() threw: " << e.what();
        }
      }
    } catch (const scripting_unavailable_error& e) {
      EXPECT_NE(std::string(e.what()).find(features.delex ? "DELEX" : "DELIFEQ"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("nothing was written"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(m.owns_lock());
    EXPECT_EQ(get(key), "") << "the key is left for its lease, PTTL " << admin->command({"PTTL", key})->integer;
    admin->command({"DEL", key});
  }
  admin->command({"ACL", "SETUSER", "locker", "+" + release});
  ASSERT_TRUE(m.try_lock());
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
  EXPECT_EQ(admin->command({"DBSIZE"})->integer, 0);
}

TEST_P(LuaFree, WhatNeedsAScriptIsRefusedWithATypedErrorAndWritesNothing) {
  reentrant_mutex r(*locker, "kinds-r");
  EXPECT_THROW(r.lock(), scripting_unavailable_error);
  shared_mutex s(*locker, "kinds-s");
  EXPECT_THROW(s.lock_shared(), scripting_unavailable_error);
  EXPECT_THROW(s.lock(), scripting_unavailable_error);
  lock_options fair;
  fair.fair = true;
  mutex f(*locker, "kinds-f", fair);
  try {
    (void)f.try_lock();
    ADD_FAILURE() << "a fair mutex acquired without scripts";
  } catch (const scripting_unavailable_error& e) {
    EXPECT_NE(std::string(e.what()).find("fair"), std::string::npos) << e.what();
  }
  EXPECT_THROW(latch(*locker, "kinds-l", 2), scripting_unavailable_error);  // its first use is the constructor
  election e(*locker, "kinds-e");
  EXPECT_THROW((void)e.try_campaign("candidate"), scripting_unavailable_error);
  semaphore sem(*locker, "kinds-sem", 2);
  EXPECT_THROW((void)sem.try_acquire(), scripting_unavailable_error);
  EXPECT_EQ(admin->command({"DBSIZE"})->integer, 0);
  if (!lua_free_path) return;
  mutex m(*locker, "kinds-m");
  ASSERT_TRUE(m.try_lock());
  try {
    (void)m.fencing_token();
    ADD_FAILURE() << "a fencing token without scripts";
  } catch (const scripting_unavailable_error& e) {
    EXPECT_NE(std::string(e.what()).find("fencing"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(m.lost());
  EXPECT_EQ(admin->command({"DBSIZE"})->integer, 1);  // the lock's key only: no counter
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
}

TEST_P(LuaFree, AWaiterBacksOffUntilTheHolderReleasesOrItsLeaseEnds) {
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  lock_options quick;
  quick.retry_min = milliseconds(2);
  quick.retry_max = milliseconds(20);
  mutex holder(*locker, "wait", quick), waiter(*locker, "wait", quick);
  ASSERT_TRUE(holder.try_lock());
  const auto started = std::chrono::steady_clock::now();
  EXPECT_FALSE(waiter.try_lock_for(milliseconds(60)));
  EXPECT_LT(std::chrono::steady_clock::now() - started, seconds(2));
  // Released while the other waits (or before it starts: acquired either way).
  std::promise<void> waiting;
  auto acquired = std::async(std::launch::async, [&] {
    waiting.set_value();
    return waiter.try_lock_for(seconds(10));
  });
  waiting.get_future().wait();
  holder.unlock();
  ASSERT_TRUE(acquired.get());
  EXPECT_EQ(waiter.unlock_and_report(), release_status::released);
  // A holder that never releases: taken once its lease has run out on the server.
  lock_options short_lease = quick;
  short_lease.lease = milliseconds(150);
  mutex crashed(*locker, "wait", short_lease);
  ASSERT_TRUE(crashed.try_lock());
  EXPECT_TRUE(waiter.try_lock_for(seconds(10)));
  EXPECT_EQ(waiter.unlock_and_report(), release_status::released);
  EXPECT_EQ(crashed.unlock_and_report(), release_status::lease_expired);
}

TEST_P(LuaFree, TheWatchdogRenewsAndReportsALossAndTheReleaseLeavesTheNewHolderAlone) {
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  lock_options renewed;
  renewed.lease = milliseconds(300);
  renewed.auto_renew = true;
  mutex m(*locker, "renewed", renewed);
  ASSERT_TRUE(m.try_lock());
  EXPECT_TRUE(eventually([&] { return locker->watchdog().stats().renewals >= 2; }));
  EXPECT_FALSE(m.lost());
  EXPECT_TRUE(m.still_held());
  admin->command({"SET", "redislock:{renewed}", "someone-else", "PX", "10000"});
  EXPECT_TRUE(eventually([&] { return m.lost(); }, seconds(3)));
  EXPECT_FALSE(m.extend());
  EXPECT_EQ(m.remaining_lease().count(), 0);
  EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
  EXPECT_EQ(get("redislock:{renewed}"), "someone-else");
}

TEST_P(LuaFree, ALuaFreeHolderAndAScriptedHolderExcludeEachOtherBothWays) {
  if (GetParam() != lua_off::acl_user) GTEST_SKIP() << "nobody runs scripts on this server";
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  client scripting(client_options{server->options()});
  mutex plain(*locker, "both"), lua(scripting, "both");
  ASSERT_TRUE(plain.try_lock());
  EXPECT_FALSE(lua.try_lock_for(milliseconds(30)));  // queues on the server, then leaves
  EXPECT_EQ(plain.unlock_and_report(), release_status::released);
  ASSERT_TRUE(lua.try_lock());
  EXPECT_GT(lua.fencing_token(), 0u);
  EXPECT_FALSE(plain.try_lock_for(milliseconds(30)));
  EXPECT_EQ(lua.unlock_and_report(), release_status::released);
  ASSERT_TRUE(plain.try_lock());
  EXPECT_FALSE(lua.try_lock());
  EXPECT_EQ(plain.unlock_and_report(), release_status::released);
}

TEST_P(LuaFree, AUserWhoseScriptingIsRevokedWhileHoldingReleasesWithoutAScript) {
  if (GetParam() != lua_off::acl_user) GTEST_SKIP() << "revoked by ACL only";
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  admin->command({"ACL", "SETUSER", "locker", "+@scripting"});
  mutex m(*locker, "revoked");
  ASSERT_TRUE(m.try_lock());
  EXPECT_EQ(m.unlock_and_report(), release_status::released);  // scripted (the connection found scripting)
  ASSERT_TRUE(m.try_lock());
  admin->command({"ACL", "SETUSER", "locker", "-@scripting"});
  EXPECT_EQ(m.unlock_and_report(), release_status::released);  // refused EVALSHA, then DELEX/DELIFEQ
  EXPECT_EQ(admin->command({"EXISTS", "redislock:{revoked}"})->integer, 0);
}
// A Lua-free waiter's attempt (SET NX GET PX) that took the lock but whose reply was lost makes
// the wait throw. The scripted wait cleans up after such a failure (leave_after_failure: "leave"
// takes a lock holding our token and passes it on); the Lua-free wait must too (DELEX/DELIFEQ
// of its token), or the lock stays held by nobody for a whole lease.
TEST_P(LuaFree, AWaitWhoseAttemptTookTheLockButLostItsReplyLeavesTheLockFree) {
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  const std::string key = "redislock:{lost-in-wait}";
  admin->command({"SET", key, "someone-else", "PX", "30000"});
  redislock_test::tcp_proxy proxy(server->options().port);
  client_options o = locker->options();
  o.connection.port = proxy.port();
  client via_proxy(o);
  lock_options lo;
  lo.retry_min = milliseconds(20);
  lo.retry_max = milliseconds(40);
  mutex m(via_proxy, "lost-in-wait", lo);
  ASSERT_FALSE(m.try_lock());  // the pooled connection has found the server (its probe is done)
  const auto sets = [&] {
    const std::string info = text(admin->command({"INFO", "commandstats"}));
    const std::size_t at = info.find("cmdstat_set:calls=");
    return at == std::string::npos ? 0L : std::stol(info.substr(at + 18));
  };
  const long before = sets();
  proxy.set_stalled(true, redislock_test::tcp_proxy::direction::to_client);
  auto waiting = std::async(std::launch::async, [&] { return m.try_lock_for(seconds(5)); });
  ASSERT_TRUE(eventually([&] { return sets() > before; }));  // the first attempt ran (held)
  proxy.cut_after_next_requests(1);                          // the next one runs, its reply is lost
  admin->command({"DEL", key});
  proxy.set_stalled(false, redislock_test::tcp_proxy::direction::to_client);
  EXPECT_THROW(waiting.get(), error);
  EXPECT_EQ(proxy.cut_after_request_count(), 1u);
  EXPECT_EQ(get(key), "") << "the failed wait left its hold on the server, PTTL "
                          << admin->command({"PTTL", key})->integer << " ms";
}
// --- redlock (docs/servers.md, "The Lua-free path") ---------------------------------------

lock_options lease(milliseconds ms) {
  lock_options o;
  o.lease = ms;
  return o;
}
const redlock_options patient{milliseconds(500)};  // rounds confirmed on a loaded machine too

/// Runs `f`, which must be refused with scripting_unavailable_error saying `why`.
template <class F>
void expect_refused(F&& f, const std::string& why) {
  try {
    f();
    ADD_FAILURE() << "not refused (" << why << ")";
  } catch (const scripting_unavailable_error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

// Every step with plain commands: values token, token#1, token#2 on every master, the owner
// checked on the client, a fencing token refused (a script draws it), nothing left behind.
TEST_P(LuaFree, RedlockLocksExtendsChecksAndReleasesOnThreeMastersWithoutScripts) {
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  redlock r(redlock_masters(3), "rl", lease(seconds(5)), patient);
  ASSERT_TRUE(r.try_lock());  // first use: the connections find their servers (not monitored)
  r.unlock();
  command_monitor monitor(server->options());
  monitor.take(*admin);
  ASSERT_TRUE(r.try_lock());
  ASSERT_TRUE(r.extend(seconds(6)));
  ASSERT_TRUE(r.extend());
  EXPECT_TRUE(everywhere(3, r.key(), r.token() + "#2"));
  EXPECT_GT(pttl_on(0, r.key()), 3000);
  EXPECT_TRUE(r.still_held());
  EXPECT_GT(r.validity().count(), 3000);
  expect_refused([&] { (void)r.fencing_token(); }, "fencing");
  EXPECT_FALSE(r.lost());
  EXPECT_EQ(r.unlock_and_report(), release_status::released);
  EXPECT_TRUE(all_empty(3));
  const std::vector<std::string> sent = monitor.take(*admin);
  EXPECT_EQ(scripted(sent), 0u);
  EXPECT_TRUE(any_of(sent, "\"IFEQ\""));
  EXPECT_TRUE(any_of(sent, "\"MULTI\""));
  EXPECT_TRUE(any_of(sent, features.delex ? "\"DELEX\"" : "\"DELIFEQ\""));
}

// Keys overwritten by another owner on two masters: the check, the next round and the release
// find them not ours (no candidate matches) and leave them alone.
TEST_P(LuaFree, RedlockWithoutScriptsFindsItsKeysTakenAndLeavesThemAlone) {
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  redlock r(redlock_masters(3), "taken", lease(seconds(5)), patient);
  ASSERT_TRUE(r.try_lock());
  ASSERT_TRUE(r.extend());
  ASSERT_TRUE(everywhere(3, r.key(), r.token() + "#1"));
  const std::string other = r.token() + "x";  // our token as a prefix, without the '#'
  for (std::size_t i = 1; i < 3; ++i) admin_of(i).command({"SET", r.key(), other, "PX", "10000"});
  EXPECT_FALSE(r.still_held());
  EXPECT_FALSE(r.extend());
  EXPECT_TRUE(r.lost());
  EXPECT_EQ(r.unlock_and_report(), release_status::lease_expired);
  EXPECT_TRUE(eventually([&] { return value_on(0, r.key()).empty(); })) << "master 0 still holds our key";
  for (std::size_t i = 1; i < 3; ++i) EXPECT_EQ(value_on(i, r.key()), other) << "master " << i;
}

// A scripted holder and a Lua-free holder of one name exclude each other, and one hold may span
// scripted and Lua-free masters (each master's connection decides its commands).
TEST_P(LuaFree, RedlockScriptedAndLuaFreeHoldersExcludeEachOtherAndMayMix) {
  if (GetParam() != lua_off::acl_user) GTEST_SKIP() << "nobody runs scripts on this server";
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  const auto lua_free = redlock_masters(3);
  std::vector<std::unique_ptr<client>> scripting;
  for (std::size_t i = 0; i < 3; ++i)
    scripting.push_back(std::make_unique<client>(client_options{admin_of(i).options()}));
  std::vector<std::reference_wrapper<client>> scripted_refs{*scripting[0], *scripting[1], *scripting[2]};
  redlock plain(lua_free, "both", lease(seconds(5)), patient), lua(scripted_refs, "both", lease(seconds(5)), patient);
  ASSERT_TRUE(plain.try_lock());
  ASSERT_TRUE(plain.extend());
  EXPECT_FALSE(lua.try_lock());
  EXPECT_EQ(plain.unlock_and_report(), release_status::released);
  ASSERT_TRUE(lua.try_lock());
  ASSERT_TRUE(lua.extend());
  EXPECT_FALSE(plain.try_lock());
  EXPECT_EQ(lua.unlock_and_report(), release_status::released);
  redlock mixed({*scripting[0], *more[0].locker, *more[1].locker}, "mixed", lease(seconds(5)), patient);
  ASSERT_TRUE(mixed.try_lock());
  ASSERT_TRUE(mixed.extend(seconds(6)));
  ASSERT_TRUE(mixed.extend());
  EXPECT_TRUE(everywhere(3, mixed.key(), mixed.token() + "#2"));
  EXPECT_TRUE(mixed.still_held());
  EXPECT_EQ(mixed.unlock_and_report(), release_status::released);
  EXPECT_TRUE(all_empty(3));
}

// A round that ran on master 0 but whose reply was lost: master 0 now holds token#1, which the
// holder cannot know. The next round names both values it may hold (token, token#1), so it
// still applies there; the release does the same and leaves nothing behind.
TEST_P(LuaFree, RedlockRoundWhoseReplyWasLostIsFollowedByALaterRoundAndARelease) {
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  redislock_test::tcp_proxy proxy(server->options().port);
  client_options o = locker->options();
  o.connection.port = proxy.port();
  client via_proxy(o);
  redlock r(redlock_masters(3, &via_proxy), "lost", lease(seconds(5)), patient);
  ASSERT_TRUE(r.try_lock());
  ASSERT_TRUE(eventually([&] { return value_on(0, r.key()) == r.token(); }));
  proxy.cut_after_next_requests(1);
  ASSERT_TRUE(r.extend()) << "masters 1 and 2 confirm";
  ASSERT_TRUE(eventually([&] { return proxy.cut_after_request_count() == 1; }));
  EXPECT_TRUE(eventually([&] { return value_on(0, r.key()) == r.token() + "#1"; })) << "the cut round ran";
  ASSERT_TRUE(r.extend(seconds(6)));
  EXPECT_TRUE(eventually([&] { return value_on(0, r.key()) == r.token() + "#2"; }))
      << "master 0 holds " << value_on(0, r.key());
  EXPECT_GT(pttl_on(0, r.key()), 4000);
  EXPECT_EQ(r.unlock_and_report(), release_status::released);
  EXPECT_TRUE(all_empty(3)) << "master 0 holds " << value_on(0, r.key());
}

// A short round held in the network paths of masters 0 and 1 reaches them after a longer, later
// round was applied there on new connections: it names only values older than the one now
// there, so it matches nothing and the longer lease stays.
TEST_P(LuaFree, RedlockLateRoundChangesNothing) {
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  const auto lockers = redlock_masters(3);
  std::vector<std::unique_ptr<redislock_test::tcp_proxy>> proxies;
  std::vector<std::unique_ptr<client>> via;
  for (std::size_t i = 0; i < 2; ++i) {
    proxies.push_back(std::make_unique<redislock_test::tcp_proxy>(admin_of(i).options().port));
    client_options o = lockers[i].get().options();
    o.connection.port = proxies.back()->port();
    via.push_back(std::make_unique<client>(o));
  }
  redlock r({*via[0], *via[1], lockers[2]}, "late", lease(seconds(3)), patient);
  ASSERT_TRUE(r.try_lock());
  ASSERT_TRUE(everywhere(3, r.key(), r.token()));
  for (auto& p : proxies) p->hold_open();  // the connections open now: what they carry next waits
  EXPECT_THROW(r.extend(milliseconds(1000)), connection_error) << "only master 2 can answer";
  ASSERT_FALSE(r.lost());
  ASSERT_TRUE(r.extend(seconds(6))) << "on new connections to masters 0 and 1";
  ASSERT_TRUE(everywhere(3, r.key(), r.token() + "#2"));
  for (auto& p : proxies) p->release_held();
  for (auto& p : proxies)
    ASSERT_TRUE(eventually([&] { return p->held_open() == 0; })) << "the held round never reached its master";
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(value_on(i, r.key()), r.token() + "#2") << "master " << i;
    EXPECT_GT(pttl_on(i, r.key()), 4000) << "the late round cut master " << i << "'s lease";
  }
  EXPECT_EQ(r.unlock_and_report(), release_status::released);
  EXPECT_TRUE(all_empty(3));
}

// A hold taken with scripts (values token, token#1 written by the script) whose user loses
// @scripting on every master: the next round's script is refused, ran nothing, and the same
// round follows with SET IFEQ of the value the script wrote; the release with DELEX/DELIFEQ.
TEST_P(LuaFree, RedlockWhoseScriptingIsRevokedWhileHoldingGoesOnWithoutScripts) {
  if (GetParam() != lua_off::acl_user) GTEST_SKIP() << "revoked by ACL only";
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  redlock r(redlock_masters(3), "revoked", lease(seconds(5)), patient);
  for (std::size_t i = 0; i < 3; ++i) admin_of(i).command({"ACL", "SETUSER", "locker", "+@scripting"});
  ASSERT_TRUE(r.try_lock());
  ASSERT_TRUE(r.extend()) << "by the script";
  ASSERT_TRUE(everywhere(3, r.key(), r.token() + "#1"));
  for (std::size_t i = 0; i < 3; ++i) admin_of(i).command({"ACL", "SETUSER", "locker", "-@scripting"});
  ASSERT_TRUE(r.extend(seconds(6))) << "refused scripts, then SET IFEQ";
  EXPECT_TRUE(everywhere(3, r.key(), r.token() + "#2"));
  EXPECT_TRUE(r.still_held());
  EXPECT_EQ(r.unlock_and_report(), release_status::released);
  EXPECT_TRUE(all_empty(3));
}

// A user refused MULTI: each command of a round then runs at once, one by one, and EXEC is
// refused. The round's SET ran (master i holds token#1), so its outcome counts as unknown (the
// next rounds and the release name token#1 too), never as "nothing ran": the release finds and
// deletes every value it wrote, and says it cannot tell.
TEST_P(LuaFree, RedlockWhoseUserIsRefusedMultiCountsItsRoundsAsUnknownAndLeavesNothing) {
  if (GetParam() != lua_off::acl_user) GTEST_SKIP() << "refused by ACL only";
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  redlock r(redlock_masters(3), "nomulti", lease(seconds(10)), patient);
  for (std::size_t i = 0; i < 3; ++i) admin_of(i).command({"ACL", "SETUSER", "locker", "-multi"});
  ASSERT_TRUE(r.try_lock());
  EXPECT_THROW(r.extend(), error) << "MULTI refused everywhere: no round confirmed";
  ASSERT_TRUE(everywhere(3, r.key(), r.token() + "#1")) << "the SETs ran without MULTI";
  EXPECT_THROW(r.unlock_and_report(), error) << "the deletes ran outside a transaction: cannot tell";
  EXPECT_FALSE(r.owns_lock());
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(value_on(i, r.key()), "") << "master " << i << " keeps our key, PTTL " << pttl_on(i, r.key());
}

// A master whose user may not run the release (DELEX/DELIFEQ refused by ACL) gets no write: its
// share of the round fails with scripting_unavailable_error (the redlock is refused when that
// answer decides it, or holds the other two masters when they decide first), and nothing is
// left anywhere after the release (failed on the old code: master 1 kept our key for its lease).
TEST_P(LuaFree, RedlockWritesNothingOnAMasterThatRefusesTheRelease) {
  if (GetParam() != lua_off::acl_user) GTEST_SKIP() << "refused by ACL only";
  if (!lua_free_path) GTEST_SKIP() << without_lua_free_path();
  redlock r(redlock_masters(3), "rl-no-release", lease(seconds(10)), patient);
  admin_of(1).command({"ACL", "SETUSER", "locker", features.delex ? "-delex" : "-delifeq"});
  const long long sets_before = redislock_test::command_calls(admin_of(1), "set");
  bool took = false;
  try {
    took = r.try_lock();
  } catch (const scripting_unavailable_error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing was written"), std::string::npos) << e.what();
  }
  // Master 1's answer may come after the round was decided: wait for its transaction.
  EXPECT_TRUE(eventually([&] { return redislock_test::command_calls(admin_of(1), "multi") >= 1; }));
  EXPECT_EQ(redislock_test::command_calls(admin_of(1), "set"), sets_before) << "a SET ran on master 1";
  EXPECT_EQ(value_on(1, r.key()), "") << "master 1 holds our key, PTTL " << pttl_on(1, r.key());
  if (took) r.unlock();
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(eventually([&] { return value_on(i, r.key()).empty(); }))
        << "master " << i << " keeps our key, PTTL " << pttl_on(i, r.key());
}

// A master that runs no scripts and lacks SET IFEQ or DELEX/DELIFEQ (Redis before 8.4) could
// neither renew nor release a redlock hold: the redlock is refused before it writes on any
// master, the scripted ones included.
TEST_P(LuaFree, RedlockWithoutTheLuaFreeCommandsIsRefusedBeforeItWritesAnything) {
  if (lua_free_path) GTEST_SKIP() << features.describe() << " has the Lua-free commands";
  const auto lockers = redlock_masters(3);
  client scripting(client_options{admin_of(1).options()});
  redlock r({lockers[0], scripting, lockers[2]}, "rl", lock_options{});
  expect_refused(
      [&] {
        if (r.try_lock_for(milliseconds(300))) r.unlock();
      },
      "8.4");
  EXPECT_FALSE(r.owns_lock());
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(admin_of(i).command({"DBSIZE"})->integer, 0) << "master " << i << " holds " << value_on(i, r.key());
}

// --- servers with scripting --------------------------------------------------------------

TEST(SetIfeqRenewal, WhereTheServerHasItTheWatchdogAndExtendUseSetIfeqInsteadOfTheScript) {
  redis_server server;
  connection admin = server.admin();
  if (!admin.features().set_ifeq) GTEST_SKIP() << admin.features().describe() << " has no SET IFEQ";
  client c(client_options{server.options()});
  lock_options renewed;
  renewed.lease = milliseconds(300);
  renewed.auto_renew = true;
  mutex m(c, "ifeq", renewed);
  ASSERT_TRUE(m.try_lock());
  command_monitor monitor(server.options());
  monitor.take(admin);
  const std::uint64_t before = c.watchdog().stats().renewals;
  EXPECT_TRUE(eventually([&] { return c.watchdog().stats().renewals >= before + 2; }));
  EXPECT_TRUE(m.extend());
  const std::vector<std::string> sent = monitor.take(admin);
  EXPECT_EQ(scripted(sent), 0u);
  EXPECT_GE(std::count_if(sent.begin(), sent.end(),
                          [](const std::string& s) { return s.find("\"IFEQ\"") != std::string::npos; }),
            3);
  EXPECT_FALSE(m.lost());
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
}

// SET is a deny-oom command: over maxmemory (noeviction) the server refuses `SET ... IFEQ` with
// -OOM, while the extend script it replaces (GET, then PEXPIRE: neither is deny-oom, and a
// script without flags is checked per command) still renews. A holder must not lose a hold
// that the script would have kept.
TEST(SetIfeqRenewal, OverMaxmemoryARenewalStillRenewsAsTheExtendScriptDoes) {
  redis_server server;
  connection admin = server.admin();
  if (!admin.features().scripting) GTEST_SKIP() << admin.features().describe() << " runs no scripts";
  client c(client_options{server.options()});
  mutex held(c, "oom", lock_options{});
  ASSERT_TRUE(held.try_lock());
  lock_options renewed;
  renewed.lease = milliseconds(1500);  // renewed every 500 ms: room for a busy machine
  renewed.auto_renew = true;
  mutex watched(c, "oom-watched", renewed);
  ASSERT_TRUE(watched.try_lock());
  admin.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  admin.command({"CONFIG", "SET", "maxmemory", "1"});  // every deny-oom command is refused now
  bool extended = false;
  try {
    extended = held.extend(seconds(20));
  } catch (const error& e) {
    ADD_FAILURE() << "extend() threw: " << e.what();
  }
  EXPECT_TRUE(extended);
  EXPECT_GT(admin.command({"PTTL", "redislock:{oom}"})->integer, 10000);
  const std::uint64_t before = c.watchdog().stats().renewals;
  EXPECT_TRUE(eventually([&] { return c.watchdog().stats().renewals >= before + 2 || watched.lost(); }));
  EXPECT_FALSE(watched.lost()) << "the watchdog's renewals were refused (" << c.watchdog().stats().failures
                               << " failures, " << c.watchdog().stats().renewals - before << " renewals)";
  admin.command({"CONFIG", "SET", "maxmemory", "0"});
  held.unlock();
  watched.unlock();
}

// docs/servers.md: a script refused on a connection that found scripting (the user's ACL
// changed) marks the connection as one without. The release then falls back at once; a
// contended lock() does not: its queue script is refused and lock() throws, though the
// Lua-free wait would take the lock.
TEST(ServerFeatures, AWaitWhoseScriptIsRefusedAfterTheUsersAclChangedFallsBackToTheLuaFreeWait) {
  redis_server server;
  connection admin = server.admin();
  const detail::server_features f = admin.features();
  if (!f.scripting || !f.set_ifeq || !f.compare_and_delete())
    GTEST_SKIP() << f.describe() << " has no Lua-free path, or runs no scripts for anyone";
  std::vector<std::string> rule = {"ACL", "SETUSER", "revoked", "on", ">revoked-pw", "~*"};
  for (const auto& c : redislock_test::acl_channel_rules(admin, "*")) rule.push_back(c);
  rule.push_back("+@all");
  admin.command(std::vector<std::string_view>(rule.begin(), rule.end()));
  client_options o{server.options()};
  o.connection.user = "revoked";
  o.connection.password = "revoked-pw";
  o.pool_size = 1;
  client c(o);
  lock_options lo;
  lo.retry_min = milliseconds(20);
  lo.retry_max = milliseconds(40);
  mutex m(c, "revoked", lo);
  ASSERT_TRUE(m.try_lock());  // the pooled connection finds scripting
  m.unlock();
  admin.command({"ACL", "SETUSER", "revoked", "-@scripting"});
  admin.command({"SET", "redislock:{revoked}", "someone-else", "PX", "300"});
  bool acquired = false;
  try {
    acquired = m.try_lock_for(seconds(3));
  } catch (const error& e) {
    ADD_FAILURE() << "try_lock_for threw: " << e.what();
  }
  EXPECT_TRUE(acquired);
  if (acquired) {
    EXPECT_EQ(m.unlock_and_report(), release_status::released);
  }
}

TEST(ServerFeatures, FoundOncePerConnectionAndAgainAfterAReconnect) {
  redis_server server;
  connection admin = server.admin();
  std::vector<std::string> rule = {"ACL", "SETUSER", "prober", "on", ">prober-pw", "~*", "+@all"};
  admin.command(std::vector<std::string_view>(rule.begin(), rule.end()));
  connection_options o = server.options();
  o.user = "prober";
  o.password = "prober-pw";
  connection c(o);
  const detail::server_features first = c.features();
  EXPECT_EQ(first.server, admin.features().server);
  EXPECT_TRUE(first.server == "redis" || first.server == "valkey") << first.server;
  const int version = redislock_test::server_version(admin);
  if (first.server == "redis") {
    EXPECT_EQ(first.major * 10000 + first.minor * 100 + first.patch, version);
  }
  EXPECT_EQ(first.set_ifeq,
            first.server == "valkey" ? first.major * 100 + first.minor >= 801 : first.major * 100 + first.minor >= 804);
  if (!first.scripting) GTEST_SKIP() << first.describe() << " runs no scripts";
  command_monitor monitor(server.options());
  monitor.take(admin);
  EXPECT_TRUE(c.features().scripting);  // kept: nothing sent
  EXPECT_TRUE(monitor.take(admin).empty());
  admin.command({"ACL", "SETUSER", "prober", "-@scripting"});
  c.close();
  EXPECT_FALSE(c.features().scripting);  // a new socket: found again
}

}  // namespace

}  // namespace test_lua_free
