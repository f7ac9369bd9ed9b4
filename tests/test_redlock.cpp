// Redlock over 3 and 5 real local servers: exclusion, majorities, masters killed (kill -9),
// stalled (SIGSTOP) and restarted empty, clean-up of failed attempts, renewal, fencing.
#include "eventually.hpp"
#include "lost_signal.hpp"
#include "process.hpp"
#include "redis_server.hpp"
#include "tcp_proxy.hpp"
#include "recording_observer.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace test_redlock {

using namespace redislock;
using redislock_test::child_process;
using redislock_test::redis_server;
using std::chrono::milliseconds;
using std::chrono::seconds;
using clk = std::chrono::steady_clock;

namespace {

/// N servers of its own (they may be killed, paused or restarted), a client and an admin
/// connection per server.
struct masters {
  explicit masters(std::size_t n, milliseconds command_timeout = seconds(5)) {
    for (std::size_t i = 0; i < n; ++i) {
      servers.push_back(std::make_unique<redis_server>());
      client_options o{servers.back()->options()};
      o.connection.command_timeout = command_timeout;
      clients.push_back(std::make_unique<client>(o));
      admins.push_back(std::make_unique<connection>(servers.back()->options()));
    }
  }
  std::vector<std::reference_wrapper<client>> refs() const {
    std::vector<std::reference_wrapper<client>> out;
    for (auto& c : clients) out.emplace_back(*c);
    return out;
  }
  std::string get(std::size_t i, const std::string& key) {
    reply_ptr r = admins[i]->command({"GET", key});
    return r->type == REDIS_REPLY_NIL ? std::string("(nil)") : std::string(r->str, r->len);
  }
  /// Waits until every master holds r's key (an acquisition returns with a majority; the
  /// others' answers may still be on the way), so a test can change keys without racing them.
  void settled(const redlock& r) {
    const std::string token = r.token();
    for (std::size_t i = 0; i < servers.size(); ++i)
      EXPECT_TRUE(redislock_test::eventually([&] { return get(i, r.key()) == token; })) << "master " << i;
  }
  long long dbsize(std::size_t i) { return admins[i]->command({"DBSIZE"})->integer; }
  long long pttl(std::size_t i, const std::string& key) { return admins[i]->command({"PTTL", key})->integer; }
  /// Waits until every master's PTTL of `key` satisfies `ok` (a round returns with a majority;
  /// the others' answers may still be on the way).
  template <class Ok>
  bool every_pttl(const std::string& key, Ok ok, milliseconds bound = seconds(5)) {
    for (std::size_t i = 0; i < servers.size(); ++i)
      if (!redislock_test::eventually([&] { return ok(pttl(i, key)); }, bound)) return false;
    return true;
  }
  void kill9(std::size_t i) {
    ::kill(servers[i]->pid(), SIGKILL);
    admins[i]->close();
  }
  std::vector<std::unique_ptr<redis_server>> servers;
  std::vector<std::unique_ptr<client>> clients;
  std::vector<std::unique_ptr<connection>> admins;
};

/// A client of master `server` that goes through `proxy` (which forwards to that server).
std::unique_ptr<client> client_via(const redis_server& server, const redislock_test::tcp_proxy& proxy) {
  client_options o{server.options()};
  o.connection.port = proxy.port();
  return std::make_unique<client>(o);
}

lock_options lease(milliseconds ms) {
  lock_options o;
  o.lease = ms;
  return o;
}

double seconds_since(clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); }

/// Waits (bounded) until `other` takes the lock on the keys `holder` left to expire; by then
/// `holder` must report the loss. Returns when `other` took it.
clk::time_point expect_loss_reported_before_takeover(const redlock& holder, redlock& other) {
  const auto t0 = clk::now();
  EXPECT_TRUE(redislock_test::eventually([&] { return other.try_lock(); })) << "the masters' keys never expired";
  const auto taken = clk::now();
  EXPECT_TRUE(holder.lost()) << "another client took the lock after " << seconds_since(t0)
                             << " s while the holder reports validity " << holder.validity().count() << " ms";
  EXPECT_EQ(holder.validity().count(), 0);
  return taken;
}

/// The first holder's release finds its lease gone; the one who took over releases cleanly.
void unlock_both(redlock& lost_holder, redlock& taker) {
  lost_holder.unlock();
  EXPECT_EQ(lost_holder.last_release(), release_status::lease_expired);
  taker.unlock();
  EXPECT_EQ(taker.last_release(), release_status::released);
}

}  // namespace

TEST(Redlock, BadInputIsRejectedWithTypedErrorsAndSendsNothing) {
  masters m(3);
  auto refs = m.refs();
  EXPECT_THROW(redlock({}, "x"), invalid_argument);
  EXPECT_THROW(redlock({*m.clients[0], *m.clients[1], *m.clients[0]}, "x"), invalid_argument);
  EXPECT_THROW(redlock(refs, ""), invalid_argument);
  EXPECT_THROW(redlock(refs, "x", lease(milliseconds(0))), invalid_argument);
  EXPECT_THROW(redlock(refs, "}x"), invalid_argument);
  lock_options fair;
  fair.fair = true;
  EXPECT_THROW(redlock(refs, "x", fair), invalid_argument);
  redlock_options drift;
  drift.drift_factor = 1.5;
  EXPECT_THROW(redlock(refs, "x", {}, drift), invalid_argument);
  redlock_options slow;
  slow.instance_timeout = milliseconds(100);
  EXPECT_THROW(redlock(refs, "x", lease(milliseconds(100)), slow), invalid_argument);  // no validity left
  redlock r(refs, "x");
  EXPECT_THROW(r.extend(), lock_error);
  EXPECT_THROW(r.fencing_token(), lock_error);
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::not_held);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(m.dbsize(i), 0);
}

