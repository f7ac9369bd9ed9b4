#pragma once
/// @file detail/asio_sentinel.hpp
/// @brief The master of an async_client built with sentinel_options, found without blocking
/// the loop: the async twin of sentinel_client's discovery (detail/sentinel_discovery.hpp).
///
/// The route asks the sentinels in turn (the one that answered last first), each on an
/// async_redis of its own bounded by the connect and command timeouts, points the client's
/// command and subscriber connections at the address named, and checks it with ROLE on the
/// command connection: only a node that answers "master" is used. Commands wait (when_master)
/// while no checked master is known; the command connection's generation is the check's: once
/// that connection ends (the master died, Sentinel's CLIENT KILL on demotion) or a command is
/// refused as by a non-master (READONLY, LOADING, MASTERDOWN), the next command looks again.
/// A look-up that finds nothing is repeated sentinel_options::retries times, pausing
/// retry_backoff (doubling, up to max(retry_backoff, 1 s)); then the waiting commands fail.
/// While commands are sent, the sentinels are asked again every recheck_interval (the command
/// that finds the recheck due waits for it; others go on to the known master meanwhile; a
/// recheck that finds nothing keeps that master): after a failover whose old master stays up and keeps its
/// clients until Sentinel reconfigures it, this bounds how long the client writes there.
/// Moving to another address closes both connections: a subscriber left on a demoted master
/// would strand its waiters (their subscriptions end with it, and they subscribe again on the
/// new master). A move is told to the observer (on_failover, on the strand), as
/// sentinel_client tells it.

#include <redislock/detail/asio_redis.hpp>
#include <redislock/detail/sentinel_discovery.hpp>
#include <redislock/options.hpp>
#include <redislock/sentinel_client.hpp>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace redislock::detail {

/// A SENTINEL GET-MASTER-ADDR-BY-NAME reply's address; nullopt for anything else (nil: the
/// sentinel does not know the name; an error; a bad address).
inline std::optional<master_address> parse_master_address(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2) return std::nullopt;
  const redisReply* host = r->element[0];
  const redisReply* port = r->element[1];
  if (host->type != REDIS_REPLY_STRING || port->type != REDIS_REPLY_STRING || host->len == 0) return std::nullopt;
  master_address a;
  a.host.assign(host->str, host->len);
  try {
    a.port = parse_port_or_db(std::string_view(port->str, port->len), "port", 65535);
  } catch (const invalid_argument&) {
    return std::nullopt;
  }
  if (a.port == 0) return std::nullopt;
  return a;
}

class async_sentinel_route : public std::enable_shared_from_this<async_sentinel_route> {
 public:
  /// `commands` and `subscriber`: the client's connections, pointed at each master found.
  async_sentinel_route(async_strand strand, sentinel_options options, std::shared_ptr<void> tls_context,
                       std::shared_ptr<async_redis> commands, std::shared_ptr<async_redis> subscriber)
      : strand_(std::move(strand)),
        options_(std::move(options)),
        tls_context_(std::move(tls_context)),
        commands_(std::move(commands)),
        subscriber_(std::move(subscriber)),
        pause_timer_(strand_) {
    asker_ = options_.connection;
    asker_.unix_path.clear();
    asker_.db = 0;
    asker_.user = options_.sentinel_user;
    asker_.password = options_.sentinel_password;
  }

  /// A checked master is known and the command connection to it is the one checked. On the strand.
  bool ready() const noexcept { return verified_ && commands_->generation() == verified_generation_; }

  /// ready(true) once a checked master is known (at once when it is), ready(false) when the
  /// look-up gave up or the client closed. On the strand. After close(), commands still go to
  /// a connection that is open (a closing client's last replies may send more, as a script's
  /// EVAL after NOSCRIPT); nothing opens a new one.
  void when_master(std::function<void(bool)> ready_cb) {
    if (ready()) {
      // Due for a recheck: this command waits for the sentinels' answer (as sentinel_client's
      // command that rechecks): sent to the known master, a renewal could be confirmed by a
      // node they no longer name. Commands meanwhile go on to the known master.
      if (looking_ || closed_ || options_.recheck_interval.count() <= 0 || steady_clock::now() < recheck_at_)
        return ready_cb(true);
      waiting_.push_back(std::move(ready_cb));
      return start(true);
    }
    if (closed_) {
      asio::post(strand_, [cb = std::move(ready_cb)] { cb(false); });
      return;
    }
    waiting_.push_back(std::move(ready_cb));
    if (!looking_) start(false);
  }

  /// A command sent on the command connection's `generation` got no reply, or was refused as
  /// by a non-master: the next command looks the master up again (starting with another
  /// sentinel: the last to answer may not know of the failover yet).
  void master_gone(std::uint64_t generation) {
    if (!verified_ || generation != verified_generation_) return;
    verified_ = false;
    if (lost_at_ == steady_clock::time_point{}) lost_at_ = steady_clock::now();
    preferred_ = (preferred_ + 1) % options_.sentinels.size();
  }

  /// The master in use is not to be trusted without asking: no checked one, or a recheck
  /// due (the next command waits for it). A notice heard meanwhile is confirmed by a command.
  bool in_doubt() const noexcept {
    return !ready() || (options_.recheck_interval.count() > 0 && steady_clock::now() >= recheck_at_);
  }

  /// Re-sends a command refused as by a non-master at most this often.
  int retries() const noexcept { return options_.retries; }

  /// For good: waiting commands fail, no look-up starts.
  void close() {
    closed_ = true;
    pause_timer_.cancel();
    finish(false);
  }

