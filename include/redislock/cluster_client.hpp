#pragma once
/// @file cluster_client.hpp
/// @brief redislock::cluster_client — a Client (see client.hpp) for Redis Cluster: routes each
/// call by the hash slot of its key to the master that owns the slot, one connection pool
/// (a redislock::client) per node.
///
///     redislock::cluster_client cluster("redis-cluster://10.0.0.1:7000,10.0.0.2:7000");
///     redislock::basic_mutex<redislock::cluster_client> m(cluster, "orders");
///
/// The slot map comes from CLUSTER SLOTS (asked of any known node, then of the seeds), loaded
/// on the first call and refreshed in full whenever a node says the map is stale.
///
/// Retries. run(key, f) calls f again only when the command f sent is known not to have run:
///  - MOVED / ASK: the node refused the command before executing it. MOVED: the map is
///    refreshed and f runs on the new owner; ASK: f runs once on the target, after ASKING.
///  - TRYAGAIN (a multi-key call during a slot migration), CLUSTERDOWN, LOADING, MASTERDOWN:
///    refused before execution; retried with jittered backoff. (One TRYAGAIN comes from a
///    script that did run: a shared lock's "wait" attempt that emptied its queue on a
///    migrating slot, detail/shared_scripts.hpp. What it did is safe to repeat.)
///  - a connection error before f started (connect refused, pool exhausted, a reconnect that
///    failed): nothing was sent; the map is refreshed and f is retried.
/// A connection error or timeout once f has started is ambiguous (the script may have run and
/// only its reply was lost), so it is thrown to the caller, never retried here: the lock
/// classes already treat such a failure as "maybe acquired" (their next attempt recognises
/// its own token). The map is refreshed on the next call. This includes a node that closed a
/// connection within connection_options::idle_check_after (100 µs) of its last reply: such a
/// connection is trusted without a check, so the command is sent and fails (connection.hpp).
/// Budget: at most cluster_options::max_redirects redirects (16) and cluster_options::retry_timeout
/// of waiting per call; then the last error is thrown (redirect_error, reply_error for
/// TRYAGAIN/CLUSTERDOWN, connection_error/timeout_error). No try starts after retry_timeout, and
/// every wait of a try (pool, connect, command) ends by retry_timeout plus one connect timeout:
/// a call returns within retry_timeout + connect_timeout. Within a timed lock call the call's
/// deadline replaces retry_timeout when it comes first (detail/call_deadline.hpp).
///
/// Waiting: sharded pub/sub (Redis 7). subscriber(channel) gives a waiter the subscriber of
/// the node that owns the channel's slot (one per node, SSUBSCRIBE, created on first use);
/// lock channels carry the lock's {hash tag}, so that is the node that runs the lock's
/// scripts, which count that node's sharded subscribers and SPUBLISH to them
/// (detail/notify_lua.hpp), whatever node the waiter's client first reached. When the slot moves the old owner pushes
/// `sunsubscribe`: the slot map is marked stale and the waiter joins again on the new owner (detail/wake_wait.hpp).
/// After a failover the demoted master accepts SSUBSCRIBE for its new master's slots (and never ends such a
/// subscription, while a release on the new master does not count it), so a waiter also compares routing_epoch() after
/// each attempt, and moves its subscription to the slot's owner when the map changed (an attempt redirected by MOVED
/// changes it); a subscription kept from an earlier wait is checked the same way before the first attempt. Where
/// SSUBSCRIBE is unknown (Redis < 7) or refused (ACL), waiters fall back to jittered backoff
/// (lock_options::retry_min/retry_max), as before; wait_stats() sums the nodes'.

#include <redislock/client.hpp>
#include <redislock/connection.hpp>
#include <redislock/detail/call_deadline.hpp>
#include <redislock/detail/cluster_slots.hpp>
#include <redislock/detail/fork_guard.hpp>
#include <redislock/detail/observe_hooks.hpp>
#include <redislock/detail/subscriber.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/errors.hpp>
#include <redislock/options.hpp>
#include <redislock/stats.hpp>
#include <redislock/reply.hpp>
#include <redislock/watchdog.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
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

