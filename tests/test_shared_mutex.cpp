// redislock::shared_mutex against a real redis-server: overlapping readers, exclusive writers,
// writer preference under a reader flood, downgrade, refused upgrade, per-reader leases
// (a killed reader), stale releases, wrong kinds, guards and round-trip counts.
#include "eventually.hpp"
#include "process.hpp"
#include "freeze_waiter.hpp"
#include "server_fixture.hpp"
#include "worker_process.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <condition_variable>
#include <future>
#include <mutex>
#include <sstream>
#include <shared_mutex>
#include <thread>
#include <vector>

namespace test_shared_mutex {

using namespace redislock;
using redislock_test::command_calls;
using redislock_test::hash_fields;
using redislock_test::hexists;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

/// The server's clock in ms (for writing a place or lease end by hand).
long long server_now_ms(connection& c) {
  reply_ptr t = c.command({"TIME"});
  return std::stoll(t->element[0]->str) * 1000 + std::stoll(t->element[1]->str) / 1000;
}

/// A countdown every thread reaches; wait() returns false when `timeout` passed first.
class thread_latch {
 public:
  explicit thread_latch(int n) : left_(n) {}
  bool arrive_and_wait(milliseconds timeout) {
    std::unique_lock<std::mutex> g(m_);
    if (--left_ == 0) cv_.notify_all();
    return cv_.wait_for(g, timeout, [&] { return left_ <= 0; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int left_;
};

/// A thread with its own client (so its wait_stats are its own) that waits for one side of the
/// lock, says when it got in, and holds it until finish().
class queued_waiter {
 public:
  queued_waiter(const client_options& co, const std::string& name, lock_options o, bool write,
                milliseconds timeout = seconds(20))
      : client_(co), lock_(client_, name, std::move(o)) {
    done_ = std::async(std::launch::async, [this, write, timeout] {
      const bool got = write ? lock_.try_lock_for(timeout) : lock_.try_lock_shared_for(timeout);
      if (!got) return false;
      in_.set_value();
      leave_f_.wait_for(seconds(30));
      if (write) lock_.unlock();
      else lock_.unlock_shared();
      return true;
    });
  }
  ~queued_waiter() { finish(); }
  queued_waiter(const queued_waiter&) = delete;
  queued_waiter& operator=(const queued_waiter&) = delete;

  bool got_in_within(milliseconds t) { return in_f_.wait_for(t) == std::future_status::ready; }
  /// Releases (when it got in) and returns whether it got in.
  bool finish() {
    if (!done_.valid()) return result_;
    leave_.set_value();
    result_ = done_.get();
    return result_;
  }
  std::uint64_t wakeups() const { return client_.wait_stats().wakeups; }

 private:
  client client_;
  shared_mutex lock_;
  std::promise<void> in_, leave_;
  std::future<void> in_f_ = in_.get_future(), leave_f_ = leave_.get_future();
  std::future<bool> done_;
  bool result_ = false;
};

/// Waiters that look again only when told (recheck_interval far beyond these tests).
lock_options patient() {
  lock_options o;
  o.recheck_interval = seconds(60);
  return o;
}

}  // namespace

struct SharedTest : redislock_test::server_test {
  /// Waiters queued on the server for the lock at `key`.
  long long zcard(const std::string& key) { return admin->command({"ZCARD", key + ":squeue"})->integer; }
  long long server_now_ms() { return test_shared_mutex::server_now_ms(*admin); }
};

TEST_F(SharedTest, ReadersReallyOverlap) {
  constexpr int readers = 4;
  // Threads sharing one object (each thread is its own owner) and threads with their own objects.
  for (bool one_object : {true, false}) {
    shared_mutex common(*pool, "overlap");
    thread_latch all_inside(readers);
    std::atomic<int> reached{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < readers; ++t)
      threads.emplace_back([&] {
        shared_mutex own(*pool, "overlap");
        shared_mutex& m = one_object ? common : own;
        std::shared_lock<shared_mutex> read(m);
        // Reached only if all readers hold their read hold at the same time.
        if (all_inside.arrive_and_wait(seconds(20))) reached.fetch_add(1);
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(reached.load(), readers) << (one_object ? "one object" : "own objects");
    EXPECT_EQ(admin->command({"EXISTS", common.key()})->integer, 0);
  }
}

TEST_F(SharedTest, AWriterExcludesReadersAndWriters) {
  shared_mutex w(*pool, "rw"), r(*pool, "rw"), other(*pool, "rw");
  ASSERT_TRUE(w.try_lock());
  EXPECT_TRUE(w.owns_lock());
  EXPECT_FALSE(r.try_lock_shared());
  EXPECT_FALSE(r.try_lock_shared_for(milliseconds(50)));
  EXPECT_FALSE(other.try_lock());
  EXPECT_FALSE(other.try_lock_for(milliseconds(50)));
  w.unlock();
  EXPECT_EQ(w.last_release(), release_status::released);
  // The writer that gave up waiting left its "writer waiting" marker: it lapses shortly.
  ASSERT_TRUE(r.try_lock_shared_for(seconds(10)));
  EXPECT_FALSE(other.try_lock());  // a reader excludes writers
  r.unlock_shared();
  EXPECT_TRUE(other.try_lock());
  other.unlock();
  EXPECT_EQ(admin->command({"EXISTS", w.key()})->integer, 0);
}

TEST_F(SharedTest, RefusedAttemptsWriteNothing) {
  shared_mutex w(*pool, "quiet"), r(*pool, "quiet"), other(*pool, "quiet");
  r.lock_shared();  // warm-up: loads the scripts
  r.unlock_shared();
  w.lock();
  admin->command({"CONFIG", "RESETSTAT"});
  for (int i = 0; i < 10; ++i) {
    EXPECT_FALSE(r.try_lock_shared());
    EXPECT_FALSE(other.try_lock());  // a single attempt: no "writer waiting" marker either
  }
  EXPECT_EQ(command_calls(*admin, "evalsha"), 20);
  for (const char* write : {"hset", "hdel", "pexpire", "del", "publish", "incr"})
    EXPECT_EQ(command_calls(*admin, write), 0) << write;
  w.unlock();
}

TEST_F(SharedTest, AWaitingWriterGetsInWhenTheReaderLeaves) {
  shared_mutex r(*pool, "handoff"), w(*pool, "handoff");
  r.lock_shared();
  auto writer = std::async(std::launch::async, [&] {
    w.lock();
    const bool mine = w.owns_lock();
    w.unlock();
    return mine;
  });
  EXPECT_EQ(writer.wait_for(milliseconds(50)), std::future_status::timeout);
  r.unlock_shared();
  ASSERT_EQ(writer.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_TRUE(writer.get());
}

TEST_F(SharedTest, ThreadsWritingThroughOneObjectExcludeEachOther) {
  shared_mutex m(*pool, "writers");
  std::atomic<int> inside{0}, overlaps{0};
  int counter = 0;  // plain int: the write lock alone protects it
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t)
    workers.emplace_back([&] {
      for (int i = 0; i < 30; ++i) {
        std::unique_lock<shared_mutex> write(m);
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        ++counter;
        inside.fetch_sub(1);
      }
    });
  for (auto& w : workers) w.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter, 120);
}

TEST_F(SharedTest, WriterWaitIsBoundedUnderAReaderFlood) {
  // Readers hand over to each other: one leaves only once another is inside (or after 50 ms
  // alone), so without writer preference the lock is never free of readers and a writer
  // starves for good. With it, new readers queue behind the writer, the ones inside leave
  // within 50 ms, and the writer gets in.
  constexpr int readers = 4;
  std::mutex m;
  std::condition_variable cv;
  int inside = 0;  // readers between their acquisition and their release (guarded by m)
  bool stop = false, writing = false;
  int cycles = 0, read_while_writing = 0;
  thread_latch flooding(readers + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < readers; ++t)
    threads.emplace_back([&] {
      client own(client_options{server->options()});
      shared_mutex lock(own, "flood");
      for (bool announced = false;;) {
        std::shared_lock<shared_mutex> read(lock);
        {
          std::unique_lock<std::mutex> g(m);
          ++inside;
          ++cycles;
          if (writing) ++read_while_writing;
          cv.notify_all();
          cv.wait_for(g, milliseconds(50), [&] { return inside >= 2 || stop; });
          --inside;
          if (stop) return;
        }
        read.unlock();
        if (!announced) {
          announced = true;
          flooding.arrive_and_wait(seconds(20));
        }
      }
    });
  ASSERT_TRUE(flooding.arrive_and_wait(seconds(20)));  // every reader is cycling
  shared_mutex w(*pool, "flood");
  const auto start = std::chrono::steady_clock::now();
  const bool got = w.try_lock_for(seconds(15));
  const auto waited = std::chrono::steady_clock::now() - start;
  if (got) {
    {
      std::lock_guard<std::mutex> g(m);
      writing = true;  // a reader that gets in from now on (before unlock) breaks exclusion
      EXPECT_EQ(inside, 0);
    }
    std::lock_guard<std::mutex> g(m);
    writing = false;
    w.unlock();
  }
  {
    std::lock_guard<std::mutex> g(m);
    stop = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  ASSERT_TRUE(got) << "the writer starved for 15 s under " << readers << " handing-over readers";
  EXPECT_LT(waited, seconds(10));  // a generous bound: the readers inside leave within 50 ms
  EXPECT_EQ(read_while_writing, 0);
  EXPECT_GT(cycles, readers);
}

// A writer queued behind the readers inside that crashed (nobody listens on its channel any
// more) holds new readers back only until the next attempt notices it: that attempt drops it.
TEST_F(SharedTest, ACrashedWaitingWriterHoldsNewReadersBackOnlyUntilTheNextAttempt) {
  shared_mutex r(*pool, "marker"), w(*pool, "marker"), late(*pool, "marker");
  r.lock_shared();
  EXPECT_FALSE(w.try_lock());  // a single attempt does not wait, so it does not queue
  EXPECT_EQ(zcard(r.key()), 0);
  EXPECT_TRUE(late.try_lock_shared());
  late.unlock_shared();
  EXPECT_FALSE(w.try_lock_for(milliseconds(30)));  // waits, then leaves the queue: holds nobody back
  EXPECT_EQ(zcard(r.key()), 0);
  EXPECT_TRUE(late.try_lock_shared());
  late.unlock_shared();
  // A writer that crashed while queued: its place would last a minute, nobody listens for it.
  admin->command({"ZADD", r.key() + ":squeue", "0", "crashed:1:0"});
  admin->command({"HSET", r.key() + ":swaiters", "crashed:1:0", std::to_string(server_now_ms() + 60000) + ":30000:w1"});
  EXPECT_TRUE(late.try_lock_shared()) << "a crashed writer kept a new reader out";
  EXPECT_EQ(zcard(r.key()), 0) << "the crashed writer's place was dropped";
  EXPECT_FALSE(hexists(*admin, r.key() + ":swaiters", "crashed:1:0"));
  late.unlock_shared();
  r.unlock_shared();
}

// A queued writer that lives but is silent (paused, partitioned: its channel still counts a
// listener) holds new readers back until its place lapses, no longer.
TEST_F(SharedTest, APausedWaitingWriterBlocksNewReadersOnlyUntilItsPlaceLapses) {
  shared_mutex r(*pool, "paused"), late(*pool, "paused");
  r.lock_shared();
  connection listener(server->options());  // the paused writer's subscription
  listener.command({"SUBSCRIBE", r.key() + ":w:paused:1"});
  ASSERT_EQ(subscribers(r.key() + ":w:paused:1"), 1);
  // Its place lapses in 600 ms.
  admin->command({"ZADD", r.key() + ":squeue", "0", "paused:1:0"});
  admin->command({"HSET", r.key() + ":swaiters", "paused:1:0", std::to_string(server_now_ms() + 600) + ":30000:w1"});
  EXPECT_FALSE(late.try_lock_shared());  // queued behind the waiting writer
  EXPECT_TRUE(r.try_lock_shared());      // re-entry by a reader inside is admitted
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(late.try_lock_shared_for(seconds(10)));  // once its place lapses
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(400));
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(5)) << "slept towards the reader's 30 s lease";
  EXPECT_EQ(zcard(r.key()), 0) << "the lapsed place was dropped";
  EXPECT_FALSE(hexists(*admin, r.key(), "@w")) << "the paused writer was granted the lock";
  late.unlock_shared();
  r.unlock_shared();
  r.unlock_shared();
}

// A writer process killed (SIGKILL) while queued behind a reader holds new readers back only
// until their next attempt (was: until its place lapsed, up to lease + wait_lease, 32 s).
TEST_F(SharedTest, AKilledQueuedWriterProcessLetsNewReadersInAtOnce) {
  shared_mutex inside(*pool, "killed-writer"), late(*pool, "killed-writer");
  inside.lock_shared();  // default lease: 30 s
  redislock_test::child_process writer({REDISLOCK_TEST_WORKER, "count-shared", std::to_string(server->port()),
                                        "killed-writer", "killed-writer-counter", "1"});
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(inside.key()) == 1; }));
  const std::string place = admin->command({"ZRANGE", inside.key() + ":squeue", "0", "0"})->element[0]->str;
  writer.signal(SIGKILL);
  EXPECT_EQ(writer.wait_for(seconds(10)), 128 + SIGKILL);
  const std::string channel = inside.key() + ":w:" + place.substr(0, place.rfind(':'));
  ASSERT_TRUE(redislock_test::eventually([&] { return subscribers(channel) == 0; })) << "nobody listens any more";
  const auto start = std::chrono::steady_clock::now();
  const bool got = late.try_lock_shared_for(seconds(5));
  EXPECT_TRUE(got) << "a killed writer kept a new reader out for "
                   << std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start).count()
                   << " ms";
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(1));
  if (got) late.unlock_shared();
  inside.unlock_shared();
}

