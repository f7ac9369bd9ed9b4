#pragma once
/// @file lock_kind.hpp
/// @brief redislock::lock_kind, the kinds of lock a name can hold (lock_info::kind).
///
/// Its own header, included by client.hpp and therefore before any kind's alias (mutex,
/// semaphore, latch, election): declared after them, the enumerators of the same names would
/// shadow them (GCC's -Wshadow warns). lock_info.hpp includes it too.

namespace redislock {

enum class lock_kind {
  none,       ///< no key: the lock is free (and was never held, or was released)
  mutex,      ///< redislock::mutex (a string key)
  reentrant,  ///< redislock::reentrant_mutex (a hash, @kind = reentrant)
  shared,     ///< redislock::shared_mutex (a hash, @kind = shared)
  semaphore,  ///< redislock::semaphore (a zset of holders with the "#permits" member)
  latch,      ///< redislock::latch (a hash, @kind = latch; never held: see lock_info::latch_count)
  election,   ///< redislock::election (a hash, @kind = election; its leader is the one holder)
  foreign,    ///< the key holds something else (lock_info::foreign_type says what)
};

inline const char* to_string(lock_kind k) noexcept {
  switch (k) {
    case lock_kind::none: return "none";
    case lock_kind::mutex: return "mutex";
    case lock_kind::reentrant: return "reentrant";
    case lock_kind::shared: return "shared";
    case lock_kind::semaphore: return "semaphore";
    case lock_kind::latch: return "latch";
    case lock_kind::election: return "election";
    case lock_kind::foreign: return "foreign";
  }
  return "?";
}

}  // namespace redislock
