#pragma once
/// @file detail/subscriber.hpp
/// @brief One pub/sub connection per client that wakes waiting locks when a holder releases.
///
/// Waiters of one client share ONE dedicated connection. Channels are reference counted: the
/// first waiter on a channel sends SUBSCRIBE, the last one to leave sends UNSUBSCRIBE.
///
/// Leader/follower, no reader thread: of the threads waiting for a notice, one at a time (the
/// reader) reads the connection, handles every reply and wakes the others, which sleep on their
/// channel's condition variable. A notice for the reader itself therefore costs no
/// thread-to-thread wake-up, which is most of a hand-off's latency; and the role passes to the
/// longest waiting thread, the one a FIFO release is most likely to serve next. Requests
/// (SUBSCRIBE/UNSUBSCRIBE) go through a queue; an eventfd interrupts the reader's poll() to
/// send them (the Linux I/O: detail/socket_wait.hpp), so no lock is held across I/O. Connecting is done by a
/// short-lived thread, so a waiter's deadline holds however slow the server is to answer. While nobody waits nobody
/// reads: the socket buffers what comes, and it is read (and a dropped connection noticed)
/// before a subscription is next trusted.
///
/// No lost wake-ups: a waiter joins a channel and waits for the server's confirmation BEFORE
/// its next acquire attempt, so any release after that attempt is published to a channel we
/// are already subscribed to. A message leaves a wake-up "token" for every local waiter on the
/// channel, and a waiter consumes one per wake: a lock kind's hand-off channel has one waiter
/// (its own), while a broadcast channel (an election's changes, a latch that opened) has one
/// per observer of this client, and each is owed the notice.
///
/// A failed SUBSCRIBE (error reply, e.g. an ACL without +subscribe) or a lost connection marks
/// the affected subscriptions failed; their waiters fall back to jittered backoff (or join
/// again). After a refused SUBSCRIBE or a failed connect, new subscriptions are refused for
/// `retry_after` without asking the server.
///
/// Sharded mode (a redislock::cluster_client: one subscriber per node, for the channels whose
/// slot the node owns) sends SSUBSCRIBE/SUNSUBSCRIBE and reads `smessage`. Redis also PUSHES
/// a `sunsubscribe` when the channel's slot leaves the node (resharding, or the node became a
/// replica). Replies are matched to requests thus: a `sunsubscribe` answers the oldest request
/// only when that is an SUNSUBSCRIBE of the same channel; any other one is a push, and ends the
/// channel's current registration (failed + moved): its waiters re-join through the client,
/// which routes them to the slot's new owner, and attempt again before sleeping. When a push
/// and our own SUNSUBSCRIBE of one channel cross, the push is taken as the answer and the real
/// answer later as a push: a live registration may be ended needlessly (its waiters re-join),
/// never kept when the server dropped it. A reply that names another channel or verb than the
/// request it would answer means the stream is not what we think: every subscription fails.
/// A MOVED reply to SSUBSCRIBE fails that subscription as moved (no `retry_after` refusal: the
/// node serves other slots) and tells the client its slot map is stale (on_moved).

#include <redislock/connection.hpp>
#include <redislock/detail/cancellation.hpp>
#include <redislock/detail/fork_guard.hpp>
#include <redislock/detail/socket_wait.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/options.hpp>
#include <redislock/reply.hpp>
#include <redislock/stats.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace redislock::detail {

class subscriber {
  struct channel_state {
    int refs = 0;                      // local waiters registered on the channel
    int in_flight = 0;                 // SUBSCRIBE/UNSUBSCRIBE sent, reply not yet read
    int tokens = 0;                    // wake-ups not yet consumed (at most refs)
    bool failed = false;               // SUBSCRIBE refused or connection lost: waiters back off
    bool moved = false;                // (with failed) the server ended it or said MOVED: re-join
    std::deque<std::string> messages;  // the latest payloads (a few), for take_message()
    std::condition_variable cv;        // its waiters: notices, confirmation, the reader's turn
  };
  using state_ptr = std::shared_ptr<channel_state>;

