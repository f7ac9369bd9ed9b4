// Every timed member of every kind takes any duration: zero is one look (it returns at once), and a
// duration too long to add to the steady clock (nanoseconds::max(), milliseconds::max(),
// hours::max(), 300 years) waits as long as it takes: on a free object it succeeds at once, and a
// wait that must block wakes on the event that ends it instead of overflowing into a deadline in
// the past (false at once). One typed suite over the blocking kinds (mutex, fair mutex, reentrant
// mutex, both sides of the shared mutex, semaphore, election campaign, Redlock), the latch's
// wait_for, the election's wait_for_change_for and, with asio, the async kinds. Each kind is a
// "scene" with the same five verbs: make_free / make_busy, call(d) (the timed member; what it
// acquires it releases on the same thread), waiting() (the call is registered on the server: it
// is waiting, not returned) and happen() (the event that ends the wait).
#include "eventually.hpp"
#include "redis_server.hpp"
#include "server_fixture.hpp"

#include <redislock/redislock.hpp>

#ifdef REDISLOCK_TEST_ASYNC
#include "async_fixture.hpp"

#include <redislock/asio.hpp>
#endif

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <ratio>
#include <string>
#include <utility>
#include <vector>

namespace test_timeouts {

using namespace redislock;
using redislock_test::eventually;
using std::chrono::milliseconds;
using std::chrono::seconds;
using steady = std::chrono::steady_clock;

namespace {

using years = std::chrono::duration<long long, std::ratio<31556952>>;

// How long "at once" may take: one or a few round trips on loopback, with room for a loaded
// machine and sanitizers; a wait that did wait would take the whole test's bound.
constexpr milliseconds kAtOnce{1500};
// How long the event may take to reach a waiter (a notice, or a read after a backoff).
constexpr seconds kWake{10};

// Calls f with each duration of the list, keeping its type (the timed members are templates).
template <class F>
void each_zero(F&& f) {
  f("nanoseconds(0)", std::chrono::nanoseconds(0));
  f("milliseconds(0)", milliseconds(0));
  f("hours(0)", std::chrono::hours(0));
}
template <class F>
void each_max(F&& f) {
  f("nanoseconds::max()", std::chrono::nanoseconds::max());
  f("milliseconds::max()", milliseconds::max());
  f("hours::max()", std::chrono::hours::max());
  f("300 years", years(300));
}

// Server-side counts the scenes look at (their own connection: the test thread's admin is not
// shared with the waiting thread).
struct server_view {
  connection c{redislock_test::server_test::server->options()};
  long long queued(const std::string& key) {  // entries of the kind's waiting queue (…queue zsets)
    long long n = 0;
    reply_ptr keys = c.command({"KEYS", key + ":*queue"});
    for (std::size_t i = 0; i < keys->elements; ++i)
      n += c.command({"ZCARD", std::string(keys->element[i]->str, keys->element[i]->len)})->integer;
    return n;
  }
  long long subscribers(const std::string& channel) {
    return c.command({"PUBSUB", "NUMSUB", channel})->element[1]->integer;
  }
  long long calls(const char* command) { return redislock_test::command_calls(c, command); }
};

// A rival of the waiter that holds the name (busy) or not (free); releasing is the event.
template <class Rival>
struct rival_hold {
  template <class... Args>
  explicit rival_hold(Args&&... args) : rival(std::forward<Args>(args)...) {}
  ~rival_hold() { make_free(); }
  void make_free() {
    if (held) rival.unlock();
    held = false;
  }
  void make_busy() {
    if (!held) rival.lock();
    held = true;
  }
  void happen() { make_free(); }
  Rival rival;
  bool held = false;
};

// --- the blocking lock kinds: call() is the waiter's timed acquisition ---

// The waiter's timed member, and the release of what it got.
template <class Lock>
struct exclusive_side {
  template <class D>
  static bool wait(Lock& l, D d) {
    const bool got = l.try_lock_for(d);
    if (got) l.unlock();
    return got;
  }
};
struct shared_read_side : exclusive_side<shared_mutex> {  // the rival writes
  template <class D>
  static bool wait(shared_mutex& l, D d) {
    const bool got = l.try_lock_shared_for(d);
    if (got) l.unlock_shared();
    return got;
  }
};

// Waiting: queued on the server.
template <class Lock, class Side = exclusive_side<Lock>>
struct lock_scene : rival_hold<Lock> {
  template <class... Extra>
  explicit lock_scene(client& pool, Extra&&... extra)
      : rival_hold<Lock>(pool, "t-" + std::to_string(++round), extra...), waiter(other, this->rival.name(), extra...) {}
  void arm() {}
  bool waiting() { return view.queued(this->rival.key()) > 0; }
  template <class D>
  bool call(D d) {
    return Side::wait(waiter, d);
  }

