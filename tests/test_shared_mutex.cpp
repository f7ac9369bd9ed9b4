// redislock::shared_mutex against a real redis-server: overlapping readers, exclusive writers,
// writer preference under a reader flood, downgrade, refused upgrade, per-reader leases
// (a killed reader), stale releases, wrong kinds, guards and round-trip counts.
#include "server_fixture.hpp"
#include "worker_process.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

using namespace redislock;
using redislock_test::command_calls;
using redislock_test::hash_fields;
using redislock_test::hexists;
using std::chrono::milliseconds;
using std::chrono::seconds;

using SharedTest = redislock_test::server_test;

namespace {

/// A countdown every thread reaches; wait() returns false when `timeout` passed first.
class latch {
 public:
  explicit latch(int n) : left_(n) {}
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

}  // namespace

TEST_F(SharedTest, ReadersReallyOverlap) {
  constexpr int readers = 4;
  // Threads sharing one object (each thread is its own owner) and threads with their own objects.
  for (bool one_object : {true, false}) {
    shared_mutex common(*pool, "overlap");
    latch all_inside(readers);
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
  latch flooding(readers + 1);
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

TEST_F(SharedTest, ACrashedWaitingWriterBlocksNewReadersOnlyBriefly) {
  lock_options slow_retry;
  slow_retry.retry_max = milliseconds(500);
  slow_retry.wait_lease = milliseconds(1000);  // the marker lasts max(wait_lease, 3 x retry_max + 100 ms) = 1.6 s
  shared_mutex r(*pool, "marker"), w(*pool, "marker", slow_retry), late(*pool, "marker");
  r.lock_shared();
  EXPECT_FALSE(w.try_lock());  // a single attempt does not wait, so it leaves no marker
  EXPECT_FALSE(hexists(*admin, r.key(), "@wq"));
  EXPECT_FALSE(w.try_lock_for(milliseconds(30)));  // waits: leaves the marker, then "crashes"
  EXPECT_TRUE(hexists(*admin, r.key(), "@wq"));
  EXPECT_FALSE(late.try_lock_shared());                // queued behind the waiting writer
  EXPECT_TRUE(r.try_lock_shared());                    // re-entry by a reader inside is admitted
  EXPECT_TRUE(late.try_lock_shared_for(seconds(10)));  // once the marker lapses
  late.unlock_shared();
  r.unlock_shared();
  r.unlock_shared();
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
  std::thread([&] { EXPECT_EQ(a.release_shared(), release_status::not_held); }).join();
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
  EXPECT_EQ(a.release(), release_status::not_held);  // nor did it: the write side sends nothing
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

TEST_F(SharedTest, ReleasesPublish) {
  shared_mutex m(*pool, "publish");
  connection sub(server->options());
  sub.command({"SUBSCRIBE", m.key() + ":released"});
  auto expect_message = [&] {
    reply_ptr msg = sub.read_reply();  // bounded by the connection's command timeout
    ASSERT_EQ(msg->type, REDIS_REPLY_ARRAY);
    EXPECT_EQ(std::string(msg->element[0]->str), "message");
  };
  m.lock();
  m.unlock();
  expect_message();
  m.lock_shared();
  m.unlock_shared();
  expect_message();
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
