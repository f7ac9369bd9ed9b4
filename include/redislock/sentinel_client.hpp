#pragma once
/// @file sentinel_client.hpp
/// @brief redislock::sentinel_client — a Client (see client.hpp) for a master that Redis
/// Sentinel watches: it asks the sentinels where the master is, keeps a pool of connections to
/// it, and moves to the new master after a failover.
///
/// Discovery: the sentinels are asked in turn (the one that answered last first),
/// `SENTINEL GET-MASTER-ADDR-BY-NAME <service>`, each bounded by the connect and command
/// timeouts; one that is down, refuses the Sentinel credentials or does not know the name is
/// skipped; when none answers, discovery_error. Every new connection to the master is checked
/// with ROLE; a node that is not (or no longer) the master is never used.
///
/// Failover: a call that finds the master gone (cannot connect, ROLE says replica, a READONLY,
/// LOADING or MASTERDOWN reply) asks the sentinels again and retries, at most
/// sentinel_options::retries times, pausing retry_backoff (doubling) between rounds. Idle
/// connections to the old master are dropped, and the pub/sub subscriber that wakes waiters is
/// replaced by one for the new master (the old one is kept, idle, until the client goes, as
/// waiting locks may still hold subscriptions on it). A waiter compares routing_epoch() after
/// each attempt and, once the master changed, moves its subscription to the new master's
/// subscriber before it sleeps again; a subscription kept from an earlier wait is checked the
/// same way before the first attempt (detail/wake_wait.hpp). A demoted master keeps its
/// subscribers unless Sentinel kills them, and a release on the new master does not count them.
///
/// What is retried: only calls that certainly did not run (see run()). A call that failed in
/// flight (timeout, connection reset after sending) is not retried: its command may have run on
/// the old master. The error reaches the lock, as on a single server, and the next call
/// discovers the new master.
///
/// Asynchronous replication: a lock written to the old master just before it failed may not
/// have reached the replica that is promoted; the new master then lets someone else take it.
/// lock_options::min_replicas narrows that window, fencing tokens cover the rest (README,
/// "Topologies").

#include <redislock/connection.hpp>
#include <redislock/detail/call_deadline.hpp>
#include <redislock/detail/connection_pool.hpp>
#include <redislock/detail/fork_guard.hpp>
#include <redislock/detail/observe_hooks.hpp>
#include <redislock/detail/sentinel_discovery.hpp>
#include <redislock/detail/subscriber.hpp>
#include <redislock/errors.hpp>
#include <redislock/eviction.hpp>
#include <redislock/options.hpp>
#include <redislock/stats.hpp>
#include <redislock/watchdog.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace redislock {

/// Options of a sentinel_client.
struct sentinel_options {
  /// Sentinels to ask, in this order at first (at least one).
  std::vector<sentinel_endpoint> sentinels;
  /// The master's name in Sentinel's configuration (`sentinel monitor <name> ...`).
  std::string service_name;
  /// Credentials for the sentinels (their `requirepass` / ACL), separate from the data nodes'.
  /// Empty password: no AUTH. Never printed in messages.
  std::string sentinel_user;
  std::string sentinel_password;
  /// The data nodes' options: user/password, db, TLS settings and the timeouts. host, port and
  /// unix_path are ignored (Sentinel names the master). The sentinels are reached with the same
  /// timeouts and TLS settings, with the Sentinel credentials and no SELECT.
  connection_options connection;
  /// Most connections to the master open at once, and how long a call waits for one.
  std::size_t pool_size = 8;
  std::chrono::milliseconds pool_wait_timeout{1000};
  /// Re-discoveries one call may make after finding the master gone, with a pause before each
  /// (retry_backoff, doubling up to max(retry_backoff, 1 s)). With the defaults a call gives up after about 0.7 s plus
  /// the timeouts of its attempts; the lock's caller retries as after any connection error. Worst case of one call when
  /// every node stalls: (retries + 1) × (sentinels × (connect + command timeout) + connect + 2 command timeouts) plus
  /// the pauses: bounded, but choose timeouts with it in mind.
  int retries = 3;
  std::chrono::milliseconds retry_backoff{100};
  /// Ask the sentinels again at least this often while calls are made (one call per interval
  /// pays the round trip; the others use the known address meanwhile). After a failover whose
  /// old master stays up (SENTINEL FAILOVER, a partition), that node is a master until Sentinel
  /// reconfigures it, which takes Sentinel several seconds: this bounds how long the client
  /// keeps writing there once the sentinels name the new one. Zero: only on errors.
  std::chrono::milliseconds recheck_interval{1000};
  /// As client_options::on_warning (eviction warning, once per client).
  std::function<void(const std::string& message)> on_warning{};
};