class RedlockN : public ::testing::TestWithParam<std::size_t> {};
INSTANTIATE_TEST_SUITE_P(Masters, RedlockN, ::testing::Values(3, 5));

TEST_P(RedlockN, HoldsItsKeyOnEveryMasterAndReleasesEverywhere) {
  const std::size_t n = GetParam();
  masters m(n);
  redlock r(m.refs(), "basic", lease(seconds(10)));
  EXPECT_EQ(r.quorum(), n / 2 + 1);
  {
    std::unique_lock<redlock> guard(r, std::defer_lock);
    ASSERT_TRUE(guard.try_lock_for(seconds(5)));
    EXPECT_EQ(r.token().size(), 32u);
    m.settled(r);
    EXPECT_GT(r.validity(), milliseconds(0));
    EXPECT_LE(r.validity(), seconds(10) - r.drift());
    EXPECT_TRUE(r.still_held());
  }
  EXPECT_EQ(r.last_release(), release_status::released);
  EXPECT_EQ(r.validity(), milliseconds(0));
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(m.get(i, r.key()), "(nil)");
  // A fresh random token per acquisition.
  r.lock();
  const std::string first = r.token();
  r.unlock();
  r.lock();
  EXPECT_NE(r.token(), first);
  r.unlock();
}

TEST_P(RedlockN, ThreadsWithTheirOwnObjectsNeverOverlap) {
  const std::size_t n = GetParam();
  masters m(n);
  std::atomic<int> inside{0}, overlaps{0};
  long counter = 0;  // guarded by the redlock only
  constexpr int threads = 4, rounds = 20;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&] {
      lock_options o;
      o.retry_max = milliseconds(20);
      redlock r(m.refs(), "exclusion", o);
      for (int i = 0; i < rounds; ++i) {
        std::lock_guard<redlock> guard(r);
        if (inside.fetch_add(1) != 0) ++overlaps;
        ++counter;
        inside.fetch_sub(1);
      }
    });
  for (auto& w : workers) w.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter, threads * rounds);
}

TEST(Redlock, ProcessesNeverOverlap) {
  masters m(3);
  std::string ports;
  for (auto& s : m.servers) ports += (ports.empty() ? "" : ",") + std::to_string(s->port());
  std::vector<child_process> children;
  for (int i = 0; i < 3; ++i)
    children.emplace_back(
        std::vector<std::string>{REDISLOCK_TEST_WORKER, "count-redlock", ports, "procs", "procs:counter", "20"});
  for (auto& c : children) EXPECT_EQ(c.wait_for(seconds(60)), 0) << "worker saw an overlap or failed";
  EXPECT_EQ(m.get(0, "procs:counter"), "60");
}

// extend() from other threads while the holder releases and takes the lock again, over and
// over: an extend that passed its "held" check just before a release dropped the hold must
// return false or throw lock_error, never send a round for the dropped (empty) hold.
TEST(Redlock, AnExtendRacingTheReleaseOfTheSameObjectSendsNothingForTheDroppedHold) {
  masters m(1);
  redlock r(m.refs(), "racing", lease(seconds(5)), redlock_options{milliseconds(500)});
  std::atomic<bool> stop{false};
  std::atomic<long> extends{0};
  std::vector<std::thread> extenders;
  for (int t = 0; t < 3; ++t)
    extenders.emplace_back([&] {
      while (!stop.load()) {
        try {
          (void)r.extend();
          ++extends;
        } catch (const error&) {  // not held at the moment (lock_error), or a slow round
        }
      }
    });
  const auto until = clk::now() + milliseconds(1500);
  long cycles = 0;
  while (clk::now() < until) {
    if (!r.try_lock_for(seconds(5))) {
      ADD_FAILURE() << "never acquired";
      break;  // the extenders must still be joined
    }
    r.unlock();
    ++cycles;
  }
  stop = true;
  for (auto& t : extenders) t.join();
  EXPECT_GT(cycles, 0);
  EXPECT_EQ(m.dbsize(0), 0) << m.get(0, r.key());
}

TEST(Redlock, AnotherObjectIsRefusedWhileHeld) {
  masters m(3);
  redlock a(m.refs(), "busy"), b(m.refs(), "busy");
  ASSERT_TRUE(a.try_lock());
  m.settled(a);
  EXPECT_FALSE(b.try_lock());
  const auto t0 = clk::now();
  EXPECT_FALSE(b.try_lock_for(milliseconds(150)));
  EXPECT_LT(seconds_since(t0), 5.0);
  m.settled(a);  // b's failed attempts left a's keys alone
  a.unlock();
  EXPECT_TRUE(b.try_lock());
  b.unlock();
}

// A name that became another kind's while held: the refusal names the lock, the kind that
// holds it on the masters and the redlock.
TEST(Redlock, AnotherKindOnTheNameIsNamedInTheError) {
  masters m(3);
  redlock r(m.refs(), "kinds");
  ASSERT_TRUE(r.try_lock());
  m.settled(r);
  std::vector<std::unique_ptr<reentrant_mutex>> others;  // held on every master until the end
  for (std::size_t i = 0; i < 3; ++i) {
    m.admins[i]->command({"DEL", r.key()});
    others.push_back(std::make_unique<reentrant_mutex>(*m.clients[i], "kinds"));
    ASSERT_TRUE(others.back()->try_lock());
  }
  try {
    r.extend();
    ADD_FAILURE() << "no wrong_type_error";
  } catch (const wrong_type_error& e) {
    EXPECT_STREQ(e.what(), "'kinds' is a reentrant mutex; a redlock cannot use it");
    EXPECT_EQ(e.lock_name(), "kinds");
    EXPECT_EQ(e.held_kind(), lock_kind::reentrant);
    EXPECT_EQ(e.asked_kind(), lock_kind::mutex);
  }
}

