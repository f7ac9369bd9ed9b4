#pragma once
// The lock objects the model checker drives, behind one interface: every kind of the public
// API (mutex, fair mutex, reentrant with nesting, shared read and write, Redlock, semaphore,
// election; the async mutex in async_subject.hpp) and, for the
// checker's self-tests, deliberately broken kinds (test-only code) that it must catch:
//   broken_stealing        try_lock() sometimes "succeeds" without asking the server;
//   broken_optimistic      remaining_lease() reports more than the server has left;
//   broken_deaf            try_lock_for() never acquires, even a free name;
//   broken_redlock_extend  validity() after a shorter extend keeps the longer validity of
//                          before (the max() that basic_redlock::extend_hold once had);
//   broken_semaphore       a semaphore made with one permit more than the checker allows;
//   broken_unrenewed       a mutex that, without auto_renew, reports no lease end and is never
//                          lost() (the hold that forgot its lease: issue 39, item 2);
//   broken_never_lost      the same, but it reports the library's lease end (lost() stays
//                          false after it has passed);
//   broken_async_extend    (async_subject.hpp) an async mutex whose lease_confirmed_until()
//                          keeps the later end when an extend shortens it (issue 39, item 1).
//
// Extreme durations (issue 39, item 3): which call an acquisition makes depends on the op's
// identity (extreme_variant), not on the generator's random stream, so that histories and
// replays of every seed stay as they were. A third of the lock() calls become
// try_lock_for(max()) of one of several periods (must act as lock(): never false; the
// election also first waits for a change of the leader it sees, with max()), a third of the
// try_lock() calls try_lock_for(0) (held to the deadline of try_lock: the slack).

#include "history.hpp"
#include "mutex_access.hpp"  // the mutex's owner token, for the observer

#include <redislock/redislock.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <ratio>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace redislock_model {

/// Every semaphore of a run is made with this many permits; the overlap check allows that many
/// certainly-valid holders of a semaphore's name at once.
inline constexpr int semaphore_permits = 2;

using std::chrono::milliseconds;
using clients = std::vector<std::reference_wrapper<redislock::client>>;

/// Which form an acquisition takes (see the top): 0 the plain call; 1..4 a timed call with an
/// extreme duration: 1 hours::max(), 2 milliseconds::max(), 3 nanoseconds::max(), 4 300 years
/// (more than nanoseconds::max()), or those periods' zero. By the op's identity (thread,
/// index, name): stable under shrinking.
inline int extreme_variant(int thread, int index, int name) {
  const unsigned h = static_cast<unsigned>(thread * 7919 + index * 104729 + name * 1299709) * 2654435761u;
  const unsigned v = (h >> 16) % 12;
  return v < 8 ? 0 : static_cast<int>(v - 7);  // a third of the calls: 1..4
}

using years = std::chrono::duration<long long, std::ratio<31556952>>;  // as C++20's

/// f(the duration of `variant` (1..4): its period's max(), or zero).
template <class F>
auto with_extreme(int variant, bool zero, F&& f) {
  switch (variant) {
    case 1: return f(zero ? std::chrono::hours::zero() : std::chrono::hours::max());
    case 2: return f(zero ? std::chrono::milliseconds::zero() : std::chrono::milliseconds::max());
    case 3: return f(zero ? std::chrono::nanoseconds::zero() : std::chrono::nanoseconds::max());
    default: return f(zero ? years::zero() : years(300));  // past nanoseconds::max() too
  }
}

inline std::string extreme_name(int variant, bool zero) {
  static const char* const periods[] = {"", "hours", "milliseconds", "nanoseconds", "years"};
  if (variant == 4 && !zero) return "years(300)";
  return std::string(periods[variant]) + (zero ? "::zero()" : "::max()");
}

