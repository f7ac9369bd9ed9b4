#pragma once
/// @file detail/asio_lock_kinds.hpp
/// @brief The policy an async lock (asio.hpp) runs: which scripts a kind's attempts, releases,
/// renewals, fencing tokens and remaining leases are, with which keys and arguments. The
/// acquisition, hand-off, cancellation and renewal machinery (async_lock_core) is the same for
/// every kind; a kind only says how to ask its scripts.
///
/// Every kind here keeps the queued hand-off's layout (detail/queue_lua.hpp): a lock key, a
/// fence counter, a queue and a waiters hash sharing one hash tag, and waiter channels
/// "<waiter_prefix><id>" (tokens "<id>:<n>") on which a hand-off publishes a notice naming the
/// token it is for. The replies have one shape across kinds: an attempt {1, 0} acquired or
/// {0, ms} refused (ms: how long the lease in the way lasts, -1 none; any other first element
/// is an error here); release and extend 1 ours or 0 not; fence a token > 0 or 0 not ours;
/// remaining the ms left or -2 not ours.

#include <redislock/detail/mutex_scripts.hpp>
#include <redislock/detail/semaphore_scripts.hpp>
#include <redislock/detail/shared_scripts.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/observe.hpp>
#include <redislock/script.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace redislock::detail {

/// The keys of one async lock (the kind's layout, beside its scripts).
struct async_keys {
  template <class Keys>
  static async_keys of(const Keys& k) {
    return {k.lock, k.fence, k.queue, k.waiters, k.waiter_prefix};
  }
  static async_keys of(const shared_scripts::keys& k) { return {k.lock, k.fence, k.queue, k.waiters, k.channel}; }
  std::string lock, fence, queue, waiters, waiter_prefix;
};

/// One script to run with its keys and arguments: views of strings that outlive the call that
/// sends it (async_client_core::run_script copies them before it returns).
struct script_call {
  const script& s;
  std::vector<std::string_view> keys, args;
};

/// What an attempt needs besides the token and mode.
struct attempt_params {
  const std::string& lease_ms;
  const std::string& wait_lease_ms;
  bool fair;
};

/// A lock kind's scripts, for async_lock_core. Stateless but for what the kind was made with
/// (a semaphore's permit count): shared by every acquisition of one async lock object.
class async_lock_kind {
 public:
  virtual ~async_lock_kind() = default;
  virtual async_keys keys(std::string_view name, const lock_options& o) const = 0;
  /// The first attempt of a non-fair acquisition is the mutex's `SET NX GET PX` (one command),
  /// not the attempt script in mode "try".
  virtual bool first_by_set() const noexcept { return false; }
  /// The token a hand-off notice (a message on our channel) is for.
  virtual std::string_view notice_token(std::string_view notice) const noexcept { return notice; }
  /// mode "try", "wait" (acquire or queue) or "leave" (acquire or leave the queue).
  virtual script_call attempt(const async_keys& k, const std::string& token, std::string_view mode,
                              const attempt_params& p) const = 0;
  /// Owner-checked, handing off to the longest waiting live waiter.
  virtual script_call release(const async_keys& k, const std::string& token) const = 0;
  virtual script_call extend(const async_keys& k, const std::string& token, const std::string& lease_ms) const = 0;
  /// lifetime_ms: the fencing counter's (detail/fence_scripts.hpp fence_lifetime_arg()).
  virtual script_call fence(const async_keys& k, const std::string& token, const std::string& lifetime_ms) const = 0;
  virtual script_call remaining(const async_keys& k, const std::string& token) const = 0;
  /// How observers (observe.hpp) name the kind and side.
  virtual lock_type observed_type(const lock_options& o) const noexcept = 0;
  /// The kind a refusal by another kind's name names as asked for (detail/kind_clash.hpp).
  virtual lock_kind asked_kind() const noexcept = 0;
  virtual lock_mode observed_mode() const noexcept { return lock_mode::exclusive; }
};

/// redislock::mutex's scripts (detail/mutex_scripts.hpp).
class async_mutex_kind final : public async_lock_kind {
 public:
  async_keys keys(std::string_view name, const lock_options& o) const override {
    return async_keys::of(mutex_scripts::keys(name, o));
  }
  bool first_by_set() const noexcept override { return true; }
  script_call attempt(const async_keys& k, const std::string& token, std::string_view mode,
                      const attempt_params& p) const override {
    return {mutex_scripts::queue_attempt(),
            {k.lock, k.fence, k.queue, k.waiters},
            {token, p.lease_ms, mode, p.fair ? "1" : "0", p.wait_lease_ms, k.waiter_prefix}};
  }
  script_call release(const async_keys& k, const std::string& token) const override {
    return {mutex_scripts::release(), {k.lock, k.fence, k.queue, k.waiters}, {token, k.waiter_prefix}};
  }
  script_call extend(const async_keys& k, const std::string& token, const std::string& lease_ms) const override {
    return {mutex_scripts::extend(), {k.lock}, {token, lease_ms}};
  }
  script_call fence(const async_keys& k, const std::string& token, const std::string& lifetime_ms) const override {
    return {mutex_scripts::fence(), {k.lock, k.fence}, {token, lifetime_ms}};
  }
  script_call remaining(const async_keys& k, const std::string& token) const override {
    return {mutex_scripts::remaining(), {k.lock}, {token}};
  }
  lock_type observed_type(const lock_options& o) const noexcept override {
    return o.fair ? lock_type::fair_mutex : lock_type::mutex;
  }
  lock_kind asked_kind() const noexcept override { return mutex_scripts::keys::kind; }
};

