#pragma once
/// @file asio.hpp
/// @brief redislock::async_client, async_mutex, async_semaphore, async_shared_mutex and
/// async_hold: the exclusive lock, the semaphore and the read/write lock for event loops, on
/// standalone asio (optional: nothing else in redislock includes this header).
///
/// Every operation takes an asio completion token (a callback, asio::use_future,
/// asio::use_awaitable, asio::experimental::deferred) and never blocks the loop: the client
/// talks to Redis over hiredis's async API, driven by the io_context through a strand of its
/// own (detail/asio_redis.hpp), so any number of threads may run the io_context.
///
/// Same protocol as redislock::mutex, semaphore and shared_mutex: the same scripts, keys, queue
/// and hand-off notices (detail/mutex_scripts.hpp, semaphore_scripts.hpp, shared_scripts.hpp),
/// so async and blocking holders of one name exclude each other (share the permits) and hand
/// off to each other. One acquisition machinery (detail::async_lock_core) serves every kind: it
/// runs the kind's scripts (detail/asio_lock_kinds.hpp). A hold belongs to the acquisition (an
/// async_hold you can move to another coroutine or thread), never to a thread.
///
/// Lifetime: destroy holds, locks and clients before their io_context, and keep running it
/// until the releases you want sent have been sent (a hold destroyed while the loop is stopped
/// is released when it runs again, or its lease runs out; an io_context destroyed without
/// running again frees what was under way on it, sending nothing: detail::loop_gone_service).

#include <redislock/detail/asio_cluster.hpp>
#include <redislock/detail/asio_lock_kinds.hpp>
#include <redislock/detail/asio_redis.hpp>
#include <redislock/detail/asio_sentinel.hpp>
#include <redislock/detail/kind_clash.hpp>
#include <redislock/detail/lease_clock.hpp>
#include <redislock/detail/lock_core.hpp>
#include <redislock/detail/plain_key_commands.hpp>
#include <redislock/detail/random.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/detail/wake_wait.hpp>
#include <redislock/detail/observe_hooks.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/observe.hpp>
#include <redislock/options.hpp>
#include <redislock/script.hpp>
#include <redislock/sentinel_client.hpp>

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>
#include <asio/executor_work_guard.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace redislock {

/// Errors of the async operations (besides asio::error::operation_aborted for a cancelled one).
enum class async_errc {
  connection_failed = 1,  ///< Redis could not be reached, or the connection ended before the reply
  server_error,           ///< Redis answered with an error (WRONGTYPE, OOM, a refused script...)
  not_held,               ///< the hold was already released (or empty)
  lease_lost,             ///< the lease had run out: the lock may be someone else's
};

inline const std::error_category& async_category() noexcept {
  struct category : std::error_category {
    const char* name() const noexcept override { return "redislock.async"; }
    std::string message(int e) const override {
      switch (static_cast<async_errc>(e)) {
        case async_errc::connection_failed: return "Redis could not be reached or the connection failed";
        case async_errc::server_error: return "Redis answered with an error";
        case async_errc::not_held: return "the hold is not held";
        case async_errc::lease_lost: return "the lease has run out";
      }
      return "unknown";
    }
  };
  static const category c;
  return c;
}
inline std::error_code make_error_code(async_errc e) noexcept { return {static_cast<int>(e), async_category()}; }

}  // namespace redislock

template <>
struct std::is_error_code_enum<redislock::async_errc> : std::true_type {};

namespace redislock {

struct async_client_options {
  connection_options connection;
  /// Redis Cluster (detail/asio_cluster.hpp): when set, `connection` is unused and the client
  /// routes each lock's scripts to the master that owns its {hash tag}'s slot, learned from
  /// these seeds (parse_cluster_uri("redis-cluster://...") makes them). Used: seeds (their
  /// credentials, TLS settings and timeouts apply to every node), max_redirects and
  /// retry_timeout; the blocking pool's settings (pool_size, pool_wait_timeout) are not.
  std::optional<cluster_options> cluster{};
  /// Where the outcome of a release sent by an async_hold's destructor goes (it runs on the
  /// client's strand: it must not block). Also counted in async_client::stats().
  std::function<void(const std::string& name, release_status)> on_background_release{};
};

/// Counters of an async_client (read with stats(), from any thread).
struct async_stats {
  std::uint64_t acquired = 0;                  ///< acquisitions granted
  std::uint64_t handed_over = 0;               ///< of them, by a release's hand-off notice
  std::uint64_t background_released = 0;       ///< destructor releases that found the hold ours
  std::uint64_t background_lease_expired = 0;  ///< ... that found the lease gone
  std::uint64_t background_failed = 0;         ///< ... that could not reach Redis
  std::uint64_t passed_on = 0;                 ///< hand-offs to an acquisition that had given up, released at once
  std::uint64_t released_after_cancel = 0;     ///< grants that reached a cancelled acquisition, released at once
};

namespace detail {

class async_lock_core;

/// Wraps a completion handler in a copyable function that posts the completion to the
/// handler's executor (the client's strand never runs user code) and clears its cancellation
/// slot there, on the side that emits cancellations.
template <class... Args, class Handler>
std::function<void(Args...)> make_completion(Handler&& handler, const asio::any_io_executor& fallback) {
  using handler_t = std::decay_t<Handler>;
  auto ex = asio::get_associated_executor(handler, fallback);
  struct state {
    state(handler_t&& handler_in, decltype(ex) e) : h(std::move(handler_in)), work(e) {}
    std::optional<handler_t> h;
    asio::executor_work_guard<decltype(ex)> work;
  };
  auto s = std::make_shared<state>(std::forward<Handler>(handler), ex);
  return [s](Args... args) {
    if (!s->h) return;
    auto work_ex = s->work.get_executor();
    asio::post(work_ex, [s, t = std::make_tuple(std::move(args)...)]() mutable {
      handler_t h = std::move(*s->h);
      s->h.reset();
      asio::get_associated_cancellation_slot(h).clear();
      s->work.reset();
      std::apply(std::move(h), std::move(t));
    });
  };
}

/// The client's shared state: its strand, the command and subscriber connections, and the
/// channels subscribed for its locks. Everything but the counters is used on the strand.
class async_client_core : public std::enable_shared_from_this<async_client_core> {
 public:
  /// `sentinel`: the master is the one Sentinel names (detail/asio_sentinel.hpp); options'
  /// connection then carries only the data nodes' credentials, TLS settings and timeouts.
  async_client_core(asio::any_io_executor ex, async_client_options o, std::optional<sentinel_options> sentinel = {})
      : executor_(ex),
        strand_(asio::make_strand(ex)),
        options_(std::move(o)),
        tls_context_(make_async_tls_context(server_options())),
        commands_(std::make_shared<async_redis>(strand_, options_.connection, false, tls_context_)),
        subscriber_(std::make_shared<async_redis>(strand_, options_.connection, true, tls_context_)) {
    if (options_.cluster) cluster_ = std::make_shared<async_cluster>(strand_, *options_.cluster, tls_context_);
    if (sentinel)
      route_ =
          std::make_shared<async_sentinel_route>(strand_, std::move(*sentinel), tls_context_, commands_, subscriber_);
  }

  void start() {
    std::weak_ptr<async_client_core> w = weak_from_this();
    if (cluster_)
      cluster_->set_sinks(
          [w](std::size_t node, std::string_view type, std::string_view channel, std::string_view payload) {
            if (auto self = w.lock()) self->on_sharded(node, type, channel, payload);
          },
          [w](std::size_t node, std::uint64_t ended) {
            if (auto self = w.lock()) self->on_subscriber_broken(ended, static_cast<int>(node));
          });
    subscriber_->set_sinks(
        [w](std::string_view type, std::string_view channel, std::string_view payload) {
          if (auto self = w.lock()) self->on_pubsub(type, channel, payload);
        },
        [w](std::uint64_t ended) {
          if (auto self = w.lock()) self->on_subscriber_broken(ended);
        });
    loop_gone_service::when_gone(executor_, w, [this] { loop_gone(); });
  }

  /// The io_context is being destroyed with work pending (loop_gone_service): what waits here
  /// for the loop (a lock's subscription, a Sentinel look-up, a cluster's slot map) is dropped
  /// unrun, so that nothing it owns keeps this client (the connections drop their callbacks
  /// themselves).
  inline void loop_gone() noexcept;

  const async_strand& strand() const noexcept { return strand_; }
  const asio::any_io_executor& executor() const noexcept { return executor_; }

  /// Sends a command: on a cluster to the master of `key`'s slot; with Sentinel to the master
  /// once a checked master is known (one refused as by a non-master is sent again, on the
  /// master looked up anew, up to sentinel_options::retries times); else to the one server. cb
  /// gets its reply or nullptr. On the strand.
  void command(std::string_view key, const std::vector<std::string_view>& argv, reply_callback cb) {
    if (cluster_) return cluster_->command(key, argv, std::move(cb));
    if (!route_) return commands_->command(argv, std::move(cb));
    routed(std::make_shared<const std::vector<std::string>>(argv.begin(), argv.end()), std::move(cb),
           route_->retries());
  }

  /// With Sentinel, while the master in use is in doubt (detail/asio_sentinel.hpp): a notice
  /// heard on its subscriber is not believed by itself. On the strand.
  bool master_in_doubt() const noexcept { return route_ && route_->in_doubt(); }

  /// With Sentinel: "host:port" of the master last checked, and how often it changed. Any thread.
  std::string master_endpoint() const { return route_ ? route_->master_endpoint() : std::string(); }
  std::uint64_t master_changes() const { return route_ ? route_->master_changes() : 0; }

