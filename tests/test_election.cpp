// redislock::election's own promises: one leader at a time, a resignation hands leadership to
// the longest waiting campaigner (woken by its notice), a leader whose lease is gone learns it
// and is replaced, leader() shows value and term, observers wake on every change.
#include "eventually.hpp"
#include "lost_signal.hpp"
#include "redis_keys.hpp"
#include "server_fixture.hpp"
#include "tcp_proxy.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

// Every member compiles for the other clients too.
template class redislock::basic_election<redislock::sentinel_client>;
template class redislock::basic_election<redislock::cluster_client>;

namespace test_election {

using namespace redislock;
using redislock_test::eventually;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

struct Election : redislock_test::server_test {
  // Campaigners queued on the server for the election `e`.
  long long queued(const election& e) { return admin->command({"ZCARD", e.key() + ":equeue"})->integer; }
  std::string string_field(const std::string& key, const std::string& field) {
    reply_ptr r = admin->command({"HGET", key, field});
    return r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : std::string();
  }
};

// Waits that only a notice ends within a test: a long lease, and no look on a timer before it.
lock_options quiet_waits() {
  lock_options o = redislock_test::server_test::lease(seconds(20));
  o.recheck_interval = seconds(60);
  return o;
}

TEST_F(Election, OneLeaderAtATimeAmongCampaigners) {
  constexpr int campaigners = 4, rounds = 4;
  std::atomic<int> leading{0}, most{0}, done{0};
  std::vector<std::unique_ptr<client>> clients;
  for (int i = 0; i < campaigners; ++i) clients.push_back(std::make_unique<client>(options()));
  std::vector<std::future<void>> runs;
  for (int i = 0; i < campaigners; ++i)
    runs.push_back(std::async(std::launch::async, [&, i] {
      election e(*clients[i], "one", quiet_waits());
      for (int r = 0; r < rounds; ++r) {
        const std::string me = "c" + std::to_string(i) + "r" + std::to_string(r);
        ASSERT_TRUE(e.try_campaign_for(me, seconds(20)));
        const int now = leading.fetch_add(1) + 1;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        const std::optional<leader_info> l = e.leader();
        EXPECT_TRUE(l && l->value == me && l->owner == e.owner_id());
        std::this_thread::sleep_for(milliseconds(2));  // the others campaign meanwhile
        leading.fetch_sub(1);
        e.resign();
        EXPECT_EQ(e.last_release(), release_status::released);
        done.fetch_add(1);
      }
    }));
  for (auto& r : runs) ASSERT_EQ(r.wait_for(seconds(60)), std::future_status::ready);
  EXPECT_EQ(done.load(), campaigners * rounds);
  EXPECT_EQ(most.load(), 1);
  EXPECT_EQ(admin->command({"EXISTS", "redislock:{one}"})->integer, 0) << "nobody leads: no leader key";
}

// The lease is 20 s and campaigners look on a timer only every 60 s: within 2 s only the
// resignation's hand-off notice can make the waiting campaigner the leader.
TEST_F(Election, AResignationHandsLeadershipToTheWaitingCampaigner) {
  election a(*pool, "handoff", quiet_waits());
  client other(options());
  election b(other, "handoff", quiet_waits());
  a.campaign("warm-up");  // loads the scripts counted below (a first EVALSHA is NOSCRIPT, then again)
  a.resign();
  (void)b.leader();
  a.campaign("a");
  const std::uint64_t a_term = a.term();
  auto got = std::async(std::launch::async, [&] { return b.try_campaign_for("b", seconds(20)); });
  ASSERT_TRUE(eventually([&] { return queued(a) == 1; }));
  const long long calls_before = evalsha();
  a.resign();
  ASSERT_EQ(got.wait_for(seconds(2)), std::future_status::ready) << "not woken by the hand-off";
  ASSERT_TRUE(got.get());
  EXPECT_EQ(a.last_release(), release_status::released);
  // The resignation and b's leader() below: b took no attempt of its own.
  const std::optional<leader_info> l = b.leader();
  EXPECT_EQ(evalsha() - calls_before, 2);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->value, "b");
  EXPECT_EQ(l->owner, b.owner_id());
  EXPECT_GT(l->term, a_term);
  EXPECT_EQ(b.term(), l->term);
  EXPECT_EQ(queued(a), 0);
  EXPECT_EQ(admin->command({"EXISTS", b.key() + ":evalues"})->integer, 0) << "the queued value goes with the grant";
  b.resign();
}