/// Parses `redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]`
/// (`rediss-sentinel://` for TLS), with optional query parameters `sentinel_user` and
/// `sentinel_password`. The user info before '@' is the data nodes' (what the locks use); the
/// sentinels' credentials go in the query. A sentinel without a port uses 26379. Values may be
/// percent-encoded; IPv6 hosts go in brackets. Throws invalid_argument (never quoting a
/// password) on bad input.
inline sentinel_options parse_sentinel_uri(std::string_view uri, sentinel_options base = {}) {
  sentinel_options o = std::move(base);
  o.sentinels.clear();
  auto scheme_end = uri.find("://");
  if (scheme_end == std::string_view::npos) throw invalid_argument("sentinel uri: missing scheme");
  const std::string_view scheme = uri.substr(0, scheme_end);
  if (scheme != "redis-sentinel" && scheme != "rediss-sentinel") throw invalid_argument("sentinel uri: unknown scheme");
  o.connection.tls = scheme == "rediss-sentinel";
  std::string_view rest = uri.substr(scheme_end + 3);

  const auto query_at = rest.find('?');
  if (query_at != std::string_view::npos) {
    std::string_view query = rest.substr(query_at + 1);
    rest = rest.substr(0, query_at);
    while (!query.empty()) {
      const auto amp = query.find('&');
      const std::string_view item = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
      const auto eq = item.find('=');
      if (eq == std::string_view::npos) throw invalid_argument("sentinel uri: query items must be name=value");
      const std::string_view name = item.substr(0, eq);
      if (name == "sentinel_user") o.sentinel_user = detail::percent_decode(item.substr(eq + 1));
      else if (name == "sentinel_password") o.sentinel_password = detail::percent_decode(item.substr(eq + 1));
      else throw invalid_argument("sentinel uri: unknown query parameter (sentinel_user, sentinel_password)");
    }
  }
  const auto at = rest.rfind('@');
  if (at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const auto colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      o.connection.user.clear();
      o.connection.password = detail::percent_decode(userinfo);
    } else {
      o.connection.user = detail::percent_decode(userinfo.substr(0, colon));
      o.connection.password = detail::percent_decode(userinfo.substr(colon + 1));
    }
  }
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos) throw invalid_argument("sentinel uri: missing /service name");
  std::string_view hosts = rest.substr(0, slash);
  std::string_view path = rest.substr(slash + 1);
  const auto db_slash = path.find('/');
  const std::string_view service = path.substr(0, db_slash);
  if (service.empty()) throw invalid_argument("sentinel uri: missing service name");
  o.service_name = detail::percent_decode(service);
  if (db_slash != std::string_view::npos) {
    const std::string_view db = path.substr(db_slash + 1);
    if (!db.empty()) o.connection.db = detail::parse_port_or_db(db, "db", 1 << 20);
  }
  if (hosts.empty()) throw invalid_argument("sentinel uri: missing sentinel host");
  while (true) {
    const auto comma = hosts.find(',');
    std::string_view hostport = hosts.substr(0, comma);
    sentinel_endpoint e;
    if (!hostport.empty() && hostport.front() == '[') {
      const auto close = hostport.find(']');
      if (close == std::string_view::npos) throw invalid_argument("sentinel uri: bad IPv6 host");
      e.host = std::string(hostport.substr(1, close - 1));
      hostport = hostport.substr(close + 1);
      if (!hostport.empty()) {
        if (hostport.front() != ':') throw invalid_argument("sentinel uri: bad port");
        e.port = detail::parse_port_or_db(hostport.substr(1), "port", 65535);
      }
    } else {
      const auto colon = hostport.find(':');
      e.host = std::string(hostport.substr(0, colon));
      if (colon != std::string_view::npos) e.port = detail::parse_port_or_db(hostport.substr(colon + 1), "port", 65535);
    }
    if (e.host.empty()) throw invalid_argument("sentinel uri: missing sentinel host");
    if (e.port == 0) throw invalid_argument("sentinel uri: port must not be 0");
    o.sentinels.push_back(std::move(e));
    if (comma == std::string_view::npos) break;
    hosts = hosts.substr(comma + 1);
  }
  return o;
}