  /// Runs a script by EVALSHA; on NOSCRIPT sends it again as EVAL (which caches it). `by_source`:
  /// EVAL at once (a best-effort command whose reply may be lost, NOSCRIPT included). On the strand.
  void run_script(const script& s, std::vector<std::string_view> keys, std::vector<std::string_view> args,
                  reply_callback cb, bool by_source = false) {
    std::vector<std::string_view> argv;
    const std::string nkeys = std::to_string(keys.size());
    argv.reserve(3 + keys.size() + args.size());
    argv.push_back(by_source ? "EVAL" : "EVALSHA");
    argv.push_back(by_source ? std::string_view(s.source()) : std::string_view(s.sha1()));
    argv.push_back(nkeys);
    argv.insert(argv.end(), keys.begin(), keys.end());
    argv.insert(argv.end(), args.begin(), args.end());
    // The retry needs the arguments after this call returned: kept as strings.
    auto kept = std::make_shared<std::vector<std::string>>(argv.begin(), argv.end());
    const std::string_view key = keys.empty() ? std::string_view() : keys.front();  // a lock's keys share a slot
    command(key, argv, [this, self = shared_from_this(), &s, kept, cb = std::move(cb)](redisReply* r) {
      if (r == nullptr || !script::is_noscript(*r)) return cb(r);
      (*kept)[0] = "EVAL";
      (*kept)[1] = s.source();
      std::vector<std::string_view> again(kept->begin(), kept->end());
      command(kept->size() > 3 ? std::string_view((*kept)[3]) : std::string_view(), again, cb);
    });
  }

  /// Subscribes `channel` for `m`; m->on_subscribed(ok) once confirmed or refused. Returns the
  /// subscriber connection's generation the subscription lives on. On the strand.
  /// On a cluster: SSUBSCRIBE on the master that owns the channel's slot (the lock's), leaving
  /// the one it was subscribed on before, if another.
  std::uint64_t subscribe(const std::string& channel, const std::shared_ptr<async_lock_core>& m) {
    auto& entry = channels_[channel];
    entry.owner = m;
    if (cluster_) return entry.generation = subscribe_sharded(channel, entry);
    // With Sentinel, only on a checked master (the subscriber follows the command connection's
    // address). Without one, refused: the waiter polls, and its attempts look the master up.
    if ((route_ && !route_->ready()) || !subscriber_->pubsub("SUBSCRIBE", channel)) {
      asio::post(strand_, [self = shared_from_this(), channel] { self->confirm(channel, false); });
    }
    return entry.generation = subscriber_->generation();
  }

  /// Whether a subscription made on connection `generation` can still hear a notice: that
  /// connection is still up (on a cluster: and its node still owns the channel's slot, as far
  /// as the slot map knows; a MOVED an attempt followed tells it otherwise).
  bool subscription_alive(const std::string& channel, std::uint64_t generation) const noexcept {
    if (!cluster_) return subscriber_->generation() == generation;
    auto it = channels_.find(channel);
    if (it == channels_.end() || it->second.node < 0) return false;
    const auto node = static_cast<std::size_t>(it->second.node);
    return cluster_->subscriber_generation(node) == generation &&
           cluster_->owner_of(key_slot(channel)) == it->second.node;
  }

  /// The lock of `channel` is gone: stop listening (a release then skips its stale places).
  /// Only a channel subscribed on the current connection (a lost connection forgot them all).
  void forget(const std::string& channel) {
    auto it = channels_.find(channel);
    if (it == channels_.end()) return;
    const int node = it->second.node;
    channels_.erase(it);
    if (!cluster_) subscriber_->pubsub("UNSUBSCRIBE", channel);
    else if (node >= 0) cluster_->subscriber(static_cast<std::size_t>(node)).pubsub("SUNSUBSCRIBE", channel);
  }

  /// For good: later operations fail with connection_failed. Commands already sent (a release
  /// posted by a hold destroyed just before its client) are still written and answered.
  void close() {
    closed_ = true;
    if (route_) route_->close();
    commands_->shutdown(true);
    subscriber_->shutdown();
    if (cluster_) cluster_->shutdown();
  }

  bool closed() const noexcept { return closed_; }
  std::chrono::milliseconds connect_timeout() const noexcept { return server_options().connect_timeout; }

  void count(std::atomic<std::uint64_t>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }
  void report_background(const std::string& name, release_status s) {
    count(s == release_status::released        ? background_released_
          : s == release_status::lease_expired ? background_lease_expired_
                                               : background_failed_);
    if (options_.on_background_release) options_.on_background_release(name, s);
  }

  async_stats stats() const noexcept {
    async_stats s;
    s.acquired = acquired_.load(std::memory_order_relaxed);
    s.handed_over = handed_over_.load(std::memory_order_relaxed);
    s.background_released = background_released_.load(std::memory_order_relaxed);
    s.background_lease_expired = background_lease_expired_.load(std::memory_order_relaxed);
    s.background_failed = background_failed_.load(std::memory_order_relaxed);
    s.passed_on = passed_on_.load(std::memory_order_relaxed);
    s.released_after_cancel = released_after_cancel_.load(std::memory_order_relaxed);
    return s;
  }

  std::atomic<std::uint64_t> acquired_{0}, handed_over_{0}, background_released_{0}, background_lease_expired_{0},
      background_failed_{0}, passed_on_{0}, released_after_cancel_{0};
  bool set_get_supported = true;  // false once the server refused SET NX GET (Redis < 7); strand only

 private:
  inline void on_pubsub(std::string_view type, std::string_view channel, std::string_view payload);
  inline void confirm(const std::string& channel, bool ok);
  inline void on_subscriber_broken(std::uint64_t ended, int node = -1);
  inline void on_sharded(std::size_t node, std::string_view type, std::string_view channel, std::string_view payload);
  struct channel_entry;
  inline std::uint64_t subscribe_sharded(const std::string& channel, channel_entry& entry);

  // What every connection is made with: the one server's, or the first seed's.
  const connection_options& server_options() const noexcept {
    return options_.cluster ? options_.cluster->seeds.front() : options_.connection;
  }

  // command() with Sentinel: waits for a checked master, then sends.
  void routed(std::shared_ptr<const std::vector<std::string>> argv, reply_callback cb, int retries) {
    route_->when_master([this, self = shared_from_this(), argv, cb = std::move(cb), retries](bool ok) mutable {
      if (!ok) return cb(nullptr);
      const std::uint64_t generation = commands_->generation();
      const std::vector<std::string_view> send(argv->begin(), argv->end());
      commands_->command(send, [this, self, argv, cb = std::move(cb), retries, generation](redisReply* r) mutable {
        if (r == nullptr) {
          route_->master_gone(generation);
          return cb(nullptr);
        }
        // Refused without running: the node is a replica now (or loading). Sent again on the
        // master looked up anew; the refusal itself when out of retries.
        if (r->type == REDIS_REPLY_ERROR && is_not_master_reply(std::string_view(r->str, r->len))) {
          route_->master_gone(generation);
          if (retries > 0) return routed(std::move(argv), std::move(cb), retries - 1);
        }
        cb(r);
      });
    });
  }

  asio::any_io_executor executor_;
  async_strand strand_;
  async_client_options options_;
  std::shared_ptr<void> tls_context_;  // before the connections, which share it
  std::shared_ptr<async_redis> commands_, subscriber_;
  std::shared_ptr<async_cluster> cluster_;       // on a cluster; commands_ and subscriber_ stay unused then
  std::shared_ptr<async_sentinel_route> route_;  // with Sentinel only
  struct channel_entry {
    std::weak_ptr<async_lock_core> owner;
    std::uint64_t generation = 0;  // of the subscriber connection it was subscribed on
    int node = -1;                 // on a cluster: the node subscribed on (-1: none)
    int redirects = 0;             // on a cluster: SSUBSCRIBEs answered MOVED in a row
  };
  std::unordered_map<std::string, channel_entry> channels_;
  bool closed_ = false;
};

struct async_acquire_op;

/// One hold: its token, lease bookkeeping and renewal. Shared by the async_hold handle and the
/// renewal timer, so moving the handle never disturbs a renewal in flight.
struct async_hold_state : std::enable_shared_from_this<async_hold_state> {
  using ticks = std::chrono::steady_clock::rep;
  static constexpr ticks never = std::numeric_limits<ticks>::max();

  async_hold_state(std::shared_ptr<async_lock_core> m, std::string t, steady::time_point sent,
                   std::chrono::milliseconds granted)
      : core(std::move(m)), token(std::move(t)), acquired_at(sent), lease(granted) {}

  bool is_lost() const noexcept {
    if (lost.load()) return true;
    const ticks until = valid_until.load();
    if (until == never || steady::now().time_since_epoch().count() < until) return false;
    mark_lost();
    return true;
  }
  /// The lease was found gone (by whatever noticed first): lost() from now on, and the
  /// observer's lost_event, once per hold.
  inline void mark_lost() const noexcept;

  std::shared_ptr<async_lock_core> core;
  const std::string token;
  const steady::time_point acquired_at;
  const std::chrono::milliseconds lease;  // the acquisition's: options().lease unless the call gave one
  mutable std::atomic<bool> lost{false};
  std::atomic<ticks> valid_until{never};  // clock's end while held (lost() reads it on any thread); never once released
  std::atomic<bool> release_requested{false};
  mutable std::atomic<bool> loss_observed{false};
  // Set at the acquisition, while an observer is installed (0: none was).
  std::uint64_t observed_hold = 0;
  steady::time_point observed_since{};
  // Strand only:
  bool released = false, lost_reported = false;
  std::chrono::milliseconds renew_lease{0};  // what renewals send: the last async_extend()'s (0: `lease`)
  lease_clock clock;                         // how long the lease certainly lasts (detail/lease_clock.hpp)
  std::uint64_t fence = 0;
  std::optional<asio::steady_timer> renew_timer;
};

/// A lock name on one client, of one kind (whose scripts it runs: detail/asio_lock_kinds.hpp):
/// keys, channel, options, and the acquisitions and holds of it that are under way (by token),
/// so a hand-off notice finds its acquisition.
class async_lock_core : public std::enable_shared_from_this<async_lock_core> {
 public:
  using hold_ptr = std::shared_ptr<async_hold_state>;
  using acquire_done = std::function<void(std::error_code, hold_ptr)>;

