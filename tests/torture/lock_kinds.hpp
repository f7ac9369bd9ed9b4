#pragma once
// The lock kinds the torture checker can drive, chosen by `--kind NAME`. A kind is a factory
// returning a torture_lock: one would-be holder (one object per thread). To add a kind, wrap it
// in a torture_lock and add a line to make_single_lock() or make_lock().
// Single-server kinds get one client; the Redlock kinds (multi_master()) one per master. The
// single-server kinds are templates on the client, so the cluster mode runs them on a
// redislock::cluster_client (make_single_lock).

#include <redislock/redislock.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace redislock_torture {

class torture_lock {
 public:
  virtual ~torture_lock() = default;
  /// One acquire attempt (no waiting). Throws redislock::error when Redis cannot be asked.
  virtual bool try_lock() = 0;
  /// Releases; never throws (the outcome is the return value).
  virtual redislock::release_status unlock() noexcept = 0;
  /// The fencing token of the current hold.
  virtual std::uint64_t fencing_token() = 0;
  /// Whether the current hold excludes everyone (false: a read hold, which excludes writers).
  virtual bool exclusive() const { return true; }
  /// Whether holders of this kind may read together (writers must then look for readers).
  virtual bool has_read_side() const { return false; }
  /// A semaphore's N: at most this many certainly-valid holders at once (0: not a semaphore).
  virtual std::int64_t permits() const { return 0; }
};

template <class Lock>
class exclusive_adapter final : public torture_lock {
 public:
  template <class... Args>
  explicit exclusive_adapter(Args&&... args) : lock_(std::forward<Args>(args)...) {}
  bool try_lock() override { return lock_.try_lock(); }
  redislock::release_status unlock() noexcept override {
    lock_.unlock();
    return lock_.last_release();
  }
  std::uint64_t fencing_token() override { return lock_.fencing_token(); }

 private:
  Lock lock_;
};

/// An exclusive lock acquired by waiting (try_lock_for), so acquisitions go through the
/// server-side queue and the release's hand-off: a mutex, a reentrant mutex, or a shared
/// mutex's write side. The caller takes the time before the call as the lease's earliest
/// start, which is conservative: the acquiring attempt (or hand-off) comes later.
template <class Lock>
class waiting_adapter final : public torture_lock {
 public:
  template <class Client>
  waiting_adapter(Client& c, const std::string& name, const redislock::lock_options& o) : lock_(c, name, o) {}
  bool try_lock() override { return lock_.try_lock_for(std::chrono::milliseconds(200)); }
  redislock::release_status unlock() noexcept override {
    lock_.unlock();
    return lock_.last_release();
  }
  std::uint64_t fencing_token() override { return lock_.fencing_token(); }

 private:
  Lock lock_;
};

/// Which side an attempt of a kind with a read side is for: the write side one time in three.
class side_picker {
 public:
  side_picker() : rng_(std::random_device{}()) {}
  bool write_next() { return std::uniform_int_distribution<int>(0, 2)(rng_) == 0; }

 private:
  std::minstd_rand rng_;
};

/// A shared mutex whose holders read or write, at random (side_picker), both by waiting:
/// readers share, and go through the queue and the hand-off that admits the run of readers at
/// its head.
template <class Client>
class shared_mixed_adapter final : public torture_lock {
 public:
  shared_mixed_adapter(Client& c, const std::string& name, const redislock::lock_options& o) : lock_(c, name, o) {}
  bool try_lock() override {
    writing_ = sides_.write_next();
    const auto timeout = std::chrono::milliseconds(200);
    return writing_ ? lock_.try_lock_for(timeout) : lock_.try_lock_shared_for(timeout);
  }
  redislock::release_status unlock() noexcept override {
    if (writing_) lock_.unlock();
    else lock_.unlock_shared();
    return lock_.last_release();
  }
  std::uint64_t fencing_token() override { return lock_.fencing_token(); }
  bool exclusive() const override { return writing_; }
  bool has_read_side() const override { return true; }

 private:
  redislock::basic_shared_mutex<Client> lock_;
  side_picker sides_;
  bool writing_ = true;
};

/// A semaphore of kSemaphorePermits permits, acquired by waiting (the queue and the release's
/// hand-off). `claimed`: the N the checker is told; the broken self-test claims one less than
/// the semaphore really has, which the checker must catch.
inline constexpr std::int64_t kSemaphorePermits = 3;
template <class Client>
class semaphore_adapter final : public torture_lock {
 public:
  semaphore_adapter(Client& c, const std::string& name, const redislock::lock_options& o, std::int64_t claimed)
      : lock_(c, name, kSemaphorePermits, o), claimed_(claimed) {}
  bool try_lock() override { return lock_.try_acquire_for(std::chrono::milliseconds(200)); }
  redislock::release_status unlock() noexcept override {
    lock_.release();
    return lock_.last_release();
  }
  std::uint64_t fencing_token() override { return lock_.fencing_token(); }
  bool exclusive() const override { return false; }
  std::int64_t permits() const override { return claimed_; }

 private:
  redislock::basic_semaphore<Client> lock_;
  std::int64_t claimed_;
};

/// A deliberately broken lock for the checker's self-test: it takes the key even while someone
/// else holds it (SET without NX), as an acquire script that ignored the holder would. The
/// checker must report violations with it, or it could not catch that bug.
template <class Client>
class stealing_lock final : public torture_lock {
 public:
  stealing_lock(Client& c, const std::string& name, const redislock::lock_options& o)
      : client_(c), key_(redislock::detail::base_key(name, o)), lease_(std::to_string(o.lease.count())) {}
  bool try_lock() override {
    token_ = redislock::detail::random_token();
    client_.run(key_, [&](redislock::connection& c) {
      fence_ = static_cast<std::uint64_t>(redislock::detail::as_integer(*c.command({"INCR", key_ + ":fence"})));
      c.command({"SET", key_, token_, "PX", lease_});
    });
    return true;
  }
  redislock::release_status unlock() noexcept override {
    try {
      client_.run(key_, [&](redislock::connection& c) { c.command({"DEL", key_}); });
      return redislock::release_status::released;
    } catch (...) {
      return redislock::release_status::failed;
    }
  }
  std::uint64_t fencing_token() override { return fence_; }