TEST(Redlock, AMinorityAcquisitionIsDeletedOnEveryMaster) {
  masters m(3);
  redlock r(m.refs(), "minority");
  // Another holder owns 2 of the 3 keys: we can only set the third.
  m.admins[0]->command({"SET", r.key(), "other", "PX", "60000"});
  m.admins[1]->command({"SET", r.key(), "other", "PX", "60000"});
  EXPECT_FALSE(r.try_lock());
  EXPECT_EQ(m.get(0, r.key()), "other");
  EXPECT_EQ(m.get(1, r.key()), "other");
  EXPECT_EQ(m.get(2, r.key()), "(nil)");  // ours was set, then deleted before try_lock returned
  // The same with one "held" answer and a dead master: the answers decide against us.
  m.kill9(0);
  EXPECT_FALSE(r.try_lock());
  EXPECT_FALSE(r.owns_lock());
  EXPECT_EQ(m.get(2, r.key()), "(nil)");
}

TEST(Redlock, ReleaseWithAStaleTokenDoesNothing) {
  masters m(3);
  redlock r(m.refs(), "stale", lease(seconds(10)));
  r.lock();
  const std::string token = r.token();
  // Our lease "ran out" and someone else holds it on every master now.
  for (std::size_t i = 0; i < 3; ++i) m.admins[i]->command({"SET", r.key(), "next-holder", "PX", "60000"});
  EXPECT_FALSE(r.extend());
  EXPECT_TRUE(r.lost());
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::lease_expired);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(m.get(i, r.key()), "next-holder");
  // The delete script itself, called with the old token.
  EXPECT_EQ(detail::as_integer(*detail::redlock_scripts::release_owned().run(*m.admins[0], {r.key()}, {token})), 0);
  EXPECT_EQ(m.get(0, r.key()), "next-holder");
}

TEST(Redlock, OneKilledMasterOfThreeStillWorks) {
  masters m(3);
  redlock r(m.refs(), "one-dead", lease(seconds(10)));
  m.kill9(2);
  ASSERT_TRUE(r.try_lock_for(seconds(5)));
  EXPECT_EQ(m.get(0, r.key()), r.token());
  EXPECT_EQ(m.get(1, r.key()), r.token());
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::released);
}

TEST(Redlock, TwoKilledMastersOfThreeFailCleanlyWithinABound) {
  masters m(3);
  redlock r(m.refs(), "two-dead", lease(seconds(10)));
  r.lock();  // held, then the masters die
  m.kill9(0);
  m.kill9(1);
  auto t0 = clk::now();
  EXPECT_THROW(r.extend(), connection_error);
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::failed);
  EXPECT_THROW(r.try_lock(), connection_error);
  EXPECT_THROW(r.lock(), connection_error);
  EXPECT_THROW(r.try_lock_for(seconds(30)), connection_error);
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_FALSE(r.owns_lock());
  EXPECT_EQ(m.get(2, r.key()), "(nil)");  // the one survivor keeps nothing of the failed attempts
}

TEST(Redlock, AStalledMasterCostsAtMostAboutOneInstanceTimeout) {
  masters m(3, seconds(10));  // the clients' own timeout: far longer than the attempt may take
  redlock_options ro;
  ro.instance_timeout = milliseconds(50);
  redlock r(m.refs(), "stalled", lease(seconds(10)), ro);
  r.lock();  // connections made (and the eviction check done) while all are up
  r.unlock();
  m.servers[0]->pause();
  auto t0 = clk::now();
  ASSERT_TRUE(r.try_lock());
  const double took = seconds_since(t0);
  t0 = clk::now();
  r.unlock();
  const double release_took = seconds_since(t0);
  m.servers[0]->resume();
  EXPECT_EQ(r.last_release(), release_status::released);
  EXPECT_LT(took, 2.0) << "the stalled master delayed the attempt by its client's 10 s timeout";
  EXPECT_LT(release_took, 2.0);
  // Once it is back, the stalled master is used again.
  ASSERT_TRUE(r.try_lock_for(seconds(10)));
  r.unlock();
}

// A master slower than the per-instance timeout (every reply delayed 300 ms by a proxy): the
// lock keeps working on the other two, and the slow master's thread does not pile up one
// command per missed round (they are skipped once stale), so destroying the lock is quick.
TEST(Redlock, ASlowMasterDoesNotAccumulateWork) {
  masters m(3);
  redislock_test::tcp_proxy proxy(m.servers[0]->port());
  client_options via_proxy{m.servers[0]->options()};
  via_proxy.connection.port = proxy.port();
  client slow(via_proxy);
  redlock_options ro;
  ro.instance_timeout = milliseconds(50);
  auto r = std::make_unique<redlock>(std::vector<std::reference_wrapper<client>>{slow, *m.clients[1], *m.clients[2]},
                                     "slow", lease(seconds(10)), ro);
  r->lock();  // connections made while fast
  r->unlock();
  proxy.set_delay(milliseconds(300));
  const auto t0 = clk::now();
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(r->try_lock());
    r->unlock();
    ASSERT_EQ(r->last_release(), release_status::released);
  }
  EXPECT_LT(seconds_since(t0), 10.0);
  const auto t1 = clk::now();
  r.reset();  // waits for the slow master's thread to finish what is queued
  EXPECT_LT(seconds_since(t1), 1.0) << "the slow master's thread replayed every missed round";
}

