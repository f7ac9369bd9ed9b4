#pragma once
/// @file detail/asio_cluster.hpp
/// @brief The async client's Redis Cluster routing (async_client_options::cluster): the slot
/// map, one command connection per master (detail/asio_redis.hpp, opened on first use) and one
/// sharded subscriber per master (SSUBSCRIBE, opened on the first contended wait there).
/// Everything here runs on the client's strand; nothing blocks it.
///
/// The map comes from CLUSTER SLOTS (asked of the known masters, then the other known nodes,
/// then the seeds, until one answers), loaded before the first command, again after a
/// command's connection failed (a failover: the next command is routed by a fresh map), and in
/// the background after a MOVED. A command goes to the master of its key's slot (a lock's keys
/// share a {hash tag}: a script's first key routes it):
///  - MOVED: the slot is given to the named node (kept over a background reload that may not
///    know of the move yet) and the command is sent there; from the second MOVED of one call
///    on, after a pause (nodes disagree for a moment after a slot move). At most
///    cluster_options::max_redirects redirects, then the refusal is the reply.
///  - ASK: ASKING and the command, pipelined, to the named node, once.
///  - TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN: refused before running; sent again with
///    backoff (5..200 ms) until cluster_options::retry_timeout from the call's start, then the
///    call fails as a lost connection does (reply nullptr: async_errc::connection_failed).
/// A redirect or refusal means the command did not run: resending it is safe. A connection
/// that failed (or a reply that did not come within command_timeout) is a lost reply, passed
/// on as nullptr exactly as on one server: the lock machinery copes with a script that ran
/// unseen (asio.hpp).
///
/// Sharded subscribers: hiredis's async pub/sub knows SUBSCRIBE and PSUBSCRIBE only (a sharded
/// message would find no callback and abort). So a sharded connection sends its first
/// SSUBSCRIBE as a command whose callback then puts the context in hiredis's monitor mode, in
/// which hiredis hands every later reply to that one callback; later (S)SUBSCRIBE and
/// SUNSUBSCRIBE are appended without a callback of their own (asio_redis.hpp). The callback
/// tells confirmations, refusals and messages apart by their shape and by the requests still
/// unanswered, oldest first.

#include <redislock/cluster_client.hpp>
#include <redislock/detail/asio_redis.hpp>
#include <redislock/detail/cluster_slots.hpp>
#include <redislock/errors.hpp>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace redislock::detail {

class async_cluster : public std::enable_shared_from_this<async_cluster> {
 public:
  using steady = std::chrono::steady_clock;
  /// A sharded subscriber's news: the node's index, then as async_redis::message_sink.
  using node_message_sink =
      std::function<void(std::size_t node, std::string_view type, std::string_view channel, std::string_view payload)>;
  using node_broken_sink = std::function<void(std::size_t node, std::uint64_t generation)>;

  async_cluster(async_strand strand, cluster_options options, std::shared_ptr<void> tls_context)
      : strand_(std::move(strand)), options_(std::move(options)), tls_context_(std::move(tls_context)) {
    slot_owner_.assign(cluster_slot_count, -1);
  }

  void set_sinks(node_message_sink on_message, node_broken_sink on_broken) {
    on_message_ = std::move(on_message);
    on_broken_ = std::move(on_broken);
  }

  /// Sends `argv` to the master of `key`'s slot, following redirects (see the file comment).
  void command(std::string_view key, const std::vector<std::string_view>& argv, reply_callback cb) {
    auto c = std::make_shared<call>();
    c->slot = key_slot(key);
    c->argv.assign(argv.begin(), argv.end());
    c->cb = std::move(cb);
    c->give_up = steady::now() + options_.retry_timeout;
    send(c);
  }

  /// The index of the master that owns `slot` in the current map; -1 when unknown.
  int owner_of(int slot) const noexcept { return slot_owner_[static_cast<std::size_t>(slot)]; }

  /// The sharded subscriber of node `n` (created on first use).
  async_redis& subscriber(std::size_t n) {
    node& x = *nodes_[n];
    if (!x.subscriber) {
      x.subscriber = std::make_shared<async_redis>(strand_, x.options, true, tls_context_, true);
      std::weak_ptr<async_cluster> w = weak_from_this();
      x.subscriber->set_sinks(
          [w, n](std::string_view type, std::string_view channel, std::string_view payload) {
            if (auto self = w.lock(); self && self->on_message_) self->on_message_(n, type, channel, payload);
          },
          [w, n](std::uint64_t ended) {
            auto self = w.lock();
            if (!self) return;
            self->stale_ = true;  // a failover, maybe: the next command reloads the map first
            if (self->on_broken_) self->on_broken_(n, ended);
          });
      if (closed_) x.subscriber->shutdown();
    }
    return *x.subscriber;
  }
  /// Node `n`'s sharded subscriber connection's generation (0: none yet).
  std::uint64_t subscriber_generation(std::size_t n) const noexcept {
    return nodes_[n]->subscriber ? nodes_[n]->subscriber->generation() : 0;
  }

