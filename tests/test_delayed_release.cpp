// A release whose reply was lost (unlock() recorded `failed`) may still reach the server
// later. Every outermost acquisition must have an identity no earlier one had, so that such a
// late release can never remove a later hold of the same object and thread: otherwise a
// second owner gets in while this one believes it holds a valid lease.
//
// The late release is the exact script call the library sends (same script, KEYS and ARGV),
// replayed on an admin connection after the re-acquisition.
#include "eventually.hpp"
#include "server_fixture.hpp"
#include "tcp_proxy.hpp"

#include <redislock/redislock.hpp>

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

namespace test_delayed_release {

using namespace redislock;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

struct DelayedRelease : redislock_test::server_test {
  // A client whose connections go through `proxy`, with short timeouts.
  client_options through(const redislock_test::tcp_proxy& proxy) {
    client_options o = options();
    o.connection.port = proxy.port();
    o.connection.connect_timeout = milliseconds(300);
    o.connection.command_timeout = milliseconds(300);
    return o;
  }
  // The release cannot reach the server: the connection is cut and new ones are refused.
  template <class Unlock>
  void release_lost(redislock_test::tcp_proxy& proxy, Unlock unlock) {
    proxy.set_refusing(true);
    proxy.cut_all();
    unlock();
    proxy.set_refusing(false);
  }
  // Replays a script call as the library sent it.
  long long replay(const script& s, std::vector<std::string> keys, std::vector<std::string> args) {
    s.load(*admin);  // the release never ran, so its script may not be cached yet
    std::vector<std::string> argv = {"EVALSHA", s.sha1(), std::to_string(keys.size())};
    argv.insert(argv.end(), keys.begin(), keys.end());
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string_view> views(argv.begin(), argv.end());
    reply_ptr r = admin->command(views);
    return r->integer;
  }
  // Whether `owner` has a read hold in the shared lock at `key`.
  bool reads(const std::string& key, const std::string& owner) {
    return admin->command({"HEXISTS", key, "r:" + owner})->integer == 1;
  }
  std::vector<std::string> fields(const std::string& key) {
    reply_ptr r = admin->command({"HKEYS", key});
    std::vector<std::string> out;
    for (std::size_t i = 0; i < r->elements; ++i) out.emplace_back(r->element[i]->str, r->element[i]->len);
    return out;
  }
};

TEST_F(DelayedRelease, ALateReleaseOfAnEarlierReentrantHoldCannotRemoveALaterOne) {
  redislock_test::tcp_proxy proxy(server->port());
  client c(through(proxy));
  reentrant_mutex r(c, "late-r", lease(milliseconds(400)));
  ASSERT_TRUE(r.try_lock());
  const std::string first_owner = r.owner_id();
  release_lost(proxy, [&] { r.unlock(); });
  ASSERT_EQ(r.last_release(), release_status::failed);
  // The same thread takes the lock again (once the lost hold's lease has run out, if the new
  // hold is a different owner).
  ASSERT_TRUE(r.try_lock_for(seconds(5)));
  // Now the lost release arrives.
  replay(detail::reentrant_scripts::release(), {r.key(), r.key() + ":fence"},
         {first_owner, r.key() + ":released", "0"});
  // The later hold is intact: nobody else gets in.
  reentrant_mutex other(*pool, "late-r", lease(seconds(5)));
  EXPECT_FALSE(other.try_lock()) << "a second owner got in while the first still holds the lock";
  EXPECT_TRUE(r.still_held());
  r.unlock();
  EXPECT_EQ(r.last_release(), release_status::released);
}

TEST_F(DelayedRelease, ALateReleaseOfAnEarlierWriteHoldCannotRemoveALaterOne) {
  redislock_test::tcp_proxy proxy(server->port());
  client c(through(proxy));
  shared_mutex s(c, "late-s", lease(milliseconds(400)));
  ASSERT_TRUE(s.try_lock());
  const std::string first_owner = s.owner_id();
  release_lost(proxy, [&] { s.unlock(); });
  ASSERT_EQ(s.last_release(), release_status::failed);
  ASSERT_TRUE(s.try_lock_for(seconds(5)));
  replay(detail::shared_scripts::release(), {s.key(), s.key() + ":fence"}, {first_owner, s.key() + ":released"});
  shared_mutex other(*pool, "late-s", lease(seconds(5)));
  EXPECT_FALSE(other.try_lock_shared()) << "a reader got in while the writer still holds the lock";
  EXPECT_FALSE(other.try_lock()) << "a second writer got in";
  EXPECT_TRUE(s.still_held());
  s.unlock();
  EXPECT_EQ(s.last_release(), release_status::released);
}

TEST_F(DelayedRelease, ALateReleaseOfAnEarlierReadHoldCannotRemoveALaterOne) {
  redislock_test::tcp_proxy proxy(server->port());
  client c(through(proxy));
  shared_mutex s(c, "late-sr", lease(milliseconds(400)));
  ASSERT_TRUE(s.try_lock_shared());
  const std::string first_owner = s.owner_id();
  release_lost(proxy, [&] { s.unlock_shared(); });
  ASSERT_EQ(s.last_release(), release_status::failed);
  ASSERT_TRUE(s.try_lock_shared_for(seconds(5)));
  replay(detail::shared_scripts::release_shared(), {s.key(), s.key() + ":fence"},
         {first_owner, s.key() + ":released", "0"});
  shared_mutex writer(*pool, "late-sr", lease(seconds(5)));
  EXPECT_FALSE(writer.try_lock()) << "a writer got in while a reader still holds the lock";
  EXPECT_TRUE(s.still_held_shared());
  s.unlock_shared();
  EXPECT_EQ(s.last_release(), release_status::released);
}

TEST_F(DelayedRelease, ALateReleaseOfAnEarlierMutexHoldCannotRemoveALaterOne) {
  redislock_test::tcp_proxy proxy(server->port());
  client c(through(proxy));
  mutex m(c, "late-m", lease(milliseconds(400)));
  ASSERT_TRUE(m.try_lock());
  const std::string first_token = get(m.key());
  release_lost(proxy, [&] { m.unlock(); });
  ASSERT_EQ(m.last_release(), release_status::failed);
  ASSERT_TRUE(m.try_lock_for(seconds(5)));
  replay(detail::mutex_scripts::release(), {m.key(), m.key() + ":fence", m.key() + ":queue", m.key() + ":waiters"},
         {first_token, m.key() + ":w:"});
  mutex other(*pool, "late-m", lease(seconds(5)));
  EXPECT_FALSE(other.try_lock());
  EXPECT_TRUE(m.still_held());
  m.unlock();
  EXPECT_EQ(m.last_release(), release_status::released);
}

// The thread keeps its owner name while it still writes (downgrade), so a lost release of its
// earlier read hold names the same owner as its next read hold. Once the write hold is gone
// that late release must not remove the later read hold (a writer would get in while the
// thread still reads), nor a late renewal shorten it (the thread would believe a longer lease
// than the server keeps). Read holds are numbered: g:<owner>.
TEST_F(DelayedRelease, ALateReleaseOrRenewalOfAnEarlierDowngradedReadCannotTouchALaterRead) {
  redislock_test::tcp_proxy proxy(server->port());
  client c(through(proxy));
  shared_mutex s(c, "late-down", lease(seconds(5)));
  ASSERT_TRUE(s.try_lock());
  ASSERT_TRUE(s.try_lock_shared());  // downgrade: the writer reads too
  const std::string owner = s.owner_id();
  const std::string read_hold = redislock_test::hget(*admin, s.key(), "g:" + owner);  // what its release names
  release_lost(proxy, [&] { s.unlock_shared(); });
  ASSERT_EQ(s.last_release(), release_status::failed);
  ASSERT_TRUE(s.try_lock_shared_for(seconds(5)));  // a new read hold, still writing: same owner
  ASSERT_EQ(s.owner_id(), owner);
  s.unlock();  // the write hold ends; the read hold goes on
  ASSERT_EQ(s.last_release(), release_status::released);
  ASSERT_TRUE(s.owns_shared());
  const std::vector<std::string> keys = {s.key(), s.key() + ":fence", s.key() + ":squeue", s.key() + ":swaiters"};
  // A late renewal of the earlier read hold (an extend_shared(1 ms) of it, say) changes
  // nothing either: the later read hold keeps its lease.
  EXPECT_EQ(replay(detail::shared_scripts::extend(), keys, {owner, s.key() + ":w:", "1", "read", read_hold}), 0);
  EXPECT_GT(s.remaining_shared_lease(), seconds(1)) << "a late renewal of the earlier read hold cut the later one";
  replay(detail::shared_scripts::release_shared(), keys, {owner, s.key() + ":w:", "0", read_hold});
  shared_mutex writer(*pool, "late-down", lease(seconds(5)));
  EXPECT_FALSE(writer.try_lock()) << "a writer got in while the thread still holds its read hold";
  EXPECT_TRUE(s.still_held_shared());
  if (writer.owns_lock()) writer.unlock();
  s.unlock_shared();
}

// A nested lock_shared() whose attempt fails after it was sent (its reply lost) leaves the
// queue with "leave", which finds the thread's own read hold and reports it acquired; the
// failing wait then releases what it took, as for an outermost acquisition, with count 0:
// the outer read hold the thread still counts is gone from the server, and a writer gets in
// while the thread reads.
TEST_F(DelayedRelease, AFailedNestedReadNeverReleasesTheOuterReadHold) {
  redislock_test::tcp_proxy proxy(server->port());
  client c(through(proxy));
  shared_mutex s(c, "nested-fail", lease(seconds(10)));
  {
    // The thread waits once (for a writer), so its channel stays subscribed: its next
    // acquisition, the nested one, queues at once ("wait").
    shared_mutex w(*pool, "nested-fail", lease(seconds(10)));
    std::promise<bool> writing;
    auto release = std::async(std::launch::async, [&] {  // holds belong to threads: one thread writes
      writing.set_value(w.try_lock());
      const bool queued = redislock_test::eventually([&] {
        return admin->command({"ZCARD", s.key() + ":squeue"})->integer == 1;
      });
      w.unlock();
      return queued;
    });
    ASSERT_TRUE(writing.get_future().get());
    ASSERT_TRUE(s.try_lock_shared_for(seconds(10)));
    ASSERT_TRUE(release.get());
    ASSERT_EQ(c.wait_stats().wakeups, 1u) << "admitted by the writer's release";
  }
  const std::string owner = s.owner_id();
  ASSERT_TRUE(reads(s.key(), owner));
  proxy.hold_open();  // the nested attempt waits in the proxy: the client times out
  EXPECT_THROW(s.lock_shared(), error);
  EXPECT_EQ(s.shared_count(), 1);
  EXPECT_FALSE(s.lost_shared());
  EXPECT_TRUE(reads(s.key(), owner)) << "the failed nested read released the outer read hold on the server";
  shared_mutex writer(*pool, "nested-fail", lease(seconds(5)));
  EXPECT_FALSE(writer.try_lock()) << "a writer got in while the thread still holds its outer read";
  if (writer.owns_lock()) writer.unlock();
  s.unlock_shared();
  proxy.cut_all();  // drops the held nested attempt (and frees the subscriber's connection)
}

}  // namespace

}  // namespace test_delayed_release
