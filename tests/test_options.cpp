// URI parsing and option validation: no server needed.
#include <redislock/cluster_client.hpp>
#include <redislock/redislock.hpp>
#include <redislock/sentinel_client.hpp>

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <vector>

namespace test_options {

using namespace redislock;

TEST(ParseUri, HostPortDb) {
  auto o = parse_uri("redis://cache.internal:6380/3");
  EXPECT_EQ(o.host, "cache.internal");
  EXPECT_EQ(o.port, 6380);
  EXPECT_EQ(o.db, 3);
  EXPECT_TRUE(o.user.empty());
  EXPECT_TRUE(o.password.empty());
  EXPECT_FALSE(o.tls);
}

TEST(ParseUri, DefaultsPortAndDb) {
  auto o = parse_uri("redis://localhost");
  EXPECT_EQ(o.host, "localhost");
  EXPECT_EQ(o.port, 6379);
  EXPECT_EQ(o.db, 0);
}

TEST(ParseUri, UserAndPasswordPercentDecoded) {
  auto o = parse_uri("redis://locker:p%40ss%3Aword@10.0.0.5:7000");
  EXPECT_EQ(o.user, "locker");
  EXPECT_EQ(o.password, "p@ss:word");
  EXPECT_EQ(o.host, "10.0.0.5");
  EXPECT_EQ(o.port, 7000);
}

TEST(ParseUri, PasswordOnly) {
  auto a = parse_uri("redis://:secret@h");
  EXPECT_TRUE(a.user.empty());
  EXPECT_EQ(a.password, "secret");
  auto b = parse_uri("redis://secret@h");
  EXPECT_TRUE(b.user.empty());
  EXPECT_EQ(b.password, "secret");
}

TEST(ParseUri, Ipv6) {
  auto o = parse_uri("redis://[::1]:6390");
  EXPECT_EQ(o.host, "::1");
  EXPECT_EQ(o.port, 6390);
}

TEST(ParseUri, UnixSocket) {
  auto o = parse_uri("unix:///run/redis/redis.sock?db=2");
  EXPECT_EQ(o.unix_path, "/run/redis/redis.sock");
  EXPECT_EQ(o.db, 2);
  EXPECT_EQ(parse_uri("unix:///tmp/r.sock").db, 0);
}

TEST(ParseUri, TlsScheme) { EXPECT_TRUE(parse_uri("rediss://h:6380").tls); }

TEST(ParseUri, RejectsMalformed) {
  for (const char* bad :
       {"localhost:6379", "http://h", "redis://", "redis://h:notaport", "redis://h:70000", "redis://h:0", "redis://h/x",
        "unix://relative.sock", "unix:///s.sock?foo=1", "redis://u:%zz@h", "redis://[::1"}) {
    EXPECT_THROW(parse_uri(bad), invalid_argument) << bad;
  }
}

TEST(ParseUri, ErrorsNeverContainThePassword) {
  try {
    parse_uri("redis://user:hunter2@h:99999");
    FAIL();
  } catch (const error& e) {
    EXPECT_EQ(std::string(e.what()).find("hunter2"), std::string::npos);
  }
  EXPECT_EQ(parse_uri("redis://user:hunter2@h").endpoint().find("hunter2"), std::string::npos);
}

TEST(Errors, ReplyErrorsAreTyped) {
  auto kind = [](const char* text) -> std::string {
    try {
      detail::throw_reply_error(text);
    } catch (const noscript_error&) {
      return "noscript";
    } catch (const wrong_type_error&) {
      return "wrongtype";
    } catch (const auth_error&) {
      return "auth";
    } catch (const redirect_error& e) {
      return std::string(e.is_ask() ? "ask " : "moved ") + std::to_string(e.slot()) + " " + e.endpoint();
    } catch (const reply_error& e) {
      return "reply:" + e.server_message();
    }
    return "none";
  };
  EXPECT_EQ(kind("NOSCRIPT No matching script."), "noscript");
  EXPECT_EQ(kind("MOVED 3999 127.0.0.1:6381"), "moved 3999 127.0.0.1:6381");
  EXPECT_EQ(kind("ASK 16383 127.0.0.1:6381"), "ask 16383 127.0.0.1:6381");
  // Out of the slot range (a broken or hostile peer): no slot, never an index past the map.
  EXPECT_EQ(kind("MOVED 16384 127.0.0.1:6381"), "moved -1 127.0.0.1:6381");
  EXPECT_EQ(kind("MOVED 20000 127.0.0.1:6381"), "moved -1 127.0.0.1:6381");
  EXPECT_EQ(kind("MOVED 99999999999 127.0.0.1:6381"), "moved -1 127.0.0.1:6381");
  EXPECT_EQ(kind("WRONGTYPE Operation against a key holding the wrong kind of value"), "wrongtype");
  EXPECT_EQ(kind("NOAUTH Authentication required."), "auth");
  EXPECT_EQ(kind("WRONGPASS invalid username-password pair or user is disabled."), "auth");
  EXPECT_EQ(kind("NOPERM this user has no permissions to run the 'eval' command"), "auth");
  EXPECT_EQ(
      kind("ERR The user executing the script can't run this command or subcommand script: 0a9a, on @user_script:2."),
      "auth");
  EXPECT_EQ(kind("MOVED 3999 127.0.0.1:6381"), "moved 3999 127.0.0.1:6381");
  EXPECT_EQ(kind("ASK 12 10.1.1.1:7000"), "ask 12 10.1.1.1:7000");
  EXPECT_EQ(kind("ERR unknown command"), "reply:ERR unknown command");
}

// A script's command error is typed by that error on every server: Redis 6 wraps it, Redis 8
// words an ACL denial its own way.
TEST(Errors, AScriptErrorIsTypedByItsCommandsErrorOnEveryServer) {
  auto type_of = [](const char* text) -> std::string {
    try {
      detail::throw_reply_error(text);
    } catch (const wrong_type_error& e) {
      return "wrongtype:" + e.server_message();
    } catch (const auth_error& e) {
      return "auth:" + e.server_message();
    } catch (const reply_error& e) {
      return "reply:" + e.server_message();
    }
    return "none";
  };
  const std::string wrong_type =
      "ERR Error running script (call to f_0afd6381b7bc7e087629b058a114888865e2f312): "
      "@user_script:1: WRONGTYPE Operation against a key holding the wrong kind of value";
  EXPECT_EQ(type_of(wrong_type.c_str()), "wrongtype:" + wrong_type);  // the whole message is kept
  EXPECT_EQ(type_of("ERR Error running script (call to f_0a9a): @user_script:2: @user_script: 2: "
                    "The user executing the script can't run this command or subcommand"),
            "auth:ERR Error running script (call to f_0a9a): @user_script:2: @user_script: 2: "
            "The user executing the script can't run this command or subcommand");
  const std::string redis8_acl =
      "ERR ACL failure in script: User lesser has no permissions to run the 'get' command "
      "script: 43f2911f06a405b9b9aba280c9c9c72edb3dd8f3, on @user_script:2.";
  EXPECT_EQ(type_of(redis8_acl.c_str()), "auth:" + redis8_acl);
  EXPECT_EQ(type_of("ERR Error running script (call to f_0a9a): @user_script:3: ERR value is not an integer"),
            "reply:ERR Error running script (call to f_0a9a): @user_script:3: ERR value is not an integer");
  // Only the wrapper is taken off: a location in the command's own message stays.
  EXPECT_EQ(type_of("ERR Error running script (call to f_0a9a): @user_script:4: ERR key a@user_script:5: WRONGTYPE"),
            "reply:ERR Error running script (call to f_0a9a): @user_script:4: ERR key a@user_script:5: WRONGTYPE");
  EXPECT_EQ(type_of("ERR Error running script (call to f_0a9a): @user_script:"),
            "reply:ERR Error running script (call to f_0a9a): @user_script:");
}

// A kind clash names the lock and both kinds; when what holds the name cannot be told (the
// look-up failed, or the name changed kind meanwhile) it still names the lock and the asked
// kind. server_message() is the server's text, unchanged.
TEST(Errors, AKindClashNamesTheLockAndBothKinds) {
  const std::string bare = "WRONGTYPE Operation against a key holding the wrong kind of value";
  auto clash = [&](lock_kind asked, std::string_view noun, auto look_up) -> wrong_type_error {
    try {
      detail::throw_kind_clash(wrong_type_error(bare), "orders", asked, noun, look_up);
    } catch (const wrong_type_error& e) {
      return e;
    }
    return wrong_type_error("none");
  };
  auto holds = [](lock_kind k, std::string type = {}) { return [=] { return detail::held_by{k, type}; }; };
  const wrong_type_error e = clash(lock_kind::mutex, {}, holds(lock_kind::semaphore));
  EXPECT_STREQ(e.what(), "'orders' is a semaphore; a mutex cannot use it");
  EXPECT_EQ(e.server_message(), bare);
  EXPECT_EQ(e.lock_name(), "orders");
  EXPECT_EQ(e.held_kind(), lock_kind::semaphore);
  EXPECT_EQ(e.held_type(), "");
  EXPECT_EQ(e.asked_kind(), lock_kind::mutex);
  EXPECT_STREQ(clash(lock_kind::election, {}, holds(lock_kind::reentrant)).what(),
               "'orders' is a reentrant mutex; an election cannot use it");
  EXPECT_STREQ(clash(lock_kind::latch, {}, holds(lock_kind::shared)).what(),
               "'orders' is a shared mutex; a latch cannot use it");
  EXPECT_STREQ(clash(lock_kind::semaphore, {}, holds(lock_kind::election)).what(),
               "'orders' is an election; a semaphore cannot use it");
  EXPECT_STREQ(clash(lock_kind::mutex, "redlock", holds(lock_kind::latch)).what(),
               "'orders' is a latch; a redlock cannot use it");
  const wrong_type_error foreign = clash(lock_kind::mutex, {}, holds(lock_kind::foreign, "hash"));
  EXPECT_STREQ(foreign.what(), "'orders' holds a Redis hash that is not a redislock lock; a mutex cannot use it");
  EXPECT_EQ(foreign.held_kind(), lock_kind::foreign);
  EXPECT_EQ(foreign.held_type(), "hash");
  const wrong_type_error unknown =
      clash(lock_kind::shared, {}, []() -> detail::held_by { throw connection_error("connection lost"); });
  EXPECT_STREQ(unknown.what(), "'orders' is another kind of lock, or other data; a shared mutex cannot use it");
  EXPECT_EQ(unknown.lock_name(), "orders");
  EXPECT_EQ(unknown.held_kind(), lock_kind::none);
  EXPECT_EQ(unknown.asked_kind(), lock_kind::shared);
  EXPECT_STREQ(clash(lock_kind::mutex, {}, holds(lock_kind::mutex)).what(),
               "'orders' is another kind of lock, or other data; a mutex cannot use it")
      << "changed kind meanwhile";
  // A bare command's error names nothing; an error that names its lock is passed on as it is.
  const wrong_type_error plain(bare);
  EXPECT_EQ(plain.lock_name(), "");
  EXPECT_EQ(plain.held_kind(), lock_kind::none);
  EXPECT_EQ(plain.asked_kind(), lock_kind::none);
  try {
    detail::throw_kind_clash(e, "other", lock_kind::latch, {}, holds(lock_kind::mutex));
  } catch (const wrong_type_error& again) {
    EXPECT_STREQ(again.what(), e.what());
  }
}

// A write refused inside a script on a node that is no longer the master: Redis 6 wraps the
// READONLY (with its leading '-') in its script error; Sentinel failover must still see it.
TEST(Errors, AReadOnlyRefusalInsideAScriptMeansNotTheMasterOnEveryServer) {
  EXPECT_TRUE(detail::is_not_master_reply("READONLY You can't write against a read only replica."));
  EXPECT_TRUE(detail::is_not_master_reply(
      "ERR Error running script (call to f_215e42f6ea5fb5399f567cac1fe39d863779dc0f): @user_script:87: "
      "@user_script: 87: -READONLY You can't write against a read only replica."));
  EXPECT_TRUE(
      detail::is_not_master_reply("ERR Error running script (call to f_1): @user_script:3: -LOADING Redis is loading"));
  EXPECT_FALSE(detail::is_not_master_reply(
      "ERR Error running script (call to f_1): @user_script:3: ERR value is not an integer"));
  EXPECT_FALSE(detail::is_not_master_reply("ERR something about READONLY"));
}

TEST(Errors, HierarchyIsRootedAtError) {
  static_assert(std::is_base_of_v<std::runtime_error, error>);
  static_assert(std::is_base_of_v<connection_error, timeout_error>);
  static_assert(std::is_base_of_v<reply_error, wrong_type_error>);
  static_assert(std::is_base_of_v<error, lock_error>);
  static_assert(std::is_base_of_v<error, invalid_argument>);
}

TEST(Script, Sha1MatchesKnownVectors) {
  EXPECT_EQ(detail::sha1_hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  EXPECT_EQ(detail::sha1_hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
  EXPECT_EQ(detail::sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
}

TEST(Tokens, AreRandom128BitHex) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    std::string t = detail::random_token();
    ASSERT_EQ(t.size(), 32u);
    ASSERT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos);
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(LockOptions, BadInputIsRejectedBeforeAnyNetworkUse) {
  // The client points at a port nobody listens on: validation must fail first, typed.
  client c(client_options{parse_uri("redis://127.0.0.1:1")});
  EXPECT_THROW(mutex(c, ""), invalid_argument);
  lock_options zero;
  zero.lease = std::chrono::milliseconds(0);
  EXPECT_THROW(mutex(c, "x", zero), invalid_argument);
  lock_options negative;
  negative.lease = std::chrono::milliseconds(-5);
  EXPECT_THROW(mutex(c, "x", negative), invalid_argument);
  lock_options huge;
  huge.lease = std::chrono::hours(24 * 365);
  EXPECT_THROW(mutex(c, "x", huge), invalid_argument);
  lock_options backwards;
  backwards.retry_min = std::chrono::milliseconds(50);
  backwards.retry_max = std::chrono::milliseconds(10);
  EXPECT_THROW(mutex(c, "x", backwards), invalid_argument);
  client_options no_pool;
  no_pool.pool_size = 0;
  EXPECT_THROW(client{no_pool}, invalid_argument);
}

// A negative timeout used to read as "no timeout" (hiredis was given none), so a stalled server
// hung the caller; every client kind now refuses it, with the other unusable settings, up front.
TEST(ClientOptions, NegativeTimeoutsAndImpossibleEndpointsAreRejected) {
  using std::chrono::milliseconds;
  std::vector<std::function<void(connection_options&)>> bad = {
      [](connection_options& o) { o.connect_timeout = milliseconds(-1); },
      [](connection_options& o) { o.command_timeout = milliseconds(-1); },
      [](connection_options& o) { o.db = -1; },
      [](connection_options& o) { o.port = 0; },
      [](connection_options& o) { o.port = 70000; },
  };
  for (std::size_t i = 0; i < bad.size(); ++i) {
    client_options c{parse_uri("redis://127.0.0.1:1")};
    bad[i](c.connection);
    EXPECT_THROW(client{c}, invalid_argument) << i;
    EXPECT_THROW(connection{c.connection}, invalid_argument) << i;
    cluster_options k;
    k.seeds.push_back(c.connection);
    EXPECT_THROW(cluster_client{k}, invalid_argument) << i;
    if (i < 3) {  // Sentinel names the master's address itself
      sentinel_options s = parse_sentinel_uri("redis-sentinel://127.0.0.1:1/m");
      bad[i](s.connection);
      EXPECT_THROW(sentinel_client{s}, invalid_argument) << i;
    }
  }
  client_options wait;
  wait.pool_wait_timeout = milliseconds(-1);
  EXPECT_THROW(client{wait}, invalid_argument);
  cluster_options k = parse_cluster_uri("redis-cluster://127.0.0.1:1");
  k.pool_wait_timeout = milliseconds(-1);
  EXPECT_THROW(cluster_client{k}, invalid_argument);
  sentinel_options s = parse_sentinel_uri("redis-sentinel://127.0.0.1:1/m");
  s.pool_wait_timeout = milliseconds(-1);
  EXPECT_THROW(sentinel_client{s}, invalid_argument);
  client_options fine{parse_uri("redis://127.0.0.1:1")};
  fine.connection.command_timeout = fine.connection.connect_timeout = milliseconds(0);  // "none" stays allowed
  EXPECT_NO_THROW(client{fine});
}

// ---- the lease clock (detail/lease_clock.hpp): one rule for every hold, checked by itself ----

namespace {
using redislock::detail::lease_clock;
using std::chrono::milliseconds;
const lease_clock::steady::time_point t0 = lease_clock::steady::time_point() + std::chrono::hours(1);
lease_clock::steady::time_point at(long long ms) { return t0 + milliseconds(ms); }
}  // namespace

TEST(LeaseClock, AConfirmedCommandCountsFromItsSendInEitherDirection) {
  lease_clock c;
  c.confirmed(at(0), milliseconds(300));
  EXPECT_EQ(c.until(), at(300));
  c.confirmed(at(100), milliseconds(20000));  // longer
  EXPECT_EQ(c.until(), at(20100));
  c.confirmed(at(200), milliseconds(300));  // shorter: earlier
  EXPECT_EQ(c.until(), at(500));
  EXPECT_EQ(c.renewal_due(), at(300));
}

TEST(LeaseClock, ACommandInFlightCountsAsRunFromItsSend) {
  lease_clock c;
  c.confirmed(at(0), milliseconds(20000));
  const lease_clock::ticket t = c.sending(at(100), milliseconds(300));
  EXPECT_EQ(c.until(), at(400)) << "the server may run it the moment it is sent";
  c.refused(t);  // an error reply: it did not run
  EXPECT_EQ(c.until(), at(20000));
  const lease_clock::ticket u = c.sending(at(200), milliseconds(300));
  c.confirmed(at(200), milliseconds(300), u);
  EXPECT_EQ(c.until(), at(500));
}

// A reply that confirms an older command while a newer one is in flight, or after a newer one
// was confirmed: the server may have run them in either order (other connections, a reconnect).
TEST(LeaseClock, OverlappingCommandsCountTheLeastOfWhatTheyMayHaveLeft) {
  lease_clock c;
  c.confirmed(at(0), milliseconds(1000));
  const lease_clock::ticket renewal = c.sending(at(100), milliseconds(30000));
  const lease_clock::ticket extend = c.sending(at(150), milliseconds(2000));
  c.confirmed(at(100), milliseconds(30000), renewal);
  EXPECT_EQ(c.until(), at(2150)) << "the extend still in flight may have run after the renewal";
  c.confirmed(at(150), milliseconds(2000), extend);
  EXPECT_EQ(c.until(), at(2150));
  // Replies the other way round: the newer confirmed first, the older after it.
  lease_clock d;
  d.confirmed(at(0), milliseconds(1000));
  const lease_clock::ticket older = d.sending(at(100), milliseconds(300));
  const lease_clock::ticket newer = d.sending(at(150), milliseconds(30000));
  d.confirmed(at(150), milliseconds(30000), newer);
  EXPECT_EQ(d.until(), at(400)) << "the older one is still in flight";
  d.confirmed(at(100), milliseconds(300), older);
  EXPECT_EQ(d.until(), at(400)) << "it may have run last";
}

TEST(LeaseClock, AnUnansweredCommandCapsEveryLaterCount) {
  lease_clock c;
  c.confirmed(at(0), milliseconds(20000));
  const lease_clock::ticket t = c.sending(at(100), milliseconds(500));
  c.unanswered(at(100), milliseconds(500), t);
  EXPECT_EQ(c.until(), at(600));
  c.confirmed(at(1000), milliseconds(20000));  // it may still run after this one
  EXPECT_EQ(c.until(), at(1500));
  EXPECT_EQ(c.counted(), milliseconds(500));
}

}  // namespace test_options