  async_lock_core(std::shared_ptr<async_client_core> client, std::string name, lock_options options,
                  std::shared_ptr<const async_lock_kind> kind)
      : client_(std::move(client)),
        kind_(std::move(kind)),
        name_(std::move(name)),
        options_(std::move(options)),
        keys_((validate(name_, options_), refuse_min_replicas(options_), kind_->keys(name_, options_))),
        channel_(keys_.waiter_prefix + tokens_.id()),
        wait_lease_ms_(std::to_string(options_.wait_lease.count())),
        fence_lifetime_ms_(fence_lifetime_arg(options_)) {}

  // WAIT after an acquisition is the blocking kinds' (detail/lease_keeper.hpp): refused here
  // rather than ignored, so no caller believes a hold replicated.
  static void refuse_min_replicas(const lock_options& o) {
    if (o.min_replicas > 0)
      throw invalid_argument("async locks: min_replicas is not supported (no WAIT after an async acquisition)");
  }

  ~async_lock_core() {
    if (subscribed_ != sub_state::none) asio::post(client_->strand(), [c = client_, ch = channel_] { c->forget(ch); });
  }

  const std::string& name() const noexcept { return name_; }
  const lock_options& options() const noexcept { return options_; }
  const async_keys& keys() const noexcept { return keys_; }
  const async_lock_kind& kind() const noexcept { return *kind_; }
  async_client_core& client() noexcept { return *client_; }
  /// How observers name this lock and its side.
  lock_event event() const noexcept {
    lock_event e;
    e.name = name_;
    e.kind = kind_->observed_type(options_);
    e.mode = kind_->observed_mode();
    return e;
  }
  const async_strand& strand() const noexcept { return client_->strand(); }

  /// An acquisition (from any thread) of a hold of `lease` (checked: checked_hold_lease),
  /// started by start_acquisition(); done gets the hold, or nullptr when the deadline passed.
  inline std::shared_ptr<async_acquire_op> acquisition(deadline d, std::chrono::milliseconds lease, acquire_done done);
  inline void start_acquisition(const std::shared_ptr<async_acquire_op>& op);

  // ---- on the strand ----
  std::string next_token() { return tokens_.next(); }

  void run(script_call call, reply_callback cb, bool by_source = false) {
    client_->run_script(call.s, std::move(call.keys), std::move(call.args), std::move(cb), by_source);
  }
  /// The kind's attempt script for `token` in `mode` ("try", "wait" or "leave") for a hold of
  /// `lease_ms` (the acquisition's lease as a script argument).
  void run_attempt(const std::string& token, std::string_view mode, const std::string& lease_ms, reply_callback cb,
                   bool by_source = false) {
    run(kind_->attempt(keys_, token, mode, {lease_ms, wait_lease_ms_, options_.fair}), std::move(cb), by_source);
  }

  /// Calls ready(true) once our channel is subscribed (at once when it is), ready(false) when
  /// the subscription failed.
  void when_subscribed(std::function<void(bool)> ready) {
    // The connection died and its news is still on its way: sleepers are woken now.
    if (subscribed_ == sub_state::active && !subscription_alive()) on_subscribed(false);
    if (subscribed_ == sub_state::active) return ready(true);
    subscribe_waiters_.push_back(std::move(ready));
    if (subscribed_ == sub_state::pending) return;
    subscribed_ = sub_state::pending;
    sub_generation_ = client_->subscribe(channel_, shared_from_this());
  }
  /// The loop is gone (async_client_core::loop_gone): the acquisitions waiting for our
  /// subscription, which own this lock, are dropped unrun.
  void loop_gone() noexcept { std::exchange(subscribe_waiters_, {}); }
  /// Our channel is subscribed on the live subscriber connection (a notice can reach us).
  bool subscription_alive() const noexcept {
    return subscribed_ == sub_state::active && client_->subscription_alive(channel_, sub_generation_);
  }
  inline void on_subscribed(bool ok);
  /// Our channel's subscription was sent again, on connection `generation` (a cluster's SSUBSCRIBE
  /// answered MOVED, sent to the slot's new owner): its confirmation is still to come.
  void resubscribed(std::uint64_t generation) { sub_generation_ = generation; }

  inline void on_notice(std::string_view notice);

  void attach(const std::string& token, std::weak_ptr<async_acquire_op> op) { waiting_[token] = std::move(op); }
  void detach(const std::string& token) { waiting_.erase(token); }
  void hold_started(const std::string& token) { held_.insert(token); }
  void hold_ended(const std::string& token) { held_.erase(token); }

  /// The owner-checked release script for `token`; done(1 released, 0 not ours, -1 no reply,
  /// -2 an error reply). by_source: see async_client_core::run_script.
  void send_release(const std::string& token, std::function<void(int)> done, bool by_source = false) {
    run(
        kind_->release(keys_, token),
        [done = std::move(done)](redisReply* r) {
          done(r == nullptr ? -1 : r->type != REDIS_REPLY_INTEGER ? -2 : static_cast<int>(r->integer));
        },
        by_source);
  }

  /// send_release, sent again (backing off retry_min..retry_max) while no reply comes, until
  /// `until` (when a lease our token may hold has certainly ended) or the client is closed.
  /// For a release nobody waits on: a hand-off passed on, a grant that came too late.
  void release_until(const std::string& token, steady::time_point until, std::function<void(int)> done,
                     bool by_source = false, std::chrono::milliseconds pause = {}) {
    send_release(
        token,
        [self = shared_from_this(), token, until, done, by_source, pause](int ours) {
          if (ours != -1 || steady::now() >= until || self->client_->closed()) return done(ours);
          const auto next = std::clamp(pause * 2, self->options_.retry_min, self->options_.retry_max);
          auto timer = std::make_shared<asio::steady_timer>(self->strand(), next);
          timer->async_wait([self, timer, token, until, done, by_source, next](const asio::error_code& e) {
            if (e) return done(-1);
            self->release_until(token, until, done, by_source, next);
          });
        },
        by_source);
  }

  inline void release(const hold_ptr& h, std::function<void(std::error_code, release_status)> done);
  /// A hold began with the lease its acquisition sent at h->acquired_at: counted from there,
  /// renewed with auto_renew, else watched (on_lost when it runs out) when on_lost is set.
  inline void start_hold(const hold_ptr& h);
  /// A command of `h` that sets the lease to `lease` (an async_extend() or a renewal) is being
  /// sent at `sent`: the server may run it at once, so the lease counts from then (the lease
  /// clock, the blocking kinds' rules). Returns the ticket its answer names.
  inline lease_clock::ticket sending_lease(const hold_ptr& h, steady::time_point sent, std::chrono::milliseconds lease);
  /// Its answer: 1 renewed, 0 not ours, -1 no answer (it may still run), -2 refused (an error
  /// reply: it did not run). Counted, then the renewal or the watch is rescheduled from there.
  inline void count_lease(const hold_ptr& h, steady::time_point sent, std::chrono::milliseconds lease, int answer,
                          lease_clock::ticket ticket);

  const std::string& wait_lease_ms() const noexcept { return wait_lease_ms_; }
  const std::string& fence_lifetime_ms() const noexcept { return fence_lifetime_ms_; }

 private:
  inline void renew(const hold_ptr& h);
  // The hold's timer: its next renewal (auto_renew), or the end of its lease (a watch).
  void schedule_renewal(const hold_ptr& h, steady::time_point at) {
    if (!h->renew_timer) return;  // neither renewed nor watched
    h->renew_timer->expires_at(at);
    h->renew_timer->async_wait([w = std::weak_ptr<async_hold_state>(h)](const asio::error_code& e) {
      auto held = w.lock();
      if (e || !held || held->released) return;
      async_lock_core& m = *held->core;
      if (m.options_.auto_renew) return m.renew(held);
      if (held->is_lost()) return m.report_lost(held);
      m.schedule_renewal(held, held->clock.until());
    });
  }
  // The renewal found the lease gone (or the clock says it may be): lost, reported once.
  void report_lost(const hold_ptr& h) {
    h->mark_lost();
    if (std::exchange(h->lost_reported, true)) return;
    if (options_.on_lost) options_.on_lost(name_);
  }

  enum class sub_state { none, pending, active };

  std::shared_ptr<async_client_core> client_;
  std::shared_ptr<const async_lock_kind> kind_;
  std::string name_;
  lock_options options_;
  async_keys keys_;
  token_sequence tokens_;
  std::string channel_, wait_lease_ms_, fence_lifetime_ms_;
  sub_state subscribed_ = sub_state::none;
  std::uint64_t sub_generation_ = 0;  // the subscriber connection our channel is subscribed on
  std::vector<std::function<void(bool)>> subscribe_waiters_;
  std::unordered_map<std::string, std::weak_ptr<async_acquire_op>> waiting_;
  std::unordered_set<std::string> held_;
  std::chrono::milliseconds longest_lease_{options_.lease};  // of our acquisitions so far (strand only)
};

/// One acquisition in progress, on the strand: the first attempt, then (subscribed to the
/// lock's channel) "wait" attempts and sleeps until a hand-off notice, the holder's lease or
/// recheck_interval; at the deadline or on cancellation one "leave" (which keeps a hand-off
/// that reached it: then released, when cancelled).
struct async_acquire_op : std::enable_shared_from_this<async_acquire_op> {
  using attempt_result = std::optional<std::chrono::milliseconds>;  // nullopt: acquired

  async_acquire_op(std::shared_ptr<async_lock_core> m, deadline d, std::chrono::milliseconds granted,
                   async_lock_core::acquire_done done)
      : core(std::move(m)),
        deadline_(d),
        lease(granted),
        lease_ms(std::to_string(granted.count())),
        done_(std::move(done)),
        timer(core->strand()),
        deadline_timer(core->strand()) {}

