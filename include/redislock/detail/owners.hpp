#pragma once
/// @file detail/owners.hpp
/// @brief Per-thread owners of one lock object (reentrant and shared locks).
///
/// A reentrant or shared lock object may be used by several threads at once; each thread is
/// a distinct owner on the server. Its name is "<instance>:<thread serial>:<generation>":
/// 128 random bits drawn when the object is made, a serial number that no other thread of this
/// process ever gets (thread ids are reused after a thread exits; serials are not), and a
/// generation that goes up each time the thread's holds on the object all end. So every
/// outermost acquisition has a name no earlier one had: a release or renewal of an earlier
/// hold that reaches the server late (its reply was lost, the call failed) finds nothing of
/// that name and changes nothing. The name changes only once the thread holds nothing, never
/// after an acquisition that failed: an attempt whose reply was lost is still recognised as
/// the thread's own by the next attempt, as for the mutex's token.

#include <redislock/connection.hpp>
#include <redislock/detail/random.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/reply.hpp>
#include <redislock/script.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace redislock::detail {

/// The calling thread's serial number: unique for the life of the process.
inline std::uint64_t thread_serial() noexcept {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t serial = next.fetch_add(1, std::memory_order_relaxed);
  return serial;
}

/// The keys of one lock (layout in detail/*_scripts.hpp). Validates name and options.
struct lock_keys {
  lock_keys(std::string_view name, const lock_options& o)
      : lock((validate(name, o), base_key(name, o))),
        fence(lock + ":fence"),
        channel(lock + ":released"),
        lease_ms(std::to_string(o.lease.count())) {}
  std::string lock, fence, channel, lease_ms;
};

/// Checks an explicit lease (extend) and returns it as a script argument.
inline std::string lease_arg(std::chrono::milliseconds lease, const char* what) {
  if (lease.count() <= 0 || lease > max_lease)
    throw invalid_argument(std::string(what) + ": lease must be in (0, max_lease]");
  return std::to_string(lease.count());
}

/// A remaining-lease script reply (ms; -1 no expiry; -2 not ours) as a duration.
inline std::chrono::milliseconds to_remaining(std::int64_t ms) noexcept {
  if (ms == -1) return max_lease;
  return std::chrono::milliseconds(ms > 0 ? ms : 0);
}

/// Tells every owner table when a thread that used it exits (see owner_table).
class thread_exits {
 public:
  struct listener {
    virtual void thread_exited(std::uint64_t serial) noexcept = 0;

   protected:
    ~listener() = default;
  };
  static thread_exits& instance() {
    static thread_exits* hub = new thread_exits();  // never destroyed: threads may exit after main
    return *hub;
  }
  void add(listener* l) {
    std::lock_guard<std::mutex> g(m_);
    listeners_.push_back(l);
  }
  /// Returns once no thread exit is telling `l` anything.
  void remove(listener* l) noexcept {
    std::lock_guard<std::mutex> g(m_);
    listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), l), listeners_.end());
  }
  /// Makes sure the calling thread tells the listeners when it exits.
  void watch_this_thread() {
    thread_local const notifier n{*this};
    (void)n;
  }

 private:
  struct notifier {
    thread_exits& hub;
    ~notifier() {
      const std::uint64_t serial = thread_serial();
      std::lock_guard<std::mutex> g(hub.m_);
      for (listener* l : hub.listeners_) l->thread_exited(serial);
    }
  };
  std::mutex m_;
  std::vector<listener*> listeners_;
};

/// Each thread's local view of its holds on one lock object, keyed by thread serial.
/// Entries stay after release (they keep the last fencing token); one per thread that used
/// the object. State has `bool idle() const` (the thread holds nothing) and
/// `void stop_renewals() noexcept`.
///
/// Holds belong to threads, as with std::recursive_mutex: only the thread that locked can
/// unlock (another thread's unlock() records release_status::not_held and sends nothing). A
/// thread that exits while it still holds stops renewing its holds (stop_renewals(), on the
/// exiting thread), so they end with their lease instead of living as long as the object.
template <class State>
class owner_table : private thread_exits::listener {
 public:
  owner_table() : instance_(random_token()) { thread_exits::instance().add(this); }
  ~owner_table() { thread_exits::instance().remove(this); }
  owner_table(const owner_table&) = delete;
  owner_table& operator=(const owner_table&) = delete;

  /// The calling thread's current owner name (see the file comment).
  std::string owner_id() const {
    std::lock_guard<std::mutex> g(m_);
    auto it = states_.find(thread_serial());
    return name(thread_serial(), it == states_.end() ? 0 : it->second.generation);
  }

