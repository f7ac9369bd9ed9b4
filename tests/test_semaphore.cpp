// redislock::semaphore's own promises: at most N holders, a crashed holder's permit back within
// its lease, hand-off to the longest waiting waiter, the permit count stored with the name and
// changed while permits are held. What every lock kind promises is in test_lock_contract.cpp.
#include "eventually.hpp"
#include "redis_keys.hpp"
#include "freeze_waiter.hpp"
#include "server_fixture.hpp"
#include "tcp_proxy.hpp"
#include "worker_process.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace test_semaphore {

using namespace redislock;
using redislock_test::eventually;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

struct Semaphore;

// Both permits of a semaphore of 2 held (a, b), and a waiter (w, with its own client) queued
// behind them, waiting up to 20 s on another thread (got: whether it acquired).
struct full_with_a_waiter {
  full_with_a_waiter(Semaphore& t, const std::string& name, const lock_options& o);
  lock_options options;
  semaphore a, b;
  client other;
  semaphore w;
  std::future<bool> got;
  bool queued = false;  // both held and the waiter queued (else the test stops)
};

struct Semaphore : redislock_test::server_test {
  // Waiters queued on the server for the semaphore `s`.
  long long queued(const semaphore& s) { return admin->command({"ZCARD", s.key() + ":pqueue"})->integer; }
  // Valid holders on the server (the holders zset has one more member: the permit count).
  long long holders(const semaphore& s) {
    return admin->command({"ZCOUNT", s.key(), "1", "+inf"})->integer;  // lease ends are positive
  }
};

full_with_a_waiter::full_with_a_waiter(Semaphore& t, const std::string& name, const lock_options& o)
    : options(o), a(*t.pool, name, 2, o), b(*t.pool, name, 2, o), other(t.options()), w(other, name, 2, o) {
  if (!a.try_acquire() || !b.try_acquire()) return;
  got = std::async(std::launch::async, [this] { return w.try_acquire_for(seconds(20)); });
  queued = eventually([&] { return t.queued(a) == 1; });
}

// Waits that only a hand-off ends within a test (no look on a timer).
lock_options quiet_waits() {
  lock_options o = redislock_test::server_test::lease(seconds(20));
  o.recheck_interval = seconds(60);
  return o;
}

TEST_F(Semaphore, AtMostNHoldAndAReleaseLetsTheNextIn) {
  std::vector<std::unique_ptr<semaphore>> s;
  for (int i = 0; i < 4; ++i) s.push_back(std::make_unique<semaphore>(*pool, "n", 3, lease(seconds(20))));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s[i]->try_acquire()) << i;
  EXPECT_FALSE(s[3]->try_acquire());
  EXPECT_EQ(holders(*s[0]), 3);
  EXPECT_EQ(s[3]->permits(), 3);
  EXPECT_EQ(s[3]->available(), 0);
  s[1]->release();
  EXPECT_EQ(s[1]->last_release(), release_status::released);
  EXPECT_EQ(s[3]->available(), 1);
  ASSERT_TRUE(s[3]->try_acquire());
  // Each permit is its own acquisition: its own token, lease and fencing token.
  EXPECT_NE(s[0]->owner_id(), s[3]->owner_id());
  EXPECT_NE(s[0]->fencing_token(), s[3]->fencing_token());
  EXPECT_GT(s[0]->remaining_lease(), seconds(19));
  for (auto& x : s) x->release();
  EXPECT_EQ(admin->command({"EXISTS", s[0]->key()})->integer, 0) << "an idle semaphore leaves no key";
}

TEST_F(Semaphore, BadPermitCountsAreRefusedAndSendNothing) {
  for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, max_permits + 1}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(semaphore(*pool, "bad", bad), invalid_argument);
    semaphore ok(*pool, "bad", 1);
    EXPECT_THROW(ok.set_permits(bad), invalid_argument);
  }
  EXPECT_EQ(redislock_test::key_dump(*admin), std::vector<std::string>{});
}