/// Options of a redislock::cluster_client.
struct cluster_options {
  /// Where to learn the cluster from (any reachable node will do). Credentials, TLS settings
  /// and timeouts of the first seed apply to every node; only host and port differ. TCP only
  /// (no unix sockets) and database 0 (a cluster has no other).
  std::vector<connection_options> seeds;
  /// Connections per node (each node has its own bounded pool).
  std::size_t pool_size = 8;
  /// How long a call waits for a free connection of a node's pool.
  std::chrono::milliseconds pool_wait_timeout{1000};
  /// Most MOVED/ASK redirects one call follows before giving up with redirect_error. From the
  /// second MOVED on, the call backs off before following one (nodes that disagree for a
  /// moment after a slot move send clients back and forth until gossip converges).
  int max_redirects = 16;
  /// Longest a call keeps retrying TRYAGAIN/CLUSTERDOWN/refused connections (with backoff)
  /// before throwing the last error. A failover or slot migration in progress is waited out
  /// within this bound. A call returns within retry_timeout + connect_timeout (the try under
  /// way at retry_timeout is cut to end by then); within a timed lock call, the call's
  /// deadline replaces retry_timeout when it comes first (detail/call_deadline.hpp).
  std::chrono::milliseconds retry_timeout{3000};
  /// Receives the nodes' eviction warnings (see client_options::on_warning); empty: stderr.
  std::function<void(const std::string& message)> on_warning{};
};

/// Parses `redis-cluster://[[user]:password@]host:port[,host:port...]` (`rediss-cluster://`
/// for TLS). Each host:port is a seed; the port defaults to 6379; IPv6 as [::1]:7000; an
/// optional trailing "/" or "/0". Credentials apply to every node. Throws invalid_argument
/// (whose message never contains the password).
inline cluster_options parse_cluster_uri(std::string_view uri) {
  auto scheme_end = uri.find("://");
  if (scheme_end == std::string_view::npos) throw invalid_argument("redis cluster uri: missing scheme");
  const std::string_view scheme = uri.substr(0, scheme_end);
  if (scheme != "redis-cluster" && scheme != "rediss-cluster")
    throw invalid_argument("redis cluster uri: scheme must be redis-cluster:// or rediss-cluster://");
  std::string_view rest = uri.substr(scheme_end + 3);
  std::string_view userinfo;
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
  }
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && db != "0") throw invalid_argument("redis cluster uri: a cluster has only database 0");
    rest = rest.substr(0, slash);
  }
  const std::string single_scheme = scheme == "rediss-cluster" ? "rediss://" : "redis://";
  cluster_options o;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view hostport = rest.substr(0, comma);
    if (hostport.empty()) throw invalid_argument("redis cluster uri: empty host in the seed list");
    if (hostport.find_first_of("/?#@") != std::string_view::npos)
      throw invalid_argument("redis cluster uri: bad seed '" + std::string(hostport) + "'");
    std::string one = single_scheme;
    if (!userinfo.empty()) one.append(userinfo).append("@");
    one.append(hostport);
    o.seeds.push_back(parse_uri(one));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return o;
}

namespace detail {

/// Throws invalid_argument (naming `who` and the option) for cluster_options no client can use
/// (cluster_client, and async_client given a cluster): TCP seeds, database 0.
inline void check_cluster_options(const cluster_options& o, const char* who) {
  const std::string w(who);
  if (o.seeds.empty()) throw invalid_argument(w + ": a cluster needs at least one seed");
  check_pool_options(o.pool_size, o.pool_wait_timeout, w);
  if (o.max_redirects < 0) throw invalid_argument(w + ": max_redirects must not be negative");
  if (o.retry_timeout.count() < 0) throw invalid_argument(w + ": retry_timeout must not be negative");
  for (const connection_options& s : o.seeds) {
    if (!s.unix_path.empty()) throw invalid_argument(w + ": seeds must be TCP endpoints, not unix sockets");
    if (s.db != 0) throw invalid_argument(w + ": a cluster has only database 0");
    if (s.host.empty()) throw invalid_argument(w + ": bad seed endpoint");
    check_connection_options(s, who);
  }
}

}  // namespace detail

