// Security: only the owner releases or extends, a minimal ACL user suffices (and each of its
// permissions is needed), and passwords never appear in error messages.
#include "eventually.hpp"
#include "redis_server.hpp"
#include "server_version.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <exception>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace test_security {

using namespace redislock;
using redislock_test::acl_channel_rules;
using redislock_test::eventually;
using redislock_test::redis_server;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

std::string text(const reply_ptr& r) { return std::string(r->str, r->len); }

/// The permissions basic_mutex needs, as documented in the README ("Redis ACL"). Scripts run
/// with their caller's permissions, so the commands they call are listed too (the wait queue:
/// time, z*, h*; the hand-off: publish). SUBSCRIBE and UNSUBSCRIBE are for waiters that listen
/// on their channel, PUBSUB NUMSUB for the release that counts them before it publishes
/// (detail/notify_lua.hpp): without it nobody is notified and waiters wake on their own timer.
const std::vector<std::string> mutex_commands = {"+evalsha", "+script|load", "+get",  "+set",  "+del",
                                                 "+pexpire", "+pttl",        "+time", "+zadd", "+zpopmin",
                                                 "+zrem",    "+hset",        "+hget", "+hdel", "+publish"};
const std::vector<std::string> waiter_commands = {"+subscribe", "+unsubscribe", "+pubsub|numsub"};
/// What the reentrant and shared mutexes add (README, "Redis ACL"); +zrange: the shared
/// mutex's scripts look at the head of its queue.
const std::vector<std::string> lock_kind_commands = {"+exists", "+hexists", "+hgetall", "+hlen", "+zrange"};
/// Everything the README lists for the three lock kinds, waiting included.
std::vector<std::string> every_lock_kind_command() {
  std::vector<std::string> all = mutex_commands;
  all.insert(all.end(), waiter_commands.begin(), waiter_commands.end());
  all.insert(all.end(), lock_kind_commands.begin(), lock_kind_commands.end());
  return all;
}

void set_user(connection& admin, const std::string& name, const std::vector<std::string>& commands) {
  std::vector<std::string> args = {"ACL", "SETUSER",          name,        "reset",
                                   "on",  ">" + name + "-pw", "resetkeys", "~redislock:*"};
  const std::vector<std::string> channels = acl_channel_rules(admin, "redislock:*");
  args.insert(args.end(), channels.begin(), channels.end());
  args.push_back("-@all");
  args.insert(args.end(), commands.begin(), commands.end());
  std::vector<std::string_view> argv(args.begin(), args.end());
  admin.command(argv);
}

client_options as_user(const redis_server& server, const std::string& name) {
  client_options o;
  o.connection = server.options();
  o.connection.user = name;
  o.connection.password = name + "-pw";
  return o;
}

/// What an application does with a mutex, starting from an empty script cache: acquire,
/// extend, fence, queue and give up, queue and be handed the lock. Throws what the server refused.
void mutex_cycle(client& c, connection& admin) {
  admin.command({"SCRIPT", "FLUSH"});
  mutex m(c, "acl");
  ASSERT_TRUE(m.try_lock());
  EXPECT_GT(m.remaining_lease().count(), 0);
  EXPECT_TRUE(m.extend(seconds(10)));
  const std::uint64_t first_token = m.fencing_token();  // from the server clock: no counter yet
  EXPECT_GT(first_token, 0u);
  EXPECT_EQ(m.unlock_and_report(), release_status::released);
  m.lock();
  EXPECT_GT(m.fencing_token(), first_token);  // from the counter
  lock_options refreshing;                    // wakes on its own timer too, so it refreshes its place (ZADD NX)
  refreshing.recheck_interval = milliseconds(20);
  mutex other(c, "acl", refreshing);
  EXPECT_FALSE(other.try_lock_for(milliseconds(20)));  // queues, then leaves the queue
  std::exception_ptr failure;
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    try {
      other.lock();
      other.unlock();
    } catch (...) {
      failure = std::current_exception();
    }
    done = true;
  });
  // Release only once the waiter is queued (or failed), so the release hands it the lock.
  const bool queued = eventually([&] {
    return done || admin.command({"ZCARD", "redislock:{acl}:queue"})->integer == 1;
  });
  // ... and has refreshed its place at least once (or failed doing so).
  const long long refreshes = redislock_test::command_calls(admin, "zadd");
  eventually([&] { return done || redislock_test::command_calls(admin, "zadd") > refreshes; });
  try {
    EXPECT_EQ(m.unlock_and_report(), release_status::released);  // hands the lock to the waiter
  } catch (...) {
    admin.command({"DEL", "redislock:{acl}"});  // refused: free the waiter (its next refresh takes the lock)
    waiter.join();
    throw;
  }
  waiter.join();
  if (failure) std::rethrow_exception(failure);
  EXPECT_TRUE(queued);
  EXPECT_EQ(other.last_release(), release_status::released);
}

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace

