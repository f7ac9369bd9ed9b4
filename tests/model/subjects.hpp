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
//   broken_semaphore       a semaphore made with one permit more than the checker allows.

#include "history.hpp"

#include <redislock/redislock.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

// The mutex's owner token, for the observer (the friend the library leaves for tests).
struct redislock::detail::mutex_test_access {
  template <class Client>
  static std::string token(const redislock::basic_mutex<Client>& m) {
    return m.current_token();
  }
};

namespace redislock_model {

/// Every semaphore of a run is made with this many permits; the overlap check allows that many
/// certainly-valid holders of a semaphore's name at once.
inline constexpr int semaphore_permits = 2;

using std::chrono::milliseconds;
using clients = std::vector<std::reference_wrapper<redislock::client>>;

class subject {
 public:
  virtual ~subject() = default;
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
};

template <class Lock>
bool acquire_with(Lock& l, acquire_mode mode, milliseconds timeout) {
  if (mode == acquire_mode::try_once) return l.try_lock();
  if (mode == acquire_mode::try_for) return l.try_lock_for(timeout);
  l.lock();
  return true;
}

template <class Lock>
class exclusive_subject : public subject {
 public:
  template <class... A>
  explicit exclusive_subject(A&&... a) : lock_(std::forward<A>(a)...) {}
  bool acquire(acquire_mode mode, milliseconds timeout, bool) override { return acquire_with(lock_, mode, timeout); }
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
    if (mode == acquire_mode::try_once) return e.try_campaign(value);
    if (mode == acquire_mode::try_for) return e.try_campaign_for(value, timeout);
    e.campaign(value);
    return true;
  }
};

template <class Client>
class shared_subject final : public subject {
 public:
  shared_subject(Client& c, const std::string& name, const redislock::lock_options& o) : lock_(c, name, o) {}
  bool acquire(acquire_mode mode, milliseconds timeout, bool write) override {
    if (write) return acquire_with(lock_, mode, timeout);
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

 private:
  redislock::basic_shared_mutex<Client> lock_;
};

/// Test-only: a mutex whose try_lock() "succeeds" one time in three without asking the server.
class stealing_subject final : public exclusive_subject<redislock::mutex> {
 public:
  stealing_subject(redislock::client& c, const std::string& name, const redislock::lock_options& o, unsigned seed)
      : exclusive_subject(c, name, o), lease_(o.lease), rng_(seed) {}
  bool acquire(acquire_mode mode, milliseconds timeout, bool write) override {
    if (std::uniform_int_distribution<int>(0, 2)(rng_) == 0) return faked_ = true;
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

 private:
  milliseconds lease_;
  std::minstd_rand rng_;
  bool faked_ = false;
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
    case kind::broken_semaphore:  // N + 1 permits: with no semaphore of N holding, it seeds N + 1
      return std::make_unique<exclusive_subject<redislock::semaphore>>(c, name, semaphore_permits + 1, o);
    case kind::async_mutex: return nullptr;  // async_subject.hpp (an async_client, not these clients)
  }
  return nullptr;
}

inline bool is_redlock(kind k) { return k == kind::redlock || k == kind::broken_redlock_extend; }
inline bool is_broken(kind k) {
  return k == kind::broken_stealing || k == kind::broken_optimistic || k == kind::broken_deaf ||
         k == kind::broken_redlock_extend || k == kind::broken_semaphore;
}
inline bool is_semaphore(kind k) { return k == kind::semaphore || k == kind::broken_semaphore; }

}  // namespace redislock_model