// N = 2, many threads each with its own object and client: never more than 2 inside at once,
// and every one of them gets in.
TEST_F(Semaphore, ManyContendersNeverExceedN) {
  constexpr int contenders = 6, rounds = 5;
  std::atomic<int> inside{0}, most{0}, done{0};
  std::vector<std::future<void>> runs;
  std::vector<std::unique_ptr<client>> clients;
  for (int i = 0; i < contenders; ++i) clients.push_back(std::make_unique<client>(options()));
  for (int i = 0; i < contenders; ++i)
    runs.push_back(std::async(std::launch::async, [&, i] {
      semaphore s(*clients[i], "many", 2, lease(seconds(20)));
      for (int r = 0; r < rounds; ++r) {
        ASSERT_TRUE(s.try_acquire_for(seconds(20)));
        const int now = inside.fetch_add(1) + 1;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(milliseconds(2));  // the hold: the others wait meanwhile
        inside.fetch_sub(1);
        s.release();
        EXPECT_EQ(s.last_release(), release_status::released);
        done.fetch_add(1);
      }
    }));
  for (auto& r : runs) ASSERT_EQ(r.wait_for(seconds(60)), std::future_status::ready);
  EXPECT_EQ(done.load(), contenders * rounds);
  EXPECT_LE(most.load(), 2);
  EXPECT_EQ(most.load(), 2) << "two never held at once";
}

// A release hands its permit to the longest waiting waiter, in arrival order.
TEST_F(Semaphore, FreedPermitsGoToTheWaitersInArrivalOrder) {
  lock_options o = quiet_waits();  // only releases wake them
  semaphore a(*pool, "order", 2, o), b(*pool, "order", 2, o);
  ASSERT_TRUE(a.try_acquire());
  ASSERT_TRUE(b.try_acquire());
  constexpr int waiters = 3;
  std::vector<std::unique_ptr<client>> clients;
  std::vector<std::unique_ptr<semaphore>> sems;
  std::mutex order_mutex;
  std::vector<int> order;
  std::vector<std::promise<void>> leave(waiters);
  std::vector<std::future<bool>> done;
  for (int i = 0; i < waiters; ++i) {
    clients.push_back(std::make_unique<client>(options()));
    sems.push_back(std::make_unique<semaphore>(*clients.back(), "order", 2, o));
    done.push_back(std::async(std::launch::async, [&, i, may_leave = leave[i].get_future()]() mutable {
      if (!sems[i]->try_acquire_for(seconds(20))) return false;
      {
        std::lock_guard<std::mutex> g(order_mutex);
        order.push_back(i);
      }
      may_leave.wait_for(seconds(20));
      sems[i]->release();
      return true;
    }));
    ASSERT_TRUE(eventually([&] { return queued(a) == i + 1; })) << "waiter " << i << " never queued";
  }
  const auto got = [&](std::size_t n) {
    return eventually([&] {
      std::lock_guard<std::mutex> g(order_mutex);
      return order.size() >= n;
    });
  };
  a.release();
  ASSERT_TRUE(got(1));
  b.release();
  ASSERT_TRUE(got(2));
  leave[0].set_value();  // the first waiter's permit goes to the third
  ASSERT_TRUE(got(3));
  {
    std::lock_guard<std::mutex> g(order_mutex);
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  }
  for (int i = 1; i < waiters; ++i) leave[i].set_value();
  for (auto& d : done) {
    ASSERT_EQ(d.wait_for(seconds(20)), std::future_status::ready);
    EXPECT_TRUE(d.get());
  }
}

// The count is stored with the name: an object made with another count joins the stored one.
TEST_F(Semaphore, TheStoredCountWinsOverAnObjectsOwn) {
  semaphore two(*pool, "count", 2, lease(seconds(20)));
  semaphore five(*pool, "count", 5, lease(seconds(20)));
  semaphore other(*pool, "count", 5, lease(seconds(20)));
  EXPECT_EQ(five.permits(), 5) << "idle: an object's own count";
  ASSERT_TRUE(two.try_acquire());  // seeds 2
  EXPECT_EQ(five.permits(), 2);
  ASSERT_TRUE(five.try_acquire());
  EXPECT_FALSE(other.try_acquire()) << "an object's own count of 5 let a third in";
  two.release();
  five.release();
  // Idle again: the next acquirer seeds its own count.
  ASSERT_TRUE(other.try_acquire());
  EXPECT_EQ(two.permits(), 5);
  other.release();
}

