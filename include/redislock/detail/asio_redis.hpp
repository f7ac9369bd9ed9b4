#pragma once
/// @file detail/asio_redis.hpp
/// @brief One hiredis async connection (redisAsyncContext) driven by an asio strand.
///
/// The adapter watches the context's socket with an asio::posix::stream_descriptor that never
/// owns the descriptor (hiredis closes it): read and write readiness call redisAsyncHandleRead
/// and redisAsyncHandleWrite. Everything here runs on the strand; no call ever blocks it,
/// except the host name look-up of redisAsyncConnect (give an address, or a Unix socket).
///
/// A command connection reconnects on the next command after a failure; commands pending on a
/// failed connection complete with an error (hiredis calls their callbacks with no reply). A
/// command whose reply (or SUBSCRIBE whose confirmation) takes longer than command_timeout
/// breaks the connection (all pending commands fail). A subscriber connection forwards every message to on_message and
/// tells on_broken when it ends; it reconnects on the next subscribe().
///
/// TLS (connection_options::tls; hiredis >= 1.0 with hiredis_ssl, REDISLOCK_WITH_TLS): the SSL
/// is made as redislock::connection makes it (detail/tls.hpp: the certificate must chain to a
/// trusted CA and name the host) and handed to hiredis right after the non-blocking connect;
/// hiredis then completes the handshake within its reads and writes. connect_timeout bounds the
/// TCP connect and the handshake together.
///
/// Lifetime: whoever owns it calls close() on the strand before letting go (a pending socket
/// wait holds a reference, so an open connection is not destroyed by itself). Should the
/// io_context be destroyed first (its loop stopped with work pending), loop_gone_service
/// frees the hiredis context there, dropping the callbacks still queued unrun: they own,
/// through the lock machinery, the client that owns this connection, a cycle asio's own
/// shutdown (which destroys only the handlers it holds) would leave.