  void start() {
    observer = current_observer();
    if (observer != nullptr) {
      started = steady::now();
      attempt_event e;
      static_cast<lock_event&>(e) = core->event();
      e.may_wait = !deadline_ || *deadline_ > started;
      tell([&](lock_observer& o) { o.on_attempt(e); });
    }
    token = core->next_token();
    if (cancelled) return finish(asio::error::operation_aborted);
    core->attach(token, weak_from_this());
    const auto grace = core->client().connect_timeout();
    if (deadline_ && grace.count() > 0) {
      // As the blocking try_lock_for: an attempt or SUBSCRIBE in flight may run past the
      // deadline by connect_timeout, no longer (a stalled server). Then the caller gets an
      // empty hold, and the late reply is handled as a cancellation.
      deadline_timer.expires_at(*deadline_ + grace);
      deadline_timer.async_wait([w = weak_from_this()](const asio::error_code& e) {
        auto self = w.lock();
        if (e || !self || self->phase == phase_t::done || self->phase == phase_t::sleeping || self->cancelled) return;
        self->cancelled = true;
        self->deliver({}, nullptr);
      });
    }
    if (core->options().fair || !core->kind().first_by_set()) return attempt("try");
    first_attempt();
  }

  void cancel() {
    if (phase == phase_t::done || cancelled) return;
    cancelled = true;
    if (phase == phase_t::sleeping) {
      ++timer_generation;
      timer.cancel();
      give_up();
    }
    // attempting / subscribing: the reply (or confirmation) sees `cancelled`.
  }

  // A hand-off notice for our token: the lock is ours, unless an attempt is on its way (its
  // reply says so, or says the lease ran out meanwhile: then we wait on).
  void on_notice() {
    if (phase == phase_t::done) return;
    if (phase != phase_t::sleeping || cancelled) {
      notified = true;  // the reply of the attempt in flight decides; a "not acquired" one asks again
      return;
    }
    ++timer_generation;
    timer.cancel();
    woken(wake_cause::notice);
    // The grant came after our first "wait" was sent (only our waits queue the token), so its
    // lease counts from there. Nothing orders the notice with the attempts' replies: it may be
    // stale (that lease ran out, someone else took the lock). With little of that lease left,
    // a "wait" decides: it returns the lock (with a lease from its own send) only when ours.
    // With Sentinel, a grant heard from a master the sentinels may no longer name (a recheck
    // due) is decided the same way, by a "wait" sent to the master they name.
    if (steady::now() >= first_wait_sent + lease - lease / 3 || core->client().master_in_doubt())
      return attempt("wait");
    core->client().count(core->client().handed_over_);
    handoff = true;
    acquired(first_wait_sent);
  }

  // The mutex's uncontended path, as basic_mutex::attempt_first: SET NX GET PX.
  void first_attempt() {
    auto& client = core->client();
    const steady::time_point sent = steady::now();
    const bool with_get = client.set_get_supported;
    const auto& k = core->keys();
    phase = phase_t::attempting;
    ++attempts;
    auto on_reply = [self = shared_from_this(), sent, with_get](redisReply* r) {
      auto& c = self->core->client();
      if (r == nullptr) return self->failed(async_errc::connection_failed, false);
      switch (classify_set_nx(*r, with_get, self->token)) {
        case set_nx_outcome::no_get: c.set_get_supported = false; return self->first_attempt();
        case set_nx_outcome::error: return self->failed(async_errc::server_error, false, r);
        case set_nx_outcome::acquired: return self->on_attempt(std::nullopt, sent);
        case set_nx_outcome::ours_or_unknown: return self->attempt("try");  // the queue script decides
        case set_nx_outcome::held: return self->on_attempt(unknown_pttl, sent);
      }
    };
    client.command(k.lock, set_nx(k.lock, token, lease_ms, with_get).views(), std::move(on_reply));
  }

  // The kind's attempt script (the mutex's queue_attempt, the semaphore's acquire) in mode
  // "try", "wait" or "leave".
  void attempt(const char* mode) {
    const steady::time_point sent = steady::now();
    const bool wait = std::string_view(mode) == "wait", leave = std::string_view(mode) == "leave";
    phase = phase_t::attempting;
    ++attempts;
    if (wait) notified = false;
    if (wait && !first_wait_sent_set) {
      first_wait_sent = sent;
      first_wait_sent_set = true;
    }
    core->run_attempt(token, mode, lease_ms, [self = shared_from_this(), sent, wait, leave](redisReply* r) {
      if (r == nullptr) return self->failed(async_errc::connection_failed, self->queued);
      if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
          r->element[1]->type != REDIS_REPLY_INTEGER || r->element[0]->integer < 0 || r->element[0]->integer > 1)
        return self->failed(async_errc::server_error, self->queued, r);
      if (r->element[0]->integer == 1) return self->on_attempt(std::nullopt, sent);
      if (wait) self->queued = true;
      if (leave) {
        self->queued = false;
        return self->finish(self->cancelled ? std::error_code(asio::error::operation_aborted) : std::error_code());
      }
      self->on_attempt(std::chrono::milliseconds(r->element[1]->integer), sent);
    });
  }

  void on_attempt(attempt_result pttl, steady::time_point sent) {
    if (phase == phase_t::done) return;  // completed by a notice meanwhile: the same hold
    if (!pttl) {
      if (!cancelled) return acquired(sent);
      // Cancelled while the grant was on its way: release what we got.
      core->client().count(core->client().released_after_cancel_);
      return pass_on(asio::error::operation_aborted);
    }
    if (cancelled || passed(deadline_)) return give_up();
    if (std::exchange(notified, false) && queued) return attempt("wait");  // a notice came during the attempt
    if (polling) return poll();
    // Not subscribed yet, or the subscriber connection died while we attempted (nobody would
    // wake us: a release then passes over our place): subscribe (again), then queue.
    if (!queued || !core->subscription_alive()) return subscribe_then_wait();
    sleep(*pttl);
  }

  void subscribe_then_wait() {
    phase = phase_t::subscribing;
    core->when_subscribed([self = shared_from_this()](bool ok) {
      if (self->phase == phase_t::done) return;
      if (self->cancelled) return self->give_up();
      if (!ok) return self->start_polling();
      self->attempt("wait");
    });
  }

  // The subscription failed (a refusal, e.g. by ACL, or no subscriber connection): attempt by
  // backoff (retry_min..retry_max), and subscribe again kResubscribe later, every time (as the
  // blocking waiter: wake_wait.hpp). A connection failure of an attempt still fails the wait.
  void start_polling() {
    polling = true;
    resubscribe_at = steady::now() + kResubscribe;
    poll_pause = std::chrono::milliseconds(0);
    attempt("wait");
  }
  void poll() {
    if (steady::now() >= resubscribe_at) {
      polling = false;
      return subscribe_then_wait();
    }
    const auto& o = core->options();
    poll_pause = std::clamp(poll_pause * 2, o.retry_min, o.retry_max);
    phase = phase_t::sleeping;
    const steady::time_point at = steady::now() + poll_pause;
    timer.expires_at(deadline_ ? std::min(at, *deadline_) : at);
    timer.async_wait([self = shared_from_this(), gen = ++timer_generation](const asio::error_code&) {
      if (gen != self->timer_generation || self->phase != phase_t::sleeping) return;
      self->woken(wake_cause::fallback);
      if (passed(self->deadline_)) return self->give_up();
      self->attempt("wait");
    });
  }

  void sleep(std::chrono::milliseconds pttl) {
    phase = phase_t::sleeping;
    timer.expires_at(wake_limit(pttl, deadline_, core->options().recheck_interval));
    timer.async_wait([self = shared_from_this(), gen = ++timer_generation](const asio::error_code&) {
      if (gen == self->timer_generation) self->wake();
    });
  }

  // The sleep ended (its time, or the subscriber connection was lost: no notice can reach us).
  void wake() {
    if (phase != phase_t::sleeping) return;
    ++timer_generation;
    timer.cancel();
    woken(wake_cause::timer);
    if (passed(deadline_)) return give_up();
    // Subscribed again first when the subscriber connection was lost meanwhile.
    polling = false;
    subscribe_then_wait();
  }

  // The deadline passed or the caller cancelled: leave the queue ("leave" keeps a hand-off
  // that reached us; a cancelled one then releases it).
  void give_up() {
    if (queued) return attempt("leave");
    finish(cancelled ? std::error_code(asio::error::operation_aborted) : std::error_code());
  }

  // An error. The attempt may have run with its reply lost (the lock may be ours, or we may be
  // queued): best effort, on a fresh connection, a queued waiter leaves the queue and whatever
  // our token holds is released (owner-checked: a no-op when it holds nothing). Posted: when
  // the connection just failed, hiredis is still freeing it (the next command reconnects only
  // once it is gone).
  void failed(async_errc e, bool leave_queue, const redisReply* reply = nullptr) {
    if (phase == phase_t::done) return;
    asio::post(core->strand(), [m = core, t = token, leave_queue, l = lease, ms = lease_ms] {
      // By source: a server that never ran the script would answer NOSCRIPT, and that reply
      // may be lost too.
      auto release = [m, t, l] {
        m->release_until(
            t, steady::now() + l, [](int) {}, true);
      };
      if (!leave_queue) return release();
      m->run_attempt(
          t, "leave", ms, [release](redisReply*) { release(); }, true);
    });
    if (observer != nullptr && reply != nullptr && reply->type == REDIS_REPLY_ERROR &&
        detail::starts_with(detail::script_error_cause(std::string_view(reply->str, reply->len)), "WRONGTYPE"))
      return name_the_clash(e);
    finish(e);
  }

  // WRONGTYPE: the name is another kind's. The observer's not_acquired_event::error names the
  // lock, the kind that holds its name and ours, as a blocking kind's wrong_type_error does
  // (detail/kind_clash.hpp: one more round trip, on this path only, and only for an observer:
  // the caller's error_code is server_error either way).
  void name_the_clash(async_errc e) {
    const async_keys& k = core->keys();
    core->run({detail::kind_script(), {k.lock}, {}}, [self = shared_from_this(), e](redisReply* r) {
      detail::held_by held;
      try {
        if (r != nullptr) held = detail::held_from(*r);
      } catch (const error&) {  // told as unknown
      }
      self->error_text =
          detail::kind_clash_message(self->core->name(), held.kind, held.type, self->core->kind().asked_kind(), {});
      self->finish(e);
    });
  }