TEST(Security, ASecondObjectCannotReleaseOrExtendTheLock) {
  redis_server server;
  client c(client_options{server.options()});
  mutex owner(c, "owned"), intruder(c, "owned");
  owner.lock();
  EXPECT_EQ(intruder.unlock_and_report(), release_status::not_held);
  EXPECT_THROW(intruder.extend(), lock_error);
  EXPECT_TRUE(owner.still_held());
  EXPECT_EQ(owner.unlock_and_report(), release_status::released);
}

TEST(Security, ARawScriptCallWithAGuessedTokenChangesNothing) {
  redis_server server;
  client c(client_options{server.options()});
  lock_options o;
  o.lease = seconds(5);
  mutex owner(c, "guarded", o);
  owner.lock();
  connection attacker = server.admin();
  const std::string key = owner.key();
  const std::string token = text(attacker.command({"GET", key}));
  // A guess that differs from the real token (tokens are 128 random bits: guessing is hopeless).
  std::string guess = detail::random_token();
  if (guess == token) guess[0] = guess[0] == '0' ? '1' : '0';
  namespace s = detail::mutex_scripts;
  const std::string fence = key + ":fence", queue = key + ":queue", waiters = key + ":waiters";
  const std::initializer_list<std::string_view> keys = {key, fence, queue, waiters};
  EXPECT_EQ(s::release().run(attacker, keys, {guess, key + ":w:"})->integer, 0);
  EXPECT_EQ(s::extend().run(attacker, {key}, {guess, "600000"})->integer, 0);
  EXPECT_EQ(s::remaining().run(attacker, {key}, {guess})->integer, -2);
  EXPECT_EQ(s::fence().run(attacker, {key, key + ":fence"}, {guess})->integer, 0);
  for (const char* mode : {"try", "wait", "leave"}) {
    reply_ptr acquire = s::queue_attempt().run(attacker, keys, {guess, "600000", mode, "1", "2000", key + ":w:"});
    EXPECT_EQ(detail::element(*acquire, 0).integer, 0) << mode;
  }
  EXPECT_EQ(text(attacker.command({"GET", key})), token);
  EXPECT_LE(attacker.command({"PTTL", key})->integer, 5000);  // not extended to 600 s
  EXPECT_EQ(owner.unlock_and_report(), release_status::released);
}

TEST(Security, TheMinimalAclSufficesAndEachPermissionIsNeeded) {
  redis_server server;
  connection admin = server.admin();
  std::vector<std::string> all = mutex_commands;
  all.insert(all.end(), waiter_commands.begin(), waiter_commands.end());
  set_user(admin, "redislock", all);
  {
    client c(as_user(server, "redislock"));
    mutex_cycle(c, admin);
    EXPECT_GE(c.wait_stats().wakeups, 1u) << "the hand-off was not notified under the documented ACL";
    // Outside the grant: other commands, keys outside the prefix.
    EXPECT_THROW(c.command({"KEYS", "*"}), auth_error);
    EXPECT_THROW(c.command({"GET", "not-redislock"}), auth_error);
    lock_options elsewhere;
    elsewhere.key_prefix = "other:";
    mutex outside(c, "x", elsewhere);
    EXPECT_THROW(outside.try_lock(), auth_error);
    EXPECT_NO_THROW(outside.unlock());
    // Waiters may subscribe to a lock's release channel, and nothing else.
    connection sub(as_user(server, "redislock").connection);
    reply_ptr r = sub.command({"SUBSCRIBE", "redislock:{acl}:released"});
    EXPECT_EQ(r->type, REDIS_REPLY_ARRAY);
    connection sub2(as_user(server, "redislock").connection);
    if (redislock_test::server_version(admin) >= 60200) {  // Redis 6.0 has no channel permissions
      EXPECT_THROW(sub2.command({"SUBSCRIBE", "elsewhere"}), auth_error);
    }
  }
  for (std::size_t drop = 0; drop < mutex_commands.size(); ++drop) {
    std::vector<std::string> fewer = mutex_commands;
    fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(drop));
    fewer.insert(fewer.end(), waiter_commands.begin(), waiter_commands.end());  // a listening waiter needs +publish
    set_user(admin, "lesser", fewer);
    client c(as_user(server, "lesser"));
    admin.command({"DEL", "redislock:{acl}", "redislock:{acl}:fence"});
    bool denied = false;
    try {
      mutex_cycle(c, admin);
    } catch (const auth_error&) {
      denied = true;
    }
    EXPECT_TRUE(denied) << "not needed: " << mutex_commands[drop];
  }
}