class subject {
 public:
  virtual ~subject() = default;
  /// The form of the next acquire() (extreme_variant); 0: the plain call.
  void set_variant(int v) { variant_ = v; }
  /// What an extreme-duration call did that it must not (an unbounded wait that gave up); "".
  std::string take_extreme_failure() { return std::exchange(extreme_failure_, {}); }
  virtual bool acquire(acquire_mode mode, milliseconds timeout, bool write) = 0;
  virtual bool extend(milliseconds lease) = 0;
  virtual std::uint64_t fencing_token() = 0;
  virtual bool still_held() = 0;
  virtual milliseconds remaining() = 0;
  virtual redislock::release_status unlock() = 0;  // one level; noexcept in the library
  virtual bool owns() const = 0;
  virtual bool lost() const = 0;
  virtual int depth() const { return owns() ? 1 : 0; }
  virtual bool writing() const { return true; }
  /// How the server names this hold (mutex: token; reentrant, shared: owner id; Redlock: token).
  virtual std::string owner() const = 0;
  /// lease_confirmed_until() of this hold (of its side, for the shared mutex).
  virtual std::optional<std::chrono::steady_clock::time_point> confirmed_until() const = 0;

 protected:
  int variant_ = 0;
  std::string extreme_failure_;
};

// try_lock() / lock() as the variant has it (try_lock_for of an extreme duration); an unbounded
// try_lock_for(max()) that returns false is recorded as the extreme failure.
template <class Lock>
bool acquire_with(Lock& l, acquire_mode mode, milliseconds timeout, int variant = 0, std::string* failure = nullptr) {
  if (mode == acquire_mode::try_for) return l.try_lock_for(timeout);
  const bool zero = mode == acquire_mode::try_once;
  if (variant > 0) {
    const bool ok = with_extreme(variant, zero, [&](auto d) { return l.try_lock_for(d); });
    if (!ok && !zero && failure) *failure = "try_lock_for(" + extreme_name(variant, zero) + ") returned false";
    return ok;
  }
  if (zero) return l.try_lock();
  l.lock();
  return true;
}

template <class Lock>
class exclusive_subject : public subject {
 public:
  template <class... A>
  explicit exclusive_subject(A&&... a) : lock_(std::forward<A>(a)...) {}
  bool acquire(acquire_mode mode, milliseconds timeout, bool) override {
    return acquire_with(lock_, mode, timeout, std::exchange(variant_, 0), &extreme_failure_);
  }
  bool extend(milliseconds lease) override { return lock_.extend(lease); }
  std::uint64_t fencing_token() override { return lock_.fencing_token(); }
  bool still_held() override { return lock_.still_held(); }
  milliseconds remaining() override { return lock_.remaining_lease(); }
  redislock::release_status unlock() override {
    lock_.unlock();
    return lock_.last_release();
  }
  bool owns() const override { return lock_.owns_lock(); }
  bool lost() const override { return lock_.lost(); }
  std::string owner() const override { return owner_of(lock_); }
  std::optional<std::chrono::steady_clock::time_point> confirmed_until() const override {
    return lock_.lease_confirmed_until();
  }

 protected:
  template <class Client>
  static std::string owner_of(const redislock::basic_mutex<Client>& l) {
    return redislock::detail::mutex_test_access::token(l);
  }
  static std::string owner_of(const redislock::redlock& l) { return l.token(); }
  template <class Client>
  static std::string owner_of(const redislock::basic_reentrant_mutex<Client>& l) {
    return l.owner_id();
  }
  template <class Client>
  static std::string owner_of(const redislock::basic_semaphore<Client>& l) {
    return l.owner_id();
  }
  template <class Client>
  static std::string owner_of(const redislock::basic_election<Client>& l) {
    return l.owner_id();
  }

  Lock lock_;
};

// The same members; holds nest (hold_count) and belong to the thread (owner_id).
template <class Client>
class reentrant_subject final : public exclusive_subject<redislock::basic_reentrant_mutex<Client>> {
 public:
  using exclusive_subject<redislock::basic_reentrant_mutex<Client>>::exclusive_subject;
  int depth() const override { return static_cast<int>(this->lock_.hold_count()); }
};