 private:
  Client& client_;
  std::string key_, lease_, token_;
  std::uint64_t fence_ = 0;
};

/// The checker's self-test for read sides: writers exclude each other (a real mutex) but
/// readers take nothing, as a shared lock that admitted readers past a writer would. The
/// checker must report the readers' overlaps with writers.
template <class Client>
class readers_ignoring_writers final : public torture_lock {
 public:
  readers_ignoring_writers(Client& c, const std::string& name, const redislock::lock_options& o)
      : writers_(c, name, o) {}
  bool try_lock() override {
    writing_ = sides_.write_next();
    return !writing_ || writers_.try_lock_for(std::chrono::milliseconds(200));
  }
  redislock::release_status unlock() noexcept override {
    if (!writing_) return redislock::release_status::released;
    writers_.unlock();
    return writers_.last_release();
  }
  std::uint64_t fencing_token() override { return writing_ ? writers_.fencing_token() : 0; }
  bool exclusive() const override { return writing_; }
  bool has_read_side() const override { return true; }

 private:
  redislock::basic_mutex<Client> writers_;
  side_picker sides_;
  bool writing_ = true;
};

/// Kinds whose holders may read together (the run must then see reads).
inline bool read_side_kind(const std::string& kind) {
  return kind == "shared-mixed" || kind == "broken-readers-ignoring-writers" || kind == "semaphore" ||
         kind == "broken-semaphore-overcount";
}

inline std::vector<std::string> lock_kinds() {
  return {"mutex",           "mutex-waiting",
          "mutex-fair",      "reentrant-waiting",
          "shared-waiting",  "shared-mixed",
          "broken-stealing", "broken-readers-ignoring-writers",
          "redlock",         "broken-redlock-minority",
          "semaphore",       "broken-semaphore-overcount",
          "election"};
}

/// Kinds that run on N independent masters (--masters) instead of one server.
inline bool multi_master(const std::string& kind) { return kind == "redlock" || kind == "broken-redlock-minority"; }

using clients = std::vector<std::reference_wrapper<redislock::client>>;

/// A single-server kind on one client (a redislock::client or a redislock::cluster_client).
template <class Client>
std::unique_ptr<torture_lock> make_single_lock(const std::string& kind, Client& c, const std::string& name,
                                               const redislock::lock_options& o) {
  if (kind == "mutex") return std::make_unique<exclusive_adapter<redislock::basic_mutex<Client>>>(c, name, o);
  if (kind == "mutex-waiting") return std::make_unique<waiting_adapter<redislock::basic_mutex<Client>>>(c, name, o);
  if (kind == "mutex-fair") {
    redislock::lock_options fair = o;
    fair.fair = true;
    return std::make_unique<waiting_adapter<redislock::basic_mutex<Client>>>(c, name, fair);
  }
  if (kind == "reentrant-waiting")
    return std::make_unique<waiting_adapter<redislock::basic_reentrant_mutex<Client>>>(c, name, o);
  // The write side only: the checker's critical section is a read-modify-write.
  if (kind == "shared-waiting")
    return std::make_unique<waiting_adapter<redislock::basic_shared_mutex<Client>>>(c, name, o);
  if (kind == "shared-mixed") return std::make_unique<shared_mixed_adapter<Client>>(c, name, o);
  // Leadership as the lock (campaign by waiting, resign; the term is the fencing token): never
  // two certainly-valid leaders.
  if (kind == "election") return std::make_unique<waiting_adapter<redislock::basic_election<Client>>>(c, name, o);
  if (kind == "semaphore") return std::make_unique<semaphore_adapter<Client>>(c, name, o, kSemaphorePermits);
  if (kind == "broken-semaphore-overcount")
    return std::make_unique<semaphore_adapter<Client>>(c, name, o, kSemaphorePermits - 1);
  if (kind == "broken-stealing") return std::make_unique<stealing_lock<Client>>(c, name, o);
  if (kind == "broken-readers-ignoring-writers") return std::make_unique<readers_ignoring_writers<Client>>(c, name, o);
  throw std::invalid_argument("unknown lock kind '" + kind + "'");
}

inline std::unique_ptr<torture_lock> make_lock(const std::string& kind, const clients& cs, const std::string& name,
                                               const redislock::lock_options& o) {
  if (cs.empty() || (!multi_master(kind) && cs.size() != 1))
    throw std::invalid_argument("lock kind '" + kind + "' got " + std::to_string(cs.size()) + " servers");
  if (!multi_master(kind)) return make_single_lock<redislock::client>(kind, cs.front(), name, o);
  if (kind == "redlock") return std::make_unique<exclusive_adapter<redislock::redlock>>(cs, name, o);
  // The Redlock self-test: each object runs the real basic_redlock on one master of its own
  // (random) choosing, i.e. it takes the lock with a minority, as a quorum bug would. Objects on
  // different masters hold at once; the checker must report it.
  if (kind == "broken-redlock-minority") {
    std::random_device rd;
    const std::size_t i = std::uniform_int_distribution<std::size_t>(0, cs.size() - 1)(rd);
    return std::make_unique<exclusive_adapter<redislock::redlock>>(clients{cs[i]}, name, o);
  }
  throw std::invalid_argument("unknown lock kind '" + kind + "'");
}

}  // namespace redislock_torture
