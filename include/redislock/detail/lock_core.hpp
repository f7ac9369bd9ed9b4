#pragma once
/// @file detail/lock_core.hpp
/// @brief What every lock kind has, written once: its name, options and keys, the outcome of
/// its last release, the accessors, the "not held" check, and a new hold's skeleton
/// (min_replicas, then renewal, or drop the hold and rethrow). Each kind keeps only its
/// protocol (scripts, attempts, releases). The standard lock members, among them the noexcept
/// unlock() / unlock_shared() around the kind's unlock_and_report(), are in detail/lockable.hpp.
///
/// lock_identity<Keys> is the part without a client (basic_redlock has one per master);
/// lock_core<Client, Keys> adds the client, for the kinds that talk to one deployment.
/// `Keys` is the kind's key layout (beside its scripts), constructed as Keys(name, options)
/// from a validated name and options and exposing at least `lock` (the key the lock lives at,
/// which every other key shares its hash tag with): detail::mutex_scripts::keys,
/// detail::redlock_scripts::keys, detail::reentrant_scripts::keys, detail::shared_scripts::keys,
/// detail::semaphore_scripts::keys. The kinds whose hold belongs to the object (mutex, semaphore)
/// build on lock_core through detail/object_hold.hpp.
///
/// The owner-table helpers at the end serve the kinds whose owners are threads (reentrant and
/// shared). Every command of a kind goes through lock_core::run_on_lock(), which names the lock
/// and the kinds in a WRONGTYPE refusal (detail/kind_clash.hpp).

#include <redislock/connection.hpp>
#include <redislock/detail/fence_scripts.hpp>
#include <redislock/detail/kind_clash.hpp>
#include <redislock/detail/lease_keeper.hpp>
#include <redislock/detail/owners.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/reply.hpp>
#include <redislock/script.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace redislock::detail {

/// Throws lock_error "<what>: lock '<name>' is not held by <holder>" unless `held`.
inline void require_held(bool held, const char* what, const std::string& name, const char* holder) {
  if (!held) throw lock_error(std::string(what) + ": lock '" + name + "' is not held by " + holder);
}

/// A remaining-lease reply (ms; -1 no expiry, so ours for good; -2 or 0: not ours) as a duration.
inline std::chrono::milliseconds to_remaining(std::int64_t ms) noexcept {
  if (ms == -1) return max_lease;
  return std::chrono::milliseconds(ms > 0 ? ms : 0);
}

template <class Keys>
class lock_identity {
 public:
  const std::string& name() const noexcept { return name_; }
  /// The Redis key holding the lock (the kind's layout: detail/*_scripts.hpp).
  const std::string& key() const noexcept { return keys_.lock; }
  const lock_options& options() const noexcept { return options_; }
  /// Outcome of the most recent release through this object, by any thread (not_held before any).
  release_status last_release() const noexcept { return last_release_.load(std::memory_order_acquire); }

 protected:
  /// Throws invalid_argument for a bad name or options (validate()). Sends nothing.
  lock_identity(std::string name, lock_options options)
      : name_(std::move(name)),
        options_(std::move(options)),
        keys_((validate(name_, options_), Keys(name_, options_))) {}
  ~lock_identity() = default;
  lock_identity(const lock_identity&) = delete;
  lock_identity& operator=(const lock_identity&) = delete;

  release_status record(release_status s) noexcept {
    last_release_.store(s, std::memory_order_release);
    return release_recorded_here() = s;
  }

  /// An option that cannot mean anything for this kind was set: refused, nothing is sent.
  void refuse_option(bool set, const char* kind, const char* option, const char* why) const {
    if (set) throw invalid_argument(std::string(kind) + ": " + option + " is not supported (" + why + ")");
  }

  /// "Start the renewal or unlock and rethrow": runs start(); when it throws, runs drop()
  /// (the kind's noexcept unlock of the new hold) and rethrows.
  template <class Start, class Drop>
  static void start_or_drop(Start&& start, Drop&& drop) {
    try {
      start();
    } catch (...) {
      drop();
      throw;
    }
  }