TEST_F(Election, LeaderShowsValueAndIncreasingTerms) {
  election a(*pool, "terms", lease(seconds(20))), b(*pool, "terms", lease(seconds(20)));
  EXPECT_FALSE(a.leader());
  EXPECT_THROW(a.term(), lock_error) << "no term while not leading";
  ASSERT_TRUE(a.try_campaign("first"));
  EXPECT_FALSE(b.try_campaign("second")) << "one leader";
  const std::optional<leader_info> first = b.leader();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->value, "first");
  EXPECT_EQ(first->term, a.term());
  EXPECT_EQ(a.fencing_token(), a.term()) << "the term is the leader's fencing token";
  EXPECT_GT(first->remaining, seconds(19));
  a.resign();
  EXPECT_FALSE(b.leader());
  ASSERT_TRUE(b.try_campaign("second"));
  const std::optional<leader_info> second = a.leader();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->value, "second");
  EXPECT_GT(second->term, first->term);
  b.resign();
  ASSERT_TRUE(a.try_campaign("third"));  // the same object again: a new grant, a new term
  EXPECT_GT(a.term(), second->term);
  a.resign();
}

// A leader without renewal whose lease ran out (a frozen process): a follower takes over at
// the lease's end, and the old leader learns it (extend() false, lost(), its resignation
// reports lease_expired, never "released").
TEST_F(Election, AnExpiredLeaderIsReplacedAndLearnsIt) {
  election a(*pool, "expiry", lease(milliseconds(200)));
  client other(options());
  election b(other, "expiry", quiet_waits());
  ASSERT_TRUE(a.try_campaign("a"));
  const steady::time_point start = steady::now();
  ASSERT_TRUE(b.try_campaign_for("b", seconds(5))) << "the follower waits for the lease's end";
  EXPECT_LT(steady::now() - start, seconds(2));
  EXPECT_EQ(b.leader()->value, "b");
  EXPECT_FALSE(a.still_held());
  EXPECT_FALSE(a.extend());
  EXPECT_TRUE(a.lost());
  EXPECT_EQ(a.resign_and_report(), release_status::lease_expired);
  EXPECT_EQ(b.leader()->value, "b") << "the old leader's resignation leaves the new one alone";
  b.resign();
}

// A renewed leader whose key is deleted behind its back: on_lost fires at the next renewal,
// and a waiting follower takes over (it wakes at the lease's end it last saw).
TEST_F(Election, ALeaderWhoseLeaseIsTakenAwayReportsLost) {
  redislock_test::lost_signal signal;
  election a(*pool, "taken", signal.options(milliseconds(600)));
  client other(options());
  lock_options fo = lease(seconds(20));
  election b(other, "taken", fo);
  ASSERT_TRUE(a.try_campaign("a"));
  auto got = std::async(std::launch::async, [&] { return b.try_campaign_for("b", seconds(5)); });
  ASSERT_TRUE(eventually([&] { return queued(a) == 1; }));
  admin->command({"DEL", a.key()});
  ASSERT_TRUE(signal.wait(seconds(2)));
  EXPECT_TRUE(a.lost());
  EXPECT_EQ(signal.name, "taken");
  ASSERT_EQ(got.wait_for(seconds(2)), std::future_status::ready);
  ASSERT_TRUE(got.get());
  EXPECT_EQ(a.resign_and_report(), release_status::lease_expired);
  EXPECT_EQ(b.leader()->value, "b");
  b.resign();
}

