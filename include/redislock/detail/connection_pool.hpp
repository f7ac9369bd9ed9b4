#pragma once
/// @file detail/connection_pool.hpp
/// @brief The bounded connection pool under redislock::client (one server) and
/// redislock::sentinel_client (the current master): at most `size` connections open, each lent
/// to one call at a time, and the eviction check of the first connection opened.
///
/// Each connection carries the generation of the address it was opened to (always 0 for one
/// server; sentinel_client counts master changes): the owner decides whether an idle one may
/// still be used (borrow's `usable`) and whether a returned one may be kept (give_back's `keep`).
/// A connection that still owes replies is never kept: its stream position is lost.

#include <redislock/connection.hpp>
#include <redislock/detail/call_deadline.hpp>
#include <redislock/errors.hpp>
#include <redislock/eviction.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace redislock::detail {

/// No connection came free within the pool's wait: the pool is busy, the server may be fine.
class pool_timeout : public timeout_error {
 public:
  using timeout_error::timeout_error;
};

/// Throws invalid_argument (naming `who`) for pool settings no client can use: the one rule of
/// client, sentinel_client and cluster_client (and async_client given their options).
inline void check_pool_options(std::size_t size, std::chrono::milliseconds wait_timeout, const std::string& who) {
  if (size == 0) throw invalid_argument(who + ": pool_size must be at least 1");
  if (wait_timeout.count() < 0) throw invalid_argument(who + ": pool_wait_timeout must not be negative");
}

class connection_pool {
 public:
  using connection_ptr = std::unique_ptr<connection>;
  struct pooled {
    connection_ptr conn;
    std::uint64_t generation = 0;  // of the address it was opened to
  };

  /// `owner` names the client in messages ("client", "sentinel_client").
  connection_pool(std::string owner, std::size_t size, std::chrono::milliseconds wait_timeout,
                  std::chrono::milliseconds connect_timeout, std::function<void(const std::string&)> on_warning)
      : owner_(std::move(owner)),
        size_(size),
        wait_timeout_(wait_timeout),
        connect_timeout_(connect_timeout),
        on_warning_(std::move(on_warning)) {
    idle_.reserve(size_);
  }

  connection_pool(const connection_pool&) = delete;
  connection_pool& operator=(const connection_pool&) = delete;

  /// Lends an idle connection that usable(const pooled&) accepts (the others are closed), or
  /// opens one with open() -> pooled while fewer than `size` are open (outside the pool's lock;
  /// the first one opened checks eviction). Waits at most wait_timeout, cut by a timed call's
  /// deadline plus one connect timeout (detail/call_deadline.hpp); then throws pool_timeout.
  template <class Usable, class Open>
  pooled borrow(Usable&& usable, Open&& open) {
    std::unique_lock<std::mutex> g(mutex_);
    for (;;) {
      const std::chrono::milliseconds wait = call_deadline::cut_pool_wait(wait_timeout_, connect_timeout_);
      const bool ready = available_.wait_for(g, wait, [&] { return !idle_.empty() || open_ < size_; });
      if (!ready)
        throw pool_timeout(owner_ + ": no free connection within " + std::to_string(wait.count()) + " ms (pool_size " +
                           std::to_string(size_) + ")");
      if (idle_.empty()) break;
      pooled p = std::move(idle_.back());
      idle_.pop_back();
      g.unlock();
      if (usable(static_cast<const pooled&>(p))) return p;
      p.conn.reset();  // closed outside the pool's lock
      g.lock();
      --open_;
    }
    ++open_;
    g.unlock();
    try {
      pooled p = open();
      check_eviction_once(*p.conn);
      return p;
    } catch (...) {
      g.lock();
      --open_;
      g.unlock();
      available_.notify_one();
      throw;
    }
  }

  /// Takes a lent connection back: idle again when `keep` and it owes no replies, else closed
  /// (outside the pool's lock) and its place freed.
  void give_back(pooled p, bool keep) noexcept {
    connection_ptr unusable;
    {
      std::lock_guard<std::mutex> g(mutex_);
      if (keep && p.conn && p.conn->pending() == 0) {
        idle_.push_back(std::move(p));  // capacity reserved
      } else {
        unusable = std::move(p.conn);
        --open_;
      }
    }
    available_.notify_one();
  }

  /// Connections open (idle or lent out).
  std::size_t open_connections() const {
    std::lock_guard<std::mutex> g(mutex_);
    return open_;
  }

  /// What the first connection found about eviction (eviction_risk::unknown before that).
  eviction_check eviction() const {
    std::lock_guard<std::mutex> g(mutex_);
    return eviction_;
  }

 private:
  // The first connection asks whether the server may evict lock keys and warns once if so.
  // One round trip, paid once per pool; tried again on a later connection if it failed.
  void check_eviction_once(connection& c) {
    if (eviction_checked_.exchange(true)) return;
    eviction_check e;
    try {
      e = check_eviction(c);
    } catch (...) {
      eviction_checked_.store(false);
      throw;
    }
    {
      std::lock_guard<std::mutex> g(mutex_);
      eviction_ = e;
    }
    warn_if_evicting(e, c.options().endpoint(), on_warning_);
  }

  const std::string owner_;
  const std::size_t size_;
  const std::chrono::milliseconds wait_timeout_, connect_timeout_;
  const std::function<void(const std::string&)> on_warning_;
  mutable std::mutex mutex_;
  std::condition_variable available_;
  std::vector<pooled> idle_;
  std::size_t open_ = 0;
  std::atomic<bool> eviction_checked_{false};
  eviction_check eviction_;  // under mutex_
};

}  // namespace redislock::detail