TEST_F(SharedTest, DowngradeKeepsReadingAfterTheWriteHoldIsReleased) {
  shared_mutex m(*pool, "downgrade"), reader(*pool, "downgrade"), writer(*pool, "downgrade");
  m.lock();
  ASSERT_TRUE(m.try_lock_shared());  // the writer may read: no deadlock
  EXPECT_EQ(m.shared_count(), 1);
  EXPECT_FALSE(reader.try_lock_shared());  // still writing
  m.unlock();
  EXPECT_EQ(m.last_release(), release_status::released);
  EXPECT_FALSE(m.owns_lock());
  EXPECT_TRUE(m.owns_shared());
  ASSERT_TRUE(reader.try_lock_shared());  // now readers share with the downgraded holder
  EXPECT_FALSE(writer.try_lock());
  m.unlock_shared();
  reader.unlock_shared();
  EXPECT_TRUE(writer.try_lock());
  writer.unlock();
}

TEST_F(SharedTest, UpgradeIsRefusedWithALockError) {
  shared_mutex m(*pool, "upgrade");
  m.lock_shared();
  const auto before = hash_fields(*admin, m.key());
  EXPECT_THROW(m.lock(), lock_error);
  EXPECT_THROW(m.try_lock(), lock_error);
  EXPECT_THROW(m.try_lock_for(milliseconds(10)), lock_error);
  EXPECT_FALSE(m.owns_lock());
  EXPECT_TRUE(m.owns_shared());
  EXPECT_EQ(hash_fields(*admin, m.key()), before);
  m.unlock_shared();
  // Not recursive on the write side either.
  m.lock();
  EXPECT_THROW(m.try_lock(), lock_error);
  m.unlock();
}