  // We got the lock but must not keep it (cancelled): release it, then complete (at the first
  // outcome; a release whose reply was lost is sent again in the background until our lease
  // has certainly ended).
  void pass_on(std::error_code e) {
    phase = phase_t::attempting;
    const steady::time_point until = steady::now() + lease;
    core->send_release(token, [self = shared_from_this(), e, until](int ours) {
      if (ours == -1)
        asio::post(self->core->strand(),
                   [m = self->core, t = self->token, until] { m->release_until(t, until, [](int) {}); });
      self->finish(e);
    });
  }

  void acquired(steady::time_point sent) {
    auto h = std::make_shared<async_hold_state>(core, token, sent, lease);
    core->hold_started(token);
    core->client().count(core->client().acquired_);
    core->start_hold(h);
    finish({}, std::move(h));
  }

  void finish(std::error_code e, async_lock_core::hold_ptr h = nullptr) {
    if (phase == phase_t::done) return;
    phase = phase_t::done;
    ++timer_generation;
    timer.cancel();
    deadline_timer.cancel();
    core->detach(token);
    deliver(e, std::move(h));
  }

  // Completes the caller (once; the deadline may do so before the op ends), and tells the
  // observer the outcome the caller gets.
  void deliver(std::error_code e, async_lock_core::hold_ptr h) {
    if (!done_) return;
    auto done = std::move(done_);
    done_ = nullptr;
    if (observer != nullptr) observe_outcome(e, h);
    done(e, std::move(h));
  }

  void observe_outcome(std::error_code e, const async_lock_core::hold_ptr& h) {
    const auto waited = steady::now() - started;
    if (h) {
      h->observed_hold = next_hold_id();
      h->observed_since = steady::now();
      acquired_event a;
      static_cast<lock_event&>(a) = core->event();
      a.wait = waited;
      a.attempts = attempts;
      a.path = handoff ? acquire_path::handoff : acquire_path::direct;
      a.hold = h->observed_hold;
      return tell([&](lock_observer& o) { o.on_acquired(a); });
    }
    not_acquired_event n;
    static_cast<lock_event&>(n) = core->event();
    n.wait = waited;
    n.attempts = attempts;
    n.reason = e ? not_acquired_reason::error : not_acquired_reason::timeout;
    const std::string why = !error_text.empty() ? error_text : e ? e.message() : std::string();
    n.error = why;
    tell([&](lock_observer& o) { o.on_not_acquired(n); });
  }
  void woken(wake_cause cause) {
    if (observer == nullptr) return;
    woken_event w;
    static_cast<lock_event&>(w) = core->event();
    w.cause = cause;
    tell([&](lock_observer& o) { o.on_woken(w); });
  }
  // The observer this acquisition started with (kept alive by set_observer): what it throws is dropped.
  template <class F>
  void tell(F&& f) noexcept {
    try {
      f(*observer);
    } catch (...) {
    }
  }

  enum class phase_t { idle, attempting, subscribing, sleeping, done };

  std::shared_ptr<async_lock_core> core;
  deadline deadline_;
  const std::chrono::milliseconds lease;  // the hold's: what every attempt sends (lease_ms) and a hand-off gets
  const std::string lease_ms;
  async_lock_core::acquire_done done_;
  asio::steady_timer timer, deadline_timer;
  std::string token;
  phase_t phase = phase_t::idle;
  std::uint64_t timer_generation = 0;
  bool cancelled = false, queued = false, notified = false, polling = false;
  std::chrono::milliseconds poll_pause{0};
  steady::time_point resubscribe_at{};
  steady::time_point first_wait_sent{};  // a hand-off's lease counts from here (never moved forward)
  bool first_wait_sent_set = false;
  // The observer (observe.hpp) installed when it started, if any, and what it is told.
  lock_observer* observer = nullptr;
  steady::time_point started{};
  std::uint32_t attempts = 0;  // commands or scripts sent to try, "leave" included
  bool handoff = false;        // a release's notice handed it the lock
  std::string error_text;      // the observer's error, when it says more than the error_code
};

std::shared_ptr<async_acquire_op> async_lock_core::acquisition(deadline d, std::chrono::milliseconds lease,
                                                               acquire_done done) {
  return std::make_shared<async_acquire_op>(shared_from_this(), d, lease, std::move(done));
}

void async_lock_core::start_acquisition(const std::shared_ptr<async_acquire_op>& op) {
  asio::post(strand(), [op] {
    auto& core = *op->core;
    core.longest_lease_ = std::max(core.longest_lease_, op->lease);
    op->start();
  });
}

void async_lock_core::on_subscribed(bool ok) {
  const bool lost = !ok && subscribed_ == sub_state::active;
  subscribed_ = ok ? sub_state::active : sub_state::none;
  for (auto& w : std::exchange(subscribe_waiters_, {})) w(ok);
  if (!lost) return;
  // The subscriber connection ended: a release now passes over our sleeping waiters (nobody
  // listens on our channel) and drops their places. Wake them to subscribe again and re-queue.
  std::vector<std::shared_ptr<async_acquire_op>> sleeping;
  for (auto& [token, w] : waiting_)
    if (auto op = w.lock()) sleeping.push_back(std::move(op));
  for (auto& op : sleeping) op->wake();
}

void async_lock_core::on_notice(std::string_view notice) {
  const std::string t(kind_->notice_token(notice));
  if (auto it = waiting_.find(t); it != waiting_.end()) {
    if (auto op = it->second.lock()) return op->on_notice();
  }
  if (held_.count(t) != 0) return;  // a late notice for a hold we have (its attempt said so first)
  // Handed to an acquisition that gave up without being able to leave the queue: pass it on
  // (owner-checked: a no-op when the lock is no longer that token's).
  client_->count(client_->passed_on_);
  // It was handed with the gone acquisition's lease, at most the longest any of ours asked for.
  release_until(t, steady::now() + longest_lease_, [](int) {});
}

void async_lock_core::release(const hold_ptr& h, std::function<void(std::error_code, release_status)> done) {
  if (h->released) return done(async_errc::not_held, release_status::not_held);
  h->released = true;
  if (h->renew_timer) h->renew_timer->cancel();
  hold_ended(h->token);
  h->is_lost();                                   // a lease already past is lost (and told) before the release
  h->valid_until.store(async_hold_state::never);  // lost() keeps what it found (sticky)
  send_release(h->token, [h, done = std::move(done)](int ours) {
    if (ours == 0) h->mark_lost();
    const release_status status = ours < 0                       ? release_status::failed
                                  : ours == 1 && !h->lost.load() ? release_status::released
                                                                 : release_status::lease_expired;
    notify([&](lock_observer& o) {
      released_event r;
      static_cast<lock_event&>(r) = h->core->event();
      r.status = status;
      r.hold = h->observed_hold;
      if (h->observed_hold != 0) r.held = steady::now() - h->observed_since;
      o.on_released(r);
    });
    if (ours < 0) return done(ours == -1 ? async_errc::connection_failed : async_errc::server_error, status);
    done({}, status);
  });
}

void async_lock_core::start_hold(const hold_ptr& h) {
  h->clock.confirmed(h->acquired_at, h->lease);
  h->valid_until.store(h->clock.until().time_since_epoch().count());
  if (!options_.auto_renew && !options_.on_lost) return;
  h->renew_timer.emplace(strand());
  // A hand-off's lease runs from our first "wait": when a third of it is gone, renew at once.
  schedule_renewal(h, options_.auto_renew ? std::max(steady::now(), h->clock.renewal_due()) : h->clock.until());
}

lease_clock::ticket async_lock_core::sending_lease(const hold_ptr& h, steady::time_point sent,
                                                   std::chrono::milliseconds lease) {
  if (h->released) return 0;
  const lease_clock::ticket t = h->clock.sending(sent, lease);
  if (h->is_lost()) return t;
  h->valid_until.store(h->clock.until().time_since_epoch().count());
  // Should no reply come, the timer finds the hold lost at the new end, not later.
  if (h->renew_timer && h->renew_timer->expiry() > h->clock.until()) schedule_renewal(h, h->clock.until());
  return t;
}

void async_lock_core::count_lease(const hold_ptr& h, steady::time_point sent, std::chrono::milliseconds lease,
                                  int answer, lease_clock::ticket ticket) {
  if (h->released) return;
  if (answer == 0) return report_lost(h);
  // Confirmed only after the lease could have run out: lost() may have said so already, and a
  // lost lease stays lost (is_lost() checks the clock first).
  if (answer == 1 && !h->is_lost()) h->clock.confirmed(sent, lease, ticket);
  else if (answer == -1) h->clock.unanswered(sent, lease, ticket);
  else h->clock.refused(ticket);
  if (h->is_lost()) return report_lost(h);
  h->valid_until.store(h->clock.until().time_since_epoch().count());
  if (!options_.auto_renew) return schedule_renewal(h, h->clock.until());  // a watch, if any
  if (answer == 1) return schedule_renewal(h, h->clock.renewal_due());
  // Failed: again soon, and in time to see the lease end.
  schedule_renewal(h, std::min(steady::now() + h->clock.retry_interval(), h->clock.until()));
}

// One owner-checked extend, counted by the lease clock (count_lease); a failed renewal retries
// soon, and the clock alone makes the hold lost once the last confirmed lease has passed.
void async_lock_core::renew(const hold_ptr& h) {
  if (h->is_lost()) return report_lost(h);
  const steady::time_point sent = steady::now();
  const std::chrono::milliseconds lease = h->renew_lease.count() > 0 ? h->renew_lease : h->lease;
  const std::string ms = std::to_string(lease.count());
  const lease_clock::ticket ticket = sending_lease(h, sent, lease);
  run(kind_->extend(keys_, h->token, ms), [h, sent, lease, ticket](redisReply* r) {
    const int answer = r == nullptr ? -1
                       : r->type == REDIS_REPLY_INTEGER && (r->integer == 0 || r->integer == 1)
                           ? static_cast<int>(r->integer)
                           : -2;
    notify([&](lock_observer& o) {
      renewed_event e;
      e.batch = 1;
      e.renewed = answer == 1 ? 1 : 0;
      e.latency = steady::now() - sent;
      o.on_renewed(e);
    });
    h->core->count_lease(h, sent, lease, answer, ticket);
  });
  // Should no reply come before the lease ends (a stalled server), the timer finds the hold
  // lost then and reports it, not command_timeout later. A reply reschedules it.
  schedule_renewal(h, h->clock.until());
}

void async_hold_state::mark_lost() const noexcept {
  lost.store(true);
  if (current_observer() == nullptr || loss_observed.exchange(true)) return;
  const ticks until = valid_until.load();
  const steady::time_point end = until != never ? steady::time_point(steady::duration(until)) : acquired_at + lease;
  notify([&](lock_observer& o) {
    lost_event e;
    static_cast<lock_event&>(e) = core->event();
    e.before_end = end - steady::now();
    o.on_lost(e);
  });
}

void async_client_core::on_pubsub(std::string_view type, std::string_view channel, std::string_view payload) {
  if (type == "subscribe") return confirm(std::string(channel), true);
  if (type != "message") return;
  auto it = channels_.find(std::string(channel));
  if (it == channels_.end()) return;
  if (auto m = it->second.owner.lock()) m->on_notice(payload);
}

void async_client_core::confirm(const std::string& channel, bool ok) {
  auto it = channels_.find(channel);
  if (it == channels_.end()) return;
  auto m = it->second.owner.lock();
  if (!ok) channels_.erase(it);
  if (m) m->on_subscribed(ok);
}

std::uint64_t async_client_core::subscribe_sharded(const std::string& channel, channel_entry& entry) {
  const int owner = cluster_->owner_of(key_slot(channel));
  if (entry.node >= 0 && entry.node != owner)
    cluster_->subscriber(static_cast<std::size_t>(entry.node)).pubsub("SUNSUBSCRIBE", channel);
  entry.node = owner;
  if (owner < 0 || !cluster_->subscriber(static_cast<std::size_t>(owner)).pubsub("SSUBSCRIBE", channel)) {
    entry.node = -1;
    asio::post(strand_, [self = shared_from_this(), channel] { self->confirm(channel, false); });
    return 0;
  }
  return cluster_->subscriber_generation(static_cast<std::size_t>(owner));
}

void async_client_core::on_sharded(std::size_t node, std::string_view type, std::string_view channel,
                                   std::string_view payload) {
  // A notice counts wherever it comes from: a script publishes only to the listeners it
  // counted on its own node (detail/notify_lua.hpp).
  if (type == "message") return on_pubsub(type, channel, payload);
  auto it = channels_.find(std::string(channel));
  if (it == channels_.end() || it->second.node != static_cast<int>(node)) return;  // not (or no longer) there
  channel_entry& entry = it->second;
  if (type == "subscribe") {
    entry.redirects = 0;
    return confirm(it->first, true);
  }
  if (type == "refused" && detail::starts_with(payload, "MOVED ") &&
      ++entry.redirects <= options_.cluster->max_redirects) {
    // The slot is another master's: subscribe there (the map now says so).
    cluster_->redirected(std::string(payload), node);
    entry.node = -1;
    const std::uint64_t generation = entry.generation = subscribe_sharded(it->first, entry);
    if (auto m = entry.owner.lock()) m->resubscribed(generation);
    return;
  }
  // Refused otherwise, or ended by the server (the slot moved: "sunsubscribe"): the lock's
  // waiters subscribe again, by a reloaded map, or poll (as after a broken subscriber).
  if (type == "sunsubscribe") cluster_->reload_in_background();
  entry.redirects = 0;
  auto m = entry.owner.lock();
  channels_.erase(it);
  if (m) m->on_subscribed(false);
}

void async_client_core::on_subscriber_broken(std::uint64_t ended, int node) {
  // Every channel of that connection is gone with it: each lock subscribes again on its next
  // wait. A channel subscribed again meanwhile (on a newer connection) stays.
  std::vector<std::shared_ptr<async_lock_core>> gone;
  for (auto it = channels_.begin(); it != channels_.end();) {
    if (it->second.generation > ended || it->second.node != node) {
      ++it;
      continue;
    }
    if (auto m = it->second.owner.lock()) gone.push_back(std::move(m));
    it = channels_.erase(it);
  }
  for (auto& m : gone) m->on_subscribed(false);
}

void async_client_core::loop_gone() noexcept {
  std::vector<std::shared_ptr<async_lock_core>> locks;
  for (auto& [channel, entry] : channels_)
    if (auto m = entry.owner.lock()) locks.push_back(std::move(m));
  channels_.clear();
  for (auto& m : locks) m->loop_gone();
  if (route_) route_->loop_gone();
  if (cluster_) cluster_->loop_gone();
}

class async_lock_object;

}  // namespace detail