namespace detail {

/// Throws invalid_argument (naming `who` and the option) for sentinel_options no client can use.
inline void check_sentinel_options(const sentinel_options& o, const char* who) {
  const std::string w(who);
  if (o.sentinels.empty()) throw invalid_argument(w + ": at least one sentinel is needed");
  if (o.service_name.empty()) throw invalid_argument(w + ": service_name must not be empty");
  check_pool_options(o.pool_size, o.pool_wait_timeout, w);
  if (o.retries < 0 || o.retries > 100) throw invalid_argument(w + ": retries must be in [0, 100]");
  if (o.retry_backoff.count() < 0 || o.retry_backoff > std::chrono::minutes(1))
    throw invalid_argument(w + ": retry_backoff must be in [0, 1 min]");
  if (o.recheck_interval.count() < 0 || o.recheck_interval > std::chrono::hours(24))
    throw invalid_argument(w + ": recheck_interval must be in [0, 24 h]");
  for (const auto& s : o.sentinels)
    if (s.host.empty() || s.port <= 0 || s.port > 65535) throw invalid_argument(w + ": bad sentinel address");
  connection_options data = o.connection;  // host and port are Sentinel's to name
  data.unix_path.clear();
  data.port = 1;
  check_connection_options(data, who);
}

/// Tells the observer (observe.hpp) that a Sentinel client moved to a new master; `lost_at`:
/// when it first found the old one gone (a default time point: it did not).
inline void report_sentinel_failover(const std::string& from, const std::string& to,
                                     std::chrono::steady_clock::time_point lost_at,
                                     std::chrono::steady_clock::time_point now) {
  notify([&](lock_observer& o) {
    failover_event e;
    e.topology = "sentinel";
    e.from = from;
    e.to = to;
    if (lost_at != std::chrono::steady_clock::time_point{}) e.recovered_in = now - lost_at;
    o.on_failover(e);
  });
}

}  // namespace detail

class sentinel_client {
 public:
  explicit sentinel_client(sentinel_options options)
      : options_(checked(std::move(options))),
        pool_("sentinel_client", options_.pool_size, options_.pool_wait_timeout, options_.connection.connect_timeout,
              options_.on_warning) {}
  /// Same as sentinel_client(parse_sentinel_uri(uri)).
  explicit sentinel_client(std::string_view uri) : sentinel_client(parse_sentinel_uri(uri)) {}

  sentinel_client(const sentinel_client&) = delete;
  sentinel_client& operator=(const sentinel_client&) = delete;

  /// As ~client(): the watchdog stops first; in a child of fork() threads are left alone.
  ~sentinel_client() {
    if (forked_.inherited()) {
      (void)watchdog_.release();
      (void)subscriber_.release();
      for (auto& s : retired_) (void)s.release();
      return;
    }
    watchdog_.reset();
  }

  const sentinel_options& options() const noexcept { return options_; }