TEST_F(SharedTest, ReadsAreReentrantPerOwner) {
  shared_mutex m(*pool, "reads");
  m.lock_shared();
  m.lock_shared();
  EXPECT_EQ(m.shared_count(), 2);
  EXPECT_EQ(admin->command({"HGET", m.key(), "r:" + m.owner_id()})->str, std::string("2"));
  m.unlock_shared();
  EXPECT_TRUE(m.owns_shared());
  EXPECT_TRUE(hexists(*admin, m.key(), "r:" + m.owner_id()));
  m.unlock_shared();
  EXPECT_EQ(admin->command({"EXISTS", m.key()})->integer, 0);
  m.unlock_shared();
  EXPECT_EQ(m.last_release(), release_status::not_held);
}

TEST_F(SharedTest, OneReadersReleaseNeverRemovesAnothersHold) {
  shared_mutex a(*pool, "two-readers", lease(seconds(10))), b(*pool, "two-readers", lease(seconds(60)));
  a.lock_shared();
  b.lock_shared();
  // The key lives as long as the longest hold.
  EXPECT_GT(admin->command({"PTTL", a.key()})->integer, 50000);
  b.unlock_shared();
  EXPECT_TRUE(a.still_held_shared());
  EXPECT_LE(admin->command({"PTTL", a.key()})->integer, 10000);
  EXPECT_TRUE(hexists(*admin, a.key(), "r:" + a.owner_id()));
  EXPECT_FALSE(hexists(*admin, a.key(), "r:" + b.owner_id()));
  // A thread of a's object that holds nothing cannot release a's hold.
  std::thread([&] { EXPECT_EQ(a.unlock_shared_and_report(), release_status::not_held); }).join();
  EXPECT_TRUE(a.still_held_shared());
  a.unlock_shared();
}

TEST_F(SharedTest, ExtendRenewsOnlyTheCallersOwnHold) {
  shared_mutex a(*pool, "extend", lease(seconds(2))), b(*pool, "extend", lease(seconds(2)));
  a.lock_shared();
  b.lock_shared();
  ASSERT_TRUE(a.extend_shared(seconds(30)));
  EXPECT_GT(a.remaining_shared_lease(), seconds(29));
  EXPECT_LE(b.remaining_shared_lease(), seconds(2));
  EXPECT_GT(admin->command({"PTTL", a.key()})->integer, 29000);
  EXPECT_THROW(a.extend(), lock_error);  // a does not write
  a.unlock_shared();
  EXPECT_EQ(a.unlock_and_report(), release_status::not_held);  // nor did it: the write side sends nothing
  b.unlock_shared();
  shared_mutex w(*pool, "extend", lease(seconds(2)));
  w.lock();
  ASSERT_TRUE(w.extend(seconds(30)));
  EXPECT_GT(w.remaining_lease(), seconds(29));
  EXPECT_THROW(w.extend_shared(), lock_error);
  w.unlock();
  EXPECT_FALSE(w.still_held());
}

TEST_F(SharedTest, FencingTokensAreDrawnOnDemandAndIncreaseAcrossHolds) {
  shared_mutex w(*pool, "fence"), r(*pool, "fence");
  w.lock();
  EXPECT_EQ(admin->command({"EXISTS", w.key() + ":fence"})->integer, 0);  // nobody asked yet
  const auto first = w.fencing_token();
  EXPECT_EQ(w.fencing_token(), first);  // kept for the hold
  w.unlock();
  r.lock_shared();
  const auto read = r.fencing_token();
  EXPECT_GT(read, first);
  r.unlock_shared();
  w.lock();
  const auto written = w.fencing_token();
  EXPECT_GT(written, read);
  w.unlock();
  EXPECT_EQ(std::string(admin->command({"GET", w.key() + ":fence"})->str), std::to_string(written));
}