/// redislock::semaphore's scripts (detail/semaphore_scripts.hpp), with the object's permit
/// count (which seeds an idle semaphore only: the stored count rules while anyone holds).
class async_semaphore_kind final : public async_lock_kind {
 public:
  explicit async_semaphore_kind(std::int64_t permits)
      : own_(semaphore_scripts::checked_permits(permits, "async_semaphore")), permits_(std::to_string(own_)) {}
  async_keys keys(std::string_view name, const lock_options& o) const override {
    return async_keys::of(semaphore_scripts::keys(name, o));
  }
  script_call attempt(const async_keys& k, const std::string& token, std::string_view mode,
                      const attempt_params& p) const override {
    return {semaphore_scripts::acquire(),
            {k.lock, k.fence, k.queue, k.waiters},
            {token, k.waiter_prefix, permits_, p.lease_ms, mode, p.fair ? "1" : "0", p.wait_lease_ms}};
  }
  script_call release(const async_keys& k, const std::string& token) const override {
    return {semaphore_scripts::release(), {k.lock, k.fence, k.queue, k.waiters}, {token, k.waiter_prefix, permits_}};
  }
  script_call extend(const async_keys& k, const std::string& token, const std::string& lease_ms) const override {
    return {semaphore_scripts::extend(), {k.lock, k.fence}, {token, k.waiter_prefix, permits_, lease_ms}};
  }
  script_call fence(const async_keys& k, const std::string& token, const std::string& lifetime_ms) const override {
    return {semaphore_scripts::fence(), {k.lock, k.fence}, {token, k.waiter_prefix, permits_, lifetime_ms}};
  }
  script_call remaining(const async_keys& k, const std::string& token) const override {
    return {semaphore_scripts::remaining(), {k.lock, k.fence}, {token, k.waiter_prefix, permits_}};
  }
  const std::string& permits() const noexcept { return permits_; }
  lock_type observed_type(const lock_options&) const noexcept override { return lock_type::semaphore; }
  lock_kind asked_kind() const noexcept override { return semaphore_scripts::keys::kind; }

  /// The object's own count (as semaphore::set_permits() stores its own). On the strand.
  void set_own_permits(std::int64_t permits) {
    own_ = permits;
    permits_ = std::to_string(permits);
  }
  std::int64_t own_permits() const noexcept { return own_; }
  /// set_permits(): `count` stored with the holders, the permits it frees handed on; "#" is no
  /// waiter's token. Reply: the valid holders afterwards.
  static script_call set_permits(const async_keys& k, const std::string& count) {
    return {semaphore_scripts::set_permits(), {k.lock, k.fence, k.queue, k.waiters}, {"#", k.waiter_prefix, count}};
  }
  /// count(): [the stored count (0: idle), the valid holders].
  script_call count(const async_keys& k) const {
    return {semaphore_scripts::count(), {k.lock}, {"#", k.waiter_prefix, permits_}};
  }

 private:
  std::int64_t own_;     // changed by set_own_permits, on the strand
  std::string permits_;  // own_, as the scripts take it
};

/// redislock::shared_mutex's scripts (detail/shared_scripts.hpp), for one side (writers or
/// readers). Each async acquisition is an owner of its own (its token) holding one hold on its
/// side (count 1): it never nests nor continues another (no nested read, no downgrade).
class async_shared_kind final : public async_lock_kind {
 public:
  explicit async_shared_kind(bool write) : write_(write) {}
  async_keys keys(std::string_view name, const lock_options& o) const override {
    return async_keys::of(shared_scripts::keys(name, o));
  }
  /// The script's notice is "<owner> <side><wait>": the token is the owner (unique per
  /// acquisition, so the wait number adds nothing).
  std::string_view notice_token(std::string_view notice) const noexcept override {
    return notice.substr(0, notice.find(' '));
  }
  script_call attempt(const async_keys& k, const std::string& token, std::string_view mode,
                      const attempt_params& p) const override {
    return {shared_scripts::acquire(),
            {k.lock, k.fence, k.queue, k.waiters},
            {token, k.waiter_prefix, p.lease_ms, mode, p.fair ? "1" : "0", p.wait_lease_ms, write_ ? "w" : "r", "1",
             "1", ""}};
  }
  script_call release(const async_keys& k, const std::string& token) const override {
    if (write_) return {shared_scripts::release(), {k.lock, k.fence, k.queue, k.waiters}, {token, k.waiter_prefix}};
    // The count left after it: 0, the hold ends. Any read hold number: the owner has one hold.
    return {shared_scripts::release_shared(), {k.lock, k.fence, k.queue, k.waiters}, {token, k.waiter_prefix, "0", ""}};
  }
  script_call extend(const async_keys& k, const std::string& token, const std::string& lease_ms) const override {
    return {shared_scripts::extend(), {k.lock, k.fence}, {token, k.waiter_prefix, lease_ms, side(), ""}};
  }
  script_call fence(const async_keys& k, const std::string& token, const std::string& lifetime_ms) const override {
    return {shared_scripts::fence(), {k.lock, k.fence}, {token, k.waiter_prefix, lifetime_ms}};
  }
  script_call remaining(const async_keys& k, const std::string& token) const override {
    return {shared_scripts::remaining(), {k.lock, k.fence}, {token, k.waiter_prefix, side()}};
  }
  lock_type observed_type(const lock_options&) const noexcept override { return lock_type::shared_mutex; }
  lock_kind asked_kind() const noexcept override { return shared_scripts::keys::kind; }
  lock_mode observed_mode() const noexcept override { return write_ ? lock_mode::exclusive : lock_mode::shared; }

 private:
  std::string_view side() const noexcept { return write_ ? "write" : "read"; }
  bool write_;
};

}  // namespace redislock::detail