  /// Borrows a connection to the current master and calls f(connection&) (see client.hpp).
  ///
  /// Retried on the (re-discovered) master only when f certainly did not run:
  /// - connecting, the handshake or the ROLE check failed: that is before f is called;
  /// - f threw reply_error READONLY / LOADING / MASTERDOWN, or returned such an error reply
  ///   (a reply_ptr it did not check): the node refused the command without running it. A
  ///   script refused with READONLY wrote nothing either: a replica runs no write.
  /// Not retried: any other exception from f, connection_error and timeout_error included. A
  /// connection that fails after f started may have delivered its command (a timed-out script
  /// may have run on the old master), so the error goes to the caller, as on one server.
  /// The budget: sentinel_options::retries re-discoveries, each attempt bounded by the
  /// connection timeouts. Within a timed lock call the pauses end at the call's deadline and
  /// the round that follows it is the last (detail/call_deadline.hpp).
  template <class F>
  auto run(std::string_view /*key*/, F&& f) -> std::invoke_result_t<F, connection&> {
    using result = std::invoke_result_t<F, connection&>;
    std::chrono::milliseconds pause = options_.retry_backoff;
    for (int round = 0;; ++round) {
      if (round > 0 && pause.count() > 0) {
        std::this_thread::sleep_until(detail::call_deadline::retries_until(detail::steady::now() + pause));
        pause = std::min(pause * 2, std::max(options_.retry_backoff, std::chrono::milliseconds(1000)));  // capped
      }
      const bool last = round >= options_.retries || detail::call_deadline::passed();
      std::optional<lease> l;
      try {
        l.emplace(*this, borrow());
      } catch (const detail::pool_timeout&) {
        throw;  // the pool is busy, not the master gone
      } catch (const discovery_error&) {
        if (last) throw;
        continue;
      } catch (const connection_error&) {  // before f: the master may have moved
        if (last) throw;
        continue;
      } catch (const reply_error& e) {
        if (last || !detail::is_not_master_reply(e.server_message())) throw;
        continue;
      } catch (const not_master&) {
        if (last)
          throw connection_error("sentinel: " + options_.service_name + ": the node Sentinel names is not a master");
        continue;
      }
      try {
        if constexpr (std::is_same_v<result, reply_ptr>) {
          reply_ptr r = f(*l->lent.conn);  // f may be called again: never moved from
          if (!last && r && r->type == REDIS_REPLY_ERROR &&
              detail::is_not_master_reply(std::string_view(r->str, r->len))) {
            l->stale();
            continue;
          }
          return r;
        } else {
          return f(*l->lent.conn);
        }
      } catch (const reply_error& e) {
        if (last || !detail::is_not_master_reply(e.server_message())) throw;
        l->stale();
      }
    }
  }

  /// Convenience: one command on the master.
  reply_ptr command(std::initializer_list<std::string_view> argv) {
    return run({}, [&](connection& c) { return c.command(argv); });
  }

  /// The one thread that renews this client's auto_renew locks (as client::watchdog()).
  /// Renewals go through run(): during a failover they may fail; a lease that cannot be
  /// renewed before it runs out is reported lost, as on one server.
  redislock::watchdog& watchdog() {
    std::call_once(watchdog_once_, [this] {
      watchdog_ = std::make_unique<redislock::watchdog>(
          [this](std::string_view key, const std::function<void(connection&)>& f) { run(key, f); });
    });
    return *watchdog_;
  }

  /// The pub/sub connection of this client's waiters, for the current master (created on first
  /// use, and anew after the master changed). A replaced one stays alive until ~sentinel_client
  /// (subscriptions may still point to it) and wakes nobody once its connection is gone.
  detail::subscriber& subscriber() {
    bool known = false;
    {
      std::lock_guard<std::mutex> g(mutex_);
      if (subscriber_ && subscriber_generation_ == generation_) return *subscriber_;
      known = master_.has_value();
    }
    if (!known) {
      try {
        (void)current_master();  // bounded by the timeouts
      } catch (...) {
        std::lock_guard<std::mutex> g(mutex_);
        if (subscriber_) return *subscriber_;  // the old one: its waiters back off
        throw;
      }
    }
    std::lock_guard<std::mutex> g(mutex_);
    if (last_master_ && (!subscriber_ || subscriber_generation_ != generation_)) {
      connection_options o = options_.connection;
      o.unix_path.clear();
      o.host = last_master_->host;
      o.port = last_master_->port;
      if (subscriber_) retired_.push_back(std::move(subscriber_));
      subscriber_ = std::make_unique<detail::subscriber>(std::move(o));
      subscriber_generation_ = generation_;
    }
    return *subscriber_;
  }