TEST_F(SharedTest, ReleasesWithNobodyWaitingPublishNothing) {
  shared_mutex m(*pool, "publish");
  m.lock();  // loads the scripts
  m.unlock();
  reset_stats();
  m.lock();
  m.unlock();
  m.lock_shared();
  m.unlock_shared();
  EXPECT_EQ(command_calls(*admin, "publish"), 0);
  EXPECT_EQ(command_calls(*admin, "spublish"), 0);
}

TEST_F(SharedTest, WrongKindsAreTypedErrorsAndChangeNothing) {
  shared_mutex sh(*pool, "kind");
  reentrant_mutex re(*pool, "kind");
  mutex plain(*pool, "kind");

  re.lock();
  auto before = hash_fields(*admin, re.key());
  EXPECT_THROW(sh.lock(), wrong_type_error);
  EXPECT_THROW(sh.try_lock_shared(), wrong_type_error);
  EXPECT_EQ(hash_fields(*admin, re.key()), before);
  EXPECT_THROW(plain.try_lock(), wrong_type_error);
  re.unlock();

  sh.lock_shared();
  sh.fencing_token();  // creates the counter, so the check below sees it unchanged
  before = hash_fields(*admin, sh.key());
  const long long fence = std::stoll(admin->command({"GET", sh.key() + ":fence"})->str);
  try {
    re.try_lock();
    FAIL() << "a reentrant lock took a shared lock's key";
  } catch (const wrong_type_error& e) {
    EXPECT_NE(e.server_message().find("not a reentrant lock"), std::string::npos) << e.server_message();
  }
  EXPECT_THROW(plain.try_lock(), wrong_type_error);
  EXPECT_EQ(hash_fields(*admin, sh.key()), before);
  EXPECT_EQ(std::stoll(admin->command({"GET", sh.key() + ":fence"})->str), fence);
  sh.unlock_shared();

  plain.lock();
  EXPECT_THROW(sh.try_lock(), wrong_type_error);
  EXPECT_THROW(sh.try_lock_shared(), wrong_type_error);
  EXPECT_FALSE(sh.owns_lock());
  EXPECT_FALSE(sh.owns_shared());
  EXPECT_TRUE(plain.still_held());
  plain.unlock();

  admin->command({"HSET", sh.key(), "field", "value"});
  try {
    sh.lock_shared();
    FAIL() << "lock_shared() on a foreign hash succeeded";
  } catch (const wrong_type_error& e) {
    EXPECT_NE(e.server_message().find("not a shared lock"), std::string::npos) << e.server_message();
  }
  EXPECT_EQ(hash_fields(*admin, sh.key()), std::vector<std::string>{"field=value"});
}

TEST_F(SharedTest, StdGuardsWork) {
  shared_mutex m(*pool, "guards"), other(*pool, "guards"), third(*pool, "guards");
  {
    std::shared_lock<shared_mutex> r1(m);
    std::shared_lock<shared_mutex> r2(other, std::try_to_lock);
    EXPECT_TRUE(r2.owns_lock());
    std::unique_lock<shared_mutex> w(third, std::try_to_lock);  // refused: readers inside
    EXPECT_FALSE(w.owns_lock());
  }
  {
    std::lock_guard<shared_mutex> g(m);
    EXPECT_TRUE(m.owns_lock());
    std::shared_lock<shared_mutex> r(other, milliseconds(20));
    EXPECT_FALSE(r.owns_lock());
  }
  {
    std::unique_lock<shared_mutex> w(m, std::defer_lock);
    EXPECT_TRUE(w.try_lock_until(std::chrono::system_clock::now() + milliseconds(100)));
  }
  EXPECT_FALSE(m.owns_lock());
  EXPECT_EQ(m.last_release(), release_status::released);
  EXPECT_EQ(admin->command({"EXISTS", m.key()})->integer, 0);
}

TEST(SharedProcesses, WritersInSeparateProcessesNeverOverlap) {
  EXPECT_EQ(redislock_test::count_in_processes(REDISLOCK_TEST_WORKER, "count-shared", 3, 60), std::to_string(3 * 60));
}