 public:
  /// A waiter's registration on one channel (RAII: leaving unsubscribes the last one).
  class subscription {
   public:
    subscription() = default;
    subscription(subscription&& o) noexcept
        : owner_(std::exchange(o.owner_, nullptr)), channel_(std::move(o.channel_)), state_(std::move(o.state_)) {}
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
      if (!owner_ || owner_->forked_.inherited()) return false;
      std::lock_guard<std::mutex> g(owner_->mutex_);
      return owner_->confirmed(*state_);
    }

    /// Ended by the server because the channel's slot moved (sharded mode): join again through
    /// the client rather than fall back to backoff.
    bool moved() const {
      if (!owner_) return false;
      std::lock_guard<std::mutex> g(owner_->mutex_);
      return state_->moved;
    }

    /// active(), after handling what already arrived (without waiting) when nobody reads, so
    /// a connection that dropped while nobody waited is noticed: before relying on a
    /// subscription kept from an earlier wait.
    bool check_active() {
      if (!owner_ || owner_->forked_.inherited()) return false;
      std::unique_lock<std::mutex> g(owner_->mutex_);
      owner_->catch_up(g);
      return owner_->confirmed(*state_);
    }

    /// Waits for a release notification until t. True when woken by one; false on timeout or
    /// when the subscription failed meanwhile (check active()).
    /// A cancelled call (detail/cancellation.hpp) ends it too: false.
    bool wait_until(steady::time_point t) {
      if (!owner_) return false;
      const cancel_hook cancelled([owner = owner_, s = state_.get()] { owner->interrupt(*s); });
      std::unique_lock<std::mutex> g(owner_->mutex_);  // released before `cancelled` is removed
      owner_->await(g, *state_, t, [&] { return state_->tokens > 0 || state_->failed || cancelled.fired(); });
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

    /// Reads what already arrived (without waiting), then forgets every notice and wake-up
    /// received so far: a wait that starts with this cannot be ended by anything published
    /// for an earlier wait. For a channel with one waiter at a time (a mutex object's own).
    /// Returns the notices it dropped.
    std::deque<std::string> discard_pending() {
      if (!owner_ || owner_->forked_.inherited()) return {};
      std::unique_lock<std::mutex> g(owner_->mutex_);
      owner_->catch_up(g);
      state_->tokens = 0;
      return std::exchange(state_->messages, {});
    }

    /// Removes and returns the messages received on this channel other than `kept`.
    std::deque<std::string> take_messages_except(std::string_view kept) {
      std::deque<std::string> taken;
      if (!owner_) return taken;
      std::lock_guard<std::mutex> g(owner_->mutex_);
      auto& m = state_->messages;
      for (auto it = m.begin(); it != m.end();) {
        if (*it == kept) {
          ++it;
        } else {
          taken.push_back(std::move(*it));
          it = m.erase(it);
        }
      }
      return taken;
    }

    /// The subscriber (hence the node) it was made on; nullptr when empty.
    const subscriber* hub() const noexcept { return owner_; }

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

  enum class mode { classic, sharded };

  /// Connects lazily (on the first join), with the client's connection options. Sharded mode:
  /// see the top of the file; on_moved is called (under the subscriber's lock: keep it short,
  /// never call back in) when the server ended a subscription or answered MOVED.
  explicit subscriber(connection_options options, std::chrono::milliseconds retry_after = std::chrono::seconds(1),
                      mode m = mode::classic, std::function<void()> on_moved = {})
      : options_(std::move(options)),
        retry_after_(retry_after),
        sharded_(m == mode::sharded),
        on_moved_(std::move(on_moved)) {}
  subscriber(const subscriber&) = delete;
  subscriber& operator=(const subscriber&) = delete;

  /// Wakes any thread still waiting here (it returns at once), waits for it to stop reading,
  /// and for a connect in progress. Every subscription must be gone before (the client
  /// outlives its lock objects).
  ~subscriber() {
    std::unique_lock<std::mutex> g(mutex_);
    stopping_ = true;
    for (auto& [name, s] : channels_) s->cv.notify_all();
    for (channel_state* s : waiting_) s->cv.notify_all();
    wake();
    idle_cv_.wait(g, [&] { return waiting_.empty() && !reading_ && !connecting_; });
    g.unlock();
    if (connector_.joinable()) connector_.join();
    conn_.reset();
  }

  /// Registers on `channel` and waits (until `d`, and at most connect + 3 × command timeout) for
  /// the server to confirm the subscription. The result is inactive when subscribing failed
  /// or the deadline came first (or the call was cancelled: detail/cancellation.hpp); the
  /// caller then backs off instead.
  subscription join(const std::string& channel, const deadline& d) {
    if (forked_.inherited()) return {};  // the connection is the parent's
    const cancel_hook cancelled([this] { interrupt_all(); });
    std::unique_lock<std::mutex> g(mutex_);  // released before `cancelled` is removed
    if (stopping_ || steady::now() < refuse_until_) {
      ++stats_.subscribe_failures;
      return {};
    }
    state_ptr s = register_on(channel);
    subscription sub(this, channel, s);
    // Connect, handshake (AUTH, SELECT) and SUBSCRIBE may each take up to their timeout.
    steady::time_point limit = steady::now() + options_.connect_timeout + 3 * options_.command_timeout;
    if (options_.connect_timeout.count() == 0 || options_.command_timeout.count() == 0)
      limit = steady::time_point::max();
    const steady::time_point until = d ? std::min(*d, limit) : limit;
    try {
      await(g, *s, until, [&] { return confirmed(*s) || s->failed || cancelled.fired(); });
    } catch (...) {
      g.unlock();  // ~subscription locks mutex_
      throw;
    }
    if (!confirmed(*s) && !s->failed && steady::now() >= limit) {
      s->failed = true;  // too slow to be useful: count it, back off
      ++stats_.subscribe_failures;
      auto it = channels_.find(channel);
      if (it != channels_.end() && it->second == s) channels_.erase(it);
      // Not sent yet (still connecting): never send it.
      outbox_.erase(std::remove_if(outbox_.begin(), outbox_.end(), [&](const request& r) { return r.state == s; }),
                    outbox_.end());
      s->cv.notify_all();    // other waiters on it back off too
      if (reading_) wake();  // one of them may be the reader, in poll()
    }
    return sub;
  }

  /// Joins `channel` only when it is already confirmed (another local waiter subscribed):
  /// no server traffic. Inactive otherwise.
  subscription join_if_subscribed(const std::string& channel) {
    if (forked_.inherited()) return {};
    std::unique_lock<std::mutex> g(mutex_);
    catch_up(g);
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

  // Waits until done() or t, taking the reader role whenever nobody holds it and there is a
  // connection (leader/follower: see the top of the file). Caller holds g.
  template <class Done>
  void await(std::unique_lock<std::mutex>& g, channel_state& s, steady::time_point t, Done&& done) {
    struct leave_on_exit {  // also when something throws: the role and the list must be right
      subscriber& self;
      std::unique_lock<std::mutex>& g;
      std::list<channel_state*>::iterator me;
      bool reading = false;
      ~leave_on_exit() {
        if (!g.owns_lock()) g.lock();
        if (reading) self.reading_ = false;
        self.waiting_.erase(me);
        self.hand_on(g);
      }
    } exit{*this, g, waiting_.insert(waiting_.end(), &s)};
    for (;;) {
      if (done() || stopping_ || steady::now() >= t) return;
      if (!reading_ && conn_) {
        reading_ = exit.reading = true;
        do read_once(g, t);
        while (!done() && !stopping_ && steady::now() < t && conn_);
        reading_ = exit.reading = false;
        continue;
      }
      if (!conn_ && !connecting_ && !outbox_.empty()) start_connecting();
      s.cv.wait_until(g, t);
    }
  }

  // The reader left: the longest waiting thread takes over; with nobody waiting, queued
  // requests (UNSUBSCRIBEs) are sent now. Caller holds g.
  void hand_on(std::unique_lock<std::mutex>& g) noexcept {
    while (!reading_) {
      if (stopping_) {
        idle_cv_.notify_all();
        return;
      }
      if (!waiting_.empty()) {
        waiting_.front()->cv.notify_all();
        return;
      }
      if (outbox_.empty() || !conn_) return;  // not connected: the next connect sends them
      reading_ = true;
      if (!send_outbox(g)) fail_all(false);
      reading_ = false;
    }
  }

  // Writes the queued requests (without mutex_ held) and moves them to sent_. Caller holds g
  // and the reader role; conn_ is set. False when the connection failed.
  bool send_outbox(std::unique_lock<std::mutex>& g) {
    if (outbox_.empty()) return true;
    std::vector<request> batch;
    batch.swap(outbox_);
    g.unlock();
    const bool ok = write_all(*conn_, batch);
    g.lock();
    for (auto& r : batch) sent_.push_back(std::move(r));
    return ok;
  }

  // Handles what already arrived, without waiting, when nobody reads: so a connection that
  // dropped while nobody waited is noticed before a subscription on it is trusted. Caller holds g.
  void catch_up(std::unique_lock<std::mutex>& g) {
    if (reading_ || !conn_ || stopping_) return;
    reading_ = true;
    try {
      read_once(g, steady::now());
    } catch (...) {
      reading_ = false;
      hand_on(g);
      throw;
    }
    reading_ = false;
    hand_on(g);
  }

  // Caller holds mutex_; nobody reads and nobody connects.
  void start_connecting() {
    if (connector_.joinable()) connector_.join();  // the last one is done (connecting_ is false)
    connector_ = std::thread([this] { connect_in_background(); });
    connecting_ = true;  // the new thread needs mutex_ to finish: set in time
  }

  void connect_in_background() noexcept {
    std::unique_ptr<connection> c;
    try {
      c = std::make_unique<connection>(options_);
      // Nobody waits on the socket with a timeout: TCP keepalive notices a peer that vanished
      // without closing (power loss, network partition), so waiters fall back.
      if (options_.unix_path.empty()) redisEnableKeepAlive(c->native_handle());
    } catch (...) {
      c.reset();
    }
    std::unique_lock<std::mutex> g(mutex_);
    connecting_ = false;
    if (stopping_) {
      idle_cv_.notify_all();
      g.unlock();
      return;
    }
    if (c) {
      conn_ = std::move(c);
      connected_ = true;
    } else {
      fail_all(true);
    }
    hand_on(g);  // a waiter reads (and sends the SUBSCRIBEs) from here on
  }

  // One round of the reader: send what is queued, wait for the socket (or a wake()) until t,
  // handle what arrived. Caller holds g and the reader role; conn_ is set.
  void read_once(std::unique_lock<std::mutex>& g, steady::time_point t) {
    if (!send_outbox(g)) {
      fail_all(false);
      return;
    }
    g.unlock();
    bool readable = false, woken = false;
    bool ok = wait_readable(conn_->native_handle()->fd, wake_, t, readable, woken);
    if (woken) wake_.drain();
    if (ok && readable) ok = redisBufferRead(conn_->native_handle()) == REDIS_OK;
    g.lock();
    try {
      while (ok && readable) {
        void* raw = nullptr;
        if (redisGetReplyFromReader(conn_->native_handle(), &raw) != REDIS_OK) ok = false;
        if (!raw) break;
        if (!handle(reply_ptr(static_cast<redisReply*>(raw)))) ok = false;
      }
    } catch (...) {
      fail_all(false);  // replies left unparsed would never be read: start afresh
      throw;
    }
    if (!woken_.empty()) {
      // Woken waiters need mutex_ at once: wake them after letting it go, or each would wake
      // only to block on it (a hand-off's latency is mostly wake-ups).
      std::vector<std::pair<state_ptr, bool>> to_wake;
      to_wake.swap(woken_);
      g.unlock();
      for (auto& [state, all] : to_wake) all ? state->cv.notify_all() : state->cv.notify_one();
      g.lock();
    }
    if (!ok) fail_all(false);
  }

  // Caller holds mutex_.
  state_ptr register_on(const std::string& channel) {
    state_ptr& s = channels_[channel];
    if (!s || s->failed) s = std::make_shared<channel_state>();
    if (s->refs++ == 0) send(verb::subscribe, channel, s);
    return s;
  }

  void leave(const std::string& channel, const state_ptr& s) noexcept {
    if (forked_.inherited()) return;  // a child of fork() must not unsubscribe the parent
    std::unique_lock<std::mutex> g(mutex_);
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
    hand_on(g);  // nobody reading: send it now
  }

  // Caller holds mutex_.
  void send(verb v, const std::string& channel, const state_ptr& s) {
    ++s->in_flight;
    outbox_.push_back({v, channel, s});
    if (reading_) wake();  // the reader may be in poll()
  }

  void wake() noexcept { wake_.wake(); }

  // Wakes the waiters on `s` and the reader's poll, so a waiter whose call was cancelled sees it.
  void interrupt(channel_state& s) noexcept {
    {
      std::lock_guard<std::mutex> g(mutex_);
      s.cv.notify_all();
    }
    wake();
  }
  // The same for every waiter (one joining: its channel state is made under the lock).
  void interrupt_all() noexcept {
    {
      std::lock_guard<std::mutex> g(mutex_);
      for (channel_state* s : waiting_) s->cv.notify_all();
    }
    wake();
  }

  // Fails every subscription (their waiters back off or join again), forgets the channels and
  // closes the connection. refuse: new subscriptions are refused for retry_after (the server
  // could not be reached); a connection lost is simply made again by the next join.
  // Caller holds mutex_, and the reader role or nobody does.
  void fail_all(bool refuse) noexcept {
    for (auto& [name, s] : channels_) {
      if (s->refs > 0 && !s->failed) ++stats_.subscribe_failures;
      s->failed = true;
      s->in_flight = 0;
      s->cv.notify_all();
    }
    for (auto& r : outbox_) r.state->failed = true;
    channels_.clear();
    outbox_.clear();
    sent_.clear();
    connected_ = false;
    conn_.reset();
    if (refuse) refuse_until_ = steady::now() + retry_after_;
  }

  bool write_all(connection& c, const std::vector<request>& batch) noexcept {
    redisContext* ctx = c.native_handle();
    for (const auto& r : batch) {
      const std::string_view v = verb_name(r.what);
      const char* argv[2] = {v.data(), r.channel.c_str()};
      const std::size_t lens[2] = {v.size(), r.channel.size()};
      if (redisAppendCommandArgv(ctx, 2, argv, lens) != REDIS_OK) return false;
    }
    return batch.empty() || flush_output(ctx);
  }

  // The command (and the reply's first element) of a request: "SUBSCRIBE", "sunsubscribe", ...
  std::string_view verb_name(verb v, bool reply = false) const {
    static constexpr std::string_view names[2][2][2] = {{{"SUBSCRIBE", "UNSUBSCRIBE"}, {"SSUBSCRIBE", "SUNSUBSCRIBE"}},
                                                        {{"subscribe", "unsubscribe"}, {"ssubscribe", "sunsubscribe"}}};
    return names[reply][sharded_][v == verb::unsubscribe];
  }

  // The server ended the registration of `channel` on its own, or refused it with MOVED
  // (sharded mode): its waiters re-join through the client. Caller holds mutex_.
  void end_as_moved(const state_ptr& s, const std::string& channel) {
    if (!s->failed) {
      s->failed = s->moved = true;
      ++stats_.moved;
      woken_.emplace_back(s, true);
    }
    auto it = channels_.find(channel);
    if (it != channels_.end() && it->second == s) channels_.erase(it);
    if (on_moved_) on_moved_();
  }

  // One pub/sub reply. False when it answers no request we sent (the caller then fails every
  // subscription). Caller holds mutex_.
  bool handle(reply_ptr r) {
    auto str = [&](std::size_t i) -> std::string_view {
      if (r->type != REDIS_REPLY_ARRAY || i >= r->elements || r->element[i]->type != REDIS_REPLY_STRING) return {};
      return {r->element[i]->str, r->element[i]->len};
    };
    if (sharded_ && str(0) == "sunsubscribe" &&
        (sent_.empty() || sent_.front().what != verb::unsubscribe || sent_.front().channel != str(1))) {
      // Pushed by the server (see the top of the file): the channel's registration ended.
      const std::string channel(str(1));
      auto it = channels_.find(channel);
      if (it != channels_.end()) end_as_moved(it->second, channel);
      return true;
    }
    if (str(0) == (sharded_ ? "smessage" : "message")) {
      auto it = channels_.find(std::string(str(1)));
      if (it == channels_.end()) return true;
      channel_state& s = *it->second;
      s.messages.emplace_back(str(2));
      if (s.messages.size() > kKeptMessages) s.messages.pop_front();
      // Every local waiter on the channel is woken: a lock kind's hand-off channel has one (its
      // waiter's own), an election's broadcast channel one per observer, each owed the notice.
      s.tokens = s.refs;
      woken_.emplace_back(it->second, true);
      return true;
    }
    // Any other reply answers the oldest SUBSCRIBE/UNSUBSCRIBE (one reply per one-channel command).
    if (sent_.empty()) return true;
    request req = std::move(sent_.front());
    sent_.pop_front();
    if (r->type != REDIS_REPLY_ERROR && (str(0) != verb_name(req.what, true) || str(1) != req.channel)) return false;
    const state_ptr& s = req.state;
    if (s->failed) {  // given up (too slow): its waiters back off
      // Subscribed after all: unsubscribe, unless the channel was joined again meanwhile.
      if (req.what == verb::subscribe && r->type != REDIS_REPLY_ERROR && channels_.count(req.channel) == 0)
        send(verb::unsubscribe, req.channel, s);
      return true;
    }
    --s->in_flight;
    auto it = channels_.find(req.channel);
    const bool registered = it != channels_.end() && it->second == s;
    if (r->type == REDIS_REPLY_ERROR && sharded_ && req.what == verb::subscribe &&
        std::string_view(r->str, r->len).substr(0, 6) == "MOVED ") {
      end_as_moved(s, req.channel);
    } else if (r->type == REDIS_REPLY_ERROR) {
      ++stats_.subscribe_failures;
      s->failed = true;
      if (registered) channels_.erase(it);  // holders keep the state; a later join starts afresh
      refuse_until_ = steady::now() + retry_after_;
    } else {
      if (req.what == verb::subscribe && s->in_flight == 0 && s->refs > 0) ++stats_.subscriptions;
      if (registered && s->refs == 0 && s->in_flight == 0) channels_.erase(it);
    }
    woken_.emplace_back(req.state, true);
    return true;
  }

  static constexpr std::size_t kKeptMessages = 8;
  connection_options options_;
  std::chrono::milliseconds retry_after_;
  bool sharded_;
  std::function<void()> on_moved_;
  mutable std::mutex mutex_;
  std::condition_variable idle_cv_;  // the destructor waits here for waiters to leave
  std::unordered_map<std::string, state_ptr> channels_;
  std::vector<request> outbox_;                    // not yet sent
  std::deque<request> sent_;                       // sent, reply pending (in order)
  std::vector<std::pair<state_ptr, bool>> woken_;  // to notify (all?) once mutex_ is released
  std::list<channel_state*> waiting_;              // threads inside await(), longest waiting first
  std::unique_ptr<connection> conn_;               // touched by the reader only (or by anyone while nobody reads)
  bool reading_ = false;                           // a thread holds the reader role (reads, writes, closes)
  bool connecting_ = false;                        // connector_ is connecting
  std::thread connector_;
  bool connected_ = false;
  bool stopping_ = false;
  steady::time_point refuse_until_{};
  wait_stats stats_;
  wake_event wake_;
  fork_guard forked_;
};

}  // namespace redislock::detail
