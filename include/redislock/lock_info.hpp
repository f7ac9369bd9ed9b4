#pragma once
/// @file lock_info.hpp
/// @brief redislock::inspect() — what the server holds for a lock name, of any kind — and
/// redislock::force_release(), the administrator's way to take a lock away from its holder.
///
/// Both read one consistent snapshot with one script per kind (detail/lock_info_scripts.hpp):
/// the mutex's script runs first and tells the kind; a hash kind's script follows when the
/// name is a reentrant lock, a shared lock, a semaphore, a latch or an election (2 round trips then). A free name (no
/// lock key) may still have waiters in any kind's queue: the other kinds' scripts then add
/// theirs (5 round trips, one snapshot per kind). inspect() changes nothing.

#include <redislock/connection.hpp>
#include <redislock/detail/election_scripts.hpp>
#include <redislock/detail/kind_clash.hpp>
#include <redislock/detail/lock_info_scripts.hpp>
#include <redislock/detail/mutex_scripts.hpp>
#include <redislock/detail/reentrant_scripts.hpp>
#include <redislock/detail/semaphore_scripts.hpp>
#include <redislock/detail/shared_scripts.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_kind.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/reply.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace redislock {

/// One hold of a lock.
struct lock_holder {
  /// mutex: the owner token ("<object id>:<acquisition>"; a Redlock's key on one master: its
  /// token, without the round number the key stores after it); reentrant/shared: the owner id.
  std::string owner;
  std::string role;        ///< "holder" (mutex, reentrant, semaphore), "writer" or "reader" (shared)
  std::int64_t count = 1;  ///< nested holds (reentrant, shared readers); 1 for the mutex
  /// What is left of this hold's lease (-1 ms: the key has no expiry).
  std::chrono::milliseconds remaining{0};

  /// The holding object's id: the owner up to its last ':' (the whole owner if it has none).
  std::string object_id() const {
    const auto colon = owner.rfind(':');
    return colon == std::string::npos ? owner : owner.substr(0, colon);
  }
};

struct lock_info {
  std::string name;
  std::string key;  ///< the lock's key, e.g. "redislock:{name}"
  lock_kind kind = lock_kind::none;
  std::string foreign_type;          ///< kind == foreign: "hash", "list", ... (TYPE of the key)
  std::vector<lock_holder> holders;  ///< empty: free
  /// When the key goes if nobody renews (PTTL): -2 ms absent, -1 ms no expiry.
  std::chrono::milliseconds key_ttl{-2};
  std::uint64_t last_fence = 0;  ///< the fencing counter (the last token given out; 0: none yet)
  /// Live waiters queued on the server (every kind queues its waiters: P{N}:queue, :rqueue,
  /// :squeue, :pqueue, :equeue). For a free name (kind none), the waiters of every kind's queue, added up.
  /// A latch (no queue): the connections listening for it to open on its server (one per
  /// client, however many of its objects wait).
  std::int64_t waiters = -1;
  /// shared: a writer waits (new readers queue behind it) for at most this much longer (its
  /// place, refreshed while it lives); 0: none.
  std::chrono::milliseconds writer_waiting{0};
  /// semaphore: its permit count N (the holders are its permits in use); 0 for the other kinds.
  std::int64_t permits = 0;
  /// latch: the count left in its current round (0: open), the count that round started with,
  /// and the round (1 from its creation, one more per try_set_count() that started it again);
  /// key_ttl is its lease left. 0 for the other kinds.
  std::int64_t latch_count = 0, latch_initial = 0, latch_round = 0;

  bool held() const noexcept { return !holders.empty(); }
};