TEST(SharedProcesses, AKilledReaderStopsBlockingWritersWhileAnotherReaderRenews) {
  redislock_test::redis_server server;
  redislock_test::worker_process crashed(REDISLOCK_TEST_WORKER,
                                         {"hold-shared", std::to_string(server.port()), "crash", "300"});
  const std::string crashed_owner = crashed.acquired();
  ASSERT_FALSE(crashed_owner.empty());

  client c(client_options{server.options()});
  connection admin = server.admin();
  lock_options o;
  o.lease = milliseconds(1000);
  shared_mutex survivor(c, "crash", o), writer(c, "crash");
  survivor.lock_shared();
  EXPECT_FALSE(writer.try_lock());
  crashed.signal(SIGKILL);
  EXPECT_EQ(crashed.wait_for(seconds(10)), 128 + SIGKILL);

  // The survivor keeps renewing its own hold (the key never expires meanwhile) until the
  // crashed reader's hold has been purged on its own lease.
  bool purged = false;
  const auto give_up = std::chrono::steady_clock::now() + seconds(20);
  while (!purged && std::chrono::steady_clock::now() < give_up) {
    ASSERT_TRUE(survivor.extend_shared());
    purged = !hexists(admin, survivor.key(), "r:" + crashed_owner);
    if (!purged) std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_TRUE(purged) << "the crashed reader's hold outlived its lease";
  EXPECT_TRUE(hexists(admin, survivor.key(), "r:" + survivor.owner_id()));
  EXPECT_FALSE(writer.try_lock());  // the survivor still reads
  survivor.unlock_shared();
  EXPECT_TRUE(writer.try_lock());  // at once: nothing is left of the crashed reader
  EXPECT_GT(writer.fencing_token(), 0u);
  writer.unlock();
}

TEST(SharedServerLoss, UnreachableIsTypedAndReleasesReportFailed) {
  static_assert(noexcept(std::declval<shared_mutex&>().unlock()));
  static_assert(noexcept(std::declval<shared_mutex&>().unlock_shared()));
  redislock_test::redis_server own;
  client_options o{own.options()};
  o.connection.connect_timeout = milliseconds(200);
  client c(o);
  shared_mutex r(c, "lost"), w(c, "lost-w");
  r.lock_shared();
  w.lock();
  own.stop();
  r.unlock_shared();
  EXPECT_EQ(r.last_release(), release_status::failed);
  EXPECT_FALSE(r.owns_shared());
  w.unlock();
  EXPECT_EQ(w.last_release(), release_status::failed);
  EXPECT_FALSE(w.owns_lock());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(r.lock_shared(), connection_error);
  EXPECT_THROW(w.try_lock_for(seconds(1)), connection_error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
}

// --- the queue: hand-off, writer preference, fairness ---------------------------------------

TEST_F(SharedTest, FairWritersAreHandedTheLockInArrivalOrderAndOnlyTheHeadWakes) {
  lock_options fair = patient();
  fair.fair = true;
  shared_mutex holder(*pool, "fifo", fair);
  holder.lock();
  std::vector<std::unique_ptr<queued_waiter>> writers;
  for (int i = 0; i < 4; ++i) {
    writers.push_back(std::make_unique<queued_waiter>(options(), "fifo", fair, true));
    ASSERT_TRUE(redislock_test::eventually([&] { return zcard(holder.key()) == i + 1; })) << "waiter " << i;
  }
  holder.unlock();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(writers[i]->got_in_within(seconds(5))) << "waiter " << i;
    EXPECT_EQ(writers[i]->wakeups(), 1u);
    for (int j = i + 1; j < 4; ++j) {
      EXPECT_FALSE(writers[j]->got_in_within(milliseconds(0))) << j << " jumped " << i;
      EXPECT_EQ(writers[j]->wakeups(), 0u) << "a release woke waiter " << j << ", not only the head";
    }
    EXPECT_TRUE(writers[i]->finish());
  }
}

TEST_F(SharedTest, AReleaseWakesOnlyTheHead) {
  shared_mutex holder(*pool, "head");
  holder.lock();
  queued_waiter first(options(), "head", patient(), true);
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(holder.key()) == 1; }));
  queued_waiter second(options(), "head", patient(), true);
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(holder.key()) == 2; }));
  queued_waiter reader(options(), "head", patient(), false);
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(holder.key()) == 3; }));
  holder.unlock();
  ASSERT_TRUE(first.got_in_within(seconds(5)));
  EXPECT_EQ(first.wakeups(), 1u);
  EXPECT_EQ(second.wakeups(), 0u);
  EXPECT_EQ(reader.wakeups(), 0u);
  EXPECT_TRUE(first.finish());
  ASSERT_TRUE(second.got_in_within(seconds(5)));
  EXPECT_EQ(reader.wakeups(), 0u);
  EXPECT_TRUE(second.finish());
  ASSERT_TRUE(reader.got_in_within(seconds(5)));
}

TEST_F(SharedTest, ReadersQueuedBehindAWriterAreAdmittedTogetherByItsRelease) {
  shared_mutex holder(*pool, "run");
  holder.lock();
  holder.unlock();  // the release script is loaded now: a NOSCRIPT round would count twice below
  holder.lock();
  std::vector<std::unique_ptr<queued_waiter>> readers;
  for (int i = 0; i < 3; ++i) {
    readers.push_back(std::make_unique<queued_waiter>(options(), "run", patient(), false));
    ASSERT_TRUE(redislock_test::eventually([&] { return zcard(holder.key()) == i + 1; }));
  }
  queued_waiter writer(options(), "run", patient(), true);  // behind the readers: stays queued
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(holder.key()) == 4; }));
  reset_stats();
  holder.unlock();
  for (auto& r : readers) {
    ASSERT_TRUE(r->got_in_within(seconds(5)));
    EXPECT_EQ(r->wakeups(), 1u) << "each reader is told on its own channel";
  }
  // All three hold at once, admitted by the release alone: none of them sent an attempt.
  EXPECT_EQ(evalsha(), 1);
  EXPECT_EQ(zcard(holder.key()), 1);
  EXPECT_FALSE(writer.got_in_within(milliseconds(0)));
  for (auto& r : readers) EXPECT_TRUE(r->finish());
  ASSERT_TRUE(writer.got_in_within(seconds(5)));  // the last reader's release hands it over
  EXPECT_EQ(writer.wakeups(), 1u);
}

TEST_F(SharedTest, AQueuedWriterIsAdmittedAloneAfterTheLastReaderAndLaterReadersQueueBehindIt) {
  shared_mutex r1(*pool, "alone"), r2(*pool, "alone"), late(*pool, "alone");
  r1.lock_shared();
  r2.lock_shared();
  queued_waiter writer(options(), "alone", patient(), true);
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(r1.key()) == 1; }));
  EXPECT_FALSE(late.try_lock_shared()) << "a new reader entered past the queued writer";
  queued_waiter reader(options(), "alone", patient(), false);
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(r1.key()) == 2; }));
  r1.unlock_shared();  // a reader is still inside: nothing handed over
  EXPECT_FALSE(writer.got_in_within(milliseconds(0)));
  r2.unlock_shared();
  ASSERT_TRUE(writer.got_in_within(seconds(5)));
  EXPECT_EQ(writer.wakeups(), 1u);
  EXPECT_FALSE(reader.got_in_within(milliseconds(0)));
  EXPECT_EQ(reader.wakeups(), 0u);
  EXPECT_TRUE(writer.finish());
  ASSERT_TRUE(reader.got_in_within(seconds(5)));
  EXPECT_EQ(reader.wakeups(), 1u);
}

TEST_F(SharedTest, WaitingSendsNoCommandsHoweverLongTheHold) {
  shared_mutex holder(*pool, "quiet-wait", lease(seconds(20)));
  holder.lock();
  queued_waiter writer(options(), "quiet-wait", patient(), true);
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(holder.key()) == 1; }));
  queued_waiter reader(options(), "quiet-wait", patient(), false);
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(holder.key()) == 2; }));
  reset_stats();
  std::this_thread::sleep_for(milliseconds(1500));  // the observation: nothing may happen in it
  const std::string stats = admin->command({"INFO", "commandstats"})->str;
  std::istringstream lines(stats);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("cmdstat_", 0) != 0) continue;
    const std::string command = line.substr(8, line.find_first_of(":|") - 8);
    EXPECT_TRUE(command == "info" || command == "config") << "sent while waiting: " << line;
  }
  holder.unlock();
  ASSERT_TRUE(writer.got_in_within(seconds(5)));
  EXPECT_TRUE(writer.finish());
  ASSERT_TRUE(reader.got_in_within(seconds(5)));
}