// Observers: woken by a resignation's notice (only a notice can wake them within the test),
// by the lease's end (an expiry publishes nothing), and back by their deadline otherwise.
TEST_F(Election, WaitForChangeWakesOnResignationExpiryAndDeadline) {
  client other(options());
  election watcher(other, "watched", quiet_waits());
  election a(*pool, "watched", quiet_waits());
  ASSERT_TRUE(a.try_campaign("a"));
  std::optional<leader_info> seen = watcher.leader();
  ASSERT_TRUE(seen);

  // Nothing changes: false at the deadline, seen kept.
  steady::time_point start = steady::now();
  EXPECT_FALSE(watcher.wait_for_change(seen, steady::now() + milliseconds(150)));
  EXPECT_GE(steady::now() - start, milliseconds(150));
  EXPECT_LT(steady::now() - start, seconds(1));
  ASSERT_TRUE(seen && seen->value == "a");

  // Resignation.
  auto changed =
      std::async(std::launch::async, [&] { return watcher.wait_for_change(seen, steady::now() + seconds(20)); });
  ASSERT_TRUE(eventually([&] { return subscribers(a.key() + ":leader") == 1; }));
  a.resign();
  ASSERT_EQ(changed.wait_for(seconds(2)), std::future_status::ready) << "not woken by the notice";
  ASSERT_TRUE(changed.get());
  EXPECT_FALSE(seen) << "nobody leads";

  // A grant, made before the wait began: the wait reads the state first.
  election b(*pool, "watched", lease(milliseconds(300)));
  ASSERT_TRUE(b.try_campaign("b"));
  ASSERT_TRUE(watcher.wait_for_change(seen, steady::now() + seconds(2)));
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->value, "b");

  // Expiry (b does not renew): woken at the lease's end.
  start = steady::now();
  ASSERT_TRUE(watcher.wait_for_change(seen, steady::now() + seconds(5)));
  EXPECT_FALSE(seen);
  EXPECT_LT(steady::now() - start, seconds(2));
  EXPECT_EQ(b.resign_and_report(), release_status::lease_expired);
}

// A timeout too long to add to the steady clock (hours::max(), milliseconds::max(), 300 years)
// means "wait until the change": it neither overflows into a past deadline (false at once) nor
// spins. Each wait is made while nobody leads; the leader is elected once the watcher listens.
TEST_F(Election, WaitForChangeWithAHugeTimeoutWaitsForTheChange) {
  using years = std::chrono::duration<long long, std::ratio<31556952>>;
  client other(options());
  election watcher(other, "huge-watch", quiet_waits());
  election a(*pool, "huge-watch", quiet_waits());
  const std::string notices = a.key() + ":leader";
  struct {
    const char* what;
    std::function<bool(std::optional<leader_info>&)> wait;
  } waits[] = {
      {"hours::max()", [&](auto& seen) { return watcher.wait_for_change_for(seen, std::chrono::hours::max()); }},
      {"milliseconds::max()",
       [&](auto& seen) { return watcher.wait_for_change_for(seen, std::chrono::milliseconds::max()); }},
      {"300 years", [&](auto& seen) { return watcher.wait_for_change_for(seen, years(300)); }},
      {"nanoseconds::max()",
       [&](auto& seen) { return watcher.wait_for_change_for(seen, std::chrono::nanoseconds::max()); }},
  };
  for (auto& w : waits) {
    SCOPED_TRACE(w.what);
    std::optional<leader_info> seen = watcher.leader();
    ASSERT_FALSE(seen);
    auto changed = std::async(std::launch::async, [&] { return w.wait(seen); });
    // Listening (the channel is subscribed, and stays so between waits: then the first read
    // sees the grant instead), or already returned: either way the grant comes after the call.
    ASSERT_TRUE(eventually(
        [&] { return subscribers(notices) == 1 || changed.wait_for(milliseconds(0)) == std::future_status::ready; }));
    ASSERT_TRUE(a.try_campaign(w.what));
    ASSERT_EQ(changed.wait_for(seconds(5)), std::future_status::ready) << "not woken by the grant";
    EXPECT_TRUE(changed.get()) << "returned false before the grant (the deadline overflowed)";
    ASSERT_TRUE(seen);
    EXPECT_EQ(seen->value, w.what);
    a.resign();
  }
}

TEST_F(Election, ACampaignThatTimesOutLeavesTheQueue) {
  election a(*pool, "leave", quiet_waits()), b(*pool, "leave", quiet_waits());
  ASSERT_TRUE(a.try_campaign("a"));
  EXPECT_FALSE(b.try_campaign_for("b", milliseconds(100)));
  EXPECT_EQ(queued(a), 0);
  EXPECT_EQ(admin->command({"HLEN", a.key() + ":evalues"})->integer, 0);
  a.resign();
  EXPECT_EQ(admin->command({"EXISTS", a.key()})->integer, 0) << "nobody was handed leadership";
}

