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
///
/// Only the bookkeeping of owners lives here; the kinds' shared skeleton (and the helpers that
/// run their scripts) is in detail/lock_core.hpp.

#include <redislock/detail/random.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
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
  /// The calling thread gave up a wait while it holds nothing: its next acquisition gets a new
  /// owner name, so nothing meant for the abandoned one (a hand-off still on its way) matches it.
  void next_generation() {
    std::lock_guard<std::mutex> g(m_);
    entry& e = states_[thread_serial()];
    if (e.state.idle()) ++e.generation;
  }
  /// f(state&) for the state of the thread with that serial, when it has one (under the
  /// table's lock: f must not take a lock that is ever held while calling into the table).
  template <class F>
  void update(std::uint64_t serial, F&& f) {
    std::lock_guard<std::mutex> g(m_);
    auto it = states_.find(serial);
    if (it != states_.end()) f(it->second.state);
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

}  // namespace redislock::detail