class cluster_client {
 public:
  using steady = std::chrono::steady_clock;

  explicit cluster_client(cluster_options options) : options_(std::move(options)) {
    detail::check_cluster_options(options_, "cluster_client");
    slot_owner_.assign(detail::cluster_slot_count, -1);
  }
  /// Same as cluster_client(parse_cluster_uri(uri)).
  explicit cluster_client(std::string_view uri) : cluster_client(parse_cluster_uri(uri)) {}

  cluster_client(const cluster_client&) = delete;
  cluster_client& operator=(const cluster_client&) = delete;

  /// Stops the watchdog first (it borrows the nodes' connections). In a child of fork() the
  /// watchdog is leaked, as ~client() does (its thread exists only in the parent).
  ~cluster_client() {
    if (forked_.inherited()) {
      (void)watchdog_.release();
      // No lock: a parent's thread may have held state_mutex_ at the fork, and it would stay
      // locked forever here; the child runs this thread only.
      for (auto& n : nodes_) (void)n->subscriber.release();  // see ~client()
      return;
    }
    watchdog_.reset();
  }

  const cluster_options& options() const noexcept { return options_; }

  /// Calls f(connection&) on the master that owns `key`'s slot, following redirects (see the
  /// file comment for what is retried and why). Returns f's result.
  template <class F>
  auto run(std::string_view key, F&& f) -> std::invoke_result_t<F, connection&> {
    return run_within(key, options_.retry_timeout, std::forward<F>(f));
  }

  /// Convenience: one command on the master that owns `key`.
  reply_ptr command(std::string_view key, std::initializer_list<std::string_view> argv) {
    return run(key, [&](connection& c) { return c.command(argv); });
  }

  /// The one thread that renews this client's auto_renew locks. Its locator names each key's
  /// master, so renewals are pipelined per node. A renewal refused by a node (MOVED after a
  /// failover or a resharding) is not retried by run() (the pipeline reads its replies
  /// itself), so the slot map is refreshed before the watchdog's next round whenever renewals
  /// failed in the last one. The watchdog's calls do not wait out TRYAGAIN or a refused
  /// connection (it retries failed renewals itself every lease/10): one unreachable node must
  /// not hold up the renewals bound for the others.
  redislock::watchdog& watchdog() {
    std::call_once(watchdog_once_, [this] {
      watchdog_ = std::make_unique<redislock::watchdog>(
          [this](std::string_view key, const std::function<void(connection&)>& f) {
            run_within(key, std::chrono::milliseconds(0), f);
          },
          [this](std::string_view key) {
            refresh_after_failed_renewals();
            return owner_of(detail::key_slot(key), steady::now())->endpoint;
          });
    });
    return *watchdog_;
  }

  /// The sharded subscriber of the master that owns `channel`'s slot (see the file comment):
  /// created on first use; it connects on the first contended wait.
  detail::subscriber& subscriber(std::string_view channel) {
    std::shared_ptr<node> n = owner_of(detail::key_slot(channel),
                                       detail::call_deadline::retries_until(steady::now() + options_.retry_timeout));
    std::call_once(n->subscriber_once, [&] {
      auto s =
          std::make_unique<detail::subscriber>(n->options, std::chrono::seconds(1), detail::subscriber::mode::sharded,
                                               [this] { stale_map_.store(true, std::memory_order_relaxed); });
      std::lock_guard<std::mutex> g(state_mutex_);  // wait_stats() reads it under state_mutex_
      n->subscriber = std::move(s);
    });
    return *n->subscriber;
  }

  /// How waiting locks of this client were woken: the sum over the nodes' subscribers.
  redislock::wait_stats wait_stats() const {
    std::lock_guard<std::mutex> g(state_mutex_);
    redislock::wait_stats sum;
    for (const auto& n : nodes_)
      if (n->subscriber) sum += n->subscriber->stats();
    return sum;
  }

  /// Loads the slot map now (the first call does it otherwise). Throws connection_error when
  /// no node answers within retry_timeout.
  void refresh() { refresh_slots(map_generation(), steady::now() + options_.retry_timeout); }