  /// How waiting locks of this client were woken (all its subscribers, replaced ones included).
  redislock::wait_stats wait_stats() const {
    std::lock_guard<std::mutex> g(mutex_);
    redislock::wait_stats total;
    auto add = [&](const detail::subscriber& s) {
      const redislock::wait_stats x = s.stats();
      total.subscriptions += x.subscriptions;
      total.subscribe_failures += x.subscribe_failures;
      total.wakeups += x.wakeups;
      total.fallback_waits += x.fallback_waits;
    };
    for (const auto& s : retired_) add(*s);
    if (subscriber_) add(*subscriber_);
    return total;
  }

  /// "host:port" of the master as last discovered ("" before the first call).
  std::string master_endpoint() const {
    std::lock_guard<std::mutex> g(mutex_);
    return master_ ? master_->endpoint() : std::string();
  }

  /// Changes whenever the master's address does: a waiter compares it after each attempt to
  /// learn that its subscription is on a node that is no longer the master (detail/wake_wait.hpp).
  std::uint64_t routing_epoch() const noexcept { return routing_epoch_.load(std::memory_order_acquire); }

  /// How many times the master's address changed since the first discovery.
  std::uint64_t master_changes() const {
    std::lock_guard<std::mutex> g(mutex_);
    return generation_ > 0 ? generation_ - 1 : 0;
  }

  /// As client::eviction(), for the first master connected to.
  eviction_check eviction() const { return pool_.eviction(); }

  /// Connections to the master currently open (idle or lent out).
  std::size_t open_connections() const { return pool_.open_connections(); }

 private:
  static sentinel_options checked(sentinel_options o) {
    detail::check_sentinel_options(o, "sentinel_client");
    return o;
  }

  struct not_master {};  // ROLE said replica: internal, becomes connection_error when out of retries
  using pooled = detail::connection_pool::pooled;  // generation: of the master it is connected to

  struct lease {
    sentinel_client& owner;
    pooled lent;
    bool drop = false;
    lease(sentinel_client& o, pooled p) : owner(o), lent(std::move(p)) {}
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    // Kept only while it is connected to the current master: not one that failed (it is never
    // reconnected here), nor one to an older master.
    ~lease() {
      const bool keep = !drop && lent.conn && !lent.conn->broken() && owner.is_current(lent.generation);
      owner.pool_.give_back(std::move(lent), keep);
    }
    // The node refused as a non-master: forget it, and this connection.
    void stale() {
      drop = true;
      owner.forget_master(lent.generation);
    }
  };

  bool is_current(std::uint64_t generation) const {
    std::lock_guard<std::mutex> g(mutex_);
    return generation == generation_ && master_;
  }

  // The master's address: the cached one, or a fresh answer from the sentinels. Returns the
  // address with its generation. Discoveries are serialised: threads that found the same
  // master gone wait for one answer.
  std::pair<detail::master_address, std::uint64_t> current_master() {
    std::unique_lock<std::mutex> d(discovery_mutex_, std::defer_lock);
    {
      std::lock_guard<std::mutex> g(mutex_);
      const bool due = options_.recheck_interval.count() > 0 && std::chrono::steady_clock::now() >= recheck_at_;
      // Due for a recheck: one thread asks (the one that gets discovery_mutex_ at once), the
      // others go on with the known address.
      if (master_ && !(due && d.try_lock())) return {*master_, generation_};
    }
    if (!d.owns_lock()) {
      d.lock();
      std::lock_guard<std::mutex> g(mutex_);
      if (master_) return {*master_, generation_};  // found by another thread meanwhile
    }
    connection_options so = options_.connection;
    so.user = options_.sentinel_user;
    so.password = options_.sentinel_password;
    std::size_t first, answered = 0;
    {
      std::lock_guard<std::mutex> g(mutex_);
      first = preferred_sentinel_;
    }
    detail::master_address a;
    try {
      a = detail::ask_sentinels(options_.sentinels, options_.service_name, so, first, answered);
    } catch (const discovery_error&) {
      std::lock_guard<std::mutex> g(mutex_);
      recheck_at_ = std::chrono::steady_clock::now() + options_.recheck_interval;
      if (master_) return {*master_, generation_};  // a recheck that failed: keep what worked
      throw;
    }
    std::unique_lock<std::mutex> g(mutex_);
    const std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
    recheck_at_ = now + options_.recheck_interval;
    preferred_sentinel_ = answered;
    std::optional<detail::master_address> moved_from;
    if (!last_master_ || *last_master_ != a) {
      ++generation_;  // idle connections and the subscriber of an older one are replaced
      routing_epoch_.store(generation_, std::memory_order_release);
      moved_from = std::exchange(last_master_, a);
    }
    master_ = a;
    const std::uint64_t generation = generation_;
    const std::chrono::steady_clock::time_point lost_at = std::exchange(master_lost_at_, {});
    g.unlock();
    if (moved_from) detail::report_sentinel_failover(moved_from->endpoint(), a.endpoint(), lost_at, now);
    return {a, generation};
  }