/// The hold of one acquisition. Movable (to another coroutine or thread); empty after a
/// timed-out acquisition, a move, or async_unlock(). Its destructor releases a hold still
/// owned, without blocking: the release is posted to the client's strand and its outcome goes
/// to async_client_options::on_background_release and async_client::stats().
class async_hold {
 public:
  async_hold() = default;
  async_hold(async_hold&& o) noexcept = default;
  async_hold& operator=(async_hold&& o) noexcept {
    if (this != &o) {
      release_in_background();
      state_ = std::move(o.state_);
    }
    return *this;
  }
  async_hold(const async_hold&) = delete;
  async_hold& operator=(const async_hold&) = delete;
  ~async_hold() { release_in_background(); }

  /// True from the acquisition until async_unlock() (or the move that emptied it).
  bool owns_lock() const noexcept { return state_ && !state_->release_requested.load(); }
  explicit operator bool() const noexcept { return owns_lock(); }

  /// The lease was found lost: by the clock once lease_confirmed_until() has passed (renewed or
  /// not), by a renewal (auto_renew), async_extend(), async_fencing_token() or the release.
  bool lost() const noexcept { return state_ && state_->is_lost(); }

  /// While held: the local time until which the server certainly keeps the lease: the send
  /// time of the last acquisition, async_extend() or renewal it confirmed, plus the lease sent
  /// (detail/lease_clock.hpp, the blocking kinds' rule). lost() turns true once it has passed,
  /// and lock_options::on_lost runs then, with or without auto_renew.
  std::optional<std::chrono::steady_clock::time_point> lease_confirmed_until() const noexcept {
    if (!state_) return std::nullopt;
    const auto until = state_->valid_until.load();
    if (until == detail::async_hold_state::never) return std::nullopt;
    return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(until));
  }

  /// The owner token (the lock key's value while held).
  const std::string& token() const noexcept {
    static const std::string none;
    return state_ ? state_->token : none;
  }

  /// Releases: void(std::error_code, release_status). The hold is empty at once; the outcome is
  /// released, lease_expired (the lease had run out), or failed with async_errc::connection_failed.
  template <class Token>
  auto async_unlock(Token&& token) {
    return on_strand<void(std::error_code, release_status)>(
        std::forward<Token>(token), release_status::not_held,
        [](const state_ptr& s, auto done) { s->core->release(s, std::move(done)); }, true);
  }

  /// Resets the lease to the hold's (options().lease unless its acquisition gave one), or to
  /// `lease`, from now, if still ours: void(error_code, bool).
  /// With auto_renew the renewals send that lease from then on (as the blocking kinds' do).
  /// false: the lease had run out (also marks lost()).
  template <class Token>
  auto async_extend(Token&& token) {
    return async_extend(std::chrono::milliseconds(0), std::forward<Token>(token));
  }
  template <class Token>
  auto async_extend(std::chrono::milliseconds lease, Token&& token) {
    if (lease.count() != 0)
      detail::checked_lease(
          lease, "async_extend",
          state_ && state_->core->options().auto_renew ? state_->lease : std::chrono::milliseconds(0));
    return on_strand<void(std::error_code, bool)>(
        std::forward<Token>(token), false, [lease](const state_ptr& s, auto done) {
          auto& m = *s->core;
          const std::chrono::milliseconds sent_lease = lease.count() != 0 ? lease : s->lease;
          const std::string ms = std::to_string(sent_lease.count());
          const detail::steady::time_point sent = detail::steady::now();  // before: conservative
          const detail::lease_clock::ticket ticket = m.sending_lease(s, sent, sent_lease);
          m.run(m.kind().extend(m.keys(), s->token, ms), [s, done, sent, sent_lease, ticket](redisReply* r) {
            auto& core = *s->core;
            if (r == nullptr) {
              s->renew_lease = sent_lease;  // with auto_renew, the renewals send it from now on
              core.count_lease(s, sent, sent_lease, -1, ticket);
              return done(async_errc::connection_failed, false);
            }
            if (r->type != REDIS_REPLY_INTEGER) {
              core.count_lease(s, sent, sent_lease, -2, ticket);  // refused: it did not run
              return done(async_errc::server_error, false);
            }
            if (r->integer == 1) s->renew_lease = sent_lease;
            core.count_lease(s, sent, sent_lease, r->integer == 1 ? 1 : 0, ticket);
            done({}, r->integer == 1);
          });
        });
  }

  /// The fencing token of this hold (detail/fence_scripts.hpp): void(error_code, uint64_t).
  /// Drawn on the first call, then cached. async_errc::lease_lost when the lease has run out.
  template <class Token>
  auto async_fencing_token(Token&& token) {
    return on_strand<void(std::error_code, std::uint64_t)>(
        std::forward<Token>(token), std::uint64_t{0}, [](const state_ptr& s, auto done) {
          if (s->fence != 0) return done({}, s->fence);
          auto& m = *s->core;
          m.run(m.kind().fence(m.keys(), s->token, m.fence_lifetime_ms()), [s, done](redisReply* r) {
            if (r == nullptr) return done(async_errc::connection_failed, 0);
            if (r->type != REDIS_REPLY_INTEGER) return done(async_errc::server_error, 0);
            if (r->integer <= 0) {
              s->mark_lost();
              return done(async_errc::lease_lost, 0);
            }
            if (s->fence == 0) {
              s->fence = static_cast<std::uint64_t>(r->integer);
              detail::notify([&](lock_observer& o) {
                fenced_event f;
                static_cast<lock_event&>(f) = s->core->event();
                f.token = s->fence;
                f.hold = s->observed_hold;
                o.on_fenced(f);
              });
            }
            done({}, s->fence);
          });
        });
  }

  /// What the server says is left of the lease: void(error_code, milliseconds); zero when not ours.
  template <class Token>
  auto async_remaining_lease(Token&& token) {
    return on_strand<void(std::error_code, std::chrono::milliseconds)>(
        std::forward<Token>(token), std::chrono::milliseconds(0), [](const state_ptr& s, auto done) {
          auto& m = *s->core;
          m.run(m.kind().remaining(m.keys(), s->token), [done](redisReply* r) {
            if (r == nullptr) return done(async_errc::connection_failed, std::chrono::milliseconds(0));
            if (r->type != REDIS_REPLY_INTEGER) return done(async_errc::server_error, std::chrono::milliseconds(0));
            done({}, detail::to_remaining(r->integer));
          });
        });
  }

 private:
  friend class detail::async_lock_object;
  using state_ptr = std::shared_ptr<detail::async_hold_state>;
  explicit async_hold(state_ptr s) : state_(std::move(s)) {}

  // Runs body(state, done) on the strand for a held hold; completes with (not_held, empty)
  // when there is none. `ending`: this call ends the hold (async_unlock).
  template <class Signature, class Token, class Empty, class Body>
  auto on_strand(Token&& token, Empty empty, Body body, bool ending = false) {
    state_ptr s = owns_lock() ? state_ : nullptr;
    if (s && ending) s->release_requested.store(true);
    // An unlocked hold still knows its client: complete there, as every other operation does.
    asio::any_io_executor ex;
    if (state_) ex = state_->core->client().executor();
    return asio::async_initiate<Token, Signature>(
        [s, ex, empty, body](auto handler) mutable {
          if (!s) {
            // Nothing to run on the strand: complete on the handler's executor (the client's
            // for a plain callback; a default-constructed or moved-from hold knows no client:
            // asio's system executor then).
            auto complete = [empty](auto h) { std::move(h)(std::error_code(async_errc::not_held), empty); };
            if (ex) {
              auto hex = asio::get_associated_executor(handler, ex);
              asio::post(hex, [h = std::move(handler), complete]() mutable { complete(std::move(h)); });
            } else {
              auto hex = asio::get_associated_executor(handler);
              asio::post(hex, [h = std::move(handler), complete]() mutable { complete(std::move(h)); });
            }
            return;
          }
          auto done = completion_for<Signature>(std::move(handler), s->core->client().executor());
          asio::post(s->core->strand(), [s, body, done]() mutable { body(s, done); });
        },
        token);
  }

  template <class Signature>
  struct completion_maker;
  template <class... Args>
  struct completion_maker<void(Args...)> {
    template <class Handler>
    static auto make(Handler&& h, const asio::any_io_executor& ex) {
      return detail::make_completion<Args...>(std::forward<Handler>(h), ex);
    }
  };
  template <class Signature, class Handler>
  static auto completion_for(Handler&& h, const asio::any_io_executor& ex) {
    return completion_maker<Signature>::make(std::forward<Handler>(h), ex);
  }

  void release_in_background() noexcept {
    if (!state_ || state_->release_requested.exchange(true)) return;
    state_ptr s = std::move(state_);
    try {
      asio::post(s->core->strand(), [s] {
        s->core->release(s, [s](std::error_code, release_status st) {
          if (st != release_status::not_held) s->core->client().report_background(s->core->name(), st);
        });
      });
    } catch (...) {  // out of memory: the lease runs out on its own
    }
  }

  state_ptr state_;
};

