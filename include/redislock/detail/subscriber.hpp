#pragma once
/// @file detail/subscriber.hpp
/// @brief One pub/sub connection per client that wakes waiting locks when a holder releases.
///
/// Waiters of one client share ONE dedicated connection and ONE reader thread. Channels are
/// reference counted: the first waiter on a channel sends SUBSCRIBE, the last one to leave
/// sends UNSUBSCRIBE. Only the reader thread touches the hiredis context; waiters hand it
/// requests through a queue and an eventfd, so no lock is held across I/O and the destructor
/// can always stop the thread (it blocks in poll() on the socket and the eventfd, never in a
/// read).
///
/// No lost wake-ups: a waiter joins a channel and waits for the server's confirmation BEFORE
/// its next acquire attempt, so any release after that attempt is published to a channel we
/// are already subscribed to. A message leaves a wake-up "token" with the channel; a waiter
/// consumes one token per wake, so a release wakes one local waiter rather than all of them
/// (each woken waiter makes an attempt, which either acquires or finds a new holder, whose
/// release will publish again).
///
/// A failed SUBSCRIBE (error reply, e.g. an ACL without +subscribe) or a lost connection marks
/// the affected subscriptions failed; their waiters fall back to jittered backoff. After a
/// failure new subscriptions are refused for `retry_after` without asking the server.

#include <redislock/connection.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/options.hpp>
#include <redislock/reply.hpp>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace redislock {

/// Counters of how waiting locks of one client were woken (client::wait_stats()).
struct wait_stats {
  std::uint64_t subscriptions = 0;       ///< channels subscribed (SUBSCRIBE confirmed)
  std::uint64_t subscribe_failures = 0;  ///< SUBSCRIBE refused or connection lost/unavailable
  std::uint64_t wakeups = 0;             ///< waits ended by a release notification
  std::uint64_t fallback_waits = 0;      ///< acquisitions that waited with backoff instead
};

namespace detail {

class subscriber {
  struct channel_state {
    int refs = 0;        // local waiters registered on the channel
    int in_flight = 0;   // SUBSCRIBE/UNSUBSCRIBE sent, reply not yet read
    int tokens = 0;      // wake-ups not yet consumed (at most refs)
    bool failed = false; // SUBSCRIBE refused or connection lost: waiters back off
    std::deque<std::string> messages;  // the latest payloads (a few), for take_message()
    std::condition_variable cv;
  };
  using state_ptr = std::shared_ptr<channel_state>;

 public:
  /// A waiter's registration on one channel (RAII: leaving unsubscribes the last one).
  class subscription {
   public:
    subscription() = default;
    subscription(subscription&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), channel_(std::move(o.channel_)), state_(std::move(o.state_)) {}
    subscription& operator=(subscription&& o) noexcept {
      if (this != &o) {
        reset();
        owner_ = std::exchange(o.owner_, nullptr);
        channel_ = std::move(o.channel_);
        state_ = std::move(o.state_);
      }
      return *this;
    }
    subscription(const subscription&) = delete;
    subscription& operator=(const subscription&) = delete;
    ~subscription() { reset(); }

    /// Confirmed by the server and not failed since: wake-ups will arrive.
    bool active() const {
      if (!owner_) return false;
      std::lock_guard<std::mutex> g(owner_->mutex_);
      return owner_->confirmed(*state_);
    }

    /// Waits for a release notification until t. True when woken by one; false on timeout or
    /// when the subscription failed meanwhile (check active()).
    bool wait_until(steady::time_point t) {
      if (!owner_) return false;
      std::unique_lock<std::mutex> g(owner_->mutex_);
      state_->cv.wait_until(g, t, [&] { return state_->tokens > 0 || state_->failed || owner_->stopping_; });
      if (state_->tokens == 0) return false;
      --state_->tokens;
      ++owner_->stats_.wakeups;
      return true;
    }