// A hold on a bare majority (a foreign key refused us on master 2) whose second master stalls:
// the answers cannot tell whether a majority still holds our key, and it does (master 1 keeps
// it). still_held() must not say "no" and the release must not say lease_expired ("your lease
// ran out, someone else may hold it"): the Redlock torture scenario counted that as a lease lost
// while it was certainly valid. Both are "cannot tell": a timeout_error and failed.
TEST(Redlock, AStalledMasterOfABareMajorityIsUnknownNotLost) {
  masters m(3);
  m.admins[2]->command({"SET", "redislock:{bare}", "other", "PX", "60000"});
  redlock r(m.refs(), "bare", lease(seconds(10)));
  ASSERT_TRUE(r.try_lock_for(seconds(5)));
  const std::string token = r.token();
  for (std::size_t i = 0; i < 2; ++i)
    ASSERT_TRUE(redislock_test::eventually([&] { return m.get(i, r.key()) == token; })) << "master " << i;
  m.servers[1]->pause();
  EXPECT_THROW(r.still_held(), timeout_error);
  r.unlock();
  m.servers[1]->resume();
  EXPECT_EQ(r.last_release(), release_status::failed);
  EXPECT_FALSE(r.owns_lock());
  EXPECT_EQ(m.get(0, r.key()), "(nil)");
  // (Master 1 held our key until it stopped; the delete queued for it runs once it resumes.)
  EXPECT_EQ(m.get(2, r.key()), "other");
}

TEST(Redlock, AMasterRestartedEmptyDoesNotHandOutTheLock) {
  masters m(3);
  redlock a(m.refs(), "restart", lease(seconds(10))), b(m.refs(), "restart", lease(seconds(10)));
  a.lock();
  m.settled(a);
  m.servers[0]->restart();     // comes back without our key
  EXPECT_FALSE(b.try_lock());  // gets only the restarted master: a minority
  EXPECT_EQ(m.get(1, a.key()), a.token());
  a.unlock();
  EXPECT_EQ(a.last_release(), release_status::released);  // two of three confirmed
  ASSERT_TRUE(b.try_lock_for(seconds(5)));
  b.unlock();
}

TEST(Redlock, AutoRenewKeepsItPastTheLease) {
  masters m(3);
  lock_options o = lease(milliseconds(600));
  o.auto_renew = true;
  redlock r(m.refs(), "renewed", o);
  r.lock();
  const auto until = clk::now() + milliseconds(1800);  // three leases
  while (clk::now() < until) {
    ASSERT_GT(r.validity(), milliseconds(0));
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(r.still_held());
  EXPECT_FALSE(r.lost());
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::released);
}

TEST(Redlock, AutoRenewReportsALostMajority) {
  masters m(3);
  std::promise<std::string> lost;
  lock_options o = lease(milliseconds(600));
  o.auto_renew = true;
  o.on_lost = [&](const std::string& name) { lost.set_value(name); };
  redlock r(m.refs(), "renew-lost", o);
  r.lock();
  m.settled(r);
  m.admins[0]->command({"DEL", r.key()});
  m.admins[1]->command({"DEL", r.key()});
  auto seen = lost.get_future();
  ASSERT_EQ(seen.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_EQ(seen.get(), "renew-lost");
  EXPECT_TRUE(r.lost());
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::lease_expired);
  EXPECT_EQ(m.get(2, r.key()), "(nil)");  // the remaining key was deleted too
}

// Issue 39, item 5: a user's unlock() racing an on_lost callback that unlocks too (on the
// renewal thread) once joined the renewal thread while that thread detached itself
// (std::terminate), and let both releases run (the second on a dropped hold). Each round loses
// the lease for certain (the keys are deleted on every master, so the next renewal finds none),
// waits until on_lost runs, then lets both unlocks go at once. Every wait is bounded.
TEST(Redlock, AnUnlockRacingAnOnLostThatUnlocksNeverTerminates) {
  masters m(3);
  struct meeting {
    std::mutex mu;
    std::condition_variable cv;
    bool entered = false;
    std::atomic<bool> go{false};
    redlock* lock = nullptr;
  } meet;
  lock_options o = lease(milliseconds(300));
  o.auto_renew = true;
  o.on_lost = [&meet](const std::string&) {
    {
      std::lock_guard<std::mutex> g(meet.mu);
      meet.entered = true;
    }
    meet.cv.notify_all();
    const auto give_up = clk::now() + seconds(10);
    while (!meet.go.load() && clk::now() < give_up) {
    }
    meet.lock->unlock();
  };
  redlock_options patient;  // a loaded machine may answer a round slowly: the release then fails, that is all
  patient.instance_timeout = milliseconds(100);
  redlock r(m.refs(), "unlock-race", o, patient);
  meet.lock = &r;
  constexpr int rounds = 40;
  for (int i = 0; i < rounds; ++i) {
    {
      std::lock_guard<std::mutex> g(meet.mu);
      meet.entered = false;
      meet.go = false;
    }
    ASSERT_TRUE(r.try_lock_for(seconds(5))) << "round " << i;
    m.settled(r);
    for (std::size_t s = 0; s < 3; ++s) m.admins[s]->command({"DEL", r.key()});
    {
      std::unique_lock<std::mutex> g(meet.mu);
      ASSERT_TRUE(meet.cv.wait_for(g, seconds(10), [&] { return meet.entered; })) << "round " << i << ": no on_lost";
    }
    meet.go = true;
    r.unlock();  // returns once the hold is released, whichever unlock released it
    // One of the two released the hold (found it gone, or too few answered in time).
    EXPECT_NE(r.last_release(), release_status::released) << "round " << i;
    EXPECT_FALSE(r.owns_lock()) << "round " << i;
    EXPECT_TRUE(r.lost());
  }
  // The last on_lost may still be running: the next acquisition and the destructor wait for it.
  ASSERT_TRUE(r.try_lock_for(seconds(5)));
  r.unlock();
  EXPECT_FALSE(r.owns_lock());
  for (std::size_t s = 0; s < 3; ++s)
    EXPECT_TRUE(redislock_test::eventually([&] { return m.dbsize(s) == 0; })) << "master " << s;
}