// A hand-off notice that arrives after its campaign gave up (and left the queue) must not make
// a later campaign of the same object the leader: leadership is still another's.
TEST_F(Election, ANoticeLeftFromAnEarlierCampaignNeverMakesALaterOneLead) {
  client other(options());
  election a(*pool, "stale", quiet_waits()), b(other, "stale", quiet_waits());
  ASSERT_TRUE(a.try_campaign("a"));
  std::string token;  // b's token while it queues
  auto first = std::async(std::launch::async, [&] { return b.try_campaign_for("b", milliseconds(500)); });
  ASSERT_TRUE(eventually([&] {
    reply_ptr r = admin->command({"ZRANGE", a.key() + ":equeue", "0", "-1"});
    if (r->elements != 1) return false;
    token.assign(r->element[0]->str, r->element[0]->len);
    return true;
  }));
  ASSERT_FALSE(first.get());
  const std::string channel = a.key() + ":w:" + token.substr(0, token.rfind(':'));
  ASSERT_EQ(admin->command({"PUBLISH", channel, token})->integer, 1) << "b keeps its channel between campaigns";
  EXPECT_FALSE(b.try_campaign_for("b", milliseconds(300)));
  EXPECT_FALSE(b.owns_lock());
  const std::optional<leader_info> l = b.leader();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->owner, a.owner_id());
  a.resign();
  EXPECT_EQ(a.last_release(), release_status::released);
}

// Leadership granted to a campaign whose notice it never read before its deadline passed (here
// written by hand, as a resignation whose notice was lost would leave it): the campaign's last
// attempt finds leadership its own and reports it, rather than leave it on a token nobody uses
// until its lease runs out.
TEST_F(Election, AGrantThatReachedACampaignAtItsDeadlineIsKept) {
  client other(options());
  election a(*pool, "deadline", quiet_waits()), b(other, "deadline", quiet_waits());
  ASSERT_TRUE(a.try_campaign("a"));
  std::string token;
  auto got = std::async(std::launch::async, [&] { return b.try_campaign_for("b", milliseconds(400)); });
  ASSERT_TRUE(eventually([&] {
    reply_ptr r = admin->command({"ZRANGE", a.key() + ":equeue", "0", "-1"});
    if (r->elements != 1) return false;
    token.assign(r->element[0]->str, r->element[0]->len);
    return true;
  }));
  // a's leadership goes to b without a notice.
  admin->command({"HSET", a.key(), "@owner", token, "@value", "b"});
  ASSERT_TRUE(got.get()) << "the last attempt found leadership its own";
  EXPECT_TRUE(b.owns_lock());
  EXPECT_EQ(b.owner_id(), token);
  EXPECT_TRUE(b.still_held());
  EXPECT_EQ(a.resign_and_report(), release_status::lease_expired);
  b.resign();
  EXPECT_EQ(b.last_release(), release_status::released);
  EXPECT_EQ(admin->command({"EXISTS", a.key()})->integer, 0);
}

// Replies lost on the way back (the connection cut after the request; the server ran it).
struct lost_replies {
  explicit lost_replies(redislock_test::server_test& t) : proxy(t.server->port()), through(via(t, proxy)) {}
  static client_options via(redislock_test::server_test& t, redislock_test::tcp_proxy& p) {
    client_options o = t.options();
    o.connection.port = p.port();
    o.connection.connect_timeout = milliseconds(300);
    o.connection.command_timeout = milliseconds(300);
    return o;
  }
  redislock_test::tcp_proxy proxy;
  client through;
};

// A campaign that was granted leadership but never heard it, by an object that then goes: the
// failing call gives leadership back (owner-checked) instead of leaving the election to a
// token nobody uses for a whole lease (20 s).
TEST_F(Election, ACampaignWhoseReplyWasLostLeavesNoLeaderBehind) {
  lost_replies lost(*this);
  {
    election e(lost.through, "lost-campaign", quiet_waits());
    ASSERT_TRUE(e.try_campaign("warm-up"));  // the connection is made and the scripts are loaded
    e.resign();
    // A grant writes the leader's hash with HSET (counted in INFO commandstats from a script).
    const auto granted = [&] { return redislock_test::command_calls(*admin, "hset"); };
    const long long granted_before = granted();
    lost.proxy.cut_after_next_requests(1);
    EXPECT_ANY_THROW(e.try_campaign("lost"));
    EXPECT_TRUE(eventually([&] { return granted() > granted_before; })) << "the attempt was not granted";
    EXPECT_FALSE(e.owns_lock());
  }
  election other(*pool, "lost-campaign", quiet_waits());
  EXPECT_TRUE(other.try_campaign_for("other", seconds(2))) << "the unheard grant stays for its whole lease";
  if (other.owns_lock()) other.resign();
}