TEST_F(SharedTest, DeadWaitersAreSkippedAndDropped) {
  shared_mutex holder(*pool, "dead");
  holder.lock();
  const std::string queue = holder.key() + ":squeue", waiters = holder.key() + ":swaiters";
  // Ahead of the live waiter: one whose place lapsed, one nobody listens for (crashed).
  admin->command({"ZADD", queue, "0", "lapsed:1:0", "0", "crashed:1:0"});
  admin->command({"HSET", waiters, "lapsed:1:0", std::to_string(server_now_ms() - 1) + ":30000:w1", "crashed:1:0",
                  std::to_string(server_now_ms() + 60000) + ":30000:r1"});
  queued_waiter live(options(), "dead", patient(), true);
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(holder.key()) == 3; }));
  holder.unlock();
  ASSERT_TRUE(live.got_in_within(seconds(5)));
  EXPECT_EQ(live.wakeups(), 1u);
  EXPECT_EQ(zcard(holder.key()), 0);
  EXPECT_FALSE(hexists(*admin, waiters, "lapsed:1:0"));
  EXPECT_FALSE(hexists(*admin, waiters, "crashed:1:0"));
  EXPECT_FALSE(hexists(*admin, holder.key(), "r:crashed:1:0")) << "a dead reader was admitted";
}

TEST_F(SharedTest, AQueuedWriterThatGivesUpLetsTheReadersBehindItIn) {
  shared_mutex inside(*pool, "gives-up");
  inside.lock_shared();
  queued_waiter writer(options(), "gives-up", patient(), true, milliseconds(600));
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(inside.key()) == 1; }));
  queued_waiter reader(options(), "gives-up", patient(), false);
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(inside.key()) == 2; }));
  EXPECT_FALSE(writer.finish());  // timed out: its "leave" admits the reader (and tells it)
  ASSERT_TRUE(reader.got_in_within(seconds(5)));
  EXPECT_EQ(reader.wakeups(), 1u);
  EXPECT_EQ(zcard(inside.key()), 0);
  inside.unlock_shared();
}

TEST_F(SharedTest, FairModeGivesALapsedLockToTheHeadNotToANewcomer) {
  lock_options fair = patient();
  fair.fair = true;
  shared_mutex holder(*pool, "fair-lapse", fair), newcomer(*pool, "fair-lapse", fair);
  holder.lock();
  queued_waiter head(options(), "fair-lapse", fair, true);
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(holder.key()) == 1; }));
  // The holder's lease ends now on the server's clock (its waiter sleeps on towards 30 s).
  admin->command({"HSET", holder.key(), "@wx", std::to_string(server_now_ms() - 1)});
  EXPECT_FALSE(newcomer.try_lock()) << "a newcomer jumped the queue";
  ASSERT_TRUE(head.got_in_within(seconds(5)));
  EXPECT_EQ(head.wakeups(), 1u);
  EXPECT_FALSE(newcomer.try_lock_shared());
  EXPECT_TRUE(head.finish());
  EXPECT_EQ(holder.unlock_and_report(), release_status::lease_expired);
  // Without fair, a lock found free goes to whoever asks first, as for the mutex.
  shared_mutex plain(*pool, "lapse"), other(*pool, "lapse");
  plain.lock();
  queued_waiter waiting(options(), "lapse", patient(), true);
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(plain.key()) == 1; }));
  admin->command({"HSET", plain.key(), "@wx", std::to_string(server_now_ms() - 1)});
  EXPECT_TRUE(other.try_lock());
  other.unlock();  // hands it to the waiter
  ASSERT_TRUE(waiting.got_in_within(seconds(5)));
}

TEST_F(SharedTest, ANoticeForAnEarlierWaitNeverCompletesALaterOne) {
  // One thread waits to write and gives up, then waits to read with the same owner id (it held
  // nothing in between, so its generation did not change). Notices naming its earlier wait, of
  // either side, arrive during the later one: they must not make it a holder.
  shared_mutex holder(*pool, "stale"), late(*pool, "stale");
  holder.lock();
  std::promise<std::string> owner_p;
  std::future<std::string> owner_f = owner_p.get_future();
  auto reader = std::async(std::launch::async, [&] {
    if (late.try_lock_for(milliseconds(50))) return std::string("acquired the write lock");
    owner_p.set_value(late.owner_id());
    if (late.try_lock_shared_for(milliseconds(1500))) return std::string("acquired the read lock");
    return std::string();
  });
  ASSERT_EQ(owner_f.wait_for(seconds(5)), std::future_status::ready);
  const std::string owner = owner_f.get();
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(holder.key()) == 1; }));
  const std::string channel = holder.key() + ":w:" + owner.substr(0, owner.rfind(':'));
  EXPECT_EQ(admin->command({"PUBLISH", channel, owner + " w1"})->integer, 1);
  EXPECT_EQ(admin->command({"PUBLISH", channel, owner + " r1"})->integer, 1);
  ASSERT_EQ(reader.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_EQ(reader.get(), "");
  EXPECT_FALSE(late.owns_shared());
  EXPECT_FALSE(hexists(*admin, holder.key(), "r:" + owner));
  holder.unlock();
}