// Campaigns with a value that names the thread's object; the term is the fencing token.
template <class Client>
class election_subject final : public exclusive_subject<redislock::basic_election<Client>> {
 public:
  using exclusive_subject<redislock::basic_election<Client>>::exclusive_subject;
  bool acquire(acquire_mode mode, milliseconds timeout, bool) override {
    auto& e = this->lock_;
    const std::string value = "model-" + e.owner_id();
    const int variant = std::exchange(this->variant_, 0);
    if (mode == acquire_mode::try_for) return e.try_campaign_for(value, timeout);
    const bool zero = mode == acquire_mode::try_once;
    if (variant > 0) {
      // wait_for_change_for: with 0 it returns at once; with max() it waits for the leader seen
      // to change (as campaign() waits for it to go: no leader, no wait), never false.
      std::optional<redislock::leader_info> seen = e.leader();
      if (zero || seen) {
        const bool changed = with_extreme(variant, zero, [&](auto d) { return e.wait_for_change_for(seen, d); });
        if (!changed && !zero)
          this->extreme_failure_ = "wait_for_change_for(" + extreme_name(variant, zero) + ") returned false";
      }
      const bool ok = with_extreme(variant, zero, [&](auto d) { return e.try_campaign_for(value, d); });
      if (!ok && !zero) this->extreme_failure_ = "try_campaign_for(" + extreme_name(variant, zero) + ") returned false";
      return ok;
    }
    if (zero) return e.try_campaign(value);
    e.campaign(value);
    return true;
  }
};

template <class Client>
class shared_subject final : public subject {
 public:
  shared_subject(Client& c, const std::string& name, const redislock::lock_options& o) : lock_(c, name, o) {}
  bool acquire(acquire_mode mode, milliseconds timeout, bool write) override {
    const int variant = std::exchange(variant_, 0);
    if (write) return acquire_with(lock_, mode, timeout, variant, &extreme_failure_);
    if (variant > 0 && mode != acquire_mode::try_for) {
      const bool zero = mode == acquire_mode::try_once;
      const bool ok = with_extreme(variant, zero, [&](auto d) { return lock_.try_lock_shared_for(d); });
      if (!ok && !zero) extreme_failure_ = "try_lock_shared_for(" + extreme_name(variant, zero) + ") returned false";
      return ok;
    }
    if (mode == acquire_mode::try_once) return lock_.try_lock_shared();
    if (mode == acquire_mode::try_for) return lock_.try_lock_shared_for(timeout);
    lock_.lock_shared();
    return true;
  }
  bool extend(milliseconds lease) override { return writing() ? lock_.extend(lease) : lock_.extend_shared(lease); }
  std::uint64_t fencing_token() override { return lock_.fencing_token(); }
  bool still_held() override { return writing() ? lock_.still_held() : lock_.still_held_shared(); }
  milliseconds remaining() override { return writing() ? lock_.remaining_lease() : lock_.remaining_shared_lease(); }
  redislock::release_status unlock() override {
    if (writing()) lock_.unlock();
    else lock_.unlock_shared();
    return lock_.last_release();
  }
  bool owns() const override { return lock_.owns_lock() || lock_.owns_shared(); }
  bool lost() const override { return writing() ? lock_.lost() : lock_.lost_shared(); }
  bool writing() const override { return lock_.owns_lock(); }
  std::string owner() const override { return lock_.owner_id(); }
  std::optional<std::chrono::steady_clock::time_point> confirmed_until() const override {
    return writing() ? lock_.lease_confirmed_until() : lock_.lease_confirmed_until_shared();
  }

 private:
  redislock::basic_shared_mutex<Client> lock_;
};