    /// Removes `payload` from the messages received on this channel and tells whether it was
    /// there (a hand-off names the token it is for; older ones are left for nobody).
    bool take_message(std::string_view payload) {
      if (!owner_) return false;
      std::lock_guard<std::mutex> g(owner_->mutex_);
      auto& m = state_->messages;
      auto it = std::find(m.begin(), m.end(), payload);
      if (it == m.end()) return false;
      m.erase(it);
      return true;
    }

    void reset() noexcept {
      if (owner_) owner_->leave(channel_, state_);
      owner_ = nullptr;
      state_.reset();
    }

   private:
    friend class subscriber;
    subscription(subscriber* owner, std::string channel, state_ptr state)
        : owner_(owner), channel_(std::move(channel)), state_(std::move(state)) {}
    subscriber* owner_ = nullptr;
    std::string channel_;
    state_ptr state_;
  };

  /// Connects lazily (on the first join), with the client's connection options.
  explicit subscriber(connection_options options, std::chrono::milliseconds retry_after = std::chrono::seconds(1))
      : options_(std::move(options)), retry_after_(retry_after) {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) throw connection_error("subscriber: eventfd failed");
    thread_ = std::thread([this] { run(); });
  }
  subscriber(const subscriber&) = delete;
  subscriber& operator=(const subscriber&) = delete;

  ~subscriber() {
    {
      std::lock_guard<std::mutex> g(mutex_);
      stopping_ = true;
      for (auto& [name, s] : channels_) s->cv.notify_all();
    }
    ready_cv_.notify_all();
    wake();
    thread_.join();
    ::close(wake_fd_);
  }

  /// Registers on `channel` and waits (until `d`, and at most connect + command timeout) for
  /// the server to confirm the subscription. The result is inactive when subscribing failed
  /// or the deadline came first; the caller then backs off instead.
  subscription join(const std::string& channel, const deadline& d) {
    std::unique_lock<std::mutex> g(mutex_);
    if (stopping_ || steady::now() < refuse_until_) {
      ++stats_.subscribe_failures;
      return {};
    }
    state_ptr s = register_on(channel);
    subscription sub(this, channel, s);
    steady::time_point limit = steady::now() + options_.connect_timeout + options_.command_timeout;
    if (options_.connect_timeout.count() == 0 || options_.command_timeout.count() == 0) limit = steady::time_point::max();
    const steady::time_point until = d ? std::min(*d, limit) : limit;
    s->cv.wait_until(g, until, [&] { return confirmed(*s) || s->failed || stopping_; });
    if (!confirmed(*s) && !s->failed && steady::now() >= limit) {
      s->failed = true;  // too slow to be useful: count it, back off
      ++stats_.subscribe_failures;
      auto it = channels_.find(channel);
      if (it != channels_.end() && it->second == s) channels_.erase(it);
      s->cv.notify_all();  // other waiters on it back off too
    }
    return sub;
  }

  /// Joins `channel` only when it is already confirmed (another local waiter subscribed):
  /// no server traffic. Inactive otherwise.
  subscription join_if_subscribed(const std::string& channel) {
    std::lock_guard<std::mutex> g(mutex_);
    auto it = channels_.find(channel);
    if (stopping_ || it == channels_.end() || !confirmed(*it->second)) return {};
    ++it->second->refs;
    return subscription(this, channel, it->second);
  }

  /// Counts an acquisition that waited with backoff because no subscription was available.
  void count_fallback() {
    std::lock_guard<std::mutex> g(mutex_);
    ++stats_.fallback_waits;
  }

  wait_stats stats() const {
    std::lock_guard<std::mutex> g(mutex_);
    return stats_;
  }

 private:
  enum class verb { subscribe, unsubscribe };
  struct request {
    verb what;
    std::string channel;
    state_ptr state;  // the registration it belongs to (a channel may be re-joined meanwhile)
  };

  bool confirmed(const channel_state& s) const { return !s.failed && s.refs > 0 && s.in_flight == 0 && connected_; }