/// A client for async locks: one command connection and one subscriber connection (opened on
/// the first contended wait) to one server (or the master Sentinel names), driven by `executor`'s io_context through a
/// strand. Thread-safe: its locks may be used from any thread.
class async_client {
 public:
  /// Sends nothing; the first operation connects. Throws invalid_argument for bad options.
  explicit async_client(asio::any_io_executor executor, async_client_options options = {}) {
    if (options.cluster) {
      detail::check_cluster_options(*options.cluster, "async_client");
    } else {
      detail::check_connection_options(options.connection, "async_client");
    }
    core_ = std::make_shared<detail::async_client_core>(std::move(executor), std::move(options));
    core_->start();
  }
  /// A client of the master that Redis Sentinel names (as sentinel_client: the same options;
  /// options.connection is replaced by sentinel.connection; pool_size and pool_wait_timeout do
  /// not apply). Sends nothing; the first operation asks the sentinels, without blocking the
  /// loop, and so does the first after the master was found gone, or once recheck_interval
  /// has passed (detail/asio_sentinel.hpp). Throws invalid_argument for bad options.
  async_client(asio::any_io_executor executor, sentinel_options sentinel, async_client_options options = {}) {
    detail::check_sentinel_options(sentinel, "async_client");
    if (options.cluster) throw invalid_argument("async_client: a cluster and Sentinel cannot both be given");
    options.connection = sentinel.connection;
    options.connection.unix_path.clear();
    core_ = std::make_shared<detail::async_client_core>(std::move(executor), std::move(options), std::move(sentinel));
    core_->start();
  }
  async_client(const async_client&) = delete;
  async_client& operator=(const async_client&) = delete;
  /// Closes the connections (posted): commands already sent are still answered (within
  /// command_timeout); operations still under way then complete with
  /// async_errc::connection_failed; holds still alive end with their leases.
  ~async_client() {
    asio::post(core_->strand(), [c = core_] { c->close(); });
  }

  asio::any_io_executor get_executor() const noexcept { return core_->executor(); }
  async_stats stats() const noexcept { return core_->stats(); }
  /// With sentinel_options: "host:port" of the master last checked ("" before the first
  /// operation, and without Sentinel), and how many times it changed since.
  std::string master_endpoint() const { return core_->master_endpoint(); }
  std::uint64_t master_changes() const { return core_->master_changes(); }

 private:
  friend class detail::async_lock_object;
  std::shared_ptr<detail::async_client_core> core_;
};

namespace detail {

/// What every async lock object is: a name on a client with its kind's scripts, and the
/// acquisitions of it (each a separate would-be holder with its own token).
class async_lock_object {
 public:
  const std::string& name() const noexcept { return core_->name(); }
  const std::string& key() const noexcept { return core_->keys().lock; }
  const lock_options& options() const noexcept { return core_->options(); }
  /// The client's executor (where its completions run).
  asio::any_io_executor get_executor() const noexcept { return core_->client().executor(); }

 protected:
  async_lock_object(async_client& client, std::string name, lock_options options,
                    std::shared_ptr<const async_lock_kind> kind)
      : core_(make_core(client, std::move(name), std::move(options), std::move(kind))) {}

  static std::shared_ptr<async_lock_core> make_core(async_client& client, std::string name, lock_options options,
                                                    std::shared_ptr<const async_lock_kind> kind) {
    return std::make_shared<async_lock_core>(client.core_, std::move(name), std::move(options), std::move(kind));
  }

  /// An acquisition on `core`: void(std::error_code, async_hold), the hold, or an empty one
  /// once `d` passed. Cancellable (asio cancellation slot): a cancelled wait leaves the queue
  /// and holds nothing afterwards (asio::error::operation_aborted).
  template <class Token>
  static auto initiate(const std::shared_ptr<async_lock_core>& on, deadline d, Token&& token) {
    return initiate(on, d, on->options().lease, std::forward<Token>(token));
  }
  /// The same for a hold of `lease` (checked first: invalid_argument, nothing sent).
  template <class Token>
  static auto initiate(const std::shared_ptr<async_lock_core>& on, deadline d, std::chrono::milliseconds lease,
                       Token&& token) {
    checked_hold_lease(lease, on->options(), "async lock");
    return asio::async_initiate<Token, void(std::error_code, async_hold)>(
        [core = on, d, lease](auto handler) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          auto done = make_completion<std::error_code, async_hold>(std::move(handler), core->client().executor());
          auto op = core->acquisition(
              d, lease, [done](std::error_code e, async_lock_core::hold_ptr h) { done(e, async_hold(std::move(h))); });
          // Before the start: the completion clears the slot, which must not be assigned after.
          if (slot.is_connected()) {
            slot.assign([w = std::weak_ptr<async_acquire_op>(op), strand = core->strand()](asio::cancellation_type) {
              asio::post(strand, [w] {
                if (auto pending = w.lock()) pending->cancel();
              });
            });
          }
          core->start_acquisition(op);
        },
        token);
  }

  std::shared_ptr<async_lock_core> core_;
};

}  // namespace detail

/// An exclusive lock named `name` for async acquisitions: any number may be under way at once
/// (each is a separate would-be holder with its own token). Cheap to keep; copies nothing to
/// Redis until used. Key layout and scripts: detail/mutex_scripts.hpp.
class async_mutex : public detail::async_lock_object {
 public:
  /// Throws invalid_argument for an empty name or bad options. Sends nothing. on_lost (with
  /// auto_renew) runs on the client's strand: it must not block.
  async_mutex(async_client& client, std::string name, lock_options options = {})
      : async_lock_object(client, std::move(name), std::move(options), kind()) {}