  std::string name_;
  lock_options options_;
  Keys keys_;
  std::atomic<release_status> last_release_{release_status::not_held};
};

template <class Client, class Keys>
class lock_core : public lock_identity<Keys> {
 public:
  using client_type = Client;

  Client& client() const noexcept { return client_; }

 protected:
  /// Throws invalid_argument for a bad name or options, or auto_renew without a watchdog.
  lock_core(Client& client, std::string name, lock_options options)
      : lock_identity<Keys>(std::move(name), std::move(options)), client_(client) {
    require_watchdog_if_renewing<Client>(this->options_);
  }
  ~lock_core() = default;

  /// The skeleton of every new hold (not a nested one): min_replicas' acknowledgement, then
  /// the renewal (auto_renew) from `sent`, the send time of the acquiring command. When either
  /// fails, `drop` (the kind's noexcept unlock of this hold) releases it and the error is
  /// rethrown: a hold we could not make safe or promised to renew is not kept.
  template <class Drop>
  void start_hold(lease_keeper& keeper, std::chrono::milliseconds lease, const renewal_target& renewal,
                  const deadline& d, steady::time_point sent, Drop&& drop) {
    require_replicas(client_, this->options_, this->name_, this->keys_.lock, renewal, d, drop);
    this->start_or_drop(
        [&] { keeper.start(client_, this->options_, lease, this->name_, this->keys_.lock, renewal, sent); }, drop);
  }

  /// client_.run(key(), f), for every command of this lock: a WRONGTYPE refusal becomes the
  /// wrong_type_error naming this lock, the kind that holds its name and this one (Keys::kind).
  template <class F>
  decltype(auto) run_on_lock(F&& f) {
    return detail::run_on_lock(client_, this->keys_.lock, this->name_, Keys::kind, std::forward<F>(f));
  }

  /// Runs a script with KEYS = {lock, fence}; the reply is an integer.
  std::int64_t run_integer(const script& s, std::initializer_list<std::string_view> args) {
    return run_on_lock([&](connection& c) {
      return as_integer(*s.run(c, {this->keys_.lock, this->keys_.fence}, args));
    });
  }

  /// The fencing token of the calling thread's current hold (reentrant, shared): drawn from
  /// the lock's counter on the first call per hold (one round trip, script `s` with ARGV owner,
  /// fence_arg(keys), the counter's lifetime; it replies 0 when the owner holds nothing on the
  /// server) and kept in State::fence until the thread's holds all end. Throws lock_error when the thread holds
  /// nothing, or when its lease has run out (after on_lost(state): write nothing then).
  template <class State, class OnLost>
  std::uint64_t draw_fence(owner_table<State>& owners, const script& s, OnLost&& on_lost) {
    State h = owners.mine();
    require_held(!h.idle(), "fencing_token", this->name_, "this thread");
    if (h.fence != 0) return h.fence;
    const std::int64_t fence =
        run_integer(s, {owners.owner_id(), fence_arg(this->keys_), fence_lifetime_arg(this->options_)});
    if (fence <= 0) {
      on_lost(h);
      throw lock_error("fencing_token: the lease on lock '" + this->name_ + "' has run out");
    }
    h = owners.mine();  // only this thread changes its own state: the same hold
    h.fence = static_cast<std::uint64_t>(fence);
    owners.set_mine(h);
    return h.fence;
  }

  Client& client_;
};

// ---- helpers of the kinds whose owners are threads (reentrant, shared) ----

/// Records a release outcome in an atomic and returns it.
inline release_status record(std::atomic<release_status>& last, release_status s) noexcept {
  last.store(s, std::memory_order_release);
  return release_recorded_here() = s;
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

/// The destructor of an owner-table kind: stops the renewals of every thread's holds and
/// releases them with release(owner, state) (never throws: a hold that cannot be released
/// ends with its lease).
template <class State, class Release>
void release_every_hold(owner_table<State>& owners, Release&& release) noexcept {
  owners.for_each([&](const std::string& owner, State& h) {
    if (h.idle()) return;
    h.stop_renewals();
    try {
      release(owner, h);
    } catch (...) {  // the lease runs out on its own
    }
  });
}

}  // namespace redislock::detail