  // Caller holds mutex_.
  state_ptr register_on(const std::string& channel) {
    state_ptr& s = channels_[channel];
    if (!s || s->failed) s = std::make_shared<channel_state>();
    if (s->refs++ == 0) send(verb::subscribe, channel, s);
    return s;
  }

  void leave(const std::string& channel, const state_ptr& s) noexcept {
    std::lock_guard<std::mutex> g(mutex_);
    s->tokens = std::min(s->tokens, std::max(0, s->refs - 1));
    if (--s->refs > 0) {
      if (s->tokens > 0) s->cv.notify_one();  // a wake-up this waiter no longer needs
      return;
    }
    auto it = channels_.find(channel);
    if (it == channels_.end() || it->second != s) return;  // detached after a failure
    if (s->failed || stopping_) {
      if (s->in_flight == 0 || s->failed) channels_.erase(it);
      return;
    }
    send(verb::unsubscribe, channel, s);
  }

  // Caller holds mutex_.
  void send(verb v, const std::string& channel, const state_ptr& s) {
    ++s->in_flight;
    outbox_.push_back({v, channel, s});
    ready_cv_.notify_one();  // the reader waits there while disconnected
    wake();                  // and in poll() while connected
  }

  void wake() noexcept {
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }

  // Fails every subscription (their waiters back off) and forgets the channels.
  // Caller holds mutex_.
  void fail_all() {
    for (auto& [name, s] : channels_) {
      if (s->refs > 0 && !s->failed) ++stats_.subscribe_failures;
      s->failed = true;
      s->in_flight = 0;
      s->cv.notify_all();
    }
    channels_.clear();
    outbox_.clear();
    sent_.clear();
    connected_ = false;
    refuse_until_ = steady::now() + retry_after_;
  }

  void run() {
    std::unique_ptr<connection> conn;
    std::unique_lock<std::mutex> g(mutex_);
    while (!stopping_) {
      if (!conn) {
        ready_cv_.wait(g, [&] { return stopping_ || !outbox_.empty(); });
        if (stopping_) break;
        g.unlock();
        try {
          conn = std::make_unique<connection>(options_);
          // The reader waits without a timeout: TCP keepalive notices a peer that vanished
          // without closing (power loss, network partition), so waiters fall back to backoff.
          if (options_.unix_path.empty()) redisEnableKeepAlive(conn->native_handle());
        } catch (...) {
          conn.reset();
        }
        g.lock();
        if (!conn) {
          fail_all();
          continue;
        }
        connected_ = true;
      }
      std::vector<request> batch;
      batch.swap(outbox_);
      g.unlock();
      bool ok = write_all(*conn, batch);
      bool readable = false, woken = false;
      if (ok) ok = wait_io(*conn, readable, woken);
      if (woken) drain_wake();
      g.lock();
      for (auto& r : batch) sent_.push_back(std::move(r));
      if (ok && readable) {
        g.unlock();
        ok = redisBufferRead(conn->native_handle()) == REDIS_OK;
        g.lock();
        while (ok) {
          void* raw = nullptr;
          if (redisGetReplyFromReader(conn->native_handle(), &raw) != REDIS_OK) ok = false;
          if (!raw) break;
          handle(reply_ptr(static_cast<redisReply*>(raw)));
        }
        // Woken waiters need mutex_ at once: wake them after letting it go, or each would
        // wake only to block on it (a hand-off's latency is mostly wake-ups).
        g.unlock();
        for (auto& [state, all] : woken_) all ? state->cv.notify_all() : state->cv.notify_one();
        woken_.clear();
        g.lock();
      }
      if (!ok) {
        fail_all();
        g.unlock();
        conn.reset();
        g.lock();
      }
    }
  }