  inline static int round = 0;
  client other{redislock_test::server_test::options()};
  Lock waiter;
  server_view view;
};

lock_options fair_options() {
  lock_options o;
  o.fair = true;
  return o;
}

struct mutex_scene : lock_scene<mutex> {
  explicit mutex_scene(client& pool) : lock_scene(pool) {}
};
struct fair_mutex_scene : lock_scene<mutex> {
  explicit fair_mutex_scene(client& pool) : lock_scene(pool, fair_options()) {}
};
struct reentrant_scene : lock_scene<reentrant_mutex> {
  explicit reentrant_scene(client& pool) : lock_scene(pool) {}
};
struct shared_write_scene : lock_scene<shared_mutex> {
  explicit shared_write_scene(client& pool) : lock_scene(pool) {}
};
struct shared_read_scene : lock_scene<shared_mutex, shared_read_side> {
  explicit shared_read_scene(client& pool) : lock_scene(pool) {}
};
struct semaphore_scene : lock_scene<semaphore> {
  explicit semaphore_scene(client& pool) : lock_scene(pool, 1) {}
};
// try_campaign_for: the rival leads (busy) or not (free).
struct campaign_side : exclusive_side<election> {
  template <class D>
  static bool wait(election& e, D d) {
    const bool got = e.try_campaign_for("waiter", d);
    if (got) e.resign();
    return got;
  }
};
struct campaign_scene : lock_scene<election, campaign_side> {
  explicit campaign_scene(client& pool) : lock_scene(pool) {}
};
// Redlock over one server (its waiting is attempts with backoff, no queue): waiting once the
// waiter made a second attempt (SET NX) after the first failed.
struct redlock_scene : rival_hold<redlock> {
  explicit redlock_scene(client& pool)
      : rival_hold(std::vector<std::reference_wrapper<client>>{pool}, "t-redlock-" + std::to_string(++round)),
        waiter({std::ref(other)}, rival.name()) {}
  void arm() { sets_before = view.calls("set"); }
  bool waiting() { return view.calls("set") >= sets_before + 2; }
  template <class D>
  bool call(D d) {
    return exclusive_side<redlock>::wait(waiter, d);
  }

  inline static int round = 0;
  client other{redislock_test::server_test::options()};
  redlock waiter;
  long long sets_before = 0;
  server_view view;
};

// --- latch::wait_for: busy is a latch of count 1, free an open one; the event is a count_down ---

struct latch_scene {
  explicit latch_scene(client& pool) : pool(pool) {}
  void make(std::int64_t count) {
    name = "t-latch-" + std::to_string(++round);
    counter.emplace(pool, name, count);
    waiter.emplace(other, name, count);
  }
  void make_free() { make(0); }
  void make_busy() { make(1); }
  void happen() { counter->count_down(); }
  // Waiting: it read the count (once before subscribing, once after) and listens.
  void arm() { reads_before = view.calls("evalsha"); }
  bool waiting() {
    return view.subscribers(counter->key() + ":open") == 1 && view.calls("evalsha") >= reads_before + 2;
  }
  template <class D>
  bool call(D d) {
    return waiter->wait_for(d);
  }

  inline static int round = 0;
  client& pool;
  client other{redislock_test::server_test::options()};
  std::string name;
  std::optional<latch> counter, waiter;
  long long reads_before = 0;
  server_view view;
};

// --- election::wait_for_change_for: busy is "seen is the state now", free "seen is stale"; the
// event is a grant ---

struct watch_scene {
  explicit watch_scene(client& pool)
      : candidate(pool, "t-watch-" + std::to_string(++round)), watcher(other, candidate.name()) {}
  void make_free() {
    candidate.resign();
    seen = leader_info{"stale", 1, "nobody:1", milliseconds(0)};  // differs from "nobody leads"
  }
  void make_busy() {
    candidate.resign();
    seen = watcher.leader();
  }
  void happen() { ASSERT_TRUE(candidate.try_campaign("new")); }
  // Waiting: it read the leader (once before subscribing, once after) and listens.
  void arm() { reads_before = view.calls("evalsha"); }
  bool waiting() {
    return view.subscribers(candidate.key() + ":leader") == 1 && view.calls("evalsha") >= reads_before + 2;
  }
  template <class D>
  bool call(D d) {
    return watcher.wait_for_change_for(seen, d);
  }