  /// Waits until the lock is ours: void(std::error_code, async_hold). Cancellable (asio
  /// cancellation slot): a cancelled wait leaves the queue and holds nothing afterwards
  /// (asio::error::operation_aborted).
  template <class Token>
  auto async_lock(Token&& token) {
    return initiate(core_, std::nullopt, std::forward<Token>(token));
  }

  /// Like async_lock, but gives up after `timeout`: then the hold is empty (and no error).
  template <class Rep, class Period, class Token>
  auto async_try_lock_for(const std::chrono::duration<Rep, Period>& timeout, Token&& token) {
    return initiate(core_, detail::deadline_after(timeout), std::forward<Token>(token));
  }

  /// async_lock and async_try_lock_for with `lease` for this hold instead of options().lease,
  /// as the blocking lock(lease): a hand-off gives it, renewals and async_extend() without a
  /// lease send it. Throws invalid_argument for a lease options().lease could not be (nothing sent).
  template <class Token>
  auto async_lock(std::chrono::milliseconds lease, Token&& token) {
    return initiate(core_, std::nullopt, lease, std::forward<Token>(token));
  }
  template <class Rep, class Period, class Token>
  auto async_try_lock_for(const std::chrono::duration<Rep, Period>& timeout, std::chrono::milliseconds lease,
                          Token&& token) {
    return initiate(core_, detail::deadline_after(timeout), lease, std::forward<Token>(token));
  }

 private:
  static std::shared_ptr<const detail::async_lock_kind> kind() {
    static const auto k = std::make_shared<const detail::async_mutex_kind>();
    return k;
  }
};

/// A semaphore named `name` for async acquisitions: at most N holders of the name at once,
/// async (any number of acquisitions, each its own would-be holder of one permit) and blocking
/// (redislock::semaphore) alike: the same scripts, keys, queue and hand-off notices
/// (detail/semaphore_scripts.hpp). As there, `permits` seeds an idle semaphore only: while
/// anyone holds, the count stored with the holders rules. Cheap to keep; sends nothing until used.
class async_semaphore : public detail::async_lock_object {
 public:
  /// Throws invalid_argument for permits outside [1, max_permits], an empty name or bad
  /// options. Sends nothing. on_lost (with auto_renew) runs on the client's strand: it must not block.
  async_semaphore(async_client& client, std::string name, std::int64_t permits, lock_options options = {})
      : async_semaphore(client, std::move(name), std::make_shared<detail::async_semaphore_kind>(permits),
                        std::move(options)) {}

  /// The permit count: the one stored with the holders while anyone holds, else this object's
  /// own: void(std::error_code, std::int64_t).
  template <class Token>
  auto async_permits(Token&& token) {
    return counted(false, std::forward<Token>(token));
  }
  /// Permits free right now: async_permits() minus the valid holds (0 while shrunk below them):
  /// void(std::error_code, std::int64_t).
  template <class Token>
  auto async_available(Token&& token) {
    return counted(true, std::forward<Token>(token));
  }
  /// As semaphore::set_permits(): sets the count for every client of this name while anyone
  /// holds (and this object's own, which seeds the semaphore when it is idle); growing hands
  /// the new permits to the longest-waiting live waiters at once, shrinking revokes nothing.
  /// void(std::error_code). Throws invalid_argument for permits outside [1, max_permits]
  /// (sending nothing).
  template <class Token>
  auto async_set_permits(std::int64_t permits, Token&& token) {
    const std::int64_t n = detail::semaphore_scripts::checked_permits(permits, "async_set_permits");
    return asio::async_initiate<Token, void(std::error_code)>(
        [core = core_, kind = kind_, n](auto handler) {
          auto done = detail::make_completion<std::error_code>(std::move(handler), core->client().executor());
          asio::post(core->strand(), [core, kind, n, done] {
            kind->set_own_permits(n);
            core->run(detail::async_semaphore_kind::set_permits(core->keys(), kind->permits()), [done](redisReply* r) {
              if (r == nullptr) return done(async_errc::connection_failed);
              done(r->type == REDIS_REPLY_INTEGER ? std::error_code() : async_errc::server_error);
            });
          });
        },
        token);
  }

  /// Waits until a permit is ours: void(std::error_code, async_hold). Cancellable (asio
  /// cancellation slot): a cancelled wait leaves the queue and holds nothing afterwards
  /// (asio::error::operation_aborted).
  template <class Token>
  auto async_acquire(Token&& token) {
    return initiate(core_, std::nullopt, std::forward<Token>(token));
  }

  /// Like async_acquire, but gives up after `timeout`: then the hold is empty (and no error).
  template <class Rep, class Period, class Token>
  auto async_try_acquire_for(const std::chrono::duration<Rep, Period>& timeout, Token&& token) {
    return initiate(core_, detail::deadline_after(timeout), std::forward<Token>(token));
  }
  /// The same with `lease` for this permit's hold (async_mutex::async_lock(lease, token)).
  template <class Token>
  auto async_acquire(std::chrono::milliseconds lease, Token&& token) {
    return initiate(core_, std::nullopt, lease, std::forward<Token>(token));
  }
  template <class Rep, class Period, class Token>
  auto async_try_acquire_for(const std::chrono::duration<Rep, Period>& timeout, std::chrono::milliseconds lease,
                             Token&& token) {
    return initiate(core_, detail::deadline_after(timeout), lease, std::forward<Token>(token));
  }

 private:
  async_semaphore(async_client& client, std::string name, std::shared_ptr<detail::async_semaphore_kind> kind,
                  lock_options options)
      : async_lock_object(client, std::move(name), std::move(options), kind), kind_(std::move(kind)) {}

  // The count script: the permit count, or (`available`) the permits free.
  template <class Token>
  auto counted(bool available, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, std::int64_t)>(
        [core = core_, kind = kind_, available](auto handler) {
          auto done =
              detail::make_completion<std::error_code, std::int64_t>(std::move(handler), core->client().executor());
          asio::post(core->strand(), [core, kind, available, done] {
            const std::int64_t own = kind->own_permits();
            core->run(kind->count(core->keys()), [done, available, own](redisReply* r) {
              if (r == nullptr) return done(async_errc::connection_failed, 0);
              if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
                  r->element[1]->type != REDIS_REPLY_INTEGER)
                return done(async_errc::server_error, 0);
              const std::int64_t stored = r->element[0]->integer, held = r->element[1]->integer;
              const std::int64_t n = stored > 0 ? stored : own;
              done({}, available ? std::max<std::int64_t>(n - held, 0) : n);
            });
          });
        },
        token);
  }

  std::shared_ptr<detail::async_semaphore_kind> kind_;  // its count changes on the strand
};

/// A read/write lock named `name` for async acquisitions: one writer, or any number of
/// readers, at a time, async and blocking (redislock::shared_mutex) alike: the same scripts,
/// keys, queue and hand-off notices (detail/shared_scripts.hpp), with the same writer
/// preference (a reader that comes while a writer waits queues behind it). Every acquisition is
/// a holder of its own (its own owner token, one hold): there is no nested read, no downgrade
/// and no upgrade (a read hold and a write hold of one task are two holders, and the second
/// waits for the first). Cheap to keep; sends nothing until used.
class async_shared_mutex : public detail::async_lock_object {
 public:
  /// Throws invalid_argument for an empty name or bad options. Sends nothing. on_lost (with
  /// auto_renew) runs on the client's strand: it must not block.
  async_shared_mutex(async_client& client, std::string name, lock_options options = {})
      : async_lock_object(client, name, options, kind(true)),
        readers_(make_core(client, std::move(name), std::move(options), kind(false))) {}

  /// Waits until the write lock is ours: void(std::error_code, async_hold). Cancellable.
  template <class Token>
  auto async_lock(Token&& token) {
    return initiate(core_, std::nullopt, std::forward<Token>(token));
  }
  /// Like async_lock, but gives up after `timeout`: then the hold is empty (and no error).
  template <class Rep, class Period, class Token>
  auto async_try_lock_for(const std::chrono::duration<Rep, Period>& timeout, Token&& token) {
    return initiate(core_, detail::deadline_after(timeout), std::forward<Token>(token));
  }

  /// Waits until a read hold is ours: void(std::error_code, async_hold). Cancellable.
  template <class Token>
  auto async_lock_shared(Token&& token) {
    return initiate(readers_, std::nullopt, std::forward<Token>(token));
  }
  /// Like async_lock_shared, but gives up after `timeout`: then the hold is empty (and no error).
  template <class Rep, class Period, class Token>
  auto async_try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout, Token&& token) {
    return initiate(readers_, detail::deadline_after(timeout), std::forward<Token>(token));
  }

  /// The four with `lease` for this hold (async_mutex::async_lock(lease, token)).
  template <class Token>
  auto async_lock(std::chrono::milliseconds lease, Token&& token) {
    return initiate(core_, std::nullopt, lease, std::forward<Token>(token));
  }
  template <class Rep, class Period, class Token>
  auto async_try_lock_for(const std::chrono::duration<Rep, Period>& timeout, std::chrono::milliseconds lease,
                          Token&& token) {
    return initiate(core_, detail::deadline_after(timeout), lease, std::forward<Token>(token));
  }
  template <class Token>
  auto async_lock_shared(std::chrono::milliseconds lease, Token&& token) {
    return initiate(readers_, std::nullopt, lease, std::forward<Token>(token));
  }
  template <class Rep, class Period, class Token>
  auto async_try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout, std::chrono::milliseconds lease,
                                 Token&& token) {
    return initiate(readers_, detail::deadline_after(timeout), lease, std::forward<Token>(token));
  }

 private:
  static std::shared_ptr<const detail::async_lock_kind> kind(bool write) {
    static const auto writer = std::make_shared<const detail::async_shared_kind>(true);
    static const auto reader = std::make_shared<const detail::async_shared_kind>(false);
    return write ? writer : reader;
  }

  std::shared_ptr<detail::async_lock_core> readers_;  // the read side: a channel and tokens of its own
};

}  // namespace redislock