  /// "host:port" of the master that owns `key`'s slot, as the client currently believes.
  std::string node_of(std::string_view key) {
    return owner_of(detail::key_slot(key), steady::now() + options_.retry_timeout)->endpoint;
  }

  /// "host:port" of every master in the current slot map.
  std::vector<std::string> masters() const {
    std::lock_guard<std::mutex> g(state_mutex_);
    std::vector<std::string> out;
    for (int index : slot_owner_) {
      if (index < 0) continue;
      const std::string& e = nodes_[static_cast<std::size_t>(index)]->endpoint;
      if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
    }
    return out;
  }

  /// How many times the slot map was loaded (first load included).
  std::uint64_t map_generation() const noexcept { return generation_.load(std::memory_order_acquire); }

  /// Changes whenever the slot map may have changed (a load, or a slot moved by a MOVED reply):
  /// a waiter compares it after each attempt to learn, without a lookup, that its subscription
  /// may be on a node that no longer owns its channel's slot (detail/wake_wait.hpp).
  std::uint64_t routing_epoch() const noexcept { return routing_epoch_.load(std::memory_order_acquire); }

 private:
  // run() with `retry_time` as the budget for waiting out refusals and refused connections.
  template <class F>
  auto run_within(std::string_view key, std::chrono::milliseconds retry_time, F&& f)
      -> std::invoke_result_t<F, connection&> {
    using result = std::invoke_result_t<F, connection&>;
    const int slot = detail::key_slot(key);
    // A timed lock call's deadline ends the retries sooner; and every wait of the call's tries
    // (pool, connect, command) ends by give_up plus one connect timeout (detail/call_deadline.hpp).
    const steady::time_point give_up = detail::call_deadline::retries_until(steady::now() + retry_time);
    std::optional<detail::call_deadline> budget;
    if (retry_time.count() > 0) budget.emplace(give_up);
    int redirects = 0;
    detail::backoff pause(std::chrono::milliseconds(5), std::chrono::milliseconds(200));
    std::shared_ptr<node> ask_target;  // after ASK: the next try goes there, once, after ASKING
    // Called in a handler: waits before the next try, or rethrows the error being handled
    // once the call's retry_timeout is spent.
    auto pause_or_rethrow = [&] {
      if (steady::now() >= give_up) throw;
      std::this_thread::sleep_for(pause.next(std::chrono::milliseconds(-1), detail::deadline(give_up)));
    };
    for (;;) {
      const std::uint64_t seen = map_generation();
      std::shared_ptr<node> target = std::exchange(ask_target, nullptr);
      const bool asking = target != nullptr;
      bool started = false;
      try {
        if (!target) target = owner_of(slot, give_up);
        return target->pool.run(key, [&](connection& c) -> result {
          c.ensure_ready();  // a failed reconnect throws here: nothing sent
          // The connection's server probe (connection::features(), which f may ask for; one
          // round trip per connect) writes nothing: made here, a failure in it is retried like
          // a failed connect. ASKING admits the next command only, so it also comes first.
          (void)c.features();
          if (asking) c.command({"ASKING"});  // no effect of its own: safe to repeat
          started = true;
          if constexpr (std::is_same_v<result, reply_ptr>) {
            // Callers that read raw replies (the mutex's plain SET) get the cluster's
            // refusals as exceptions here, so they are handled below like a script's.
            reply_ptr r = std::forward<F>(f)(c);
            if (r && r->type == REDIS_REPLY_ERROR && is_cluster_refusal(std::string_view(r->str, r->len)))
              detail::throw_reply_error(std::string(r->str, r->len));
            return r;
          } else {
            return std::forward<F>(f)(c);
          }
        });
      } catch (const redirect_error& e) {
        if (++redirects > options_.max_redirects) throw;
        std::shared_ptr<node> to = node_at(e.endpoint(), target ? target->options.host : std::string());
        if (!to) throw;
        if (e.is_ask()) {
          ask_target = std::move(to);
        } else {
          // A second MOVED in one call: the nodes disagree for a moment (gossip has not
          // converged after a slot move); give them time instead of spending the budget at once.
          if (redirects > 1) pause_or_rethrow();
          // The MOVED reply is the freshest word on this slot: it is applied after the full
          // refresh, in case the node asked for the map has not learned of the move yet.
          try {
            refresh_slots(seen, give_up);
          } catch (const error&) {
          }
          assign_slot(e.slot() >= 0 ? e.slot() : slot, to);
        }
      } catch (const connection_error&) {
        stale_map_.store(true, std::memory_order_relaxed);
        note_failure();
        if (started) throw;  // the command may have run: not ours to repeat (see the file comment)
        pause_or_rethrow();
        try {
          refresh_slots(seen, give_up);
        } catch (const error&) {
        }
      } catch (const reply_error& e) {
        if (!is_retryable_refusal(e.server_message())) throw;
        pause_or_rethrow();
        // TRYAGAIN from an ASK target (a multi-key call while the slot's keys are split
        // between the two nodes): go back to the target directly, not through another ASK,
        // so waiting out a migration does not spend the redirect budget.
        if (asking) ask_target = target;
        if (detail::starts_with(e.server_message(), "CLUSTERDOWN")) try {
            refresh_slots(seen, give_up);
          } catch (const error&) {
          }
      }
    }
  }