// A resignation whose reply was lost: reported as failed (resign_and_report() throws, resign()
// records it), never as released, and the local leadership is dropped either way.
TEST_F(Election, AResignationWhoseReplyWasLostIsReportedFailed) {
  lost_replies lost(*this);
  election e(lost.through, "lost-resign", quiet_waits());
  ASSERT_TRUE(e.try_campaign("warm-up"));  // the connection is made and the scripts are loaded:
  e.resign();                              // the cut request below is the resignation itself
  for (const bool reporting : {true, false}) {
    SCOPED_TRACE(reporting);
    ASSERT_TRUE(e.try_campaign("v"));
    lost.proxy.cut_after_next_requests(1);
    if (reporting) EXPECT_ANY_THROW(e.resign_and_report());
    else e.resign();
    EXPECT_EQ(e.last_release(), release_status::failed);
    EXPECT_FALSE(e.owns_lock());
    EXPECT_TRUE(eventually([&] {
      return admin->command({"EXISTS", e.key()})->integer == 0;
    })) << "the resignation ran on the server";
  }
}

TEST_F(Election, BadInputIsRefusedAndSendsNothing) {
  reset_stats();
  EXPECT_THROW(election(*pool, ""), invalid_argument);
  EXPECT_THROW(election(*pool, "x", lease(milliseconds(0))), invalid_argument);
  EXPECT_THROW(election(*pool, "x", lease(max_lease + milliseconds(1))), invalid_argument);
  lock_options fair;
  fair.fair = true;
  EXPECT_THROW(election(*pool, "x", fair), invalid_argument);
  election e(*pool, "x");
  EXPECT_THROW(e.extend(), lock_error) << "not leading";
  EXPECT_EQ(evalsha(), 0);
  EXPECT_EQ(redislock_test::key_dump(*admin), std::vector<std::string>{});
}

TEST_F(Election, AnotherKindOnTheSameNameIsWrongType) {
  mutex m(*pool, "kind");
  ASSERT_TRUE(m.try_lock());
  election e(*pool, "kind");
  EXPECT_THROW(e.try_campaign("v"), wrong_type_error);
  EXPECT_THROW(e.leader(), wrong_type_error);
  m.unlock();

  ASSERT_TRUE(e.try_campaign("v"));
  mutex m2(*pool, "kind");
  EXPECT_THROW(m2.try_lock(), wrong_type_error);
  reentrant_mutex r(*pool, "kind");
  EXPECT_THROW(r.try_lock(), wrong_type_error);
  shared_mutex s(*pool, "kind");
  EXPECT_THROW(s.try_lock(), wrong_type_error);
  EXPECT_THROW(s.try_lock_shared(), wrong_type_error);
  semaphore p(*pool, "kind", 2);
  EXPECT_THROW(p.try_acquire(), wrong_type_error);
  EXPECT_EQ(e.leader()->value, "v") << "untouched";
  e.resign();
  EXPECT_EQ(e.last_release(), release_status::released);

  reentrant_mutex r2(*pool, "kind2");
  ASSERT_TRUE(r2.try_lock());
  election e2(*pool, "kind2");
  EXPECT_THROW(e2.try_campaign("v"), wrong_type_error);
  r2.unlock();
}