  /// A redirect of a subscription (MOVED to SSUBSCRIBE): applied as a command's. Returns the
  /// node now believed to own the slot (-1: an unusable redirect).
  int redirected(const std::string& refusal, std::size_t from) {
    const redirect_error e(refusal);
    if (e.is_ask()) return -1;
    const int to = node_at(e.endpoint(), nodes_[from]->options.host);
    if (to >= 0 && e.slot() >= 0) moved(e.slot(), to);
    return to;
  }

  /// The slot map may be stale (a subscription the server ended): reloaded in the background.
  void reload_in_background() { load_map(nullptr); }

  /// The io_context is being destroyed (loop_gone_service): the calls waiting for the slot
  /// map, which own the client that owns this, are dropped unrun.
  void loop_gone() noexcept {
    closed_ = true;
    std::exchange(map_waiters_, {});
  }

  /// For good: calls under way fail; commands already sent are still answered (`graceful`).
  void shutdown() {
    closed_ = true;
    for (auto& n : nodes_) {
      if (n->commands) n->commands->shutdown(true);
      if (n->subscriber) n->subscriber->shutdown();
    }
  }

 private:
  struct node {
    std::string endpoint;
    connection_options options;
    std::shared_ptr<async_redis> commands, subscriber;
  };
  struct call {
    int slot = 0;
    std::vector<std::string> argv;
    reply_callback cb;
    steady::time_point give_up;
    int redirects = 0, ask_node = -1;
    std::chrono::milliseconds pause{0};
  };

  async_redis& commands_of(std::size_t n) {
    node& x = *nodes_[n];
    if (!x.commands) {
      x.commands = std::make_shared<async_redis>(strand_, x.options, false, tls_context_);
      if (closed_) x.commands->shutdown();
    }
    return *x.commands;
  }

  void fail(const std::shared_ptr<call>& c) {
    asio::post(strand_, [c] { c->cb(nullptr); });
  }

  void send(const std::shared_ptr<call>& c) {
    if (!loaded_ || stale_) {
      if (closed_) return fail(c);
      stale_ = false;
      return load_map([self = shared_from_this(), c](bool ok) {
        if (!ok && !self->loaded_) return c->cb(nullptr);
        self->route(c);
      });
    }
    route(c);
  }

  // Also once closed: a connection still draining takes a command its callbacks send (a
  // script's EVAL after NOSCRIPT); a closed node's connection refuses it (nullptr).
  void route(const std::shared_ptr<call>& c) {
    const int asked = std::exchange(c->ask_node, -1);
    const int target = asked >= 0 ? asked : owner_of(c->slot);
    if (target < 0) return retry_later(c, true);  // no master serves the slot: CLUSTERDOWN
    async_redis& conn = commands_of(static_cast<std::size_t>(target));
    if (asked >= 0) conn.command({"ASKING"}, [](redisReply*) {});  // admits the next command only
    std::vector<std::string_view> argv(c->argv.begin(), c->argv.end());
    conn.command(argv, [self = shared_from_this(), c, target, asked](redisReply* r) {
      self->on_reply(c, static_cast<std::size_t>(target), asked >= 0, r);
    });
  }

  void on_reply(const std::shared_ptr<call>& c, std::size_t target, bool asking, redisReply* r) {
    if (r == nullptr) {
      stale_ = true;  // a failover, maybe: the next command reloads the map first
      return c->cb(nullptr);
    }
    if (r->type != REDIS_REPLY_ERROR) return c->cb(r);
    const std::string_view message(r->str, r->len);
    if (starts_with(message, "MOVED ") || starts_with(message, "ASK ")) {
      const redirect_error e{std::string(message)};
      const int to = node_at(e.endpoint(), nodes_[target]->options.host);
      if (to < 0 || ++c->redirects > options_.max_redirects) return c->cb(r);
      if (e.is_ask()) {
        c->ask_node = to;
        return route(c);
      }
      moved(e.slot() >= 0 ? e.slot() : c->slot, to);
      load_map(nullptr);
      if (c->redirects > 1) return retry_later(c, false);
      return route(c);
    }
    if (starts_with(message, "TRYAGAIN") || starts_with(message, "CLUSTERDOWN") || starts_with(message, "LOADING") ||
        starts_with(message, "MASTERDOWN")) {
      // TRYAGAIN from an ASK target: back to it directly, not through another ASK.
      if (asking) c->ask_node = static_cast<int>(target);
      return retry_later(c, starts_with(message, "CLUSTERDOWN"));
    }
    c->cb(r);
  }