namespace detail {

inline lock_info parse_lock_info(const redisReply& r, std::string name, std::string key) {
  lock_info info;
  info.name = std::move(name);
  info.key = std::move(key);
  info.kind = kind_named(as_string(element(r, 0)), info.foreign_type);
  info.key_ttl = std::chrono::milliseconds(as_integer(element(r, 1)));
  info.last_fence = static_cast<std::uint64_t>(as_integer(element(r, 2)));
  info.waiters = as_integer(element(r, 3));
  // The fifth element is the semaphore's permit count, the shared lock's writer_waiting_ms, a
  // latch's initial count (then its count left, and no holders).
  if (info.kind == lock_kind::latch) {
    info.latch_initial = as_integer(element(r, 4));
    info.latch_count = as_integer(element(r, 5));
    info.latch_round = as_integer(element(r, 6));
    return info;
  }
  if (info.kind == lock_kind::semaphore) info.permits = as_integer(element(r, 4));
  else info.writer_waiting = std::chrono::milliseconds(as_integer(element(r, 4)));
  for (std::size_t i = 5; i + 3 < r.elements; i += 4) {
    lock_holder h;
    h.owner = std::string(as_string(element(r, i)));
    h.role = std::string(as_string(element(r, i + 1)));
    h.count = as_integer(element(r, i + 2));
    h.remaining = std::chrono::milliseconds(as_integer(element(r, i + 3)));
    info.holders.push_back(std::move(h));
  }
  return info;
}

// Runs the mutex's script (or its break), then the kind's own one while the reply names
// another kind. A name that changes kind between two calls is looked at again (bounded).
// A free name (no lock key: expired, evicted or deleted under its waiters) may still have
// waiters queued by any kind, each in its own queue: inspect() counts them all, one snapshot
// per kind (five round trips).
template <class Client>
lock_info run_lock_info(Client& client, std::string_view name, const lock_options& options, bool force) {
  validate(name, options);
  // Each kind has its own queue keys, from its layout (detail/*_scripts.hpp); the lock, fence
  // and channel prefix are the same for all.
  const mutex_scripts::keys mk(name, options);
  const reentrant_scripts::keys rk(name, options);
  const shared_scripts::keys sk(name, options);
  const semaphore_scripts::keys pk(name, options);
  const election_scripts::keys ek(name, options);
  const std::string& key = mk.lock;
  struct kind_scripts {
    std::string_view kind;
    const script *info, *force_release;
    const std::string *queue, *waiters;   // the kind's queue keys (a latch has none: nullptr)
    const std::string* values = nullptr;  // the election's fifth key (its campaigners' values)
  };
  const kind_scripts kinds[] = {
      {"mutex", &lock_info_scripts::mutex_info(), &lock_info_scripts::mutex_break(), &mk.queue, &mk.waiters},
      {"reentrant", &lock_info_scripts::reentrant_info(), &lock_info_scripts::reentrant_break(), &rk.queue,
       &rk.waiters},
      {"shared", &lock_info_scripts::shared_info(), &lock_info_scripts::shared_break(), &sk.queue, &sk.waiters},
      {"semaphore", &lock_info_scripts::semaphore_info(), &lock_info_scripts::semaphore_break(), &pk.queue,
       &pk.waiters},
      {"latch", &lock_info_scripts::latch_info(), &lock_info_scripts::latch_break(), nullptr, nullptr},
      {"election", &lock_info_scripts::election_info(), &lock_info_scripts::election_break(), &ek.queue, &ek.waiters,
       &ek.values}};
  // The election's scripts take its values key and broadcast channel too; a latch's script
  // reads no queue: it is given the mutex's keys, unused.
  auto run_kind = [&](const kind_scripts& k, const script& s) {
    const std::string& queue = k.queue ? *k.queue : mk.queue;
    const std::string& waiters = k.waiters ? *k.waiters : mk.waiters;
    return client.run(key, [&](connection& c) {
      if (k.values != nullptr)
        return s.run(c, {key, mk.fence, queue, waiters, *k.values},
                     {mk.waiter_prefix, ek.notices, fence_lifetime_arg(options)});
      return s.run(c, {key, mk.fence, queue, waiters}, {mk.waiter_prefix});
    });
  };
  std::string kind = "mutex";  // the mutex's script also answers for a free or foreign key
  for (int round = 0; round < 4; ++round) {
    const kind_scripts* k = &kinds[0];
    for (const kind_scripts& candidate : kinds)
      if (candidate.kind == kind) k = &candidate;
    reply_ptr r = run_kind(*k, force ? *k->force_release : *k->info);
    const std::string found(as_string(element(*r, 0)));
    if (r->elements <= 1) {
      kind = found;
      continue;
    }
    lock_info info = parse_lock_info(*r, std::string(name), key);
    if (info.kind != lock_kind::none) return info;
    // A free name: add the waiters of the other kinds' queues (read-only, break or not).
    for (const kind_scripts& other : kinds) {
      if (&other == k || other.queue == nullptr) continue;
      reply_ptr o = run_kind(other, *other.info);
      if (o->elements <= 1) continue;  // taken meanwhile by another kind: the first snapshot stands
      const lock_info more = parse_lock_info(*o, std::string(name), key);
      if (more.kind != lock_kind::none) continue;  // taken meanwhile: likewise
      info.waiters += more.waiters;
      info.writer_waiting = std::max(info.writer_waiting, more.writer_waiting);
    }
    return info;
  }
  throw reply_error("inspect: the lock '" + std::string(name) + "' kept changing its kind");
}

}  // namespace detail

/// What the server holds for `name` (any lock kind; options: key_prefix). Changes nothing.
/// Throws invalid_argument for a bad name or prefix, connection_error / reply_error as usual.
template <class Client>
lock_info inspect(Client& client, std::string_view name, const lock_options& options = {}) {
  return detail::run_lock_info(client, name, options, false);
}

/// Administrator's force release: removes every hold of `name`, whoever holds it, and lets
/// the waiters move on at once (the release's hand-off to the head of the kind's queue: the
/// longest waiting live waiter, or a shared lock's run of readers). Returns what was removed (held() false:
/// the lock was free, nothing changed). The fencing counter is kept, so the next holder's token
/// still exceeds the removed holder's: fence your writes and the old holder is rejected.
/// A key of a foreign type is left alone (kind == foreign), and so is a latch (it has no
/// holders: kind == latch, held() false).
template <class Client>
lock_info force_release(Client& client, std::string_view name, const lock_options& options = {}) {
  return detail::run_lock_info(client, name, options, true);
}

}  // namespace redislock