/// What an application does with a shared mutex: read, extend, write, fence; a reader that
/// queues behind the writer and is handed the lock; a writer that queues and gives up.
/// Throws what the server refused.
void shared_cycle(client& c, connection& admin) {
  shared_mutex s(c, "acl-shared"), other(c, "acl-shared");
  s.lock_shared();
  EXPECT_TRUE(s.extend_shared(seconds(5)));
  s.unlock_shared();
  s.lock();
  EXPECT_GT(s.fencing_token(), 0u);
  std::exception_ptr failed;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    try {
      if (other.try_lock_shared_for(seconds(10))) other.unlock_shared();
    } catch (...) {
      failed = std::current_exception();
    }
    done = true;
  });
  const bool queued = eventually([&] {
    return admin.command({"ZCARD", "redislock:{acl-shared}:squeue"})->integer == 1 || done.load();
  });
  s.unlock();  // hands the lock to the queued reader
  reader.join();
  if (failed) std::rethrow_exception(failed);
  EXPECT_TRUE(queued);
  EXPECT_EQ(s.last_release(), release_status::released);
  s.lock_shared();
  EXPECT_FALSE(other.try_lock_for(milliseconds(50)));  // queues, waits on its channel, leaves
  s.unlock_shared();
}

TEST(Security, TheSharedMutexNeedsEachOfItsOwnPermissions) {
  redis_server server;
  connection admin = server.admin();
  for (const char* needed : {"+hgetall", "+zrange"}) {
    std::vector<std::string> fewer = mutex_commands;
    fewer.insert(fewer.end(), waiter_commands.begin(), waiter_commands.end());
    for (const std::string& k : lock_kind_commands)
      if (k != needed) fewer.push_back(k);
    set_user(admin, "lesser", fewer);
    client c(as_user(server, "lesser"));
    admin.command(
        {"DEL", "redislock:{acl-shared}", "redislock:{acl-shared}:squeue", "redislock:{acl-shared}:swaiters"});
    EXPECT_THROW(shared_cycle(c, admin), auth_error) << "not needed: " << needed;
  }
}

