#pragma once
/// @file connection.hpp
/// @brief redislock::connection — one blocking hiredis connection (RAII, move-only).
///
/// Not thread-safe: one thread uses a connection at a time (redislock::client lends them out).
/// A connection that failed (I/O error, timeout, peer closed) is marked broken and is
/// re-established by the next call; a failed reconnect leaves it broken and throws.
///
/// Cost per command over TCP or a Unix socket: two system calls, as for hiredis alone (send,
/// then read). The command is written by the connection itself with send(MSG_NOSIGNAL), so a
/// closed peer is an error and never a SIGPIPE, without changing any signal mask; and the
/// check for a close by the server while idle (a poll) is made only after
/// connection_options::idle_check_after without traffic. Over TLS, hiredis writes (SSL_write)
/// with SIGPIPE blocked in the calling thread (detail/no_sigpipe.hpp).
///
/// Within a timed lock call (detail/call_deadline.hpp) the connect (handshake included) and
/// each command's send and reply read are cut to end by the call's deadline plus one
/// connect_timeout; past that, a command fails with timeout_error before it is sent.

#include <redislock/detail/call_deadline.hpp>
#include <redislock/detail/no_sigpipe.hpp>
#include <redislock/detail/observe_hooks.hpp>
#include <redislock/detail/server_features.hpp>
#include <redislock/errors.hpp>
#include <redislock/options.hpp>
#include <redislock/reply.hpp>