// Every kind refused by every other kind (and by data that is no lock) says so by name: the
// lock, the kind that holds the name and the kind that asked, in what() and the accessors;
// server_message() stays the server's WRONGTYPE.
TEST_F(Election, EveryKindPairNamesTheLockAndBothKinds) {
  struct holder {
    const char* label;
    lock_kind kind;
    std::string type;                                               // foreign: the Redis type
    std::function<std::function<void()>(const std::string&)> take;  // returns the release
  };
  auto held_by = [](auto lock) { return [lock] { lock->unlock(); }; };
  const std::vector<holder> holders = {
      {"mutex", lock_kind::mutex, "",
       [&](const std::string& n) {
         auto m = std::make_shared<mutex>(*pool, n);
         EXPECT_TRUE(m->try_lock());
         return held_by(m);
       }},
      {"reentrant", lock_kind::reentrant, "",
       [&](const std::string& n) {
         auto r = std::make_shared<reentrant_mutex>(*pool, n);
         EXPECT_TRUE(r->try_lock());
         return held_by(r);
       }},
      {"shared", lock_kind::shared, "",
       [&](const std::string& n) {
         auto s = std::make_shared<shared_mutex>(*pool, n);
         EXPECT_TRUE(s->try_lock_shared());
         return std::function<void()>([s] { s->unlock_shared(); });
       }},
      {"semaphore", lock_kind::semaphore, "",
       [&](const std::string& n) {
         auto p = std::make_shared<semaphore>(*pool, n, 2);
         EXPECT_TRUE(p->try_acquire());
         return held_by(p);
       }},
      {"latch", lock_kind::latch, "",
       [&](const std::string& n) {
         auto l = std::make_shared<latch>(*pool, n, 1);
         return std::function<void()>([l] {});
       }},
      {"election", lock_kind::election, "",
       [&](const std::string& n) {
         auto e = std::make_shared<election>(*pool, n);
         EXPECT_TRUE(e->try_campaign("v"));
         return std::function<void()>([e] { e->resign(); });
       }},
      {"hash", lock_kind::foreign, "hash",
       [&](const std::string& n) {
         admin->command({"HSET", mutex(*pool, n).key(), "f", "v"});
         return std::function<void()>([] {});
       }},
      {"list", lock_kind::foreign, "list",
       [&](const std::string& n) {
         admin->command({"RPUSH", mutex(*pool, n).key(), "v"});
         return std::function<void()>([] {});
       }},
  };
  lock_options fair;
  fair.fair = true;
  struct asker {
    const char* noun;
    lock_kind kind;
    std::function<void(const std::string&)> call;
  };
  const std::vector<asker> askers = {
      {"mutex", lock_kind::mutex, [&](const std::string& n) { mutex(*pool, n).try_lock(); }},
      {"mutex", lock_kind::mutex, [&](const std::string& n) { mutex(*pool, n, fair).try_lock_for(milliseconds(50)); }},
      {"mutex", lock_kind::mutex, [&](const std::string& n) { mutex(*pool, n).lock(); }},
      {"reentrant mutex", lock_kind::reentrant, [&](const std::string& n) { reentrant_mutex(*pool, n).try_lock(); }},
      {"shared mutex", lock_kind::shared, [&](const std::string& n) { shared_mutex(*pool, n).try_lock(); }},
      {"shared mutex", lock_kind::shared, [&](const std::string& n) { shared_mutex(*pool, n).try_lock_shared(); }},
      {"semaphore", lock_kind::semaphore, [&](const std::string& n) { semaphore(*pool, n, 2).try_acquire(); }},
      {"semaphore", lock_kind::semaphore, [&](const std::string& n) { semaphore(*pool, n, 2).permits(); }},
      {"latch", lock_kind::latch, [&](const std::string& n) { latch(*pool, n, 1); }},
      {"election", lock_kind::election, [&](const std::string& n) { election(*pool, n).try_campaign("v"); }},
      {"election", lock_kind::election, [&](const std::string& n) { election(*pool, n).leader(); }},
  };
  int checked = 0;
  for (const holder& h : holders) {
    for (const asker& a : askers) {
      if (h.kind == a.kind) continue;
      const std::string name = std::string("clash-") + h.label + "-" + std::to_string(checked++);
      const std::function<void()> release = h.take(name);
      const std::string want = h.kind == lock_kind::foreign
                                   ? "'" + name + "' holds a Redis " + h.type + " that is not a redislock lock; a" +
                                         (a.kind == lock_kind::election ? "n " : " ") + a.noun + " cannot use it"
                                   : "'" + name + "' is a" + (h.kind == lock_kind::election ? "n " : " ") +
                                         detail::kind_noun(h.kind).data() + "; a" +
                                         (a.kind == lock_kind::election ? "n " : " ") + a.noun + " cannot use it";
      try {
        a.call(name);
        ADD_FAILURE() << "no wrong_type_error: " << want;
      } catch (const wrong_type_error& e) {
        EXPECT_EQ(std::string(e.what()), want);
        EXPECT_EQ(e.lock_name(), name);
        EXPECT_EQ(e.held_kind(), h.kind) << want;
        EXPECT_EQ(e.held_type(), h.type) << want;
        EXPECT_EQ(e.asked_kind(), a.kind) << want;
        EXPECT_NE(e.server_message().find("WRONGTYPE"), std::string::npos) << e.server_message();
      }
      release();
    }
  }
  EXPECT_EQ(checked, 77);
}