// A hand-off counts the new hold's lease from the waiter's last "wait" attempt, which can be
// up to recheck_interval old: such a stale hold is confirmed with one owner-checked extend
// before it is renewed, so it starts out valid (not lost() by the clock) and renewed.
TEST_F(SharedTest, AHandOffAfterALongWaitStartsAValidRenewedHold) {
  lock_options o;
  o.lease = milliseconds(900);
  o.auto_renew = true;
  o.recheck_interval = seconds(20);  // the waiter's last "wait" is as old as the hold
  shared_mutex holder(*pool, "long-wait"), waiter(*pool, "long-wait", o);
  for (bool write : {true, false}) {
    SCOPED_TRACE(write ? "writer" : "reader");
    holder.lock();
    const std::uint64_t renewals = pool->watchdog().stats().renewals;
    auto waited = std::async(std::launch::async, [&]() -> std::string {
      if (!(write ? waiter.try_lock_for(seconds(30)) : waiter.try_lock_shared_for(seconds(30)))) return "not acquired";
      std::string problem;
      if (write ? waiter.lost() : waiter.lost_shared()) problem += " lost at once;";
      if (!(write ? waiter.still_held() : waiter.still_held_shared())) problem += " not held;";
      if (!pool->watchdog().wait_for_stats(
              seconds(20), [&](const watchdog_stats& s) { return s.renewals > renewals || s.lost > 0; }) ||
          (write ? waiter.lost() : waiter.lost_shared()))
        problem += " not renewed;";
      if ((write ? waiter.unlock_and_report() : waiter.unlock_shared_and_report()) != release_status::released)
        problem += " release;";
      return problem;
    });
    ASSERT_TRUE(redislock_test::eventually([&] { return zcard(holder.key()) == 1; }, seconds(20)));
    std::this_thread::sleep_for(milliseconds(1500));  // lets the waiter's queue attempt age past its lease
    holder.unlock();
    ASSERT_EQ(waited.wait_for(seconds(40)), std::future_status::ready);
    EXPECT_EQ(waited.get(), "");
  }
}

// A thread's hand-off channel goes when the thread ends: an object used from short-lived
// threads keeps no server subscription per thread that ever waited.
TEST_F(SharedTest, TheChannelsOfExitedThreadsAreNotKept) {
  shared_mutex holder(*pool, "thread-churn"), shared_by_threads(*pool, "thread-churn");
  holder.lock();
  for (int i = 0; i < 8; ++i) {
    std::thread([&] { EXPECT_FALSE(shared_by_threads.try_lock_shared_for(milliseconds(30))); }).join();
  }
  holder.unlock();
  auto channels = [&] { return admin->command({"PUBSUB", "CHANNELS", holder.key() + ":w:*"})->elements; };
  EXPECT_TRUE(redislock_test::eventually([&] { return channels() == 0; }))
      << channels() << " channels still subscribed for 8 exited threads";
}

// A wait whose "leave" never reached Redis leaves its place queued: the thread moves to a new
// owner name and drops its channel, so a release skips that place and the thread never finds a
// phantom hold "of its own" (a read hold would make its try_lock() an upgrade).
TEST_F(SharedTest, APlaceLeftByAFailedLeaveNeverBecomesAPhantomHoldOfTheThread) {
  if (version() < 60200) GTEST_SKIP() << "needs CLIENT PAUSE ... WRITE and CLIENT UNPAUSE (Redis 6.2)";
  lock_options o;
  o.recheck_interval = milliseconds(200);
  shared_mutex holder(*pool, "failed-leave", o), other(*pool, "failed-leave");
  client_options co = options();
  co.connection.command_timeout = milliseconds(300);
  client thread_client(co);
  shared_mutex t(thread_client, "failed-leave", o);
  holder.lock();
  std::promise<std::string> failed;
  std::promise<void> go;
  std::future<void> go_f = go.get_future();
  auto thread = std::async(std::launch::async, [&]() -> std::string {
    const std::string owner = t.owner_id();
    try {
      t.try_lock_shared_for(seconds(10));
      failed.set_value("");
      return "the wait did not fail";
    } catch (const std::exception&) {
      failed.set_value(owner);
    }
    go_f.wait_for(seconds(20));  // the thread lives on (its channel, if kept, still listens)
    if (t.owner_id() == owner) return "the thread kept its owner name";
    try {
      if (t.try_lock()) t.unlock();
    } catch (const std::exception& e) {
      return std::string("try_lock threw: ") + e.what();
    }
    return t.owns_shared() ? "the thread believes it reads" : "";
  });
  ASSERT_TRUE(redislock_test::eventually([&] { return zcard(holder.key()) == 1; }));
  admin->command({"CLIENT", "PAUSE", "30000", "WRITE"});  // its re-check and its "leave" time out
  auto failed_f = failed.get_future();
  const auto ended = failed_f.wait_for(seconds(10));
  admin->command({"CLIENT", "UNPAUSE"});
  ASSERT_EQ(ended, std::future_status::ready);
  const std::string owner = failed_f.get();
  ASSERT_NE(owner, "");
  if (zcard(holder.key()) != 1) {
    go.set_value();
    thread.get();
    GTEST_SKIP() << "the server ran the timed-out leave after all";
  }
  const std::string channel = holder.key() + ":w:" + owner.substr(0, owner.rfind(':'));
  EXPECT_TRUE(redislock_test::eventually([&] { return subscribers(channel) == 0; })) << "the thread still listens";
  holder.unlock();  // must skip the abandoned place
  EXPECT_FALSE(hexists(*admin, holder.key(), "r:" + owner)) << "a read hold was handed to a wait that ended";
  go.set_value();
  EXPECT_EQ(thread.get(), "");
  EXPECT_TRUE(other.try_lock()) << "nobody holds the lock as far as any client knows";
  if (other.owns_lock()) other.unlock();
}

// Readers and writers on separate clients with short timeouts (leaves, hand-offs racing
// leaves), both modes: no overlap is ever seen and nothing is left behind.
TEST_F(SharedTest, ReadersAndWritersWithShortTimeoutsNeverOverlap) {
  for (bool fair : {false, true}) {
    std::atomic<int> writers{0}, readers{0}, violations{0}, acquired{0}, timeouts{0};
    std::vector<std::thread> threads;
    const auto until = std::chrono::steady_clock::now() + seconds(4);
    for (int i = 0; i < 6; ++i) {
      threads.emplace_back([&, i] {
        client c(options());
        lock_options o;
        o.fair = fair;
        shared_mutex m(c, fair ? "short-timeouts-fair" : "short-timeouts", o);
        unsigned seed = 1234u + i;
        while (std::chrono::steady_clock::now() < until) {
          seed = seed * 1103515245u + 12345u;
          const bool write = (seed >> 16) % 3 == 0;
          const milliseconds t((seed >> 8) % 15);
          if (write) {
            if (!m.try_lock_for(t)) {
              ++timeouts;
              continue;
            }
            if (writers.fetch_add(1) != 0 || readers.load() != 0) ++violations;
            std::this_thread::sleep_for(std::chrono::microseconds((seed >> 4) % 2000));
            writers.fetch_sub(1);
            m.unlock();
          } else {
            if (!m.try_lock_shared_for(t)) {
              ++timeouts;
              continue;
            }
            readers.fetch_add(1);
            if (writers.load() != 0) ++violations;
            std::this_thread::sleep_for(std::chrono::microseconds((seed >> 4) % 2000));
            readers.fetch_sub(1);
            m.unlock_shared();
          }
          ++acquired;
        }
      });
    }
    for (auto& t : threads) t.join();
    std::printf("fair %d: acquired %d timeouts %d violations %d\n", fair, acquired.load(), timeouts.load(),
                violations.load());
    EXPECT_EQ(violations.load(), 0);
    EXPECT_GT(acquired.load(), 50);
    const std::string key = "redislock:{" + std::string(fair ? "short-timeouts-fair" : "short-timeouts") + "}";
    EXPECT_EQ(zcard(key), 0) << "queue entries left behind";
    EXPECT_LE(admin->command({"HLEN", key + ":swaiters"})->integer, 1) << "waiter fields left behind";
    EXPECT_EQ(admin->command({"EXISTS", key})->integer, 0) << "holds left behind";
  }
}