  /// The io_context is being destroyed (loop_gone_service): waiting commands, which own the
  /// client that owns this route, are dropped unrun.
  void loop_gone() noexcept {
    closed_ = true;
    std::exchange(waiting_, {});
  }

  /// "host:port" of the master last checked ("" before), and how often it changed. Any thread.
  std::string master_endpoint() const {
    std::lock_guard<std::mutex> g(seen_mutex_);
    return seen_endpoint_;
  }
  std::uint64_t master_changes() const {
    std::lock_guard<std::mutex> g(seen_mutex_);
    return changes_;
  }

 private:
  using steady_clock = std::chrono::steady_clock;

  // `recheck`: the known master stays in use until the sentinels name another one.
  void start(bool recheck) {
    looking_ = true;
    rechecking_ = recheck;
    round_ = 0;
    pause_ = options_.retry_backoff;
    recheck_at_ = steady_clock::now() + options_.recheck_interval;
    if (!recheck) verified_ = false;
    // The connection ended (or the first look-up): recovery counts from here.
    if (!recheck && lost_at_ == steady_clock::time_point{} && current_.port != 0) lost_at_ = steady_clock::now();
    ask(0);
  }

  void ask(std::size_t k) {
    if (closed_) return finish(false);
    const std::size_t n = options_.sentinels.size();
    if (k == n) return round_failed();
    const std::size_t i = (preferred_ + k) % n;
    connection_options o = asker_;
    o.host = options_.sentinels[i].host;
    o.port = options_.sentinels[i].port;
    auto sentinel = std::make_shared<async_redis>(strand_, std::move(o), false, tls_context_);
    sentinel->command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", options_.service_name},
                      [self = shared_from_this(), sentinel, i, k](redisReply* r) {
                        std::optional<master_address> a = parse_master_address(r);
                        // Closed once this callback is done (hiredis frees its context then).
                        asio::post(self->strand_, [sentinel] { sentinel->close(); });
                        if (!a) return self->ask(k + 1);
                        // A recheck that names the master in use: nothing to do but ask this
                        // sentinel first next time (the ones before it did not answer).
                        if (self->ready() && *a == self->current_) {
                          self->preferred_ = i;
                          return self->finish(true);
                        }
                        self->check(*a, i, k);
                      });
  }

  // Points both connections at `a` and asks it ROLE on the command connection (its first
  // command there when the address is new).
  void check(const master_address& a, std::size_t index, std::size_t k) {
    if (closed_) return finish(false);
    verified_ = false;  // until ROLE answers on the connection to `a`
    current_ = a;
    commands_->retarget(a.host, a.port);
    subscriber_->retarget(a.host, a.port);
    commands_->command({"ROLE"}, [self = shared_from_this(), a, index, k](redisReply* r) {
      const bool master = r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                          r->element[0]->type == REDIS_REPLY_STRING &&
                          std::string_view(r->element[0]->str, r->element[0]->len) == "master";
      if (self->closed_) return self->finish(false);
      if (!master) return self->ask(k + 1);
      self->verified_ = true;
      self->verified_generation_ = self->commands_->generation();
      self->preferred_ = index;
      const std::string endpoint = a.endpoint();
      std::string from;
      {
        std::lock_guard<std::mutex> g(self->seen_mutex_);
        if (!self->seen_endpoint_.empty() && self->seen_endpoint_ != endpoint) {
          ++self->changes_;
          from = self->seen_endpoint_;
        }
        self->seen_endpoint_ = endpoint;
      }
      const steady_clock::time_point lost_at = std::exchange(self->lost_at_, {});
      if (!from.empty()) report_sentinel_failover(from, endpoint, lost_at, steady_clock::now());
      self->finish(true);
    });
  }

  // No sentinel named a master that answers as one: again after a pause, or give up. A
  // recheck that found nothing keeps the master in use (as sentinel_client's).
  void round_failed() {
    if (rechecking_ && ready()) return finish(true);
    if (round_ >= options_.retries) return finish(false);
    ++round_;
    pause_timer_.expires_after(pause_);
    pause_ = std::min(pause_ * 2, std::max(options_.retry_backoff, std::chrono::milliseconds(1000)));
    pause_timer_.async_wait([self = shared_from_this()](const asio::error_code& e) {
      if (e || self->closed_) return self->finish(false);
      self->ask(0);
    });
  }

  void finish(bool ok) {
    looking_ = false;
    recheck_at_ = steady_clock::now() + options_.recheck_interval;
    for (auto& cb : std::exchange(waiting_, {})) cb(ok);
  }

  async_strand strand_;
  sentinel_options options_;
  connection_options asker_;  // the sentinels': their credentials, no SELECT
  std::shared_ptr<void> tls_context_;
  std::shared_ptr<async_redis> commands_, subscriber_;
  asio::steady_timer pause_timer_;
  std::vector<std::function<void(bool)>> waiting_;
  bool looking_ = false, verified_ = false, closed_ = false;
  bool rechecking_ = false;                // the look-up under way started with a checked master known
  std::uint64_t verified_generation_ = 0;  // the command connection's, when ROLE said master
  std::size_t preferred_ = 0;              // the sentinel asked first
  master_address current_;                 // where the connections point
  steady_clock::time_point recheck_at_{};  // the next look-up while the master is known
  steady_clock::time_point lost_at_{};     // when the master in use was first found gone
  int round_ = 0;
  std::chrono::milliseconds pause_{0};
  mutable std::mutex seen_mutex_;
  std::string seen_endpoint_;
  std::uint64_t changes_ = 0;
};

}  // namespace redislock::detail