  inline static int round = 0;
  client other{redislock_test::server_test::options()};
  election candidate, watcher;
  std::optional<leader_info> seen;
  long long reads_before = 0;
  server_view view;
};

#ifdef REDISLOCK_TEST_ASYNC
// --- the async kinds: a blocking rival of the same name (same scripts and keys); call() runs
// the async timed member on a loop of its own and waits for its completion ---

template <class Async, class Rival, class Call>
struct async_scene : rival_hold<Rival> {
  template <class... Extra>
  explicit async_scene(redislock::client& pool, Extra... extra)
      : rival_hold<Rival>(pool, "t-async-" + std::to_string(++round), extra...),
        async(loop.io.get_executor(), async_client_options{redislock_test::server_test::server->options()}),
        waiter(async, this->rival.name(), extra...) {}
  void arm() {}
  bool waiting() { return view.queued(this->rival.key()) > 0; }
  template <class D>
  bool call(D d) {
    auto [error, hold] =
        redislock_test::outcome<async_hold>([&](auto done) { Call::start(waiter, d, std::move(done)); });
    EXPECT_FALSE(error) << error.message();
    const bool got = hold.owns_lock();
    if (got) {
      EXPECT_FALSE(redislock_test::unlock_now(hold));
    }
    return got;
  }

  inline static int round = 0;
  redislock_test::loop loop;
  async_client async;
  Async waiter;
  server_view view;
};
struct async_lock_call {
  template <class A, class D, class Done>
  static void start(A& a, D d, Done done) {
    a.async_try_lock_for(d, std::move(done));
  }
};
struct async_shared_call {
  template <class A, class D, class Done>
  static void start(A& a, D d, Done done) {
    a.async_try_lock_shared_for(d, std::move(done));
  }
};
struct async_acquire_call {
  template <class A, class D, class Done>
  static void start(A& a, D d, Done done) {
    a.async_try_acquire_for(d, std::move(done));
  }
};
struct async_mutex_scene : async_scene<async_mutex, mutex, async_lock_call> {
  explicit async_mutex_scene(redislock::client& pool) : async_scene(pool) {}
};
struct async_semaphore_scene : async_scene<async_semaphore, semaphore, async_acquire_call> {
  explicit async_semaphore_scene(redislock::client& pool) : async_scene(pool, std::int64_t{1}) {}
};
struct async_shared_write_scene : async_scene<async_shared_mutex, shared_mutex, async_lock_call> {
  explicit async_shared_write_scene(redislock::client& pool) : async_scene(pool) {}
};
struct async_shared_read_scene : async_scene<async_shared_mutex, shared_mutex, async_shared_call> {
  explicit async_shared_read_scene(redislock::client& pool) : async_scene(pool) {}
};
#endif

template <class Scene>
struct TimedMembers : redislock_test::server_test {};

// s.call(d) returns `expected`, and at once.
template <class Scene, class D>
void expect_at_once(Scene& s, D d, bool expected) {
  const steady::time_point start = steady::now();
  EXPECT_EQ(s.call(d), expected);
  EXPECT_LT(steady::now() - start, kAtOnce);
}

using scenes =
    ::testing::Types<mutex_scene, fair_mutex_scene, reentrant_scene, shared_write_scene, shared_read_scene,
                     semaphore_scene, campaign_scene, redlock_scene, latch_scene, watch_scene
#ifdef REDISLOCK_TEST_ASYNC
                     ,
                     async_mutex_scene, async_semaphore_scene, async_shared_write_scene, async_shared_read_scene
#endif
                     >;
TYPED_TEST_SUITE(TimedMembers, scenes);

// Zero is one look: false at once where the call would have to wait, true at once where it need not.
TYPED_TEST(TimedMembers, ZeroLooksOnceAndReturnsAtOnce) {
  TypeParam s(*this->pool);
  each_zero([&](const char* what, auto zero) {
    SCOPED_TRACE(what);
    s.make_busy();
    expect_at_once(s, zero, false);
    s.make_free();
    expect_at_once(s, zero, true);
  });
}

// The longest durations of every period on a free object: true at once (no overflow into a past
// deadline, no wait for nothing).
TYPED_TEST(TimedMembers, MaxOnAFreeObjectSucceedsAtOnce) {
  TypeParam s(*this->pool);
  each_max([&](const char* what, auto longest) {
    SCOPED_TRACE(what);
    s.make_free();
    expect_at_once(s, longest, true);
  });
}

// The longest durations of every period where the call must wait: it waits (registered on the
// server, not returned), and the event ends the wait with success.
TYPED_TEST(TimedMembers, MaxWaitsUntilTheEvent) {
  TypeParam s(*this->pool);
  each_max([&](const char* what, auto longest) {
    SCOPED_TRACE(what);
    s.make_busy();
    s.arm();
    auto call = std::async(std::launch::async, [&] { return s.call(longest); });
    const auto returned = [&] { return call.wait_for(milliseconds(0)) == std::future_status::ready; };
    EXPECT_TRUE(eventually([&] { return returned() || s.waiting(); }, kWake)) << "neither waiting nor returned";
    if (returned()) {
      ADD_FAILURE() << "returned before the event: " << (call.get() ? "true" : "false");
      return;
    }
    s.happen();  // also where the wait was not seen registered: the future's destructor waits for the call
    ASSERT_EQ(call.wait_for(kWake), std::future_status::ready) << "not woken by the event";
    EXPECT_TRUE(call.get());
  });
}

}  // namespace

}  // namespace test_timeouts