// Growing admits queued waiters at once (no release needed); shrinking revokes no valid hold
// and admits nobody until fewer than the new count hold.
TEST_F(Semaphore, ChangingTheCountWhilePermitsAreHeld) {
  lock_options o = quiet_waits();  // only the change wakes them
  std::vector<std::unique_ptr<semaphore>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(std::make_unique<semaphore>(*pool, "resize", 2, o));
    ASSERT_TRUE(held.back()->try_acquire());
  }
  client other(options());
  std::vector<std::unique_ptr<semaphore>> waiting;
  std::vector<std::future<bool>> got;
  for (int i = 0; i < 2; ++i) {
    waiting.push_back(std::make_unique<semaphore>(other, "resize", 2, o));
    semaphore& w = *waiting.back();
    got.push_back(std::async(std::launch::async, [&w] { return w.try_acquire_for(seconds(20)); }));
    ASSERT_TRUE(eventually([&] { return queued(*held[0]) == i + 1; }));
  }
  held[0]->set_permits(4);  // grow: both waiters are in, nobody released
  for (auto& g : got) {
    ASSERT_EQ(g.wait_for(seconds(10)), std::future_status::ready);
    EXPECT_TRUE(g.get());
  }
  EXPECT_EQ(holders(*held[0]), 4);
  EXPECT_EQ(held[1]->permits(), 4);

  held[0]->set_permits(2);  // shrink below the holders: every hold stays valid
  for (auto* s : {held[0].get(), held[1].get(), waiting[0].get(), waiting[1].get()}) {
    EXPECT_TRUE(s->still_held());
    EXPECT_TRUE(s->extend());
  }
  semaphore late(*pool, "resize", 4, o);
  EXPECT_FALSE(late.try_acquire()) << "4 hold, 2 permits";
  held[0]->release();
  EXPECT_FALSE(late.try_acquire()) << "3 hold, 2 permits";
  held[1]->release();
  EXPECT_FALSE(late.try_acquire()) << "2 hold, 2 permits";
  waiting[0]->release();
  EXPECT_TRUE(late.try_acquire()) << "1 holds, 2 permits";
  EXPECT_EQ(late.permits(), 2);
  late.release();
  waiting[1]->release();
  EXPECT_EQ(waiting[1]->last_release(), release_status::released);
}