  // A connection of `generation` found its node not (or no longer) the master.
  void forget_master(std::uint64_t generation) {
    std::lock_guard<std::mutex> g(mutex_);
    if (generation != generation_ || !master_) return;
    if (master_lost_at_ == std::chrono::steady_clock::time_point{}) master_lost_at_ = std::chrono::steady_clock::now();
    master_.reset();  // the next call asks the sentinels,
    // starting with another one: the last to answer may not have heard of the failover yet
    preferred_sentinel_ = (preferred_sentinel_ + 1) % options_.sentinels.size();
  }

  pooled borrow() {
    if (forked_.inherited())
      throw error("sentinel_client: created before fork(), in the parent process; create a new client in the child");
    (void)current_master();  // the cached address, or a (re)discovery when due or unknown
    // An idle connection to an older master, or one the server closed (a demoted master drops
    // its clients), is not reconnected to the same address: it is closed.
    return pool_.borrow([&](const pooled& p) { return is_current(p.generation) && !p.conn->needs_reconnect(); },
                        [&] { return connect_to_master(); });
  }

  pooled connect_to_master() {
    auto [address, generation] = current_master();
    connection_options o = options_.connection;
    o.unix_path.clear();
    o.host = address.host;
    o.port = address.port;
    pooled p{nullptr, generation};
    try {
      p.conn = std::make_unique<connection>(std::move(o));
      if (!detail::is_master(*p.conn)) throw not_master{};
    } catch (const reply_error& e) {
      if (detail::is_not_master_reply(e.server_message())) forget_master(generation);
      throw;
    } catch (const connection_error&) {
      forget_master(generation);  // down, or not reachable: ask the sentinels again
      throw;
    } catch (const not_master&) {
      forget_master(generation);
      throw;
    }
    return p;
  }

  sentinel_options options_;
  detail::fork_guard forked_;
  mutable std::mutex mutex_;
  std::mutex discovery_mutex_;  // one discovery at a time; taken before mutex_
  detail::connection_pool pool_;
  std::optional<detail::master_address> master_;              // under mutex_; empty: ask the sentinels
  std::optional<detail::master_address> last_master_;         // under mutex_; what generation_ refers to
  std::chrono::steady_clock::time_point master_lost_at_{};    // under mutex_; when the master was first found gone
  std::uint64_t generation_ = 0;                              // under mutex_; +1 per master address change
  std::atomic<std::uint64_t> routing_epoch_{0};               // generation_, readable without mutex_
  std::size_t preferred_sentinel_ = 0;                        // under mutex_; the one that answered last
  std::chrono::steady_clock::time_point recheck_at_{};        // under mutex_; next periodic discovery
  std::vector<std::unique_ptr<detail::subscriber>> retired_;  // under mutex_; replaced subscribers
  std::unique_ptr<detail::subscriber> subscriber_;            // under mutex_
  std::uint64_t subscriber_generation_ = 0;                   // under mutex_
  std::once_flag watchdog_once_;
  std::unique_ptr<redislock::watchdog> watchdog_;  // last member: destroyed first
};

}  // namespace redislock