#include <redislock/errors.hpp>
#include <redislock/options.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/execution/context.hpp>
#include <asio/execution_context.hpp>
#include <asio/post.hpp>
#include <asio/query.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#if defined(REDISLOCK_WITH_TLS) && HIREDIS_MAJOR >= 1
#include <redislock/detail/tls.hpp>
#endif

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace redislock::detail {

using async_strand = asio::strand<asio::any_io_executor>;

/// A reply, or nullptr when the connection failed before one came (the callback then owns
/// nothing; the reply is freed by hiredis once the callback returns).
using reply_callback = std::function<void(redisReply* reply)>;

/// The TLS context shared by a client's connections (an SSL_CTX; empty without tls). Throws
/// invalid_argument (a certificate without its key, or TLS asked of a build without it) or
/// tls_error (a file that cannot be loaded): at the client's construction, before any connect.
inline std::shared_ptr<void> make_async_tls_context(const connection_options& o) {
  if (!o.tls) return {};
#if defined(REDISLOCK_WITH_TLS) && HIREDIS_MAJOR >= 1
  return std::shared_ptr<SSL_CTX>(make_tls_context(o).release(), ssl_ctx_deleter{});
#else
  throw invalid_argument("TLS (rediss://) needs hiredis >= 1.0 with hiredis_ssl; build with REDISLOCK_WITH_TLS");
#endif
}

/// The execution context (io_context) going away while work is still pending. asio then
/// destroys the handlers it holds without running them, but not what hiredis holds (the
/// callbacks of commands still unanswered) nor what waits in the client for the loop (a
/// lock's subscription, a Sentinel look-up, a cluster's slot map): those own, through the lock
/// machinery, the client that owns them, cycles nothing else breaks once the loop is gone.
/// This service is shut down first among those the connections use (services shut down
/// newest first, and it is made after a connection's strand, timers and socket): each object
/// registered with it that still lives lets go there of what waits for the loop, dropping it
/// unrun, and asio's own shutdown destroys the rest. Not on a strand: nothing runs the loop
/// any more (an io_context is destroyed only once no thread runs it).
class loop_gone_service : public asio::execution_context::service {
 public:
  inline static asio::execution_context::id id;
  explicit loop_gone_service(asio::execution_context& context) : asio::execution_context::service(context) {}

  /// Calls `gone` when `executor`'s context shuts down, if `owner` still lives then (kept
  /// alive meanwhile). Any thread.
  static void when_gone(const asio::any_io_executor& executor, std::weak_ptr<void> owner, std::function<void()> gone) {
    auto& self = asio::use_service<loop_gone_service>(asio::query(executor, asio::execution::context));
    std::lock_guard<std::mutex> g(self.mutex_);
    if (self.shut_) return;
    if (self.entries_.size() >= self.prune_at_) {  // amortised: those gone meanwhile are dropped
      self.entries_.erase(
          std::remove_if(self.entries_.begin(), self.entries_.end(), [](const entry& e) { return e.owner.expired(); }),
          self.entries_.end());
      self.prune_at_ = std::max<std::size_t>(16, self.entries_.size() * 2);
    }
    self.entries_.push_back({std::move(owner), std::move(gone)});
  }

 private:
  struct entry {
    std::weak_ptr<void> owner;
    std::function<void()> gone;
  };

  void shutdown() override {
    std::vector<entry> entries;
    {
      std::lock_guard<std::mutex> g(mutex_);
      shut_ = true;
      entries.swap(entries_);
    }
    for (entry& e : entries) {
      if (std::shared_ptr<void> alive = e.owner.lock()) e.gone();
    }
  }

  std::mutex mutex_;
  std::vector<entry> entries_;
  std::size_t prune_at_ = 16;
  bool shut_ = false;
};

class async_redis : public std::enable_shared_from_this<async_redis> {
 public:
  using message_sink = std::function<void(std::string_view type, std::string_view channel, std::string_view payload)>;

  /// `tls_context`: make_async_tls_context(options) (shared by a client's connections).
  /// `sharded`: a subscriber that takes SSUBSCRIBE and SUNSUBSCRIBE (Redis Cluster; see pubsub()).
  async_redis(async_strand strand, connection_options options, bool subscriber, std::shared_ptr<void> tls_context = {},
              bool sharded = false)
      : strand_(std::move(strand)),
        options_(std::move(options)),
        subscriber_(subscriber),
        sharded_(sharded),
        tls_context_(std::move(tls_context)),
        socket_(strand_),
        connect_timer_(strand_),
        reply_timer_(strand_) {}

  async_redis(const async_redis&) = delete;
  async_redis& operator=(const async_redis&) = delete;
  ~async_redis() { close(); }

  /// Subscriber connections: messages and (un)subscribe confirmations; broken(generation): the
  /// connection of that generation() ended.
  void set_sinks(message_sink on_message, std::function<void(std::uint64_t)> on_broken) {
    on_message_ = std::move(on_message);
    on_broken_ = std::move(on_broken);
  }

  /// Sends a command (connecting first when needed); cb gets its reply or nullptr. On the strand.
  void command(const std::vector<std::string_view>& argv, reply_callback cb) {
    if (!ensure_open()) {
      asio::post(strand_, [cb = std::move(cb)] { cb(nullptr); });
      return;
    }
    auto* owned = new reply_callback(std::move(cb));
    if (!send(argv, &async_redis::on_reply, owned)) {
      asio::post(strand_, [owned] {
        std::unique_ptr<reply_callback> c(owned);
        (*c)(nullptr);
      });
      return;
    }
    if (!subscriber_) expect_reply();
  }

  /// Subscriber connections: SUBSCRIBE or UNSUBSCRIBE one channel; the confirmation comes to
  /// on_message (type "subscribe"). Returns false when it could not be sent (no connection).
  /// Sharded subscribers: SSUBSCRIBE or SUNSUBSCRIBE; the confirmation comes as "subscribe",
  /// a refusal (MOVED...) as "refused" with the error as payload, a message as "message", and
  /// a SUNSUBSCRIBE the server sent on its own (the channel's slot moved) as "sunsubscribe".
  bool pubsub(std::string_view verb, std::string_view channel) {
    if (sharded_) return sharded_pubsub(verb, channel);
    if (verb == "SUBSCRIBE" && !ensure_open()) return false;
    if (ac_ == nullptr) return false;
    if (!send({verb, channel}, &async_redis::on_pubsub, this)) return false;
    // A SUBSCRIBE's confirmation is due within command_timeout (messages are not replies). An
    // UNSUBSCRIBE's is not awaited: hiredis passes it on only for a channel it knows.
    if (verb == "SUBSCRIBE") expect_reply();
    return true;
  }

  /// Changes when a context opens and when it ends (synchronously, before on_broken is told).
  std::uint64_t generation() const noexcept { return generation_; }

  /// Closes for good: no reconnection after this. `graceful`: commands already sent are
  /// written and their replies awaited first (with what their callbacks send on this
  /// connection, e.g. a script's EVAL after NOSCRIPT); command_timeout still breaks the
  /// connection should a reply not come. At once when no reply is due.
  void shutdown(bool graceful = false) noexcept {
    shut_ = true;
    draining_ = graceful;
    if (!graceful || sent_at_.empty()) close();
  }

  /// Points later contexts at host:port (Sentinel named a new master): a context open to
  /// another address is closed (its pending commands fail). On the strand.
  void retarget(const std::string& host, int port) {
    if (options_.unix_path.empty() && options_.host == host && options_.port == port) return;
    options_.unix_path.clear();
    options_.host = host;
    options_.port = port;
    close();
  }

  /// Frees the context: pending callbacks get nullptr. On the strand (or with nothing else left).
  void close() noexcept {
    if (ac_ == nullptr) return;
    redisAsyncContext* ac = std::exchange(ac_, nullptr);
    redisAsyncFree(ac);  // deferred by hiredis when called from one of its callbacks
  }

 private:
  // hiredis's async pub/sub knows no sharded messages: the first request goes as a command
  // whose callback (on_sharded) puts the context in monitor mode, where hiredis hands it every
  // later reply; later requests are appended with no callback of their own. pending_ holds the
  // requests not yet answered, oldest first: replies come in their order, messages between.
  bool sharded_pubsub(std::string_view verb, std::string_view channel) {
    const bool subscribe = verb == "SSUBSCRIBE";
    if (subscribe && !ensure_open()) return false;
    if (ac_ == nullptr) return false;
    if (!sink_sent_) {
      if (!send({verb, channel}, &async_redis::on_sharded, this)) return false;
      sink_sent_ = true;
    } else {
      const char* argv[] = {verb.data(), channel.data()};
      const std::size_t lens[] = {verb.size(), channel.size()};
      if (redisAppendCommandArgv(&ac_->c, 2, argv, lens) != REDIS_OK) return false;
      want(false, true);  // hiredis asks for write readiness only for what it queued itself
    }
    pending_.emplace_back(subscribe, std::string(channel));
    if (subscribe) expect_reply();
    return true;
  }

  static void on_sharded(redisAsyncContext* ac, void* reply, void* priv) {
    auto* self = static_cast<async_redis*>(priv);
    auto* r = static_cast<redisReply*>(reply);
    if (r == nullptr || ac != self->ac_) return;  // the context ends: on_broken tells
    ac->c.flags |= REDIS_MONITORING;              // hiredis keeps this callback for every later reply
    self->keep_one_sink(*ac);
    auto str = [&](std::size_t i) {
      const redisReply* e = r->element[i];
      return e->type == REDIS_REPLY_STRING ? std::string_view(e->str, e->len) : std::string_view();
    };
    auto answered = [self](bool subscribe, std::string_view channel) {
      if (self->pending_.empty() || self->pending_.front().first != subscribe ||
          (!channel.empty() && self->pending_.front().second != channel))
        return false;
      if (subscribe && !self->sent_at_.empty()) self->sent_at_.pop_front();
      return true;
    };
    auto tell = [self](std::string_view type, std::string_view channel, std::string_view payload) {
      if (self->on_message_) self->on_message_(type, channel, payload);
    };
    if (r->type == REDIS_REPLY_ERROR) {
      if (self->pending_.empty()) return;
      const std::pair<bool, std::string> request = std::move(self->pending_.front());
      answered(request.first, {});
      self->pending_.pop_front();
      if (request.first) tell("refused", request.second, std::string_view(r->str, r->len));
      return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3) return;
    const std::string_view kind = str(0), channel = str(1);
    if (kind == "smessage") return tell("message", channel, str(2));
    if (kind == "ssubscribe") {
      if (!answered(true, channel)) return;
      self->pending_.pop_front();
      return tell("subscribe", channel, {});
    }
    if (kind != "sunsubscribe") return;
    if (answered(false, channel)) return self->pending_.pop_front();
    tell("sunsubscribe", channel, {});
  }

  // How hiredis keeps a monitoring context's callback differs: 1.2 queues it again after each
  // reply; 0.14 (and 1.0) only at the end of a read, as the callback it last ran or, when the
  // read completed no reply (a large message arriving in parts), as an empty one that then
  // swallows the next reply. Between, the queue is empty, and an error reply (a MOVED to an
  // SSUBSCRIBE) meeting an empty queue drops the connection. So each call leaves exactly one
  // callback queued, this one: empty ones and extra copies are removed (hiredis's list and
  // callback layout are public in async.h; entries are freed as hiredis frees them).
  void keep_one_sink(redisAsyncContext& ac) noexcept {
    redisCallback* kept = nullptr;
    redisCallback** link = &ac.replies.head;
    ac.replies.tail = nullptr;
    while (redisCallback* cb = *link) {
      const bool sink = cb->fn == nullptr || (cb->fn == &async_redis::on_sharded && cb->privdata == this);
      if (sink && kept != nullptr) {
        *link = cb->next;
        free_callback(cb);
        continue;
      }
      if (sink) {
        kept = cb;
        cb->fn = &async_redis::on_sharded;
        cb->privdata = this;
      }
      ac.replies.tail = cb;
      link = &cb->next;
    }
    if (kept != nullptr) return;
#if HIREDIS_MAJOR >= 1
    auto* cb = static_cast<redisCallback*>(hi_calloc(1, sizeof(redisCallback)));
#else
    auto* cb = static_cast<redisCallback*>(std::calloc(1, sizeof(redisCallback)));
#endif
    if (cb == nullptr) return;
    cb->fn = &async_redis::on_sharded;
    cb->privdata = this;
    *link = cb;
    ac.replies.tail = cb;
  }
  static void free_callback(redisCallback* cb) noexcept {
#if HIREDIS_MAJOR >= 1
    hi_free(cb);
#else
    std::free(cb);
#endif
  }

  bool send(const std::vector<std::string_view>& argv, redisCallbackFn* fn, void* priv) {
    std::vector<const char*> ptrs;
    std::vector<std::size_t> lens;
    ptrs.reserve(argv.size());
    lens.reserve(argv.size());
    for (std::string_view a : argv) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    return redisAsyncCommandArgv(ac_, fn, priv, static_cast<int>(argv.size()), ptrs.data(), lens.data()) == REDIS_OK;
  }

  // Opens a context when there is none: connect (non-blocking), then AUTH and SELECT queued
  // ahead of any command (an error reply to either breaks the connection).
  bool ensure_open() {
    if (ac_ != nullptr) return true;
    if (shut_) return false;
    redisAsyncContext* ac = options_.unix_path.empty() ? redisAsyncConnect(options_.host.c_str(), options_.port)
                                                       : redisAsyncConnectUnix(options_.unix_path.c_str());
    if (ac == nullptr) return false;
    if (ac->err != 0) {
      redisAsyncFree(ac);
      return false;
    }
    const int flags = ::fcntl(ac->c.fd, F_GETFD);
    if (flags != -1) ::fcntl(ac->c.fd, F_SETFD, flags | FD_CLOEXEC);
    if (!start_tls(*ac)) {
      redisAsyncFree(ac);
      return false;
    }
    asio::error_code ec;
    socket_.assign(ac->c.fd, ec);
    if (ec) {
      redisAsyncFree(ac);
      return false;
    }
    if (!loop_watched_) {  // once a context exists: only it can hold callbacks
      loop_watched_ = true;
      loop_gone_service::when_gone(strand_.get_inner_executor(), weak_from_this(), [this] { abandon(); });
    }
    ac_ = ac;
    ++generation_;
    sink_sent_ = false;
    pending_.clear();
    want_read_ = want_write_ = read_armed_ = write_armed_ = false;
    ac->data = this;
    ac->ev.data = this;
    ac->ev.addRead = [](void* p) { static_cast<async_redis*>(p)->want(true, true); };
    ac->ev.delRead = [](void* p) { static_cast<async_redis*>(p)->want(true, false); };
    ac->ev.addWrite = [](void* p) { static_cast<async_redis*>(p)->want(false, true); };
    ac->ev.delWrite = [](void* p) { static_cast<async_redis*>(p)->want(false, false); };
    ac->ev.cleanup = [](void* p) { static_cast<async_redis*>(p)->context_gone(); };
    // After the hooks: hiredis then asks for the first write readiness (the connect's end).
    redisAsyncSetConnectCallback(ac, [](const redisAsyncContext*, int) {});
    if (options_.connect_timeout.count() > 0) {
      connect_timer_.expires_after(options_.connect_timeout);
      connect_timer_.async_wait([self = shared_from_this(), gen = generation_](const asio::error_code& e) {
        if (e || gen != self->generation_ || self->ac_ == nullptr) return;
        if (!(self->ac_->c.flags & REDIS_CONNECTED) || !self->tls_established()) self->close();
      });
    }
    auto handshake = [this](std::vector<std::string_view> argv) {
      auto* cb = new reply_callback([self = shared_from_this(), gen = generation_](redisReply* r) {
        if ((r == nullptr || r->type == REDIS_REPLY_ERROR) && gen == self->generation_) self->close();
      });
      if (send(argv, &async_redis::on_reply, cb)) expect_reply();
      else delete cb;
    };
    if (!options_.password.empty()) {
      if (options_.user.empty()) handshake({"AUTH", options_.password});
      else handshake({"AUTH", options_.user, options_.password});
    }
    if (options_.db != 0) {
      const std::string db = std::to_string(options_.db);
      handshake({"SELECT", db});
    }
    return true;
  }

  // Hands a verified SSL to hiredis (with tls): the handshake starts now and goes on within
  // hiredis's reads and writes. False when TLS could not be started (the context is unused).
  bool start_tls(redisAsyncContext& ac) {
#if defined(REDISLOCK_WITH_TLS) && HIREDIS_MAJOR >= 1
    ssl_ = nullptr;
    if (!tls_context_) return true;
    std::unique_ptr<SSL, ssl_deleter> ssl;
    try {
      ssl = new_verified_ssl(static_cast<SSL_CTX*>(tls_context_.get()), tls_name(options_));
    } catch (const error&) {
      return false;
    }
    if (redisInitiateSSL(&ac.c, ssl.get()) != REDIS_OK) return false;  // the SSL is still ours
    ssl_ = ssl.release();                                              // hiredis frees it with the context
#else
    (void)ac;
#endif
    return true;
  }

  // True without TLS, and once the TLS handshake has completed.
  bool tls_established() const noexcept {
#if defined(REDISLOCK_WITH_TLS) && HIREDIS_MAJOR >= 1
    return ssl_ == nullptr || SSL_is_init_finished(ssl_) == 1;
#else
    return true;
#endif
  }

  static void on_reply(redisAsyncContext* ac, void* reply, void* priv) {
    std::unique_ptr<reply_callback> cb(static_cast<reply_callback*>(priv));
    auto* self = static_cast<async_redis*>(ac->data);
    if (self->abandoned_) return;  // the loop is gone: dropped unrun (and what it owns with it)
    // Only the current context's replies are due in sent_at_: hiredis 1.x fails a broken
    // context's commands after context_gone(), when a command sent from one of those callbacks
    // may already be due on a new context.
    if (ac == self->ac_ && !self->sent_at_.empty()) self->sent_at_.pop_front();
    (*cb)(static_cast<redisReply*>(reply));
    if (self->draining_ && self->sent_at_.empty() && self->ac_ == ac) self->close();  // freed after this callback
  }

  static void on_pubsub(redisAsyncContext*, void* reply, void* priv) {
    auto* self = static_cast<async_redis*>(priv);
    auto* r = static_cast<redisReply*>(reply);
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements < 3) return;
    const redisReply* type = r->element[0];
    const redisReply* channel = r->element[1];
    const redisReply* payload = r->element[2];
    if (type->type != REDIS_REPLY_STRING || channel->type != REDIS_REPLY_STRING || !self->on_message_) return;
    const std::string_view kind(type->str, type->len);
    if (kind == "subscribe" && !self->sent_at_.empty()) self->sent_at_.pop_front();
    const std::string_view body =
        payload->type == REDIS_REPLY_STRING ? std::string_view(payload->str, payload->len) : std::string_view();
    self->on_message_(kind, std::string_view(channel->str, channel->len), body);
  }

  // Command timeout: the oldest reply still due breaks the connection once it is overdue.
  void expect_reply() {
    sent_at_.push_back(std::chrono::steady_clock::now());
    if (sent_at_.size() == 1) arm_reply_timer();
  }
  void arm_reply_timer() {
    if (sent_at_.empty() || options_.command_timeout.count() <= 0) return;
    reply_timer_.expires_at(sent_at_.front() + options_.command_timeout);
    reply_timer_.async_wait([self = shared_from_this(), gen = generation_](const asio::error_code& e) {
      if (e || gen != self->generation_ || self->ac_ == nullptr) return;
      if (!self->sent_at_.empty() &&
          std::chrono::steady_clock::now() >= self->sent_at_.front() + self->options_.command_timeout)
        self->close();
      else self->arm_reply_timer();
    });
  }

  void want(bool read, bool on) {
    (read ? want_read_ : want_write_) = on;
    if (on) arm(read);
  }

  void arm(bool read) {
    bool& armed = read ? read_armed_ : write_armed_;
    if (armed || !(read ? want_read_ : want_write_) || ac_ == nullptr) return;
    armed = true;
    socket_.async_wait(read ? asio::posix::stream_descriptor::wait_read : asio::posix::stream_descriptor::wait_write,
                       [self = shared_from_this(), gen = generation_, read](const asio::error_code& e) {
                         if (gen != self->generation_) return;  // a wait of a context already gone
                         (read ? self->read_armed_ : self->write_armed_) = false;
                         if (e || self->ac_ == nullptr || !(read ? self->want_read_ : self->want_write_)) return;
                         if (read) redisAsyncHandleRead(self->ac_);
                         else redisAsyncHandleWrite(self->ac_);
                         if (gen == self->generation_) self->arm(read);
                       });
  }

  // The io_context is being destroyed (loop_gone_service): frees the context, its pending
  // callbacks dropped unrun, and opens none again.
  void abandon() noexcept {
    abandoned_ = shut_ = true;
    on_message_ = nullptr;
    on_broken_ = nullptr;
    close();
  }

  // hiredis frees the context (an error, the peer's close, or close()): it closes the
  // descriptor right after this, so the stream_descriptor lets go of it first.
  void context_gone() noexcept {
    // hiredis 0.14 calls this twice when the connection fails (on the error, then when freeing
    // it): the second call must not take a context opened in between for this one.
    if (ac_ != nullptr) ac_->ev.cleanup = nullptr;
    ac_ = nullptr;
#if defined(REDISLOCK_WITH_TLS) && HIREDIS_MAJOR >= 1
    ssl_ = nullptr;  // freed by hiredis with its context
#endif
    const std::uint64_t ended = generation_++;
    sent_at_.clear();
    try {
      if (socket_.is_open()) socket_.release();  // cancels its waits; never closes the descriptor
    } catch (...) {
    }
    connect_timer_.cancel();
    reply_timer_.cancel();
    if (on_broken_)
      asio::post(strand_, [self = weak_from_this(), ended] {
        if (auto s = self.lock(); s && s->on_broken_) s->on_broken_(ended);
      });
  }

  async_strand strand_;
  connection_options options_;
  bool subscriber_, sharded_;
  bool sink_sent_ = false;                            // sharded: on_sharded is this context's callback
  std::deque<std::pair<bool, std::string>> pending_;  // sharded: (subscribe?, channel) unanswered
  std::shared_ptr<void> tls_context_;                 // SSL_CTX, shared by the client's connections; empty without tls
#if defined(REDISLOCK_WITH_TLS) && HIREDIS_MAJOR >= 1
  SSL* ssl_ = nullptr;  // the current context's, owned by hiredis
#endif
  bool shut_ = false, draining_ = false;
  bool loop_watched_ = false, abandoned_ = false;  // registered with loop_gone_service; its context gone
  asio::posix::stream_descriptor socket_;
  asio::steady_timer connect_timer_, reply_timer_;
  redisAsyncContext* ac_ = nullptr;
  std::uint64_t generation_ = 0;  // one per context: stale socket waits and timers do nothing
  bool want_read_ = false, want_write_ = false, read_armed_ = false, write_armed_ = false;
  std::deque<std::chrono::steady_clock::time_point> sent_at_;  // commands awaiting replies, oldest first
  message_sink on_message_;
  std::function<void(std::uint64_t)> on_broken_;
};

}  // namespace redislock::detail