  /// A copy of the calling thread's state (default-constructed when it never used the object).
  State mine() const {
    std::lock_guard<std::mutex> g(m_);
    auto it = states_.find(thread_serial());
    return it == states_.end() ? State{} : it->second.state;
  }
  /// Replaces the calling thread's state. When its last hold ends here, its next outermost
  /// acquisition gets a new owner name.
  void set_mine(const State& s) {
    if (!s.idle()) thread_exits::instance().watch_this_thread();
    std::lock_guard<std::mutex> g(m_);
    entry& e = states_[thread_serial()];
    if (!e.state.idle() && s.idle()) ++e.generation;
    e.state = s;
  }
  /// f(owner name, state&) for every thread's state (under the table's lock).
  template <class F>
  void for_each(F&& f) {
    std::lock_guard<std::mutex> g(m_);
    for (auto& [serial, e] : states_) f(name(serial, e.generation), e.state);
  }

 private:
  void thread_exited(std::uint64_t serial) noexcept override {
    std::lock_guard<std::mutex> g(m_);
    auto it = states_.find(serial);
    if (it != states_.end() && !it->second.state.idle()) it->second.state.stop_renewals();
  }

  struct entry {
    State state;
    std::uint64_t generation = 0;
  };
  std::string name(std::uint64_t serial, std::uint64_t generation) const {
    return instance_ + ":" + std::to_string(serial) + ":" + std::to_string(generation);
  }
  std::string instance_;
  mutable std::mutex m_;
  std::unordered_map<std::uint64_t, entry> states_;
};

/// Runs a lock script with KEYS = {lock, fence}; the reply is an integer. Keys: lock_keys or a
/// kind's own keys struct (members lock, fence).
template <class Client, class Keys = lock_keys>
std::int64_t run_integer(Client& client, const Keys& k, const script& s, std::initializer_list<std::string_view> args) {
  return client.run(k.lock, [&](connection& c) { return as_integer(*s.run(c, {k.lock, k.fence}, args)); });
}

/// Runs a lock script with KEYS = {lock, fence}; the reply is a pair of integers.
template <class Client, class Keys = lock_keys>
std::pair<std::int64_t, std::int64_t> run_pair(Client& client, const Keys& k, const script& s,
                                               std::initializer_list<std::string_view> args) {
  return client.run(k.lock, [&](connection& c) {
    reply_ptr r = s.run(c, {k.lock, k.fence}, args);
    return std::pair{as_integer(element(*r, 0)), as_integer(element(*r, 1))};
  });
}

/// The fencing token of the calling thread's current hold: drawn from the lock's counter on
/// the first call per hold (one round trip, script `s` with ARGV owner, channel; it replies 0
/// when the owner holds nothing on the server) and kept in State::fence until the thread's
/// holds all end. Throws lock_error when the thread holds nothing, or when its lease has run
/// out (after on_lost(state): write nothing then).
template <class Client, class Keys, class State, class OnLost>
std::uint64_t draw_fence(Client& client, const Keys& k, owner_table<State>& owners, const script& s,
                         const std::string& name, OnLost&& on_lost) {
  State h = owners.mine();
  if (h.idle()) throw lock_error("fencing_token: lock '" + name + "' is not held by this thread");
  if (h.fence != 0) return h.fence;
  const std::int64_t fence = run_integer(client, k, s, {owners.owner_id(), k.channel});
  if (fence <= 0) {
    on_lost(h);
    throw lock_error("fencing_token: the lease on lock '" + name + "' has run out");
  }
  h = owners.mine();  // only this thread changes its own state: the same hold
  h.fence = static_cast<std::uint64_t>(fence);
  owners.set_mine(h);
  return h.fence;
}

/// Records a release outcome in an atomic and returns it.
inline release_status record(std::atomic<release_status>& last, release_status s) noexcept {
  last.store(s, std::memory_order_release);
  return s;
}

/// Drops one local hold of the calling thread and asks the server to drop it too; the outcome
/// is recorded in `last`. drop(state&) returns false when there was no hold (nothing is sent);
/// send(owner, state) runs the release script and returns released or lease_expired (see
/// lease_keeper::outcome). Throws what send throws (after recording release_status::failed);
/// the local hold is gone either way.
template <class State, class Drop, class Send>
release_status release_one(owner_table<State>& owners, std::atomic<release_status>& last, Drop&& drop, Send&& send) {
  State s = owners.mine();
  if (!drop(s)) return record(last, release_status::not_held);
  const std::string owner = owners.owner_id();  // the hold's name, before set_mine may renew it
  owners.set_mine(s);
  try {
    return record(last, send(owner, s));
  } catch (...) {
    record(last, release_status::failed);
    throw;
  }
}

}  // namespace redislock::detail