// on_lost may take the lock again, on the renewal thread: the new hold gets a renewal thread
// of its own while the old one is still in the callback (it cannot join itself); unlock() joins
// both.
TEST(Redlock, AnOnLostThatLocksAgainGetsARenewalOfItsOwn) {
  masters m(3);
  std::promise<bool> relocked;
  std::atomic<int> calls{0};
  redlock* self = nullptr;
  lock_options o = lease(milliseconds(300));
  o.auto_renew = true;
  o.on_lost = [&](const std::string&) {
    if (calls.fetch_add(1) != 0) return;
    self->unlock();
    relocked.set_value(self->try_lock_for(seconds(5)));
  };
  redlock r(m.refs(), "relock", o);
  self = &r;
  r.lock();
  m.settled(r);
  for (std::size_t s = 0; s < 3; ++s) m.admins[s]->command({"DEL", r.key()});
  auto again = relocked.get_future();
  ASSERT_EQ(again.wait_for(seconds(10)), std::future_status::ready);
  ASSERT_TRUE(again.get());
  ASSERT_TRUE(r.owns_lock());
  const auto first = r.lease_confirmed_until();
  ASSERT_TRUE(first.has_value());
  // The new hold's renewal thread renews it (its confirmed end moves on).
  EXPECT_TRUE(redislock_test::eventually([&] { return r.lease_confirmed_until().value_or(*first) > *first; }))
      << "the new hold was not renewed";
  EXPECT_FALSE(r.lost());
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::released);
  EXPECT_EQ(calls.load(), 1);
}

TEST(Redlock, ExtendNeedsAMajority) {
  masters m(3);
  redlock r(m.refs(), "extend", lease(seconds(5)));
  r.lock();
  m.settled(r);
  EXPECT_TRUE(r.extend(seconds(20)));
  EXPECT_GT(r.validity(), seconds(10));
  // Rounds return with a majority; wait for the last master's answers before changing keys.
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(redislock_test::eventually([&] { return m.admins[i]->command({"PTTL", r.key()})->integer > 10000; }));
  m.admins[0]->command({"DEL", r.key()});
  EXPECT_TRUE(r.extend());  // two of three
  m.admins[1]->command({"DEL", r.key()});
  EXPECT_FALSE(r.extend());  // one of three
  EXPECT_TRUE(r.lost());
  EXPECT_EQ(r.validity().count(), 0);  // no majority holds our key
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::lease_expired);
}

// A shorter extend shortens the masters' keys: the validity follows at once, and once it has
// run out the hold is lost by the clock alone (no round needed), before another client can
// take the lock on the expired keys.
TEST(Redlock, AShorterExtendShortensTheValidity) {
  masters m(3);
  redlock a(m.refs(), "shorter", lease(seconds(1))), b(m.refs(), "shorter", lease(seconds(1)));
  a.lock();
  m.settled(a);
  ASSERT_TRUE(a.extend(seconds(10)));
  EXPECT_GT(a.validity().count(), 9000);
  ASSERT_TRUE(m.every_pttl(a.key(), [](long long p) { return p > 5000; }));
  ASSERT_TRUE(a.extend(milliseconds(300)));
  EXPECT_LE(a.validity(), milliseconds(300) - a.drift(milliseconds(300)));
  expect_loss_reported_before_takeover(a, b);
  EXPECT_THROW(a.fencing_token(), lock_error);
  unlock_both(a, b);
}

// Lease-setting rounds run one at a time, but a round that timed out on a master may still
// reach it later: its connection is dropped while the command waits in a stalled network path,
// and the next round goes out on a new connection. Here a short extend is held in two masters'
// paths, a longer one is then confirmed by all three, and the short one arrives last. A late
// round never undoes a later one: the masters keep the longer lease, so they never hold the key
// for less than the client's validity, and nobody else can take the lock meanwhile.
TEST(Redlock, ALateExtendRoundNeverUndoesALaterOne) {
  masters m(3);
  redislock_test::tcp_proxy p0(m.servers[0]->port()), p1(m.servers[1]->port());
  auto c0 = client_via(*m.servers[0], p0), c1 = client_via(*m.servers[1], p1);
  const redlock_options patient{milliseconds(300)};  // rounds confirmed on a loaded machine too
  redlock a(std::vector<std::reference_wrapper<client>>{*c0, *c1, *m.clients[2]}, "late-round", lease(seconds(3)),
            patient);
  redlock b(m.refs(), "late-round", lease(seconds(1)), patient);
  a.lock();
  m.settled(a);
  const milliseconds short_lease(1000);
  p0.hold_open();  // the connections open now: what they carry next waits in the proxies
  p1.hold_open();
  EXPECT_THROW(a.extend(short_lease), connection_error) << "only master 2 can answer";
  ASSERT_FALSE(a.lost());
  ASSERT_TRUE(a.extend(seconds(5))) << "the timed-out connections are replaced by new ones, not held";
  ASSERT_TRUE(m.every_pttl(a.key(), [](long long p) { return p > 4000; }));  // every master ran it
  p0.release_held();
  p1.release_held();
  ASSERT_TRUE(redislock_test::eventually([&] { return p0.held_open() == 0 && p1.held_open() == 0; }))
      << "the held short round never reached masters 0 and 1";
  long long pttl[3];  // before the validity, which can only have shrunk since
  for (std::size_t i = 0; i < 3; ++i) pttl[i] = m.pttl(i, a.key());
  const milliseconds v = a.validity();
  EXPECT_GT(v.count(), 4000);
  std::size_t not_below = 0;
  for (long long p : pttl) not_below += p >= v.count() ? 1 : 0;
  EXPECT_GE(not_below, a.quorum()) << "client validity " << v.count() << " ms, masters' PTTLs " << pttl[0] << ", "
                                   << pttl[1] << ", " << pttl[2] << " ms";
  // Whatever the late round may have set runs out; another client must not find a majority free
  // while `a` still counts on its validity.
  std::this_thread::sleep_for(short_lease + milliseconds(100));
  const bool taken = b.try_lock();
  EXPECT_FALSE(taken && a.validity().count() > 0 && !a.lost())
      << "two holders: b took the lock while a reports validity " << a.validity().count() << " ms";
  if (taken) b.unlock();
  a.unlock();
  EXPECT_EQ(a.last_release(), release_status::released);
}