// Shrinking while waiters are queued: a release above the new count hands nothing on.
TEST_F(Semaphore, AReleaseAboveTheShrunkCountHandsNothingOn) {
  full_with_a_waiter f(*this, "shrink", quiet_waits());
  ASSERT_TRUE(f.queued);
  semaphore &a = f.a, &b = f.b, &w = f.w;
  std::future<bool>& got = f.got;
  a.set_permits(1);
  a.release();  // 1 holds, 1 permit: the waiter stays queued
  EXPECT_EQ(got.wait_for(milliseconds(300)), std::future_status::timeout);
  EXPECT_EQ(queued(a), 1);
  b.release();  // 0 hold: the waiter is in
  ASSERT_EQ(got.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(got.get());
  EXPECT_EQ(w.permits(), 1);
  w.release();
}

// A holder killed with SIGKILL gives its permit back when its lease ends, with nobody's help:
// a waiter gets it within the dead holder's lease (plus the wake-up).
TEST_F(Semaphore, AKilledHoldersPermitComesBackWithinItsLease) {
  redislock_test::worker_process holder(REDISLOCK_TEST_WORKER,
                                        {"hold-permit", std::to_string(server->port()), "crash", "500", "2"});
  const std::string dead = holder.acquired();
  ASSERT_FALSE(dead.empty());
  semaphore alive(*pool, "crash", 2, lease(seconds(20)));
  ASSERT_TRUE(alive.try_acquire());
  client other(options());
  semaphore waiter(other, "crash", 2, lease(seconds(20)));
  EXPECT_FALSE(waiter.try_acquire());
  holder.signal(SIGKILL);
  const steady::time_point killed = steady::now();
  EXPECT_EQ(holder.wait_for(seconds(10)), 128 + SIGKILL);
  ASSERT_TRUE(waiter.try_acquire_for(seconds(10)));
  EXPECT_LT(steady::now() - killed, milliseconds(500) + seconds(2)) << "not within the dead holder's lease";
  // The dead holder's entry is gone from the server; the live holder kept its permit.
  EXPECT_EQ(admin->command({"ZSCORE", alive.key(), dead})->type, REDIS_REPLY_NIL);
  EXPECT_TRUE(alive.still_held());
  waiter.release();
  alive.release();
}

// A permit freed by a lapsed lease (no release to hand it on): with fair, the next attempt of
// anyone hands it to the head of the queue, and a newcomer does not pass the queued waiter;
// without, whoever asks first takes it.
TEST_F(Semaphore, APermitFreedByALapsedLeaseGoesToTheHeadInFairMode) {
  for (const bool fair : {true, false}) {
    SCOPED_TRACE(fair ? "fair" : "default");
    const std::string name = fair ? "lapsed-fair" : "lapsed";
    lock_options o = quiet_waits();  // the waiter sleeps on: only a hand-off wakes it
    o.fair = fair;
    full_with_a_waiter f(*this, name, o);
    ASSERT_TRUE(f.queued);
    semaphore &a = f.a, &b = f.b, &w = f.w;
    std::future<bool>& got = f.got;
    client third(options());
    semaphore newcomer(third, name, 2, o);
    ASSERT_TRUE(a.extend(milliseconds(20)));  // a vanishes: its lease lapses, nobody releases
    ASSERT_TRUE(eventually([&] { return !a.still_held(); }));
    EXPECT_EQ(newcomer.try_acquire(), !fair);
    if (fair) {
      ASSERT_EQ(got.wait_for(seconds(10)), std::future_status::ready);
      EXPECT_TRUE(got.get()) << "the head was not handed the lapsed permit";
    } else {
      EXPECT_EQ(got.wait_for(milliseconds(200)), std::future_status::timeout);
      newcomer.release();  // hands its permit to the waiter
      ASSERT_EQ(got.wait_for(seconds(10)), std::future_status::ready);
      EXPECT_TRUE(got.get());
    }
    EXPECT_EQ(a.unlock_and_report(), release_status::lease_expired);
    w.release();
    b.release();
    if (fair) newcomer.release();
  }
}

// A raw script call with a guessed token changes nothing: only the holder's token releases,
// extends, fences or reads its permit.
TEST_F(Semaphore, AGuessedTokenChangesNothing) {
  semaphore owner(*pool, "guarded", 2, lease(seconds(5)));
  ASSERT_TRUE(owner.try_acquire());
  const std::vector<std::string> before = redislock_test::key_dump(*admin);
  const std::string key = owner.key(), guess = detail::random_token() + ":1", prefix = key + ":w:";
  const std::string fence = key + ":fence", queue = key + ":pqueue", waiters = key + ":pwaiters";
  namespace s = detail::semaphore_scripts;
  EXPECT_EQ(s::release().run(*admin, {key, fence, queue, waiters}, {guess, prefix, "2"})->integer, 0);
  EXPECT_EQ(s::extend().run(*admin, {key, fence}, {guess, prefix, "2", "600000"})->integer, 0);
  EXPECT_EQ(s::remaining().run(*admin, {key, fence}, {guess, prefix, "2"})->integer, -2);
  EXPECT_EQ(s::fence().run(*admin, {key, fence}, {guess, prefix, "2"})->integer, 0);
  EXPECT_EQ(redislock_test::key_dump(*admin), before);
  EXPECT_LE(owner.remaining_lease(), seconds(5));
  owner.release();
  EXPECT_EQ(owner.last_release(), release_status::released);
}

// A waiter that gives up leaves the queue: the next release hands its permit to the one behind.
TEST_F(Semaphore, AWaiterThatGaveUpIsSkipped) {
  lock_options o = quiet_waits();
  semaphore holder(*pool, "gaveup", 1, o);
  ASSERT_TRUE(holder.try_acquire());
  client c1(options()), c2(options());
  semaphore quitter(c1, "gaveup", 1, o), patient(c2, "gaveup", 1, o);
  EXPECT_FALSE(quitter.try_acquire_for(milliseconds(200)));
  EXPECT_EQ(queued(holder), 0) << "the quitter left its place";
  std::future<bool> got = std::async(std::launch::async, [&] { return patient.try_acquire_for(seconds(20)); });
  ASSERT_TRUE(eventually([&] { return queued(holder) == 1; }));
  holder.release();
  ASSERT_EQ(got.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(got.get());
  patient.release();
}

// A value of another type at the key is WRONGTYPE, and another lock kind on a semaphore's name
// too, before anything changes.
TEST_F(Semaphore, AnotherKindOnTheNameIsWrongType) {
  mutex m(*pool, "typed");
  m.lock();
  semaphore s(*pool, "typed", 2);
  const std::vector<std::string> before = redislock_test::key_dump(*admin);
  EXPECT_THROW(s.try_acquire(), wrong_type_error);
  EXPECT_EQ(redislock_test::key_dump(*admin), before);
  m.unlock();
  ASSERT_TRUE(s.try_acquire());
  EXPECT_THROW(m.try_lock(), wrong_type_error);
  s.release();
  // A sorted set that is not a semaphore (no "#permits" member) is foreign.
  admin->command({"ZADD", s.key(), "1", "someone's"});
  const std::vector<std::string> foreign = redislock_test::key_dump(*admin);
  EXPECT_THROW(s.try_acquire(), wrong_type_error);
  EXPECT_THROW(s.set_permits(3), wrong_type_error);
  EXPECT_EQ(redislock_test::key_dump(*admin), foreign);
  EXPECT_EQ(inspect(*pool, "typed").kind, lock_kind::foreign);
}

// The permissions a semaphore needs beyond the mutex's (docs/lock-kinds.md, "The semaphore"):
// acquire, extend, fence, count, queue and be handed a permit, resize, under exactly those.
TEST_F(Semaphore, TheDocumentedAclSuffices) {
  if (version() < 60000) GTEST_SKIP() << "no ACL before Redis 6";
  std::vector<std::string> acl = {
      "ACL", "SETUSER", "sem", "reset", "on", ">sem-pw", "~redislock:*", "-@all", "+evalsha", "+script|load", "+get",
      "+set", "+del", "+pexpire", "+pttl", "+time", "+zadd", "+zpopmin", "+zrem", "+hset", "+hget", "+hdel", "+publish",
      "+subscribe", "+unsubscribe", "+pubsub|numsub",
      // the semaphore's additions
      "+zscore", "+zcount", "+zrange", "+zrangebyscore", "+zremrangebyscore", "+pexpireat", "+exists"};
  for (const std::string& rule : redislock_test::acl_channel_rules(*admin, "redislock:*")) acl.push_back(rule);
  admin->command(std::vector<std::string_view>(acl.begin(), acl.end()));
  admin->command({"SCRIPT", "FLUSH"});
  client_options as_sem = options();
  as_sem.connection.user = "sem";
  as_sem.connection.password = "sem-pw";
  client c(as_sem), c2(as_sem);
  lock_options o = quiet_waits();
  semaphore a(c, "acl", 1, o), b(c2, "acl", 1, o);
  ASSERT_TRUE(a.try_acquire());
  EXPECT_TRUE(a.extend());
  EXPECT_GT(a.fencing_token(), 0u);
  EXPECT_GT(a.remaining_lease().count(), 0);
  EXPECT_EQ(a.permits(), 1);
  std::future<bool> got = std::async(std::launch::async, [&] { return b.try_acquire_for(seconds(20)); });
  ASSERT_TRUE(eventually([&] { return queued(a) == 1; }));
  a.release();
  EXPECT_EQ(a.last_release(), release_status::released);
  ASSERT_EQ(got.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(got.get());
  EXPECT_GE(c2.wait_stats().wakeups, 1u) << "handed over by the notice";
  a.set_permits(2);
  ASSERT_TRUE(a.try_acquire());
  a.release();
  b.release();
  EXPECT_EQ(b.last_release(), release_status::released);
}

// inspect() lists every valid permit's holder, the permit count and the queued waiters, and
// writes nothing; force_release() removes every hold and hands the freed permits to waiters.
TEST_F(Semaphore, InspectAndForceRelease) {
  full_with_a_waiter f(*this, "seen", quiet_waits());
  ASSERT_TRUE(f.queued);
  semaphore &a = f.a, &b = f.b, &w = f.w;
  std::future<bool>& got = f.got;
  const std::vector<std::string> before = redislock_test::key_dump(*admin);
  const lock_info i = inspect(*pool, "seen");
  EXPECT_EQ(redislock_test::key_dump(*admin), before) << "inspect wrote";
  EXPECT_EQ(i.kind, lock_kind::semaphore);
  EXPECT_EQ(i.permits, 2);
  EXPECT_EQ(i.waiters, 1);
  ASSERT_EQ(i.holders.size(), 2u);
  for (const lock_holder& h : i.holders) {
    EXPECT_TRUE(h.owner == a.owner_id() || h.owner == b.owner_id()) << h.owner;
    EXPECT_EQ(h.role, "holder");
    EXPECT_GT(h.remaining, seconds(19));
  }
  const lock_info removed = force_release(*pool, "seen");
  EXPECT_EQ(removed.holders.size(), 2u);
  ASSERT_EQ(got.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(got.get()) << "the freed permit was not handed to the waiter";
  EXPECT_FALSE(a.still_held());
  EXPECT_EQ(a.unlock_and_report(), release_status::lease_expired);
  EXPECT_EQ(inspect(*pool, "seen").holders.size(), 1u);
  w.release();
  b.release();
  EXPECT_EQ(inspect(*pool, "seen").kind, lock_kind::none);
  // EVALSHA_RO refuses a script that writes: the info script runs under it (Redis 7 has it).
  if (version() < 70000) return;
  ASSERT_TRUE(a.try_acquire());
  const redislock::script& info = detail::lock_info_scripts::semaphore_info();
  info.load(*admin);
  const std::string key = a.key();
  reply_ptr r = admin->command(
      {"EVALSHA_RO", info.sha1(), "4", key, key + ":fence", key + ":pqueue", key + ":pwaiters", key + ":w:"});
  EXPECT_NE(r->type, REDIS_REPLY_ERROR) << std::string(r->str, r->len);
  a.release();
}

}  // namespace

// A hand-off notice read after a later attempt was refused is stale: the permit it announced
// was handed while the waiter was frozen (between its timer wake-up and its next "wait"), and
// that lease ran out and another took the permit before the "wait" ran. The wait must not
// count the old notice as its hold: the server queued the waiter again, the permit is C's.
TEST_F(Semaphore, AHandOffNoticeReadAfterARefusedAttemptIsNotAHold) {
  auto freezer = std::make_shared<redislock_test::freeze_at_first_timer_wake>("stale-notice");
  const redislock_test::observer_installed observing(freezer);
  lock_options held_long = lease(seconds(20));
  semaphore h(*pool, "stale-notice", 1, held_long);
  ASSERT_TRUE(h.try_acquire());
  client other(options());
  lock_options short_lease = lease(milliseconds(300));
  short_lease.recheck_interval = milliseconds(100);  // the waiter's timer fires soon
  semaphore w(other, "stale-notice", 1, short_lease);
  // 3 s: frozen and unfrozen well within it; with the stale notice ignored, it ends queued.
  std::future<bool> got = std::async(std::launch::async, [&] { return w.try_acquire_for(seconds(3)); });
  std::future<void> frozen = freezer->frozen.get_future();
  ASSERT_EQ(frozen.wait_for(seconds(10)), std::future_status::ready);
  ASSERT_EQ(queued(h), 1);
  const std::string t = w.owner_id();
  h.release();  // hands the permit to w's token (w listens) and publishes the notice
  EXPECT_EQ(admin->command({"ZSCORE", h.key(), t})->type, REDIS_REPLY_STRING) << "not handed to the waiter";
  client third(options());
  semaphore c(third, "stale-notice", 1, held_long);
  ASSERT_TRUE(eventually([&] { return c.try_acquire(); })) << "the handed lease never ran out";  // 300 ms
  freezer->go.set_value();  // w's next "wait" is refused (c holds) and queues it again
  ASSERT_EQ(got.wait_for(seconds(15)), std::future_status::ready);
  const bool w_holds = got.get();
  EXPECT_TRUE(c.still_held());
  EXPECT_FALSE(w_holds && !w.still_held())
      << "w believes it holds a permit of 1 while c holds it (the server has w queued: " << queued(h) << ")";
  if (w_holds) w.release();
  c.release();
}

// A "wait" of an earlier wait, delayed in the network, runs after that wait left the queue
// (replayed here on the admin connection with the old token): it queues a token nobody uses.
// A release must not strand its permit on that token (for its whole lease) while the same
// object, waiting again with its new token, is the only live waiter.
TEST_F(Semaphore, ALateWaitOfAnAbandonedTokenStrandsNoPermit) {
  lock_options o = quiet_waits();  // lease 20 s: a stranded permit stays away that long
  semaphore holder(*pool, "late-wait", 1, o);
  ASSERT_TRUE(holder.try_acquire());
  client c(options());
  semaphore w(c, "late-wait", 1, o);
  const std::string stale = w.owner_id();
  EXPECT_FALSE(w.try_acquire_for(milliseconds(200)));  // queued, then left: its token rotates
  ASSERT_NE(w.owner_id(), stale);
  ASSERT_EQ(queued(holder), 0);
  const std::string key = holder.key();
  namespace s = detail::semaphore_scripts;
  reply_ptr r = s::acquire().run(*admin, {key, key + ":fence", key + ":pqueue", key + ":pwaiters"},
                                 {stale, key + ":w:", "1", "20000", "wait", "0", "2000"});
  ASSERT_EQ(r->element[0]->integer, 0);
  ASSERT_EQ(queued(holder), 1) << "the late wait did not queue";
  std::future<bool> got = std::async(std::launch::async, [&] { return w.try_acquire_for(seconds(3)); });
  ASSERT_TRUE(eventually([&] { return queued(holder) == 2; }));
  holder.release();
  ASSERT_EQ(got.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(got.get()) << "the released permit went to the abandoned token "
                         << (admin->command({"ZSCORE", key, stale})->type == REDIS_REPLY_STRING ? "(it holds it)" : "");
  if (w.owns_lock()) w.release();
}

// set_permits() sets the count for every client while anyone holds (semaphore.hpp): it is
// stored with the holders, so once the semaphore has gone idle the next acquirer's own count
// applies.
TEST_F(Semaphore, ACountSetBySetPermitsLastsWhileAnyoneHolds) {
  semaphore a(*pool, "set-then-idle", 3, lease(seconds(20)));
  semaphore b(*pool, "set-then-idle", 3, lease(seconds(20)));
  semaphore c(*pool, "set-then-idle", 3, lease(seconds(20)));
  ASSERT_TRUE(a.try_acquire());
  a.set_permits(1);
  EXPECT_EQ(b.permits(), 1);
  EXPECT_FALSE(b.try_acquire()) << "set_permits(1) did not apply while a holds";
  a.release();  // idle: the count goes with the last hold
  EXPECT_EQ(c.permits(), 3);
  ASSERT_TRUE(b.try_acquire());
  EXPECT_TRUE(c.try_acquire()) << "the idle semaphore did not take the next acquirer's count";
  EXPECT_EQ(c.permits(), 3);
  if (c.owns_lock()) c.release();
  b.release();
}

// An attempt that ran but whose reply was lost (the connection cut after the request), by an
// object that then goes (a std::unique_lock's stack unwinding): the permit it took belongs to
// a token nobody will use again, for its whole lease (20 s) while another waits, unless the
// failing call sends a best-effort owner-checked release of that token (as the async kinds do,
// docs/async.md).
TEST_F(Semaphore, AnAttemptWhoseReplyWasLostLeavesNoPermitBehindItsObject) {
  redislock_test::tcp_proxy proxy(server->port());
  client_options via = options();
  via.connection.port = proxy.port();
  via.connection.connect_timeout = milliseconds(300);
  via.connection.command_timeout = milliseconds(300);
  client through(via);
  {
    semaphore s(through, "lost-try", 1, lease(seconds(20)));
    ASSERT_TRUE(s.try_acquire());  // the connection is made and the scripts are loaded
    s.release();
    // The attempt's script adds the permit with ZADD (counted in INFO commandstats even when
    // a script calls it); the release that follows the failure only removes it (ZREM).
    const auto added = [&] { return redislock_test::command_calls(*admin, "zadd"); };
    const long long added_before = added();
    proxy.cut_after_next_requests(1);
    EXPECT_ANY_THROW(s.try_acquire());
    // (the proxy forwards the request as it cuts: the server may run it after we are told)
    EXPECT_TRUE(eventually([&] { return added() > added_before; })) << "the attempt did not take the permit";
    EXPECT_EQ(holders(s), 0) << "the failed attempt's permit was not released";
  }
  semaphore other(*pool, "lost-try", 1, lease(seconds(20)));
  EXPECT_TRUE(other.try_acquire_for(seconds(2)))
      << "the lost attempt's permit stays with an abandoned token for its whole lease";
  if (other.owns_lock()) other.release();
}

}  // namespace test_semaphore