  bool write_all(connection& c, const std::vector<request>& batch) {
    redisContext* ctx = c.native_handle();
    for (const auto& r : batch) {
      const char* argv[2] = {r.what == verb::subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE", r.channel.c_str()};
      const std::size_t lens[2] = {r.what == verb::subscribe ? 9u : 11u, r.channel.size()};
      if (redisAppendCommandArgv(ctx, 2, argv, lens) != REDIS_OK) return false;
    }
    int done = batch.empty();
    while (!done)
      if (redisBufferWrite(ctx, &done) != REDIS_OK) return false;
    return true;
  }

  // Blocks until the socket is readable or a waiter/the destructor woke us. No timeout:
  // the destructor always writes the eventfd.
  bool wait_io(connection& c, bool& readable, bool& woken) {
    pollfd p[2] = {{c.native_handle()->fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    for (;;) {
      int n = ::poll(p, 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return false;
      break;
    }
    readable = (p[0].revents & (POLLIN | POLLERR | POLLHUP)) != 0;
    woken = (p[1].revents & POLLIN) != 0;
    return (p[0].revents & POLLNVAL) == 0;
  }

  void drain_wake() noexcept {
    std::uint64_t n;
    [[maybe_unused]] ssize_t r = ::read(wake_fd_, &n, sizeof n);
  }

  // One pub/sub reply. Caller holds mutex_.
  void handle(reply_ptr r) {
    auto str = [&](std::size_t i) -> std::string_view {
      if (r->type != REDIS_REPLY_ARRAY || i >= r->elements || r->element[i]->type != REDIS_REPLY_STRING) return {};
      return {r->element[i]->str, r->element[i]->len};
    };
    if (str(0) == "message") {
      auto it = channels_.find(std::string(str(1)));
      if (it == channels_.end()) return;
      channel_state& s = *it->second;
      s.messages.emplace_back(str(2));
      if (s.messages.size() > kKeptMessages) s.messages.pop_front();
      if (str(2) == "all") {  // several waiters may enter (readers after a writer): wake every one
        s.tokens = s.refs;
        woken_.emplace_back(it->second, true);
      } else {  // one may enter (or a hand-off to the one waiter on the channel): wake one
        if (s.tokens < s.refs) ++s.tokens;
        woken_.emplace_back(it->second, false);
      }
      return;
    }
    // Any other reply answers the oldest SUBSCRIBE/UNSUBSCRIBE (one reply per one-channel command).
    if (sent_.empty()) return;
    request req = std::move(sent_.front());
    sent_.pop_front();
    const state_ptr& s = req.state;
    if (s->failed) return;  // already given up (too slow); holders back off
    --s->in_flight;
    auto it = channels_.find(req.channel);
    const bool registered = it != channels_.end() && it->second == s;
    if (r->type == REDIS_REPLY_ERROR) {
      ++stats_.subscribe_failures;
      s->failed = true;
      if (registered) channels_.erase(it);  // holders keep the state; a later join starts afresh
      refuse_until_ = steady::now() + retry_after_;
    } else {
      if (req.what == verb::subscribe && s->in_flight == 0 && s->refs > 0) ++stats_.subscriptions;
      if (registered && s->refs == 0 && s->in_flight == 0) channels_.erase(it);
    }
    s->cv.notify_all();
  }

  static constexpr std::size_t kKeptMessages = 8;
  connection_options options_;
  std::chrono::milliseconds retry_after_;
  mutable std::mutex mutex_;
  std::condition_variable ready_cv_;  // the reader waits here while disconnected
  std::unordered_map<std::string, state_ptr> channels_;
  std::vector<request> outbox_;  // not yet sent
  std::deque<request> sent_;     // sent, reply pending (in order)
  std::vector<std::pair<state_ptr, bool>> woken_;  // to notify (all?) once mutex_ is released
  bool connected_ = false;
  bool stopping_ = false;
  steady::time_point refuse_until_{};
  wait_stats stats_;
  int wake_fd_ = -1;
  std::thread thread_;
};

}  // namespace detail
}  // namespace redislock