// What a holder keeps per master for the commands without scripts (detail/redlock_scripts.hpp,
// master_rounds): every value of ours that may be there, or no more rounds there.
TEST(Redlock, TheValuesALuaFreeMasterMayHoldAreKeptCompleteOrItGetsNoMoreRounds) {
  using detail::redlock_scripts::master_rounds;
  master_rounds unanswered_acquire;
  unanswered_acquire.acquire_sent();
  unanswered_acquire.unanswered(1);
  unanswered_acquire.none_there();  // its SET NX may still land, and round 1 after it
  EXPECT_EQ(unanswered_acquire.candidates, (std::vector<std::uint64_t>{0, 1}));
  master_rounds m;
  m.acquire_sent();
  m.applied(0);
  for (std::uint64_t r = 1; r < master_rounds::max_candidates; ++r) {
    EXPECT_TRUE(m.can_send_round());
    m.unanswered(r);
  }
  EXPECT_EQ(m.candidates.size(), master_rounds::max_candidates);
  EXPECT_FALSE(m.can_send_round()) << "a round would name more than max_candidates values";
  m.unanswered(master_rounds::max_candidates);  // the scripted path sent one more, unanswered
  EXPECT_FALSE(m.complete);
  m.applied(9);
  EXPECT_TRUE(m.can_send_round());
  EXPECT_EQ(m.candidates, (std::vector<std::uint64_t>{9}));
  m.none_there();  // the acquisition was answered: nothing of ours can come back
  EXPECT_TRUE(m.candidates.empty());
  EXPECT_EQ(detail::redlock_scripts::value_of("t", 0), "t");
  EXPECT_EQ(detail::redlock_scripts::value_of("t", 12), "t#12");
  EXPECT_TRUE(detail::redlock_scripts::ours("t#12", "t"));
  EXPECT_TRUE(detail::redlock_scripts::ours("t", "t"));
  EXPECT_FALSE(detail::redlock_scripts::ours("tx", "t"));
  EXPECT_FALSE(detail::redlock_scripts::ours("", "t"));
}

// After an extend a master's key holds "<token>#<round>": every script reads its owner part
// (check, fencing, release), inspect() reports the token as the holder, force_release() removes it.
TEST(Redlock, AKeyWithARoundNumberIsStillTheHoldersEverywhere) {
  masters m(3);
  redlock r(m.refs(), "numbered", lease(seconds(5)), redlock_options{seconds(1)});
  r.lock();
  ASSERT_TRUE(r.extend(seconds(6)));
  ASSERT_TRUE(r.extend());
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(redislock_test::eventually([&] { return m.get(i, r.key()) == r.token() + "#2"; })) << "master " << i;
  EXPECT_TRUE(r.still_held());
  EXPECT_GT(r.fencing_token(), 0u);
  const lock_info info = inspect(*m.clients[0], "numbered");
  EXPECT_EQ(info.kind, lock_kind::mutex);
  ASSERT_EQ(info.holders.size(), 1u);
  EXPECT_EQ(info.holders[0].owner, r.token());
  EXPECT_EQ(info.holders[0].object_id(), r.token());
  EXPECT_GT(info.holders[0].remaining.count(), 4000);
  EXPECT_EQ(force_release(*m.clients[0], "numbered").holders.at(0).owner, r.token());
  EXPECT_EQ(m.get(0, r.key()), "(nil)");
  EXPECT_TRUE(r.extend()) << "two of three";
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::released);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(m.get(i, r.key()), "(nil)");
}

// A shorter extend that reaches only a minority (two masters stalled) may still have shortened
// the keys wherever it ran, the stalled masters included (they run it when they resume): the
// validity drops to what that round may have set, and never grows from an unconfirmed round.
TEST(Redlock, AnUnconfirmedExtendNeverLengthensAndMayShortenTheValidity) {
  masters m(3);
  redlock a(m.refs(), "unconfirmed", lease(seconds(1)));
  a.lock();
  m.settled(a);
  ASSERT_TRUE(a.extend(seconds(10)));
  ASSERT_TRUE(m.every_pttl(a.key(), [](long long p) { return p > 5000; }));
  const milliseconds before = a.validity();
  m.servers[1]->pause();
  m.servers[2]->pause();
  EXPECT_THROW(a.extend(seconds(20)), connection_error);
  EXPECT_LE(a.validity().count(), before.count());  // an unconfirmed longer extend adds nothing
  EXPECT_THROW(a.extend(milliseconds(300)), connection_error);
  const milliseconds after = a.validity();
  m.servers[1]->resume();
  m.servers[2]->resume();
  EXPECT_LE(after.count(), 300) << "master 0 (and the stalled ones, once resumed) run on 300 ms";
  EXPECT_TRUE(redislock_test::eventually([&] { return a.lost(); }, seconds(2)));
  EXPECT_EQ(a.validity().count(), 0);
  a.unlock();
}

