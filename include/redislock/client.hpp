#pragma once
/// @file client.hpp
/// @brief redislock::client — the thread-safe handle to one Redis server: a bounded pool of
/// connections lent out per call. Create one per process (per server) and share it.
///
/// ## The Client concept
/// The lock templates (basic_mutex<Client>, ...) need only this of a Client:
///
///     template <class F> auto run(std::string_view key, F&& f) -> std::invoke_result_t<F, connection&>;
///
/// It calls f with a connection to the server that owns `key` (all keys of one lock share a
/// hash tag, so one key routes the whole call) and returns f's result. A Redis Cluster client
/// routes by the key's hash slot and follows MOVED/ASK; a Sentinel client asks Sentinel for the
/// current master. Both fit without changing the lock classes.
///
/// Optional, for lock_options::auto_renew:
///
///     redislock::watchdog& watchdog();
///
/// returns the client's one lease-renewal thread (created on first use, stopped and joined
/// by the client's destructor). A Client without it still works; its locks reject auto_renew.
/// A multi-server Client passes a locator to the watchdog so that renewals are pipelined per
/// server.
/// Optionally, for waiting without polling, a Client also offers
///
///     detail::subscriber& subscriber();
///
/// a pub/sub connection shared by all waiters of the client (see detail/subscriber.hpp), or
///
///     detail::subscriber& subscriber(std::string_view channel);
///
/// the one for waiters on `channel`: a cluster client's sharded subscriber on the node that
/// owns the channel's slot (cluster_client.hpp). Lock classes detect either form at compile
/// time (detail/wake_wait.hpp); without one they wait with jittered backoff. A Client whose
/// subscriber for a channel can change (the slot's owner, the Sentinel master) also offers
///
///     std::uint64_t routing_epoch() const;
///
/// which changes whenever it may have: waiters compare it after each attempt and move their
/// subscription to the subscriber the client names then.

#include <redislock/connection.hpp>
#include <redislock/detail/connection_pool.hpp>
#include <redislock/detail/fork_guard.hpp>
#include <redislock/detail/subscriber.hpp>
#include <redislock/errors.hpp>
#include <redislock/eviction.hpp>
#include <redislock/lock_kind.hpp>  // before the kinds' aliases (lock_kind.hpp)
#include <redislock/options.hpp>
#include <redislock/stats.hpp>
#include <redislock/watchdog.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <utility>

namespace redislock {

class client {
 public:
  explicit client(client_options options = {})
      : options_(checked(std::move(options))),
        pool_("client", options_.pool_size, options_.pool_wait_timeout, options_.connection.connect_timeout,
              options_.on_warning) {}
  /// Same as client(client_options{parse_uri(uri)}).
  explicit client(std::string_view uri) : client(client_options{parse_uri(uri)}) {}

  // Locks keep a reference to their client: it is neither copied nor moved.
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// Stops the lease watchdog first (it borrows connections from the pool).
  /// In a child of fork(), the watchdog and the subscriber are left as they are (leaked): their
  /// threads exist only in the parent, and a condition variable that a parent's thread waited
  /// on at the fork can never be destroyed in the child. The pool's sockets are closed, which
  /// closes only the child's copies.
  ~client() {
    if (forked_.inherited()) {
      (void)watchdog_.release();
      (void)subscriber_.release();
      return;
    }
    watchdog_.reset();
  }

  const client_options& options() const noexcept { return options_; }

  /// Borrows a connection (waiting at most pool_wait_timeout), calls f(connection&) and gives
  /// the connection back. `key` selects the server; a single-server client ignores it.
  template <class F>
  auto run(std::string_view /*key*/, F&& f) -> std::invoke_result_t<F, connection&> {
    lease l(*this, borrow());
    return std::forward<F>(f)(*l.lent.conn);
  }

  /// Convenience: one command on the pool (e.g. PING, INFO).
  reply_ptr command(std::initializer_list<std::string_view> argv) {
    return run({}, [&](connection& c) { return c.command(argv); });
  }

  /// The one thread that renews this client's auto_renew locks; created on first use, its
  /// thread starts with the first registration.
  redislock::watchdog& watchdog() {
    std::call_once(watchdog_once_, [this] {
      watchdog_ = std::make_unique<redislock::watchdog>(
          [this](std::string_view key, const std::function<void(connection&)>& f) { run(key, f); });
    });
    return *watchdog_;
  }

  /// The pub/sub connection that wakes this client's waiting locks: created on first use (it
  /// connects on the first contended wait), closed by ~client().
  detail::subscriber& subscriber() {
    std::call_once(subscriber_once_, [&] {
      auto s = std::make_unique<detail::subscriber>(options_.connection);
      std::lock_guard<std::mutex> g(mutex_);  // wait_stats() reads it under mutex_
      subscriber_ = std::move(s);
    });
    return *subscriber_;
  }

  /// How waiting locks of this client were woken (all zero before the first contended wait).
  redislock::wait_stats wait_stats() const {
    std::lock_guard<std::mutex> g(mutex_);
    return subscriber_ ? subscriber_->stats() : redislock::wait_stats{};
  }

  /// Whether the server may evict held locks (eviction.hpp), as found on this client's first
  /// connection; eviction_risk::unknown before that or where CONFIG GET is refused.
  eviction_check eviction() const { return pool_.eviction(); }

  /// Connections currently open (idle or lent out).
  std::size_t open_connections() const { return pool_.open_connections(); }

 private:
  static client_options checked(client_options o) {
    detail::check_pool_options(o.pool_size, o.pool_wait_timeout, "client");
    detail::check_connection_options(o.connection, "client");
    return o;
  }

  struct lease {
    client& owner;
    detail::connection_pool::pooled lent;
    lease(client& o, detail::connection_pool::pooled p) : owner(o), lent(std::move(p)) {}
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() { owner.pool_.give_back(std::move(lent), true); }  // a broken one reconnects on next use
  };

  detail::connection_pool::pooled borrow() {
    if (forked_.inherited())
      throw error("client: created before fork(), in the parent process; create a new client in the child");
    return pool_.borrow(
        [](const detail::connection_pool::pooled&) { return true; },
        [&] { return detail::connection_pool::pooled{std::make_unique<connection>(options_.connection)}; });
  }

  client_options options_;
  detail::connection_pool pool_;
  detail::fork_guard forked_;
  mutable std::mutex mutex_;  // subscriber_, once set
  std::once_flag subscriber_once_;
  std::unique_ptr<detail::subscriber> subscriber_;  // after the pool: stopped before it goes
  std::once_flag watchdog_once_;
  std::unique_ptr<redislock::watchdog> watchdog_;  // last member: destroyed first
};

}  // namespace redislock