#include <hiredis/hiredis.h>
#if defined(REDISLOCK_WITH_TLS) && HIREDIS_MAJOR >= 1
#include <redislock/detail/tls.hpp>
#endif

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace redislock {

class connection {
 public:
  /// Connects (over TLS: the handshake included, the server's certificate verified for host or
  /// tls_server_name), authenticates and selects the database. Throws connection_error
  /// (timeout_error when the connect timeout ran out, tls_error when TLS is refused), auth_error
  /// or invalid_argument.
  explicit connection(connection_options options) : options_(std::move(options)) {
    detail::check_connection_options(options_, "connection");
    context_ = open(tls_context_);
    last_traffic_ = std::chrono::steady_clock::now();
  }

  connection(connection&&) noexcept = default;
  connection& operator=(connection&& other) noexcept {
    context_.reset();  // before the TLS context it may use
    tls_context_ = std::move(other.tls_context_);
    context_ = std::move(other.context_);
    options_ = std::move(other.options_);
    out_ = std::move(other.out_);
    other.out_.clear();
    pending_ = std::exchange(other.pending_, 0);
    last_traffic_ = other.last_traffic_;
    io_timeout_ = other.io_timeout_;
    checked_ = std::exchange(other.checked_, false);
    features_ = std::exchange(other.features_, std::nullopt);
    return *this;
  }
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection() = default;

  const connection_options& options() const noexcept { return options_; }

  /// True when the next call must reconnect first.
  bool broken() const noexcept { return !context_ || context_->err != 0; }

  /// True when the connection is broken or the server has closed it (checked now, without a
  /// round trip, however recent the last command): the next command would fail or reconnect.
  /// A client that picks the server itself (Sentinel) drops such a connection instead of
  /// letting it reconnect to the same address.
  bool needs_reconnect() const noexcept { return pending_ == 0 && (!context_ || broken() || peer_closed_while_idle()); }

  /// Reconnects if the connection is broken or the server closed it while idle (checked
  /// without a round trip, once idle_check_after has passed without a reply). Called by every
  /// command; callable directly to fail early, e.g. before setting a socket timeout that must
  /// apply to the next command: that command is then sent without a second check.
  void ensure_ready() {
    const bool reconnect_first =
        pending_ != 0 ? broken() : !context_ || broken() || (!recently_used() && peer_closed_while_idle());
    if (reconnect_first) reconnect();
    checked_ = pending_ == 0;
  }

  /// Sends one command and reads its reply. Error replies are thrown as typed exceptions.
  reply_ptr command(std::initializer_list<std::string_view> argv) { return command(argv.begin(), argv.size()); }
  reply_ptr command(const std::vector<std::string_view>& argv) { return command(argv.data(), argv.size()); }
  reply_ptr command(const std::string_view* argv, std::size_t argc) {
    append(argv, argc);
    reply_ptr r = read_reply();
    detail::checked(*r);
    return r;
  }

  /// Pipelining: append N commands, then read N replies in order. Replies are returned as
  /// they are (error replies included) so the caller can handle each one.
  void append(std::initializer_list<std::string_view> argv) { append(argv.begin(), argv.size()); }
  void append(const std::vector<std::string_view>& argv) { append(argv.data(), argv.size()); }
  void append(const std::string_view* argv, std::size_t argc) {
    if (pending_ == 0 && !checked_) ensure_ready();
    checked_ = false;
    // The command in RESP, built in a buffer the connection keeps (hiredis's own formatting
    // costs an sds reallocation and a printf-style pass per argument) and sent by
    // read_reply(): the commands of a pipeline go out in one write.
    const std::size_t start = out_.size();
    try {
      add_length('*', argc);
      for (std::size_t i = 0; i < argc; ++i) {
        add_length('$', argv[i].size());
        out_.append(argv[i].data(), argv[i].size());
        out_.append("\r\n", 2);
      }
    } catch (...) {
      out_.resize(start);  // no half command on the wire (bad_alloc on a huge argument)
      throw;
    }
    ++pending_;
  }

  /// Reads the next reply of the pipeline (sending what was appended first).
  reply_ptr read_reply() {
    const bool cut = limit_io_to_call_deadline();
    if (!out_.empty()) send_appended();
    void* raw = nullptr;
    if (options_.tls) {
      const detail::sigpipe_blocked no_sigpipe;  // over TLS, redisGetReply writes (SSL_write)
      if (redisGetReply(context_.get(), &raw) != REDIS_OK) raw = nullptr;
    } else if (redisGetReply(context_.get(), &raw) != REDIS_OK) {  // reads only: nothing queued in hiredis
      raw = nullptr;
    }
    if (raw == nullptr) fail("read");
    --pending_;
    last_traffic_ = std::chrono::steady_clock::now();
    if (cut) (void)set_io_timeout(options_.command_timeout);  // failing, it is set by the next command
    return reply_ptr(static_cast<redisReply*>(raw));
  }

  /// Replies appended but not yet read.
  std::size_t pending() const noexcept { return pending_; }

  /// What the server at the other end offers (detail/server_features.hpp): found with one
  /// round trip on the first call after each connect (a reconnect may reach another server,
  /// e.g. after a failover), then kept. Call with no reply pending.
  const detail::server_features& features() {
    ensure_ready();  // a reconnect first forgets what the old socket's server had
    if (features_) return *features_;
    detail::server_features f;
    // EVAL, not EVALSHA: tests and operators count EVALSHAs as the locks' scripts. A user refused
    // EVAL may still be allowed EVALSHA (the README's minimal ACL user): then EVALSHA tells.
    // NOSCRIPT (a server that never saw "return 1", or one without a Lua engine: Valkey answers
    // NOSCRIPT then too): SCRIPT LOAD tells.
    static constexpr std::string_view eval_probe[] = {"EVAL", "return 1", "0"};
    static constexpr std::string_view evalsha_probe[] = {"EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"};
    const auto error_text = [](const reply_ptr& r) {
      return r->type == REDIS_REPLY_ERROR ? std::string_view(r->str, r->len) : std::string_view();
    };
    append({"HELLO"});
    append(eval_probe, 3);
    const reply_ptr hello = read_reply();
    reply_ptr probe = read_reply();
    if (detail::starts_with(error_text(probe), "NOPERM")) {
      append(evalsha_probe, 3);
      probe = read_reply();
    }
    if (detail::starts_with(error_text(probe), "NOSCRIPT")) {
      // Only a missing engine counts here: a user refused SCRIPT LOAD alone may still run the
      // scripts an administrator loaded.
      const reply_ptr load = read_reply_of({"SCRIPT", "LOAD", "return 1"});
      f.scripting = !detail::starts_with(error_text(load), "ERR Could not find scripting engine");
    } else {
      f.scripting = !detail::is_scripting_refusal(error_text(probe));
    }
    if (!detail::read_hello(*hello, f)) {
      const reply_ptr info = read_reply_of({"INFO", "server"});
      if (info->type == REDIS_REPLY_STRING) detail::read_info_server(std::string_view(info->str, info->len), f);
    }
    f.derive();
    features_ = std::move(f);
    return *features_;
  }
  /// A script was refused as in detail::is_scripting_refusal (the user's ACL changed since
  /// features() looked): from now on this connection counts as one without scripting.
  void forget_scripting() noexcept {
    if (features_) features_->scripting = false;
  }

  /// The underlying hiredis context, for what this wrapper does not cover. Do not free it, and
  /// do not queue commands on it with redisAppend*: this connection sends its own commands
  /// itself (appended ones first, on the next read_reply()).
  redisContext* native_handle() noexcept { return context_.get(); }

  /// Drops the socket; the next call reconnects. Used after timeouts and by tests.
  void close() noexcept {
    context_.reset();
    features_.reset();
    pending_ = 0;
    out_.clear();
    checked_ = false;
  }

 private:
  struct context_deleter {
    void operator()(redisContext* c) const noexcept { redisFree(c); }
  };
  using context_ptr = std::unique_ptr<redisContext, context_deleter>;

  static timeval to_timeval(std::chrono::milliseconds ms) {
    timeval tv{};
    tv.tv_sec = static_cast<decltype(tv.tv_sec)>(ms.count() / 1000);
    tv.tv_usec = static_cast<decltype(tv.tv_usec)>((ms.count() % 1000) * 1000);
    return tv;
  }

  static bool looks_like_timeout(const redisContext& c) {
#ifdef REDIS_ERR_TIMEOUT
    if (c.err == REDIS_ERR_TIMEOUT) return true;
#endif
    return std::strstr(c.errstr, "timed out") != nullptr ||
           std::strstr(c.errstr, "temporarily unavailable") != nullptr || std::strstr(c.errstr, "Timeout") != nullptr ||
           std::strstr(c.errstr, "timeout") != nullptr;
  }

  // Builds a new, ready context with command_timeout as its socket timeout; leaves *this
  // untouched on failure. A TLS context, if any, is stored in tls_out. connect_timeout bounds
  // the TCP connect and the TLS handshake together; a timed call's deadline cuts both, and the
  // AUTH and SELECT replies.
  context_ptr open(std::shared_ptr<void>& tls_out) const {
    (void)tls_out;
    if (options_.tls) {
#if !(defined(REDISLOCK_WITH_TLS) && HIREDIS_MAJOR >= 1)
      throw invalid_argument("TLS (rediss://) needs hiredis >= 1.0 with hiredis_ssl; build with REDISLOCK_WITH_TLS");
#endif
    }
    const auto started = std::chrono::steady_clock::now();
    context_ptr c;
    const std::optional<std::chrono::milliseconds> connect_timeout =
        detail::call_deadline::cut(options_.connect_timeout, options_.connect_timeout);
    const std::optional<std::chrono::milliseconds> io_timeout =
        detail::call_deadline::cut(options_.command_timeout, options_.connect_timeout);
    if (!connect_timeout || !io_timeout)
      throw timeout_error("cannot connect to " + options_.endpoint() + ": " + kDeadlinePassed);
    const timeval connect_tv = to_timeval(*connect_timeout);
    const bool has_connect_timeout = connect_timeout->count() > 0;
    if (!options_.unix_path.empty()) {
      c.reset(has_connect_timeout ? redisConnectUnixWithTimeout(options_.unix_path.c_str(), connect_tv)
                                  : redisConnectUnix(options_.unix_path.c_str()));
    } else {
      c.reset(has_connect_timeout ? redisConnectWithTimeout(options_.host.c_str(), options_.port, connect_tv)
                                  : redisConnect(options_.host.c_str(), options_.port));
    }
    if (!c) throw connection_error("cannot connect to " + options_.endpoint() + ": out of memory");
    if (c->err != 0) {
      std::string what = "cannot connect to " + options_.endpoint() + ": " + c->errstr;
      if (looks_like_timeout(*c)) throw timeout_error(what);
      throw connection_error(what);
    }
    // Close-on-exec: a program this process forks and execs (the redislock tool's command)
    // must not inherit an authenticated connection. hiredis opens the socket without the flag,
    // so an exec in another thread between socket() and here still inherits it.
    const int fd_flags = ::fcntl(c->fd, F_GETFD);
    if (fd_flags == -1 || ::fcntl(c->fd, F_SETFD, fd_flags | FD_CLOEXEC) == -1)
      throw connection_error("cannot set close-on-exec on the socket to " + options_.endpoint() + ": " +
                             std::strerror(errno));
    auto set_io_timeout = [&](std::chrono::milliseconds t) {
      if (redisSetTimeout(c.get(), to_timeval(t)) != REDIS_OK)
        throw connection_error("cannot set timeout on " + options_.endpoint() + ": " + c->errstr);
    };
    if (io_timeout->count() > 0) set_io_timeout(*io_timeout);
#if defined(REDISLOCK_WITH_TLS) && HIREDIS_MAJOR >= 1
    if (options_.tls) {
      std::shared_ptr<SSL_CTX> ctx(detail::make_tls_context(options_).release(), detail::ssl_ctx_deleter{});
      std::optional<std::chrono::steady_clock::time_point> deadline;
      if (has_connect_timeout) deadline = started + *connect_timeout;
      const detail::sigpipe_blocked no_sigpipe;  // the handshake writes with OpenSSL's write()
      detail::start_tls(*c, ctx.get(), detail::tls_name(options_), options_.endpoint(), deadline);
      tls_out = std::move(ctx);
    }
#else
    (void)started;
#endif
    auto run = [&](std::initializer_list<std::string_view> argv) {
      std::vector<const char*> ptrs;
      std::vector<std::size_t> lens;
      for (auto a : argv) {
        ptrs.push_back(a.data());
        lens.push_back(a.size());
      }
      reply_ptr r;
      {
        const detail::sigpipe_blocked no_sigpipe;
        r.reset(static_cast<redisReply*>(
            redisCommandArgv(c.get(), static_cast<int>(argv.size()), ptrs.data(), lens.data())));
      }
      if (!r) {
        std::string what = "connection to " + options_.endpoint() + " failed during handshake: " + c->errstr;
        if (looks_like_timeout(*c)) throw timeout_error(what);
        throw connection_error(what);
      }
      detail::checked(*r);
    };
    if (!options_.password.empty()) {
      if (options_.user.empty()) {
        run({"AUTH", options_.password});
      } else {
        try {
          run({"AUTH", options_.user, options_.password});
        } catch (const reply_error& e) {
          // Before ACL users AUTH takes the password alone (Redis 6.0; a Sentinel 6.2).
          const std::string& m = e.server_message();
          if (m.find("wrong number of arguments") == std::string::npos) throw;
          throw server_version_error(m, "connection to " + options_.endpoint() +
                                            ": a user name needs ACL users, Redis 6.0 or later (on a Sentinel, "
                                            "6.2 or later); the server refused AUTH with a user name: " +
                                            m);
        }
      }
    }
    if (options_.db != 0) {
      std::string db = std::to_string(options_.db);
      run({"SELECT", db});
    }
    if (*io_timeout != options_.command_timeout) set_io_timeout(options_.command_timeout);
    return c;
  }

  reply_ptr read_reply_of(std::initializer_list<std::string_view> argv) {
    append(argv);
    return read_reply();
  }

  // Sends the appended commands. Over TCP and Unix sockets with send(MSG_NOSIGNAL): a peer
  // that closed the connection gives EPIPE or ECONNRESET, never a SIGPIPE. The socket is
  // blocking with SO_SNDTIMEO = command_timeout (redisSetTimeout), so a stalled send ends
  // with EAGAIN. Over TLS, hiredis encrypts and writes it in redisGetReply.
  void send_appended() {
    if (options_.tls) {
      const int rc = redisAppendFormattedCommand(context_.get(), out_.data(), out_.size());
      clear_appended();
      if (rc != REDIS_OK) fail("send");
      return;
    }
    std::size_t sent = 0;
    while (sent < out_.size()) {
      const ssize_t n = ::send(context_->fd, out_.data() + sent, out_.size() - sent, MSG_NOSIGNAL);
      if (n >= 0) {
        sent += static_cast<std::size_t>(n);
      } else if (errno != EINTR) {
        const int e = errno;
        fail("send", e == EAGAIN || e == EWOULDBLOCK ? "timed out" : std::strerror(e), e == EAGAIN || e == EWOULDBLOCK);
      }
    }
    clear_appended();
  }

  void clear_appended() noexcept {
    out_.clear();
    if (out_.capacity() > kKeptBuffer) std::string().swap(out_);  // a one-off large command (SCRIPT LOAD)
  }

  bool recently_used() const noexcept {
    return std::chrono::steady_clock::now() - last_traffic_ < options_.idle_check_after;
  }

  // An idle connection has nothing to read; readable means EOF or an unsolicited error
  // (e.g. the server closed it after CLIENT KILL or a restart).
  bool peer_closed_while_idle() const noexcept {
    pollfd p{context_->fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
    char byte;
    ssize_t n = ::recv(context_->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;                                    // orderly shutdown by the server
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;  // reset
    return !options_.tls;  // plain RESP2 never sends unsolicited data; TLS may (session tickets)
  }

  // Sets the socket timeout of this command's send and reply read: command_timeout, or less
  // within a timed call (see the file comment); true when it is less. read_reply() then sets
  // command_timeout back after the reply: between commands the socket has the connection's
  // own timeout, which the code that sets its own for one command (the watchdog's
  // read_deadline, Redlock's command_timeout_scope) relies on and restores. Without a
  // deadline nothing is set: no system call.
  bool limit_io_to_call_deadline() {
    const std::optional<std::chrono::milliseconds> limit =
        detail::call_deadline::cut(options_.command_timeout, options_.connect_timeout);
    if (!limit) fail(out_.empty() ? "read" : "send", kDeadlinePassed, true);
    if (*limit == io_timeout_) return false;
    if (!set_io_timeout(*limit)) fail("setting the timeout");
    return *limit != options_.command_timeout;
  }

  bool set_io_timeout(std::chrono::milliseconds t) noexcept {
    if (redisSetTimeout(context_.get(), to_timeval(t)) != REDIS_OK) return false;
    io_timeout_ = t;
    return true;
  }

  void reconnect() {
    if (failed_at_ == std::chrono::steady_clock::time_point{}) failed_at_ = std::chrono::steady_clock::now();
    std::shared_ptr<void> tls;
    context_ptr fresh = open(tls);  // throws, leaving the old (broken) state in place
    context_ = std::move(fresh);    // frees the old context before its TLS context below
    tls_context_ = std::move(tls);
    io_timeout_ = options_.command_timeout;
    pending_ = 0;
    out_.clear();
    last_traffic_ = std::chrono::steady_clock::now();
    features_.reset();
    const std::chrono::nanoseconds down_for = last_traffic_ - std::exchange(failed_at_, {});
    detail::notify([&](lock_observer& o) {
      const std::string endpoint = options_.endpoint();
      reconnected_event e;
      e.endpoint = endpoint;
      e.down_for = down_for;
      o.on_reconnected(e);
    });
  }

  [[noreturn]] void fail(const char* during) {
    fail(during, context_ ? context_->errstr : "not connected", context_ && looks_like_timeout(*context_));
  }
  [[noreturn]] void fail(const char* during, const char* reason, bool timeout) {
    std::string what = std::string(during) + " failed on " + options_.endpoint() + ": " + reason;
    close();  // the stream position is unknown now: never reuse this socket
    if (failed_at_ == std::chrono::steady_clock::time_point{}) failed_at_ = std::chrono::steady_clock::now();
    if (timeout) throw timeout_error(what);
    throw connection_error(what);
  }

  // "<prefix><n>\r\n" at the end of out_.
  void add_length(char prefix, std::size_t n) {
    char buf[24];
    buf[0] = prefix;
    const auto r = std::to_chars(buf + 1, buf + sizeof buf - 2, n);
    r.ptr[0] = '\r';
    r.ptr[1] = '\n';
    out_.append(buf, static_cast<std::size_t>(r.ptr + 2 - buf));
  }

  static constexpr std::size_t kKeptBuffer = 64 * 1024;
  static constexpr const char* kDeadlinePassed = "the timed call's deadline (plus one connect timeout) has passed";

  connection_options options_;
  std::string out_;                    // the command being appended (reused: no allocation per command)
  std::shared_ptr<void> tls_context_;  // declared before context_: destroyed after it
  context_ptr context_;
  std::size_t pending_ = 0;
  std::chrono::milliseconds io_timeout_{options_.command_timeout};  // the socket timeout this object set last (0: none)
  std::chrono::steady_clock::time_point last_traffic_{};            // the last reply read (or the connect)
  std::chrono::steady_clock::time_point failed_at_{};  // the first failure since the last connect (observe.hpp)
  bool checked_ = false;                               // ensure_ready() ran since the last command
  std::optional<detail::server_features> features_;    // found on this socket; none before features()
};

}  // namespace redislock