  // After a pause (backoff 5..200 ms), within the call's retry_timeout; past it, the call
  // fails as a lost connection does.
  void retry_later(const std::shared_ptr<call>& c, bool reload) {
    c->pause = std::clamp(c->pause * 2, std::chrono::milliseconds(5), std::chrono::milliseconds(200));
    if (steady::now() + c->pause >= c->give_up || closed_) return fail(c);
    if (reload) stale_ = true;
    auto timer = std::make_shared<asio::steady_timer>(strand_, c->pause);
    timer->async_wait([self = shared_from_this(), c, timer](const asio::error_code&) { self->send(c); });
  }

  // A MOVED names the slot's owner: the freshest word on it, also over a reload under way.
  void moved(int slot, int to) {
    if (slot < 0 || slot >= cluster_slot_count) return;
    slot_owner_[static_cast<std::size_t>(slot)] = to;
    if (loading_) moved_while_loading_.emplace_back(slot, to);
  }

  // Loads the map (one CLUSTER SLOTS at a time; `then`, when given, hears whether it loaded).
  void load_map(std::function<void(bool)> then) {
    if (then) map_waiters_.push_back(std::move(then));
    if (loading_) return;
    if (closed_) return finish_load(false);
    loading_ = true;
    moved_while_loading_.clear();
    std::vector<bool> is_master(nodes_.size(), false);
    for (int i : slot_owner_)
      if (i >= 0) is_master[static_cast<std::size_t>(i)] = true;
    auto order = std::make_shared<std::vector<std::size_t>>();
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (is_master[i]) order->push_back(i);
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (!is_master[i]) order->push_back(i);
    for (const connection_options& s : options_.seeds) {
      const auto n = static_cast<std::size_t>(node_index(s.host, s.port));
      if (std::find(order->begin(), order->end(), n) == order->end()) order->push_back(n);
    }
    ask_slots(order, 0);
  }

  void ask_slots(const std::shared_ptr<std::vector<std::size_t>>& order, std::size_t i) {
    if (i == order->size() || closed_) return finish_load(false);
    const std::size_t n = (*order)[i];
    commands_of(n).command({"CLUSTER", "SLOTS"}, [self = shared_from_this(), order, i, n](redisReply* r) {
      std::vector<slot_range> ranges;
      if (r != nullptr) try {
          ranges = parse_cluster_slots(*r, self->nodes_[n]->options.host);
        } catch (const error&) {
          ranges.clear();
        }
      if (ranges.empty()) return self->ask_slots(order, i + 1);  // unreachable, refused, or not yet joined
      self->install(ranges);
      self->finish_load(true);
    });
  }

  void install(const std::vector<slot_range>& ranges) {
    std::fill(slot_owner_.begin(), slot_owner_.end(), -1);
    for (const slot_range& r : ranges)
      std::fill(slot_owner_.begin() + r.first, slot_owner_.begin() + r.last + 1, node_index(r.host, r.port));
    for (const auto& [slot, to] : moved_while_loading_) slot_owner_[static_cast<std::size_t>(slot)] = to;
    loaded_ = true;
  }

  void finish_load(bool ok) {
    loading_ = false;
    moved_while_loading_.clear();
    for (auto& w : std::exchange(map_waiters_, {})) w(ok);
  }

  // The node at "host:port" (created on first sight); -1 for an unparsable endpoint. An empty
  // host (a node that does not know its address) means `fallback_host`.
  int node_at(const std::string& endpoint, const std::string& fallback_host) {
    const std::size_t colon = endpoint.rfind(':');
    if (colon == std::string::npos) return -1;
    std::string host = endpoint.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host.empty() || host == "?") host = fallback_host;
    int port = 0;
    try {
      port = parse_port_or_db(std::string_view(endpoint).substr(colon + 1), "port", 65535);
    } catch (const invalid_argument&) {
      return -1;
    }
    if (host.empty() || port == 0) return -1;
    return node_index(host, port);
  }

  int node_index(const std::string& host, int port) {
    const std::string endpoint =
        (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i]->endpoint == endpoint) return static_cast<int>(i);
    auto n = std::make_unique<node>();
    n->endpoint = endpoint;
    n->options = options_.seeds.front();
    n->options.host = host;
    n->options.port = port;
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size() - 1);
  }

  async_strand strand_;
  cluster_options options_;
  std::shared_ptr<void> tls_context_;
  std::vector<std::unique_ptr<node>> nodes_;  // every node ever seen; never shrinks
  std::vector<int> slot_owner_;               // slot -> index in nodes_, -1: unknown
  bool loaded_ = false, loading_ = false, stale_ = false, closed_ = false;
  std::vector<std::function<void(bool)>> map_waiters_;
  std::vector<std::pair<int, int>> moved_while_loading_;
  node_message_sink on_message_;
  node_broken_sink on_broken_;
};

}  // namespace redislock::detail