// drift = lease x 1 % + 2 ms of the lease each round sends, not of the configured lease.
TEST(Redlock, ExtendSubtractsTheDriftOfTheLeaseItSends) {
  masters m(3);
  redlock r(m.refs(), "drift", lease(seconds(1)));
  EXPECT_EQ(r.drift(), milliseconds(12));
  EXPECT_EQ(r.drift(seconds(60)), milliseconds(602));
  r.lock();
  EXPECT_LE(r.validity().count(), 1000 - 12);
  ASSERT_TRUE(r.extend(seconds(60)));
  const milliseconds v = r.validity();
  EXPECT_LE(v.count(), 60000 - 602);
  EXPECT_GT(v.count(), 55000);
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::released);
}

// With auto_renew the renewal thread renews to the lease of the last extend(): after a longer
// one the masters' keys keep that lease at the renewer's next turn (round 2, a third of it on),
// and so does the validity.
TEST(Redlock, AutoRenewAfterALongerExtendRenewsWithThatLease) {
  masters m(3);
  lock_options o = lease(seconds(1));
  o.auto_renew = true;
  redlock r(m.refs(), "renew-longer", o);
  r.lock();
  m.settled(r);
  ASSERT_TRUE(r.extend(milliseconds(2400)));  // round 1 (unless the renewer's came first)
  const std::string token = r.token();
  ASSERT_TRUE(redislock_test::eventually(
      [&] {
        for (std::size_t i = 0; i < 3; ++i)
          if (m.get(i, r.key()) != token + "#2") return false;
        return true;
      },
      seconds(5)))
      << "the renewer did not run";
  ASSERT_TRUE(m.every_pttl(r.key(), [](long long p) { return p > 1500; })) << "renewed to 1 s, not 2.4 s";
  EXPECT_GT(r.validity().count(), 1500);
  EXPECT_FALSE(r.lost());
  EXPECT_TRUE(r.still_held());
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::released);
}

// A shorter extend() after a longer one: the renewer, asleep until a third of the longer lease
// after its last round, must renew a third of the shorter lease on, before the validity that
// extend() left runs out (1 s), not 2 s after its last round.
TEST(Redlock, AutoRenewAfterAShorterExtendRenewsBeforeItsValidityEnds) {
  masters m(3);
  lock_options o = lease(seconds(1));
  o.auto_renew = true;
  redlock r(m.refs(), "renew-shorter", o);
  r.lock();
  m.settled(r);
  const std::string token = r.token();
  auto every_master_at = [&](int round) {
    return [&, round] {
      for (std::size_t i = 0; i < 3; ++i)
        if (m.get(i, r.key()) != token + "#" + std::to_string(round)) return false;
      return true;
    };
  };
  ASSERT_TRUE(r.extend(seconds(6)));  // round 1 (unless the renewer's came first)
  ASSERT_TRUE(redislock_test::eventually(every_master_at(2), seconds(5))) << "the renewer did not run";
  ASSERT_TRUE(r.extend(seconds(1)));  // round 3; the renewer's next turn was 2 s after round 2
  EXPECT_TRUE(redislock_test::eventually(every_master_at(4), milliseconds(1500)))
      << "no renewal within the 1 s validity of the shorter extend";
  EXPECT_FALSE(r.lost());
  r.unlock();
}

// The holder is cut from two of three masters (a black hole: nothing answers) after a longer
// extend, once the renewer has renewed with it. Another client takes the lock when those keys
// expire; by then the holder must report the loss (lost() by its clock, on_lost from the
// renewer).
TEST(Redlock, AutoRenewReportsAPartitionBeforeTheKeysCanExpireAfterALongerExtend) {
  masters m(3);
  redislock_test::tcp_proxy p0(m.servers[0]->port()), p1(m.servers[1]->port());
  auto c0 = client_via(*m.servers[0], p0), c1 = client_via(*m.servers[1], p1);
  redislock_test::lost_signal signal;
  redlock a(std::vector<std::reference_wrapper<client>>{*c0, *c1, *m.clients[2]}, "partition",
            signal.options(seconds(1)));
  redlock b(m.refs(), "partition", lease(seconds(1)));
  a.lock();
  m.settled(a);
  ASSERT_TRUE(a.extend(milliseconds(1500)));
  const std::string token = a.token();
  ASSERT_TRUE(redislock_test::eventually([&] { return m.get(2, a.key()) == token + "#2"; }, seconds(5)))
      << "the renewer did not run";
  p0.set_stalled(true);
  p1.set_stalled(true);
  const auto taken = expect_loss_reported_before_takeover(a, b);
  ASSERT_TRUE(signal.wait(seconds(3))) << "on_lost did not run within 3 s of the other client's acquisition";
  EXPECT_LT(std::chrono::duration<double>(signal.at - taken).count(), 0.5);
  p0.set_stalled(false);
  p1.set_stalled(false);
  unlock_both(a, b);
}

// Each holder reaches a different majority (a foreign key blocks one master in turn). With
// the maximum of per-master INCRs, the third holder would get the second's token again.
TEST(Redlock, FencingTokensIncreaseAcrossDifferentMajorities) {
  masters m(3);
  redlock r(m.refs(), "fenced", lease(seconds(10)));
  std::uint64_t previous = 0;
  for (std::size_t round = 0; round < 6; ++round) {
    const std::size_t blocked = round % 3;
    m.admins[blocked]->command({"SET", r.key(), "someone-else", "PX", "60000"});
    ASSERT_TRUE(r.try_lock_for(seconds(5)));
    const std::uint64_t token = r.fencing_token();
    EXPECT_GT(token, previous) << "round " << round;
    EXPECT_EQ(r.fencing_token(), token);  // the same for the whole hold
    previous = token;
    r.unlock();
    m.admins[blocked]->command({"DEL", r.key()});
  }
  // A holder that lost its majority gets no token.
  r.lock();
  m.settled(r);
  m.admins[0]->command({"DEL", r.key()});
  m.admins[1]->command({"DEL", r.key()});
  EXPECT_THROW(r.fencing_token(), lock_error);
  EXPECT_TRUE(r.lost());
  r.unlock();
}