/// Test-only: a mutex whose try_lock() "succeeds" one time in three without asking the server.
class stealing_subject final : public exclusive_subject<redislock::mutex> {
 public:
  stealing_subject(redislock::client& c, const std::string& name, const redislock::lock_options& o, unsigned seed)
      : exclusive_subject(c, name, o), lease_(o.lease), rng_(seed) {}
  bool acquire(acquire_mode mode, milliseconds timeout, bool write) override {
    if (std::uniform_int_distribution<int>(0, 2)(rng_) == 0) {
      faked_until_ = std::chrono::steady_clock::now() + lease_;
      return faked_ = true;
    }
    return exclusive_subject::acquire(mode, timeout, write);
  }
  bool extend(milliseconds lease) override { return faked_ || exclusive_subject::extend(lease); }
  std::uint64_t fencing_token() override { return faked_ ? 0 : exclusive_subject::fencing_token(); }
  bool still_held() override { return faked_ || exclusive_subject::still_held(); }
  milliseconds remaining() override { return faked_ ? lease_ : exclusive_subject::remaining(); }
  redislock::release_status unlock() override {
    if (!faked_) return exclusive_subject::unlock();
    faked_ = false;
    return redislock::release_status::released;
  }
  bool owns() const override { return faked_ || exclusive_subject::owns(); }
  std::optional<std::chrono::steady_clock::time_point> confirmed_until() const override {
    return faked_ ? std::optional(faked_until_) : exclusive_subject::confirmed_until();
  }

 private:
  milliseconds lease_;
  std::minstd_rand rng_;
  bool faked_ = false;
  std::chrono::steady_clock::time_point faked_until_{};
};

/// Test-only: a mutex whose remaining_lease() adds half a lease to the server's answer.
class optimistic_subject final : public exclusive_subject<redislock::mutex> {
 public:
  optimistic_subject(redislock::client& c, const std::string& name, const redislock::lock_options& o)
      : exclusive_subject(c, name, o), bonus_(o.lease / 2) {}
  milliseconds remaining() override {
    const milliseconds r = exclusive_subject::remaining();
    return r.count() > 0 ? r + bonus_ : r;
  }

 private:
  milliseconds bonus_;
};

/// Test-only: a mutex whose waits never acquire (try_lock_for sleeps out its timeout), as a
/// waiter that missed every release notice would: the liveness check must catch it.
class deaf_subject final : public exclusive_subject<redislock::mutex> {
 public:
  using exclusive_subject::exclusive_subject;
  bool acquire(acquire_mode mode, milliseconds timeout, bool write) override {
    if (mode != acquire_mode::try_for) return exclusive_subject::acquire(mode, timeout, write);
    std::this_thread::sleep_for(timeout);
    return false;
  }
};

/// Test-only: Redlock whose validity after a successful extend is the larger of the old and the
/// new one, as basic_redlock::extend_hold's max() had it: a shorter extend then leaves the
/// client believing in more validity than the masters' keys have.
class redlock_extend_max_subject final : public exclusive_subject<redislock::redlock> {
 public:
  using exclusive_subject::exclusive_subject;
  bool acquire(acquire_mode mode, milliseconds timeout, bool write) override {
    kept_until_ = {};
    return exclusive_subject::acquire(mode, timeout, write);
  }
  bool extend(milliseconds lease) override {
    const auto before = std::chrono::steady_clock::now() + lock_.validity();
    const bool ok = exclusive_subject::extend(lease);
    if (ok) kept_until_ = std::max(kept_until_, before);
    return ok;
  }
  milliseconds remaining() override {
    const milliseconds real = lock_.validity();
    if (real.count() == 0) return real;
    const auto kept = std::chrono::ceil<milliseconds>(kept_until_ - std::chrono::steady_clock::now());
    return std::max(real, kept);
  }

 private:
  std::chrono::steady_clock::time_point kept_until_{};
};

/// Test-only: a mutex that, without auto_renew, forgets the lease it asked for, as every hold
/// without renewal did before the lease clock (issue 39, item 2): lease_confirmed_until() empty,
/// lost() false until a call finds the key gone.
class unrenewed_subject final : public exclusive_subject<redislock::mutex> {
 public:
  unrenewed_subject(redislock::client& c, const std::string& name, const redislock::lock_options& o, bool reports_end)
      : exclusive_subject(c, name, o), renewed_(o.auto_renew), reports_end_(reports_end) {}
  bool acquire(acquire_mode mode, milliseconds timeout, bool write) override {
    told_ = false;
    return exclusive_subject::acquire(mode, timeout, write);
  }
  bool extend(milliseconds lease) override {
    const bool ok = exclusive_subject::extend(lease);
    told_ = told_ || !ok;  // the server said so
    return ok;
  }
  std::uint64_t fencing_token() override {
    try {
      return exclusive_subject::fencing_token();
    } catch (const redislock::lock_error&) {
      told_ = true;
      throw;
    }
  }
  bool lost() const override { return renewed_ ? exclusive_subject::lost() : told_; }
  std::optional<std::chrono::steady_clock::time_point> confirmed_until() const override {
    if (renewed_ || reports_end_) return exclusive_subject::confirmed_until();
    return std::nullopt;
  }