// inspect() shows the leader as the one holder; force_release() hands leadership to the
// waiting campaigner with a new term (woken by its notice), and the removed leader learns it.
TEST_F(Election, InspectShowsTheLeaderAndForceReleaseHandsLeadershipOn) {
  client other(options());
  election a(*pool, "inspected", quiet_waits()), b(other, "inspected", quiet_waits());
  ASSERT_TRUE(a.try_campaign("a"));
  const std::uint64_t a_term = a.term();
  auto got = std::async(std::launch::async, [&] { return b.try_campaign_for("b", seconds(20)); });
  ASSERT_TRUE(eventually([&] { return queued(a) == 1; }));
  const lock_info info = inspect(*pool, "inspected");
  EXPECT_EQ(info.kind, lock_kind::election);
  ASSERT_EQ(info.holders.size(), 1u);
  EXPECT_EQ(info.holders[0].owner, a.owner_id());
  EXPECT_EQ(info.holders[0].role, "leader");
  EXPECT_GT(info.holders[0].remaining, seconds(19));
  EXPECT_EQ(info.waiters, 1);
  EXPECT_EQ(info.last_fence, a_term);

  const lock_info removed = force_release(*pool, "inspected");
  EXPECT_EQ(removed.kind, lock_kind::election);
  ASSERT_EQ(removed.holders.size(), 1u);
  EXPECT_EQ(removed.holders[0].owner, a.owner_id());
  ASSERT_EQ(got.wait_for(seconds(2)), std::future_status::ready) << "not handed leadership";
  ASSERT_TRUE(got.get());
  const std::optional<leader_info> l = b.leader();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->value, "b");
  EXPECT_GT(l->term, a_term);
  EXPECT_FALSE(a.extend());
  EXPECT_TRUE(a.lost());
  EXPECT_EQ(a.resign_and_report(), release_status::lease_expired);

  // Nobody waiting: the key goes, and an observer is told.
  std::optional<leader_info> seen = a.leader();
  auto changed = std::async(std::launch::async, [&] { return a.wait_for_change(seen, steady::now() + seconds(20)); });
  ASSERT_TRUE(eventually([&] { return subscribers(a.key() + ":leader") == 1; }));
  EXPECT_EQ(force_release(*pool, "inspected").kind, lock_kind::election);
  ASSERT_EQ(changed.wait_for(seconds(2)), std::future_status::ready) << "the observer was not told";
  EXPECT_TRUE(changed.get());
  EXPECT_FALSE(seen);
  EXPECT_EQ(inspect(*pool, "inspected").kind, lock_kind::none);
  EXPECT_EQ(b.resign_and_report(), release_status::lease_expired);
}

// Two observers in one process share the client's subscription to the broadcast channel: one
// notice must wake both (a change published to everyone, within the wait's deadline, is never
// reported as "no change"). The lease (20 s) and recheck_interval (60 s) are past the deadline:
// only the notice can end the waits with true.
TEST_F(Election, OneNoticeWakesEveryObserverOfOneClient) {
  client other(options());
  election a(*pool, "observers", quiet_waits());
  election w1(other, "observers", quiet_waits()), w2(other, "observers", quiet_waits());
  ASSERT_TRUE(a.try_campaign("a"));
  std::optional<leader_info> seen1 = w1.leader(), seen2 = seen1;
  ASSERT_TRUE(seen1);
  const long long before = evalsha();
  auto watch = [&](election& w, std::optional<leader_info>& seen) {
    return std::async(std::launch::async, [&] { return w.wait_for_change(seen, steady::now() + seconds(3)); });
  };
  auto first = watch(w1, seen1), second = watch(w2, seen2);
  // Each wait reads the leader, subscribes (or joins the other's subscription at once), reads it
  // again, then sleeps: 3 or 4 reads in all.
  ASSERT_TRUE(eventually([&] { return evalsha() - before >= 3 && subscribers(a.key() + ":leader") == 1; }));
  a.resign();
  ASSERT_EQ(first.wait_for(seconds(5)), std::future_status::ready);
  ASSERT_EQ(second.wait_for(seconds(5)), std::future_status::ready);
  const bool first_saw = first.get(), second_saw = second.get();
  EXPECT_TRUE(first_saw) << "an observer missed the resignation";
  EXPECT_TRUE(second_saw) << "an observer missed the resignation";
}