TEST(Security, EveryLockKindWorksWithTheDocumentedAcl) {
  redis_server server;
  connection admin = server.admin();
  set_user(admin, "kinds", every_lock_kind_command());
  client c(as_user(server, "kinds"));

  reentrant_mutex r(c, "acl-reentrant");
  r.lock();
  r.lock();
  EXPECT_TRUE(r.extend(seconds(5)));
  // Waiters queue (the reentrant kind's own queue keys), listen on their channels, give up
  // or are handed the lock by the last release.
  client other(as_user(server, "kinds"));
  reentrant_mutex w(other, "acl-reentrant");
  std::thread([&] { EXPECT_FALSE(w.try_lock_for(milliseconds(50))); }).join();
  auto waited = std::async(std::launch::async, [&] {
    const bool got = w.try_lock_for(seconds(10));
    if (got) w.unlock();
    return got;
  });
  ASSERT_TRUE(redislock_test::eventually([&] {
    return admin.command({"ZCARD", "redislock:{acl-reentrant}:rqueue"})->integer == 1;
  }));
  r.unlock();
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::released);
  ASSERT_EQ(waited.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(waited.get());
  EXPECT_EQ(other.wait_stats().wakeups, 1u) << "handed over by the release";
  EXPECT_EQ(other.wait_stats().subscribe_failures, 0u);

  shared_cycle(c, admin);

  // An election: campaign, read the leader, a campaigner handed leadership, an observer told.
  election leader(c, "acl-election"), next(other, "acl-election");
  leader.campaign("a");
  EXPECT_GT(leader.term(), 0u);
  std::optional<leader_info> seen = next.leader();
  ASSERT_TRUE(seen && seen->value == "a");
  auto campaigned = std::async(std::launch::async, [&] { return next.try_campaign_for("b", seconds(10)); });
  ASSERT_TRUE(redislock_test::eventually([&] {
    return admin.command({"ZCARD", "redislock:{acl-election}:equeue"})->integer == 1;
  }));
  leader.resign();
  EXPECT_EQ(leader.last_release(), release_status::released);
  ASSERT_EQ(campaigned.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(campaigned.get());
  EXPECT_TRUE(leader.wait_for_change(seen, std::chrono::steady_clock::now() + seconds(2)));
  ASSERT_TRUE(seen && seen->value == "b");
  next.resign();
  EXPECT_EQ(next.last_release(), release_status::released);

  lock_options fair;
  fair.fair = true;
  mutex first(c, "acl-fair", fair), second(c, "acl-fair", fair);
  first.lock();
  EXPECT_FALSE(second.try_lock_for(milliseconds(50)));  // queues, waits on its channel, leaves
  first.unlock();
  EXPECT_EQ(first.last_release(), release_status::released);
  EXPECT_TRUE(second.try_lock());
  second.unlock();
  EXPECT_EQ(c.wait_stats().subscribe_failures, 0u);
}

// inspect() and force_release() need +type on top of the lock kinds' commands (README, "Redis
// ACL"); a force release of each kind, held, runs under that user.
TEST(Security, InspectAndForceReleaseWorkWithTheDocumentedAcl) {
  redis_server server;
  connection admin = server.admin();
  std::vector<std::string> all = every_lock_kind_command();
  all.push_back("+type");
  set_user(admin, "admin-tool", all);
  client c(as_user(server, "admin-tool"));
  mutex m(c, "acl-break-m");
  reentrant_mutex r(c, "acl-break-r");
  shared_mutex s(c, "acl-break-s");
  election e(c, "acl-break-e");
  m.lock();
  r.lock();
  s.lock_shared();
  e.campaign("v");
  EXPECT_EQ(inspect(c, "acl-break-e").kind, lock_kind::election);
  EXPECT_EQ(force_release(c, "acl-break-e").kind, lock_kind::election);
  EXPECT_EQ(inspect(c, "acl-break-e").kind, lock_kind::none);
  EXPECT_EQ(e.resign_and_report(), release_status::lease_expired);
  EXPECT_EQ(inspect(c, "acl-break-s").kind, lock_kind::shared);
  EXPECT_EQ(force_release(c, "acl-break-m").kind, lock_kind::mutex);
  EXPECT_EQ(force_release(c, "acl-break-r").kind, lock_kind::reentrant);
  EXPECT_EQ(force_release(c, "acl-break-s").kind, lock_kind::shared);
  for (const char* name : {"acl-break-m", "acl-break-r", "acl-break-s"})
    EXPECT_EQ(inspect(c, name).kind, lock_kind::none) << name;
  EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
  EXPECT_EQ(r.unlock_and_report(), release_status::lease_expired);
  EXPECT_EQ(s.unlock_shared_and_report(), release_status::lease_expired);
}

TEST(Security, PasswordsNeverAppearInErrors) {
  const std::string pw = "Very-Secret-Pw-42";
  redis_server server({"--requirepass", "the-right-one"});
  const std::string port = std::to_string(server.port());
  // Wrong password, through the client and a lock.
  {
    client c("redis://:" + pw + "@127.0.0.1:" + port);
    mutex m(c, "pw");
    const std::string msg = message_of([&] { m.lock(); });
    EXPECT_NE(msg, "(no exception)");
    EXPECT_EQ(msg.find(pw), std::string::npos) << msg;
    EXPECT_EQ(message_of([&] { c.command({"PING"}); }).find(pw), std::string::npos);
  }
  // Wrong user and password (ACL form).
  EXPECT_EQ(message_of([&] { connection(parse_uri("redis://someone:" + pw + "@127.0.0.1:" + port)); }).find(pw),
            std::string::npos);
  // Nobody listening, and malformed URIs carrying a password.
  const std::string closed = std::to_string(redislock_test::free_port());
  EXPECT_EQ(message_of([&] { connection(parse_uri("redis://u:" + pw + "@127.0.0.1:" + closed)); }).find(pw),
            std::string::npos);
  for (const std::string& uri :
       {"redis://u:" + pw + "@h:99999", "redis://u:" + pw + "@", "redis://:" + pw + "@h/x", "redis://u:" + pw + "@[::1",
        "redis://u:" + pw + "%zz@h", "rediss://:" + pw + "@h:1"}) {
    const std::string msg = message_of([&] {
      client c(uri);
      c.command({"PING"});
    });
    EXPECT_NE(msg, "(no exception)") << uri;
    EXPECT_EQ(msg.find(pw), std::string::npos) << msg;
  }
}

}  // namespace test_security
