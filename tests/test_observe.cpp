// Observing locks (observe.hpp): every event fires exactly once per occurrence, for every lock
// kind, in the uncontended, contended (hand-off), timeout, lost-lease, error and reconnect
// cases; an observer that throws changes nothing; the Prometheus text parses.
#include "eventually.hpp"
#include "recording_observer.hpp"
#include "prometheus_check.hpp"
#include "redis_server.hpp"
#include "tcp_proxy.hpp"

#include <redislock/observe/prometheus.hpp>
#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace test_observe {

using namespace redislock;
using redislock_test::eventually;
using redislock_test::recorder;
using redislock_test::redis_server;
using std::chrono::milliseconds;

namespace {

// One side of one lock object, whatever its kind.
struct handle {
  virtual ~handle() = default;
  virtual void lock() = 0;
  virtual bool try_lock() = 0;
  virtual bool try_lock_for(milliseconds) = 0;
  virtual release_status unlock() = 0;
  virtual std::uint64_t fencing_token() = 0;
  virtual std::string key() const = 0;
};
template <class L>
struct exclusive_handle : handle {
  template <class... A>
  explicit exclusive_handle(A&&... a) : l(std::forward<A>(a)...) {}
  void lock() override { l.lock(); }
  bool try_lock() override { return l.try_lock(); }
  bool try_lock_for(milliseconds t) override { return l.try_lock_for(t); }
  release_status unlock() override { return l.unlock_and_report(); }
  std::uint64_t fencing_token() override { return l.fencing_token(); }
  std::string key() const override { return l.key(); }
  L l;
};
struct reader_handle : handle {
  reader_handle(client& c, std::string name, lock_options o) : l(c, std::move(name), std::move(o)) {}
  void lock() override { l.lock_shared(); }
  bool try_lock() override { return l.try_lock_shared(); }
  bool try_lock_for(milliseconds t) override { return l.try_lock_shared_for(t); }
  release_status unlock() override { return l.unlock_shared_and_report(); }
  std::uint64_t fencing_token() override { return l.fencing_token(); }
  std::string key() const override { return l.key(); }
  shared_mutex l;
};

struct kind_case {
  const char* label;
  const char* type;  // "<lock_type>/<mode>" as the recorder writes it
  bool hands_off;    // a waiter is handed the lock on release (all but redlock)
  std::function<std::unique_ptr<handle>(client&, const std::string&, lock_options)> make;
};

std::vector<kind_case> kinds() {
  return {
      {"mutex", "mutex/exclusive", true,
       [](client& c, const std::string& n, lock_options o) {
         return std::make_unique<exclusive_handle<mutex>>(c, n, o);
       }},
      {"fair", "fair_mutex/exclusive", true,
       [](client& c, const std::string& n, lock_options o) {
         o.fair = true;
         return std::make_unique<exclusive_handle<mutex>>(c, n, o);
       }},
      {"reentrant", "reentrant_mutex/exclusive", true,
       [](client& c, const std::string& n, lock_options o) {
         return std::make_unique<exclusive_handle<reentrant_mutex>>(c, n, o);
       }},
      {"shared_write", "shared_mutex/exclusive", true,
       [](client& c, const std::string& n, lock_options o) {
         return std::make_unique<exclusive_handle<shared_mutex>>(c, n, o);
       }},
      {"shared_read", "shared_mutex/shared", true,  // readers share: they wait for a writer
       [](client& c, const std::string& n, lock_options o) { return std::make_unique<reader_handle>(c, n, o); }},
      {"semaphore", "semaphore/exclusive", true,  // one permit: exclusive, like a mutex
       [](client& c, const std::string& n, lock_options o) {
         return std::make_unique<exclusive_handle<semaphore>>(c, n, 1, o);
       }},
      {"redlock", "redlock/exclusive", false,
       [](client& c, const std::string& n, lock_options o) {
         redlock_options r;
         r.instance_timeout = std::chrono::seconds(1);  // a loaded machine's reply is no refusal
         return std::make_unique<exclusive_handle<redlock>>(std::vector<std::reference_wrapper<client>>{c}, n, o, r);
       }},
  };
}

// One server and client per test; `rec` is installed for the test's length.
template <class Base>
class observed : public Base {
 protected:
  void SetUp() override { set_observer(rec); }
  void TearDown() override { set_observer(nullptr); }
  std::shared_ptr<recorder> rec = std::make_shared<recorder>();
  redis_server server;
  client c{client_options{server.options()}};
};

class Observe : public observed<::testing::TestWithParam<kind_case>> {
 protected:
  std::string name() const { return std::string("obs:") + GetParam().label; }
  std::string ev(const std::string& what) const { return what + " " + name() + " " + GetParam().type; }
  // Who makes the lock wait: one of the kind's own, a writer for the read side.
  std::unique_ptr<handle> holder_for(const kind_case& k) {
    return std::string(k.label) == "shared_read" ? kinds()[3].make(c, name(), {}) : k.make(c, name(), {});
  }
};

TEST_P(Observe, AnUncontendedCycleReportsAttemptAcquiredReleasedOnce) {
  auto h = GetParam().make(c, name(), {});
  h->lock();
  EXPECT_EQ(h->unlock(), release_status::released);
  EXPECT_EQ(h->unlock(), release_status::not_held);  // nothing held: no event
  const std::vector<std::string> want{ev("attempt") + " wait", ev("acquired") + " direct attempts=1",
                                      ev("released") + " released"};
  EXPECT_EQ(rec->snapshot(), want);
}

// A hold's first fencing_token() is reported once, with the token and the hold's number (the
// recorder checks that the hold is the open one); later calls return the kept token and report
// nothing; the next hold draws and reports a greater one.
TEST_P(Observe, TheFirstFencingTokenOfAHoldIsReportedOnce) {
  auto h = GetParam().make(c, name(), {});
  h->lock();
  const std::uint64_t first = h->fencing_token();
  EXPECT_EQ(h->fencing_token(), first);
  EXPECT_EQ(h->unlock(), release_status::released);
  h->lock();
  const std::uint64_t second = h->fencing_token();
  EXPECT_EQ(h->fencing_token(), second);
  EXPECT_EQ(h->unlock(), release_status::released);
  EXPECT_GT(second, first);
  const std::vector<std::string> cycle{ev("attempt") + " wait", ev("acquired") + " direct attempts=1"};
  std::vector<std::string> want = cycle;
  want.push_back(ev("fenced") + " token=" + std::to_string(first));
  want.push_back(ev("released") + " released");
  want.insert(want.end(), cycle.begin(), cycle.end());
  want.push_back(ev("fenced") + " token=" + std::to_string(second));
  want.push_back(ev("released") + " released");
  EXPECT_EQ(rec->snapshot(), want);
}

TEST_P(Observe, AWaiterIsReportedOnceWhenItGetsTheLock) {
  const kind_case& k = GetParam();
  auto holder = holder_for(k);
  auto waiter = k.make(c, name(), {});
  holder->lock();
  release_status waiter_released = release_status::failed;
  std::thread t([&] {  // the waiter's hold is its thread's (reentrant, shared)
    waiter->lock();
    waiter_released = waiter->unlock();
  });
  ASSERT_TRUE(eventually([&] { return k.hands_off ? inspect(c, name()).waiters == 1 : rec->count("woken") >= 1; }));
  holder->unlock();
  t.join();
  EXPECT_EQ(waiter_released, release_status::released);
  EXPECT_EQ(rec->count("attempt"), 2);
  EXPECT_EQ(rec->count("acquired"), 2);
  EXPECT_EQ(rec->count("released"), 2);
  EXPECT_EQ(rec->count("not_acquired"), 0);
  EXPECT_EQ(rec->count("bad_"), 0) << ::testing::PrintToString(rec->snapshot());
  if (k.hands_off) {
    EXPECT_EQ(rec->count(ev("woken") + " notice"), 1) << ::testing::PrintToString(rec->snapshot());
    EXPECT_EQ(rec->count(ev("acquired") + " handoff"), 1) << ::testing::PrintToString(rec->snapshot());
  } else {
    EXPECT_GE(rec->count(ev("woken") + " fallback"), 1);
  }
}

TEST_P(Observe, ATimeoutIsReportedOnceAsNotAcquired) {
  const kind_case& k = GetParam();
  auto holder = holder_for(k);
  auto other = k.make(c, name(), {});
  holder->lock();
  std::thread t([&] {  // another thread: reentrant and shared owners are threads
    EXPECT_FALSE(other->try_lock());
    EXPECT_FALSE(other->try_lock_for(milliseconds(30)));
  });
  t.join();
  holder->unlock();
  EXPECT_EQ(rec->count(ev("not_acquired") + " timeout"), 2);
  EXPECT_EQ(rec->count(ev("attempt") + " try"), 1);
  EXPECT_EQ(rec->count("acquired"), 1);  // the holder's only
  EXPECT_EQ(rec->count("released"), 1);
}

TEST_P(Observe, ALeaseTakenAwayIsReportedLostOnce) {
  const kind_case& k = GetParam();
  auto h = k.make(c, name(), {});
  h->lock();
  connection admin = server.admin();
  admin.command({"DEL", h->key()});
  EXPECT_EQ(h->unlock(), release_status::lease_expired);
  EXPECT_EQ(rec->count(ev("lost")), 1);
  EXPECT_EQ(rec->count(ev("released") + " lease_expired"), 1);
  EXPECT_EQ(rec->count("bad_"), 0) << ::testing::PrintToString(rec->snapshot());
}

TEST_P(Observe, AnAcquisitionThatThrowsIsReportedAsAnError) {
  const kind_case& k = GetParam();
  redislock_test::tcp_proxy proxy(server.port());
  connection_options o = server.options();
  o.port = proxy.port();
  o.command_timeout = milliseconds(200);
  client through(client_options{o});
  auto h = k.make(through, name(), {});
  h->lock();
  h->unlock();
  proxy.set_refusing(true);
  proxy.cut_all();
  EXPECT_ANY_THROW(h->lock());
  EXPECT_EQ(rec->count(ev("not_acquired") + " error"), 1);
  proxy.set_refusing(false);
  h->lock();  // the pooled connection comes back
  h->unlock();
  // At least the one that worked: a connect the refusing proxy accepted before resetting it
  // counts too (the connection was established, then failed again).
  EXPECT_GE(rec->count("reconnected 127.0.0.1:" + std::to_string(proxy.port())), 1);
  EXPECT_EQ(rec->count("acquired"), 2);
  EXPECT_EQ(rec->count("released"), 2);
  EXPECT_EQ(rec->count("bad_"), 0) << ::testing::PrintToString(rec->snapshot());
}

INSTANTIATE_TEST_SUITE_P(Kinds, Observe, ::testing::ValuesIn(kinds()),
                         [](const auto& info) { return std::string(info.param.label); });

class ObserveContract : public observed<::testing::Test> {};

struct thrower : lock_observer {
  void on_attempt(const attempt_event&) override { throw std::runtime_error("observer"); }
  void on_acquired(const acquired_event&) override { throw std::runtime_error("observer"); }
  void on_not_acquired(const not_acquired_event&) override { throw 1; }
  void on_released(const released_event&) override { throw std::runtime_error("observer"); }
  void on_lost(const lost_event&) override { throw std::runtime_error("observer"); }
};

TEST_F(ObserveContract, AnObserverThatThrowsChangesNothing) {
  set_observer(std::make_shared<thrower>());
  mutex a(c, "obs:throw"), b(c, "obs:throw");
  a.lock();
  EXPECT_FALSE(b.try_lock());
  server.admin().command({"DEL", a.key()});
  EXPECT_EQ(a.unlock_and_report(), release_status::lease_expired);
  EXPECT_TRUE(b.try_lock());
  EXPECT_EQ(b.unlock_and_report(), release_status::released);
}

TEST_F(ObserveContract, TheWatchdogReportsRenewalsAndALostLeaseOnce) {
  lock_options o;
  o.lease = milliseconds(300);
  o.auto_renew = true;
  mutex m(c, "obs:renew", o);
  m.lock();
  ASSERT_TRUE(eventually([&] { return rec->count("renewed - 1/1") >= 1; }));
  server.admin().command({"DEL", m.key()});
  ASSERT_TRUE(eventually([&] { return rec->count("lost obs:renew") == 1; }));
  EXPECT_FALSE(m.extend());  // found again: not reported again
  EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
  EXPECT_EQ(rec->count("lost obs:renew"), 1);
}

// Nested holds: each lock() and unlock() is reported; the inner release is marked nested and
// both releases name the outermost hold.
TEST_F(ObserveContract, NestedHoldsAreReportedEachWithTheOutermostHold) {
  reentrant_mutex r(c, "obs:nested");
  shared_mutex s(c, "obs:nested-read");
  r.lock();
  r.lock();
  s.lock_shared();
  s.lock_shared();
  EXPECT_EQ(r.unlock_and_report(), release_status::released);
  EXPECT_EQ(r.unlock_and_report(), release_status::released);
  EXPECT_EQ(s.unlock_shared_and_report(), release_status::released);
  EXPECT_EQ(s.unlock_shared_and_report(), release_status::released);
  EXPECT_EQ(rec->count("acquired"), 4);
  EXPECT_EQ(rec->count("released obs:nested reentrant_mutex/exclusive released nested"), 1);
  EXPECT_EQ(rec->count("released obs:nested-read shared_mutex/shared released nested"), 1);
  EXPECT_EQ(rec->count("released"), 4);
  EXPECT_EQ(rec->count("bad_"), 0) << ::testing::PrintToString(rec->snapshot());
  EXPECT_TRUE(rec->open_holds.empty());
}

TEST_F(ObserveContract, NothingIsReportedWithoutAnObserver) {
  set_observer(nullptr);
  mutex m(c, "obs:none");
  m.lock();
  m.unlock();
  EXPECT_TRUE(rec->snapshot().empty());
}

// A contended run of every kind under one collector: the text it renders passes the checker
// (and `promtool check metrics` when installed).
TEST(ObservePrometheus, TheTextOfAContendedRunParses) {
  redis_server server;
  client c(client_options{server.options()});
  auto metrics = std::make_shared<prometheus_collector>(prometheus_options{{"order:*"}});
  set_observer(metrics);
  for (const kind_case& k : kinds()) {
    const std::string name = std::string("order:") + k.label;
    auto a = std::string(k.label) == "shared_read" ? kinds()[3].make(c, name, {}) : k.make(c, name, {});
    auto b = k.make(c, name, {});
    a->lock();
    a->fencing_token();
    std::promise<void> timed_out;
    std::thread t([&] {
      EXPECT_FALSE(b->try_lock_for(milliseconds(5)));
      timed_out.set_value();
      b->lock();
      b->unlock();
    });
    timed_out.get_future().wait();
    a->unlock();
    t.join();
  }
  mutex plain(c, "inventory");
  plain.lock();
  plain.unlock();
  set_observer(nullptr);
  const std::string text = metrics->render();
  const std::vector<std::string> problems = redislock_test::check_exposition(text);
  EXPECT_TRUE(problems.empty()) << ::testing::PrintToString(problems) << "\n" << text;
  EXPECT_NE(
      text.find(
          "redislock_acquisitions_total{lock=\"order:*\",kind=\"mutex\",mode=\"exclusive\",outcome=\"acquired\"} 2"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("redislock_held{lock=\"inventory\",kind=\"mutex\",mode=\"exclusive\"} 0"), std::string::npos);
  EXPECT_NE(text.find("redislock_fencing_tokens_total{lock=\"order:*\",kind=\"semaphore\",mode=\"exclusive\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("redislock_waiting{lock=\"order:*\",kind=\"mutex\",mode=\"exclusive\"} 0\n"), std::string::npos);
  if (const char* out = std::getenv("REDISLOCK_METRICS_SAMPLE")) std::ofstream(out) << text;  // docs' sample
  if (std::system("command -v promtool > /dev/null 2>&1") == 0) {
    const std::string file = ::testing::TempDir() + "redislock_metrics.txt";
    std::ofstream(file) << text;
    EXPECT_EQ(std::system(("promtool check metrics < " + file).c_str()), 0);
  }
}

TEST(ObservePrometheus, NamesAreFoldedByPatternAndBounded) {
  prometheus_options o;
  o.patterns = {"order:*", "user:*:cart"};
  o.max_names = 2;
  prometheus_collector m(o);
  attempt_event e;
  for (const char* n : {"order:1", "order:2", "user:7:cart", "a", "b", "c", "d"}) {
    e.name = n;
    m.on_attempt(e);
  }
  EXPECT_EQ(m.label_of("order:1"), "order:*");
  EXPECT_EQ(m.label_of("user:7:cart"), "user:*:cart");
  EXPECT_EQ(m.label_of("a"), "a");
  EXPECT_EQ(m.label_of("b"), "b");
  EXPECT_EQ(m.label_of("c"), "_other");
  const std::string text = m.render();
  EXPECT_NE(text.find("redislock_acquire_attempts_total{lock=\"_other\",kind=\"mutex\",mode=\"exclusive\"} 2"),
            std::string::npos)
      << text;
  EXPECT_TRUE(redislock_test::check_exposition(text).empty());
  e.name = "quote\"back\\slash\nnewline";
  m.on_attempt(e);  // max_names reached: folded, but the escapes are checked below anyway
  EXPECT_TRUE(prometheus_collector::matches("a*b*c", "aXbYc"));
  EXPECT_FALSE(prometheus_collector::matches("a*b", "aXbY"));
}

TEST(ObservePrometheus, TheCheckerRejectsBrokenText) {
  using redislock_test::check_exposition;
  EXPECT_TRUE(check_exposition("# TYPE x_total counter\nx_total 1\n").empty());
  EXPECT_FALSE(check_exposition("x_total 1\n").empty());                               // no TYPE
  EXPECT_FALSE(check_exposition("# TYPE x counter\nx 1\n").empty());                   // no _total
  EXPECT_FALSE(check_exposition("# TYPE x_total counter\nx_total{a=b} 1\n").empty());  // unquoted
  EXPECT_FALSE(check_exposition("# TYPE x_total counter\nx_total{a=\"\\q\"} 1\n").empty());
  EXPECT_FALSE(check_exposition("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                                "h_sum 1\nh_count 1\n")
                   .empty());  // decreasing
  EXPECT_FALSE(check_exposition("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n").empty());
  EXPECT_FALSE(check_exposition("# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{x=\"1\"} 1\n").empty());
}

}  // namespace

}  // namespace test_observe