// A campaigner that died while queued (its connections closed: no listener on its channel) is
// passed over by the hand-off; the value it queued with must go with its place, not stay in
// P{N}:evalues for as long as anyone keeps campaigning.
TEST_F(Election, AHandOffPassingOverADeadCampaignerDropsItsValue) {
  lost_replies dying(*this);
  client other(options());
  election a(*pool, "dead-value", quiet_waits()), b(other, "dead-value", quiet_waits());
  election c(dying.through, "dead-value", quiet_waits());
  ASSERT_TRUE(a.try_campaign("a"));
  auto c_run = std::async(std::launch::async, [&] {
    try {
      return c.try_campaign_for("c", seconds(20));
    } catch (const redislock::error&) {
      return false;
    }
  });
  ASSERT_TRUE(eventually([&] { return queued(a) == 1; }));
  const std::string c_token = admin->command({"ZRANGE", a.key() + ":equeue", "0", "0"})->element[0]->str;
  auto b_run = std::async(std::launch::async, [&] { return b.try_campaign_for("b", seconds(20)); });
  ASSERT_TRUE(eventually([&] { return queued(a) == 2; }));
  // c's process dies: its connections close, and it never comes back.
  dying.proxy.set_refusing(true);
  dying.proxy.cut_all();
  const std::string c_channel = a.key() + ":w:" + c_token.substr(0, c_token.rfind(':'));
  ASSERT_TRUE(eventually([&] { return subscribers(c_channel) == 0; }));
  ASSERT_EQ(c_run.wait_for(seconds(5)), std::future_status::ready);
  EXPECT_FALSE(c_run.get());
  a.resign();
  ASSERT_EQ(b_run.wait_for(seconds(5)), std::future_status::ready);
  ASSERT_TRUE(b_run.get());
  EXPECT_EQ(b.leader()->value, "b");
  EXPECT_EQ(queued(a), 0);
  EXPECT_EQ(admin->command({"HEXISTS", a.key() + ":evalues", c_token})->integer, 0)
      << "the dead campaigner's value stays behind";
  b.resign();
}

// Foreign data at the fencing counter (not an integer): a resignation with a campaigner queued
// cannot draw the next term; it must fail before it writes anything, as every script refusing
// bad data does: the campaigner keeps its place, and the error says what is wrong.
TEST_F(Election, AResignationThatCannotDrawATermWritesNothing) {
  client other(options());
  election a(*pool, "bad-fence", quiet_waits()), b(other, "bad-fence", quiet_waits());
  ASSERT_TRUE(a.try_campaign("a"));
  const std::string a_owner = a.owner_id();
  auto got = std::async(std::launch::async, [&] {
    try {
      return b.try_campaign_for("b", seconds(5));
    } catch (const redislock::error&) {
      return false;
    }
  });
  ASSERT_TRUE(eventually([&] { return queued(a) == 1; }));
  admin->command({"SET", a.key() + ":fence", "not-a-number"});
  std::string what;
  try {
    a.resign_and_report();
  } catch (const redislock::error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("fencing counter"), std::string::npos) << what;
  EXPECT_EQ(queued(a), 1) << "the queued campaigner lost its place";
  EXPECT_EQ(admin->command({"HLEN", a.key() + ":evalues"})->integer, 1);
  EXPECT_EQ(string_field(a.key(), "@owner"), a_owner) << "leadership is still a's";
  admin->command({"DEL", a.key() + ":fence"});
  force_release(*pool, "bad-fence");
  ASSERT_EQ(got.wait_for(seconds(6)), std::future_status::ready);
  EXPECT_TRUE(got.get());
  if (b.owns_lock()) b.resign();
}

}  // namespace

}  // namespace test_election