TEST(Redlock, ConcurrentHoldersNeverShareAFencingToken) {
  masters m(3);
  std::mutex seen_mutex;
  std::vector<std::uint64_t> seen;
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t)
    workers.emplace_back([&] {
      redlock r(m.refs(), "fence-threads");
      for (int i = 0; i < 10; ++i) {
        std::lock_guard<redlock> guard(r);
        const std::uint64_t f = r.fencing_token();
        std::lock_guard<std::mutex> g(seen_mutex);
        seen.push_back(f);
      }
    });
  for (auto& w : workers) w.join();
  ASSERT_EQ(seen.size(), 30u);
  for (std::size_t i = 1; i < seen.size(); ++i) EXPECT_GT(seen[i], seen[i - 1]);  // in the order of the holds
}

// Without auto_renew the holder still knows when its hold may be gone (safety review 4, item 2):
// lease_confirmed_until() is the validity's end from the acquisition (its start + lease − drift),
// moved by each confirmed extend (earlier too); lost() turns true then, and on_lost runs then
// (the first master's client's watchdog watches it: no thread per hold).
TEST(Redlock, AHoldWithoutRenewalIsLostByTheClockAndToldWhenItsValidityEnds) {
  masters m(3);
  for (const bool with_on_lost : {true, false}) {
    SCOPED_TRACE(with_on_lost ? "on_lost set" : "no on_lost");
    std::promise<clk::time_point> lost_at;
    std::atomic<int> calls{0};
    lock_options o = lease(milliseconds(300));
    if (with_on_lost)
      o.on_lost = [&](const std::string&) {
        if (calls.fetch_add(1) == 0) lost_at.set_value(clk::now());
      };
    redlock r(m.refs(), "unrenewed", o);
    const clk::time_point before = clk::now();
    r.lock();
    std::optional<clk::time_point> counted = r.lease_confirmed_until();
    ASSERT_TRUE(counted.has_value()) << "the validity is forgotten";
    EXPECT_GE(*counted, before + milliseconds(300) - r.drift());
    EXPECT_LE(*counted, clk::now() + milliseconds(300) - r.drift());
    for (const milliseconds l : {milliseconds(900), milliseconds(350)}) {
      SCOPED_TRACE(l.count());
      const clk::time_point sent = clk::now();
      ASSERT_TRUE(r.extend(l));
      counted = r.lease_confirmed_until();
      ASSERT_TRUE(counted.has_value());
      EXPECT_GE(*counted, sent + l - r.drift(l));
      EXPECT_LE(*counted, clk::now() + l - r.drift(l));
    }
    if (with_on_lost) {
      auto seen = lost_at.get_future();
      ASSERT_EQ(seen.wait_for(seconds(5)), std::future_status::ready) << "on_lost never ran";
      EXPECT_GE(seen.get(), *counted);
    } else {
      std::this_thread::sleep_until(*counted);
    }
    EXPECT_TRUE(r.lost());
    r.unlock();
    EXPECT_EQ(r.last_release(), release_status::lease_expired);
    EXPECT_EQ(calls.load(), with_on_lost ? 1 : 0);
    EXPECT_FALSE(r.lease_confirmed_until().has_value());
  }
}

namespace {

// lock(lease) / try_lock_for(timeout, lease): every master's key and the validity have the
// call's lease (less its drift), extend() renews to it, auto_renew renews with it (three
// renewer turns of a 900 ms lease under options().lease of 30 s), and the next acquisition
// without one has options().lease again. A lease that leaves no validity is refused unsent.
TEST(Redlock, ALeaseGivenToTheCallIsTheHolds) {
  masters m(3);
  lock_options o = lease(seconds(30));
  o.auto_renew = true;
  redlock r(m.refs(), "per-call", o);
  EXPECT_THROW(r.lock(milliseconds(0)), invalid_argument);
  EXPECT_THROW(r.try_lock_for(seconds(1), r.redlock().instance_timeout + r.drift(milliseconds(50))), invalid_argument);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(m.admins[i]->command({"EXISTS", r.key()})->integer, 0);
  ASSERT_TRUE(r.try_lock_for(seconds(5), milliseconds(900)));
  EXPECT_LE(r.validity().count(), 900 - r.drift(milliseconds(900)).count());
  m.settled(r);
  for (std::size_t i = 0; i < 3; ++i) {
    const long long pttl = m.admins[i]->command({"PTTL", r.key()})->integer;
    EXPECT_GT(pttl, 0);
    EXPECT_LE(pttl, 900);
  }
  // Three confirmed renewer turns: the hold is kept, with the call's lease.
  auto rec = std::make_shared<redislock_test::recorder>();
  set_observer(rec);
  const bool renewed = redislock_test::eventually([&] { return rec->count("renewed - 1/1") >= 3; }, seconds(20));
  set_observer(nullptr);
  ASSERT_TRUE(renewed);
  EXPECT_FALSE(r.lost());
  EXPECT_LE(r.validity().count(), 900);
  for (std::size_t i = 0; i < 3; ++i) {
    const long long pttl = m.admins[i]->command({"PTTL", r.key()})->integer;
    EXPECT_GT(pttl, 0);
    EXPECT_LE(pttl, 900);
  }
  EXPECT_THROW(r.extend(milliseconds(600)), invalid_argument);  // shorter than the renewed hold's lease
  ASSERT_TRUE(r.extend());
  EXPECT_LE(r.validity().count(), 900);
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::released);
  r.lock();
  EXPECT_GT(r.validity(), seconds(20)) << "the next acquisition kept the earlier call's lease";
  r.unlock();
}

}  // namespace

}  // namespace test_redlock