TEST_F(SharedTest, ANestedReadAfterTheReadHoldWasLostThrowsAndTakesNothing) {
  for (const bool is_try : {false, true}) {
    SCOPED_TRACE(is_try ? "try_lock_shared" : "lock_shared");
    shared_mutex m(*pool, is_try ? "lost-nested-read-try" : "lost-nested-read", lease(seconds(10)));
    m.lock_shared();
    admin->command({"DEL", m.key()});  // the read lease is gone, as if it had run out
    shared_mutex writer(*pool, m.name());
    ASSERT_TRUE(writer.try_lock());  // someone else wrote meanwhile: the outer read was not continuous
    writer.unlock();
    if (is_try) {
      EXPECT_THROW((void)m.try_lock_shared(), lock_error);
    } else {
      EXPECT_THROW(m.lock_shared(), lock_error);
    }
    EXPECT_TRUE(m.lost_shared());
    EXPECT_EQ(m.shared_count(), 1);
    EXPECT_EQ(admin->command({"EXISTS", m.key()})->integer, 0) << "the lost nested read took the lock again";
    EXPECT_EQ(m.unlock_shared_and_report(), release_status::lease_expired);
    EXPECT_FALSE(m.owns_shared());
  }
}

// A thread whose write hold was lost, and who reads after another writer, never reads under
// the lost write hold's cached token: the read is refused as a downgrade of a lost hold, and
// once the thread has let go of it a new read hold draws a token above that writer's.
TEST_F(SharedTest, AReadHoldTakenAfterTheWriteHoldWasLostDrawsAFreshFencingToken) {
  shared_mutex m(*pool, "stale-fence", lease(seconds(10))), other(*pool, "stale-fence", lease(seconds(10)));
  m.lock();
  const std::uint64_t lost_write = m.fencing_token();
  admin->command({"DEL", m.key()});  // the write lease is gone, as if it had run out
  ASSERT_TRUE(other.try_lock());
  const std::uint64_t between = other.fencing_token();
  other.unlock();
  ASSERT_GT(between, lost_write);
  EXPECT_THROW((void)m.try_lock_shared(), lock_error);  // a downgrade of the lost write hold
  EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
  ASSERT_TRUE(m.try_lock_shared());  // a new hold: the lock was free
  EXPECT_GT(m.fencing_token(), between) << "the new read hold reports the lost write hold's token";
  m.unlock_shared();
}

// A downgrade (lock_shared() while writing) continues the write hold as a read hold with no
// writer in between. When the write hold was lost meanwhile and another writer held the lock,
// it must not quietly become a fresh read hold taken after that writer.
TEST_F(SharedTest, ADowngradeAfterTheWriteHoldWasLostThrowsAndTakesNothing) {
  shared_mutex m(*pool, "lost-downgrade", lease(seconds(10))), other(*pool, "lost-downgrade");
  m.lock();
  admin->command({"DEL", m.key()});  // the write lease is gone, as if it had run out
  ASSERT_TRUE(other.try_lock());     // someone else wrote meanwhile
  other.unlock();
  EXPECT_THROW(m.lock_shared(), lock_error);
  EXPECT_TRUE(m.lost());
  EXPECT_FALSE(m.owns_shared());
  EXPECT_EQ(admin->command({"EXISTS", m.key()})->integer, 0) << "the lost downgrade took a read hold";
  if (m.owns_shared()) m.unlock_shared();
  EXPECT_EQ(m.unlock_and_report(), release_status::lease_expired);
}

// As Semaphore.AHandOffNoticeReadAfterARefusedAttemptIsNotAHold, for the shared mutex's write
// side: the lock was handed to the frozen writer, its lease ran out, c took it; the writer's
// next "wait" is refused, and the old notice must not make it the holder.
TEST_F(SharedTest, AHandOffNoticeReadAfterARefusedAttemptIsNotAHold) {
  auto freezer = std::make_shared<redislock_test::freeze_at_first_timer_wake>("stale-notice");
  const redislock_test::observer_installed observing(freezer);
  shared_mutex h(*pool, "stale-notice", lease(seconds(20)));
  h.lock();
  redislock::client other(options());
  lock_options short_lease = lease(milliseconds(300));
  short_lease.recheck_interval = milliseconds(100);
  shared_mutex w(other, "stale-notice", short_lease);
  std::future<bool> got = std::async(std::launch::async, [&] { return w.try_lock_for(seconds(3)); });
  std::future<void> frozen = freezer->frozen.get_future();
  ASSERT_EQ(frozen.wait_for(seconds(10)), std::future_status::ready);
  h.unlock();  // hands the write hold to w and publishes the notice
  redislock::client third(options());
  shared_mutex c(third, "stale-notice", lease(seconds(20)));
  ASSERT_TRUE(redislock_test::eventually([&] { return c.try_lock(); }));  // once w's 300 ms ran out
  freezer->go.set_value();
  ASSERT_EQ(got.wait_for(seconds(15)), std::future_status::ready);
  const bool w_holds = got.get();
  EXPECT_TRUE(c.still_held());
  EXPECT_FALSE(w_holds && !w.still_held()) << "w believes it holds the write side while c holds it";
  if (w_holds) w.unlock();
  c.unlock();
}

}  // namespace test_shared_mutex