  struct node {
    std::string endpoint;  // "host:port"
    connection_options options;
    client pool;
    std::once_flag subscriber_once;
    std::unique_ptr<detail::subscriber> subscriber;  // sharded; under state_mutex_ once set
    node(std::string e, connection_options o, const cluster_options& c)
        : endpoint(std::move(e)),
          options(o),
          pool(client_options{std::move(o), c.pool_size, c.pool_wait_timeout, c.on_warning}) {}
  };

  // Refusals that mean "this command did not run here": MOVED/ASK are handled apart.
  static bool is_retryable_refusal(std::string_view message) {
    return detail::starts_with(message, "TRYAGAIN") || detail::starts_with(message, "CLUSTERDOWN") ||
           detail::starts_with(message, "LOADING") || detail::starts_with(message, "MASTERDOWN");
  }
  static bool is_cluster_refusal(std::string_view message) {
    return detail::starts_with(message, "MOVED ") || detail::starts_with(message, "ASK ") ||
           is_retryable_refusal(message);
  }

  // The node at "host:port" (created on first sight); nullptr for an unparsable endpoint.
  // An empty host (a node that does not know its address) means `fallback_host`.
  std::shared_ptr<node> node_at(const std::string& endpoint, const std::string& fallback_host) {
    const std::size_t colon = endpoint.rfind(':');
    if (colon == std::string::npos) return nullptr;
    std::string host = endpoint.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host.empty() || host == "?") host = fallback_host;
    int port = 0;
    try {
      port = detail::parse_port_or_db(std::string_view(endpoint).substr(colon + 1), "port", 65535);
    } catch (const invalid_argument&) {
      return nullptr;
    }
    if (host.empty() || port == 0) return nullptr;
    std::lock_guard<std::mutex> g(state_mutex_);
    return nodes_[node_index(host, port)];
  }

  // Under state_mutex_.
  std::size_t node_index(const std::string& host, int port) {
    const std::string endpoint =
        (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i]->endpoint == endpoint) return i;
    connection_options o = options_.seeds.front();
    o.host = host;
    o.port = port;
    nodes_.push_back(std::make_shared<node>(endpoint, std::move(o), options_));
    return nodes_.size() - 1;
  }

  void assign_slot(int slot, const std::shared_ptr<node>& n) {
    if (slot < 0 || static_cast<std::size_t>(slot) >= slot_owner_.size()) return;  // a malformed redirect
    std::lock_guard<std::mutex> g(state_mutex_);
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i] == n &&
          std::exchange(slot_owner_[static_cast<std::size_t>(slot)], static_cast<int>(i)) != static_cast<int>(i))
        routing_epoch_.fetch_add(1, std::memory_order_acq_rel);
  }

  // The master of `slot`, loading the map first when it was never loaded or was marked stale
  // by a connection error. A slot no master owns (a cluster being set up, or one that lost a
  // master without a failover) counts as CLUSTERDOWN: refreshed and waited for until give_up.
  std::shared_ptr<node> owner_of(int slot, steady::time_point give_up) {
    const bool stale =
        stale_map_.load(std::memory_order_relaxed) && stale_map_.exchange(false, std::memory_order_relaxed);
    if (map_generation() == 0 || stale) {
      try {
        refresh_slots(map_generation(), give_up);
      } catch (const error&) {
        if (map_generation() == 0) throw;  // nothing to route by
      }
    }
    for (std::chrono::milliseconds pause{5};; pause = std::min(pause * 2, std::chrono::milliseconds(200))) {
      {
        std::lock_guard<std::mutex> g(state_mutex_);
        const int index = slot_owner_[static_cast<std::size_t>(slot)];
        if (index >= 0) return nodes_[static_cast<std::size_t>(index)];
      }
      if (steady::now() >= give_up)
        throw connection_error("cluster_client: no master serves slot " + std::to_string(slot));
      std::this_thread::sleep_for(std::min<steady::duration>(pause, give_up - steady::now()));
      refresh_slots(map_generation(), give_up);
    }
  }

  // Reloads the whole map with CLUSTER SLOTS, asking the known masters, then every known
  // node, then the seeds, until one answers. Skipped when another thread reloaded it since
  // the caller's `seen` generation (one reload serves every caller that saw the same map).
  void refresh_slots(std::uint64_t seen, steady::time_point give_up) {
    std::lock_guard<std::mutex> one_at_a_time(refresh_mutex_);
    if (map_generation() != seen) return;
    std::vector<std::shared_ptr<node>> candidates;
    {
      std::lock_guard<std::mutex> g(state_mutex_);
      std::vector<bool> is_master(nodes_.size(), false);
      for (int index : slot_owner_)
        if (index >= 0) is_master[static_cast<std::size_t>(index)] = true;
      for (std::size_t i = 0; i < nodes_.size(); ++i)
        if (is_master[i]) candidates.push_back(nodes_[i]);
      for (std::size_t i = 0; i < nodes_.size(); ++i)
        if (!is_master[i]) candidates.push_back(nodes_[i]);
      for (const connection_options& s : options_.seeds) {
        std::shared_ptr<node> n = nodes_[node_index(s.host, s.port)];
        if (std::find(candidates.begin(), candidates.end(), n) == candidates.end()) candidates.push_back(std::move(n));
      }
    }
    std::string failures, refusal;
    for (const std::shared_ptr<node>& n : candidates) {
      if (!failures.empty() && steady::now() >= give_up) break;
      try {
        reply_ptr r = n->pool.run({}, [](connection& c) { return c.command({"CLUSTER", "SLOTS"}); });
        std::vector<detail::slot_range> ranges = detail::parse_cluster_slots(*r, n->options.host);
        if (ranges.empty()) throw reply_error("CLUSTER SLOTS: no slot is assigned");  // a node not yet joined
        install(ranges);
        return;
      } catch (const auth_error& e) {
        refusal = e.server_message();
        failures += (failures.empty() ? "" : "; ") + n->endpoint + ": " + e.what();
      } catch (const error& e) {
        failures += (failures.empty() ? "" : "; ") + n->endpoint + ": " + e.what();
      }
    }
    // Wrong credentials or a missing +cluster|slots are the caller's to fix: not retried.
    if (!refusal.empty()) throw auth_error(refusal);
    throw connection_error("cluster_client: no node answered CLUSTER SLOTS (" + failures + ")");
  }

  void install(const std::vector<detail::slot_range>& ranges) {
    std::vector<std::pair<std::string, std::string>> promotions;
    {
      std::lock_guard<std::mutex> g(state_mutex_);
      std::vector<int> before = slot_owner_;
      std::fill(slot_owner_.begin(), slot_owner_.end(), -1);
      for (const detail::slot_range& r : ranges) {
        const int index = static_cast<int>(node_index(r.host, r.port));
        std::fill(slot_owner_.begin() + r.first, slot_owner_.begin() + r.last + 1, index);
      }
      if (current_observer() != nullptr) promotions = promoted(before);
    }
    generation_.fetch_add(1, std::memory_order_acq_rel);
    routing_epoch_.fetch_add(1, std::memory_order_acq_rel);
    const steady::rep failed_at = first_failure_at_.exchange(0, std::memory_order_relaxed);
    for (const auto& promotion : promotions) {  // not a structured binding: the lambda captures it (C++17)
      const auto& from = promotion.first;
      const auto& to = promotion.second;
      detail::notify([&](lock_observer& o) {
        failover_event e;
        e.topology = "cluster";
        e.from = from;
        e.to = to;
        if (failed_at != 0) e.recovered_in = steady::now() - steady::time_point(steady::duration(failed_at));
        o.on_failover(e);
      });
    }
  }

  // The failovers between the slot map `before` and the current one (under state_mutex_): a
  // node that owned slots and owns none now, all of whose slots went to one node that owned
  // none before (its replica, promoted). A resharding moves slots between masters that keep
  // some: not a failover.
  std::vector<std::pair<std::string, std::string>> promoted(const std::vector<int>& before) const {
    std::vector<int> heir(nodes_.size(), -2);  // old master -> the one new owner of its slots (-1: several)
    std::vector<bool> owned_before(nodes_.size(), false), owns_now(nodes_.size(), false);
    for (std::size_t slot = 0; slot < before.size(); ++slot) {
      if (slot_owner_[slot] >= 0) owns_now[static_cast<std::size_t>(slot_owner_[slot])] = true;
      if (before[slot] < 0) continue;
      const auto old = static_cast<std::size_t>(before[slot]);
      owned_before[old] = true;
      if (heir[old] == -2) heir[old] = slot_owner_[slot];
      else if (heir[old] != slot_owner_[slot]) heir[old] = -1;
    }
    std::vector<std::pair<std::string, std::string>> out;
    for (std::size_t m = 0; m < heir.size(); ++m) {
      if (!owned_before[m] || owns_now[m] || heir[m] < 0) continue;
      if (owned_before[static_cast<std::size_t>(heir[m])]) continue;
      out.emplace_back(nodes_[m]->endpoint, nodes_[static_cast<std::size_t>(heir[m])]->endpoint);
    }
    return out;
  }

  // The first connection failure since the map was last loaded: a failover's recovered_in.
  void note_failure() noexcept {
    steady::rep none = 0;
    first_failure_at_.compare_exchange_strong(none, steady::now().time_since_epoch().count(),
                                              std::memory_order_relaxed);
  }

  // On the watchdog thread (its locator): failed renewals since the last look mean a node may
  // have refused them (MOVED after a failover or resharding): reload the map before routing.
  void refresh_after_failed_renewals() {
    if (!watchdog_) return;
    const std::uint64_t failures = watchdog_->stats().failures;
    if (renewal_failures_seen_.exchange(failures, std::memory_order_relaxed) == failures) return;
    try {
      refresh_slots(map_generation(), steady::now() + options_.retry_timeout);
    } catch (const error&) {  // the renewal fails and is retried; nothing may escape that thread
    }
  }

  cluster_options options_;
  detail::fork_guard forked_;
  mutable std::mutex state_mutex_;            // nodes_ and slot_owner_
  std::vector<std::shared_ptr<node>> nodes_;  // every node ever seen; never shrinks
  std::vector<int> slot_owner_;               // slot -> index in nodes_, -1: unknown
  std::mutex refresh_mutex_;                  // one CLUSTER SLOTS at a time
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::uint64_t> routing_epoch_{0};  // +1 per load and per slot a MOVED reassigned
  std::atomic<bool> stale_map_{false};
  std::atomic<steady::rep> first_failure_at_{0};  // see note_failure()
  std::atomic<std::uint64_t> renewal_failures_seen_{0};
  std::once_flag watchdog_once_;
  std::unique_ptr<redislock::watchdog> watchdog_;  // last member: destroyed first
};

}  // namespace redislock