 private:
  bool renewed_, reports_end_;
  bool told_ = false;  // lost as the server said (extend false, fencing_token refused)
};

/// A subject of one of the kinds every client type offers (mutex, fair mutex, reentrant,
/// shared, semaphore, election) on `c`: a client, sentinel_client or cluster_client; nullptr
/// for the other kinds.
template <class Client>
std::unique_ptr<subject> make_public_subject(kind k, Client& c, const std::string& name,
                                             const redislock::lock_options& o) {
  switch (k) {
    case kind::mutex: return std::make_unique<exclusive_subject<redislock::basic_mutex<Client>>>(c, name, o);
    case kind::fair_mutex: {
      redislock::lock_options fair = o;
      fair.fair = true;
      return std::make_unique<exclusive_subject<redislock::basic_mutex<Client>>>(c, name, fair);
    }
    case kind::reentrant: return std::make_unique<reentrant_subject<Client>>(c, name, o);
    case kind::shared: return std::make_unique<shared_subject<Client>>(c, name, o);
    case kind::semaphore:
      return std::make_unique<exclusive_subject<redislock::basic_semaphore<Client>>>(c, name, semaphore_permits, o);
    case kind::election: return std::make_unique<election_subject<Client>>(c, name, o);
    default: return nullptr;
  }
}

/// A subject of kind `k` on `cs` (one client, or one per Redlock master).
inline std::unique_ptr<subject> make_subject(kind k, const clients& cs, const std::string& name,
                                             const redislock::lock_options& o, unsigned seed) {
  redislock::client& c = cs.front();
  switch (k) {
    case kind::mutex:
    case kind::fair_mutex:
    case kind::reentrant:
    case kind::shared:
    case kind::semaphore:
    case kind::election: return make_public_subject(k, c, name, o);
    case kind::redlock: return std::make_unique<exclusive_subject<redislock::redlock>>(cs, name, o);
    case kind::broken_stealing: return std::make_unique<stealing_subject>(c, name, o, seed);
    case kind::broken_optimistic: return std::make_unique<optimistic_subject>(c, name, o);
    case kind::broken_deaf: return std::make_unique<deaf_subject>(c, name, o);
    case kind::broken_redlock_extend: return std::make_unique<redlock_extend_max_subject>(cs, name, o);
    case kind::broken_unrenewed: return std::make_unique<unrenewed_subject>(c, name, o, false);
    case kind::broken_never_lost: return std::make_unique<unrenewed_subject>(c, name, o, true);
    case kind::broken_semaphore:  // N + 1 permits: with no semaphore of N holding, it seeds N + 1
      return std::make_unique<exclusive_subject<redislock::semaphore>>(c, name, semaphore_permits + 1, o);
    case kind::async_mutex:
    case kind::broken_async_extend: return nullptr;  // async_subject.hpp (an async_client, not these clients)
  }
  return nullptr;
}

inline bool is_redlock(kind k) { return k == kind::redlock || k == kind::broken_redlock_extend; }
inline bool is_broken(kind k) {
  return k == kind::broken_stealing || k == kind::broken_optimistic || k == kind::broken_deaf ||
         k == kind::broken_redlock_extend || k == kind::broken_semaphore || k == kind::broken_unrenewed ||
         k == kind::broken_never_lost || k == kind::broken_async_extend;
}
/// The kinds async_subject.hpp makes (an async_client on the run's io_context thread).
inline bool is_async(kind k) { return k == kind::async_mutex || k == kind::broken_async_extend; }
inline bool is_semaphore(kind k) { return k == kind::semaphore || k == kind::broken_semaphore; }

}  // namespace redislock_model
