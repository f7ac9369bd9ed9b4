#pragma once
// A loopback TCP proxy for fault injection: accepts on a free 127.0.0.1 port and forwards each
// connection to 127.0.0.1:<target_port>. Faults apply per direction (to_server: the requests,
// to_client: the replies, or both) while they are set:
//   - delay every forwarded chunk by a fixed time plus a uniform jitter (order is kept),
//   - stall: bytes are read and queued but not forwarded until resumed (a request then runs
//     late, possibly after its caller gave up and closed the connection: what was queued for
//     the server is still delivered, then the connection is closed),
//   - black-hole: bytes are read and dropped (the sender's TCP sees them acknowledged);
//     both directions at once is a partition (partition(true)): connections, new ones
//     included, stay open and silent. A connection that lost bytes so is reset once its black
//     hole is lifted: a TCP stream never resumes past a gap, and forwarding what follows the
//     gap would hand a pipelining client a later command's reply for the lost one. A
//     connection that sent nothing meanwhile carries on;
// and on every connection:
//   - cut all open connections (both sides see a reset),
//   - cut after the request (set_cut_after_request): each request is forwarded to the server,
//     then the client's side is reset and the server's closed: the command runs, its reply is lost,
//   - refuse new connections (accepted and reset at once),
//   - hold the connections open now (hold_open): their requests wait in the proxy until
//     release_held(), while connections opened later pass (a command delivered after a later
//     one on a fresh connection, as a stalled network path delivers it);
// and a hook (set_request_hook) that sees every chunk of requests before it is forwarded, and
// may act on the server first (a SCRIPT FLUSH just before a given command reaches it).
// One thread multiplexes everything with poll(); a self-pipe wakes it for commands. The
// destructor stops the thread and closes every socket.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace redislock_test {

class tcp_proxy {
 public:
  using clock = std::chrono::steady_clock;
  using ms = std::chrono::milliseconds;

  /// Which way a fault applies: requests (client to server), replies (server to client), or both.
  enum class direction { to_server = 1, to_client = 2, both = 3 };

  explicit tcp_proxy(int target_port, unsigned seed = 1) : target_port_(target_port), rng_(seed) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a = loopback(0);
    socklen_t len = sizeof a;
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_, 128) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (listener_ >= 0) ::close(listener_);
      throw std::runtime_error("tcp_proxy: cannot listen");
    }
    port_ = ntohs(a.sin_port);
    if (::pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0) {
      ::close(listener_);
      throw std::runtime_error("tcp_proxy: pipe failed");
    }
    thread_ = std::thread([this] { loop(); });
  }

  ~tcp_proxy() {
    {
      std::lock_guard<std::mutex> g(m_);
      stop_ = true;
    }
    wake();
    thread_.join();
    for (auto& p : pairs_) close_pair(p);
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;

  int port() const { return port_; }
  std::string uri() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  /// Every chunk read in `dir` is forwarded `d` plus a uniform [0, jitter] later (0: at once).
  /// Chunks keep their order: a chunk is never due before the one queued ahead of it.
  void set_delay(ms d, ms jitter = ms(0), direction dir = direction::both) {
    command([&] { each(dir, [&](rules& r) { r.delay = d, r.jitter = jitter; }); });
  }
  /// Stops (true) or resumes (false) forwarding in `dir`; what arrives meanwhile is queued.
  void set_stalled(bool stalled, direction dir = direction::both) {
    command([&] { each(dir, [&](rules& r) { r.stalled = stalled; }); });
  }
  /// Drops (true) every byte read in `dir` from now on, or forwards again (false): then the
  /// connections that lost bytes are reset.
  void set_black_hole(bool on, direction dir = direction::both) {
    command([&] { each(dir, [&](rules& r) { r.black_hole = on; }); });
  }
  /// A partition of this proxy's client from its server: both directions black-holed.
  void partition(bool on) { set_black_hole(on, direction::both); }
  /// While true, every request is forwarded and its connection then cut: reply lost, command run.
  void set_cut_after_request(bool on) {
    command([&] { cut_after_request_ = on; });
  }
  /// Like set_cut_after_request(true) for the next `n` requests only, then forwards again.
  void cut_after_next_requests(unsigned long n) {
    command([&] { cut_budget_ = n; });
  }
  /// New connections are reset right after accept while true.
  void set_refusing(bool refusing) {
    command([&] { refusing_ = refusing; });
  }
  /// `hook` runs on the proxy thread with each chunk read from a client, before the chunk is
  /// queued for the server (it may block: the proxy waits); an empty function removes it.
  void set_request_hook(std::function<void(const std::string& chunk)> hook) {
    auto shared = hook ? std::make_shared<const std::function<void(const std::string&)>>(std::move(hook)) : nullptr;
    command([&] { request_hook_ = std::move(shared); });
  }
  /// Lifts every fault (delay, stall, black hole, cut after request, refusing).
  void heal() {
    command([&] {
      up_ = down_ = rules{};
      cut_after_request_ = refusing_ = false;
      cut_budget_ = 0;
    });
  }

  /// Resets every open connection; returns once the proxy thread has done it (bounded).
  void cut_all() { on_loop(cuts_requested_, cuts_done_); }

  /// Holds the connections open now: what their clients send next is queued, not forwarded,
  /// until release_held(); connections opened later are not held. Returns once applied.
  void hold_open() { on_loop(holds_requested_, holds_done_); }
  /// Forwards what the held connections queued (then closes those whose client has gone).
  void release_held() { on_loop(releases_requested_, releases_done_); }
  /// Held connections still open (released ones count until they close).
  int held_open() const { return held_open_.load(); }

  /// Connections accepted so far (for tests that check the library went through the proxy).
  unsigned long accepted() const { return accepted_.load(); }
  /// Requests forwarded and then cut by set_cut_after_request (each one reached the server).
  unsigned long cut_after_request_count() const { return cut_requests_.load(); }
  /// Bytes dropped by black holes so far (either way).
  unsigned long dropped() const { return dropped_.load(); }

 private:
  using hook = std::shared_ptr<const std::function<void(const std::string&)>>;
  struct rules {
    ms delay{0}, jitter{0};
    bool stalled = false, black_hole = false;
    hook on_chunk;  // requests only (set_request_hook)
  };
  struct chunk {
    clock::time_point due;
    std::string bytes;
  };
  // One way of a connection: bytes read from `from`, queued, written to `to`.
  struct flow {
    std::deque<chunk> queue;
    bool source_closed = false;  // EOF from the reading side: flush what is queued, then close
  };
  struct pair {
    int client = -1, server = -1;
    flow up, down;  // up: client -> server; down: server -> client
    bool dead = false;
    bool lost_up = false, lost_down = false;  // bytes dropped by a black hole that way
    bool held = false, released = false;      // hold_open(), release_held()
  };

  static sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    return a;
  }

  template <class F>
  void each(direction dir, F&& f) {
    if (static_cast<int>(dir) & static_cast<int>(direction::to_server)) f(up_);
    if (static_cast<int>(dir) & static_cast<int>(direction::to_client)) f(down_);
  }

  // Asks the proxy thread, which owns the connections, to act on them; returns once it has.
  void on_loop(unsigned long& requested, const unsigned long& done) {
    std::unique_lock<std::mutex> g(m_);
    const unsigned long want = ++requested;
    g.unlock();
    wake();
    g.lock();
    done_.wait_for(g, std::chrono::seconds(10), [&] { return done >= want || stop_; });
  }

  // Applies a change and returns once the proxy thread has picked it up (bounded): bytes sent
  // after a setter returned are handled under the new rules.
  template <class F>
  void command(F&& f) {
    std::unique_lock<std::mutex> g(m_);
    f();
    const unsigned long want = ++changes_;
    g.unlock();
    wake();
    g.lock();
    done_.wait_for(g, std::chrono::seconds(10), [&] { return changes_seen_ >= want || stop_; });
  }

  void wake() {
    char b = 1;
    [[maybe_unused]] auto n = ::write(wake_[1], &b, 1);  // full pipe: a wake-up is pending anyway
  }

  static void reset_and_close(int fd) {
    if (fd < 0) return;
    linger l{1, 0};  // RST instead of FIN: the peer sees "connection reset"
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::close(fd);
  }
  static void close_pair(pair& p) {
    reset_and_close(p.client);
    reset_and_close(p.server);
    p.client = p.server = -1;
    p.dead = true;
  }
  // The client's side reset, the server's closed in order (FIN): the server still reads and
  // runs what it received.
  static void cut_keeping_request(pair& p) {
    reset_and_close(p.client);
    if (p.server >= 0) ::close(p.server);
    p.client = p.server = -1;
    p.dead = true;
  }

  void accept_new() {
    for (;;) {
      int fd = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      ++accepted_;
      bool refusing;
      {
        // Read the flag at accept time: a client that connected after set_refusing(false)
        // returned must not be refused by a value read before the change.
        std::lock_guard<std::mutex> g(m_);
        refusing = refusing_;
      }
      if (refusing) {
        reset_and_close(fd);
        continue;
      }
      int up = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a = loopback(target_port_);
      if (up < 0 || ::connect(up, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {  // loopback: immediate
        if (up >= 0) ::close(up);
        reset_and_close(fd);
        continue;
      }
      ::fcntl(up, F_SETFL, ::fcntl(up, F_GETFL) | O_NONBLOCK);
      int one = 1;
      ::setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      pair p;
      p.client = fd;
      p.server = up;
      pairs_.push_back(std::move(p));
    }
  }

  // Reads what is available from `from` into `f` (or drops it: black hole); marks the source
  // closed on EOF. False on a read error.
  bool pump_in(int from, flow& f, const rules& r, bool& lost) {
    char buf[16384];
    for (;;) {
      ssize_t n = ::recv(from, buf, sizeof buf, 0);
      if (n > 0) {
        if (r.black_hole) {
          lost = true;
          dropped_ += static_cast<unsigned long>(n);
          continue;
        }
        if (r.on_chunk) (*r.on_chunk)(std::string(buf, static_cast<std::size_t>(n)));
        auto due = clock::now() + r.delay;
        if (r.jitter.count() > 0)
          due += std::chrono::microseconds(std::uniform_int_distribution<long long>(0, r.jitter.count() * 1000)(rng_));
        if (!f.queue.empty()) due = std::max(due, f.queue.back().due);
        f.queue.push_back(chunk{due, std::string(buf, static_cast<std::size_t>(n))});
        continue;
      }
      if (n == 0) {
        f.source_closed = true;
        return true;
      }
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
  }

  // Writes the chunks of `f` that are due; false on error. `wrote` counts whole chunks sent.
  static bool pump_out(int to, flow& f, int& wrote) {
    const auto now = clock::now();
    while (!f.queue.empty() && f.queue.front().due <= now) {
      chunk& c = f.queue.front();
      ssize_t n = ::send(to, c.bytes.data(), c.bytes.size(), MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.bytes.erase(0, static_cast<std::size_t>(n));
      if (!c.bytes.empty()) return true;  // socket buffer full
      f.queue.pop_front();
      ++wrote;
    }
    return true;
  }

  static int timeout_until(const std::deque<chunk>& q, int current) {
    if (q.empty()) return current;
    auto left = std::chrono::ceil<ms>(q.front().due - clock::now()).count();
    int t = static_cast<int>(std::max<long long>(left, 0));
    return current < 0 ? t : std::min(current, t);
  }
  static bool holding(const pair& p) { return p.held && !p.released; }
  static bool due_now(const flow& f) { return !f.queue.empty() && f.queue.front().due <= clock::now(); }

  // One way of one connection after poll: read, then forward what is due (unless stalled).
  bool step(int from, int to, short from_events, flow& f, const rules& r, bool& lost, int& wrote) {
    bool ok = true;
    if (!f.source_closed && (from_events & (POLLIN | POLLHUP | POLLERR))) ok = pump_in(from, f, r, lost);
    if (ok && !r.stalled) ok = pump_out(to, f, wrote);
    return ok;
  }

  void loop() {
    std::vector<pollfd> fds;
    for (;;) {
      rules up, down;
      bool cut_after_request;
      unsigned long cut_budget;
      {
        std::lock_guard<std::mutex> g(m_);
        if (stop_) return;
        up = up_;
        up.on_chunk = request_hook_;
        down = down_;
        cut_after_request = cut_after_request_;
        cut_budget = cut_budget_;
        if (changes_seen_ < changes_) {
          changes_seen_ = changes_;
          done_.notify_all();
        }
        if (cuts_done_ < cuts_requested_) {
          for (auto& p : pairs_) close_pair(p);
          cuts_done_ = cuts_requested_;
          done_.notify_all();
        }
        if (holds_done_ < holds_requested_) {
          for (auto& p : pairs_)
            if (!p.dead && !p.held) {
              p.held = true;
              ++held_open_;
            }
          holds_done_ = holds_requested_;
          done_.notify_all();
        }
        if (releases_done_ < releases_requested_) {
          for (auto& p : pairs_) p.released = true;
          releases_done_ = releases_requested_;
          done_.notify_all();
        }
      }
      // A black hole lifted (or any change): the connections that lost bytes to it go now.
      for (auto& p : pairs_)
        if ((p.lost_up && !up.black_hole) || (p.lost_down && !down.black_hole)) close_pair(p);
      pairs_.erase(std::remove_if(pairs_.begin(), pairs_.end(),
                                  [this](const pair& p) {
                                    if (p.dead && p.held) --held_open_;
                                    return p.dead;
                                  }),
                   pairs_.end());

      fds.assign({pollfd{wake_[0], POLLIN, 0}, pollfd{listener_, POLLIN, 0}});
      int timeout = -1;
      for (auto& p : pairs_) {
        short cev = p.up.source_closed ? 0 : POLLIN, sev = p.down.source_closed ? 0 : POLLIN;
        if (!up.stalled && !holding(p)) {
          timeout = timeout_until(p.up.queue, timeout);
          if (due_now(p.up)) sev |= POLLOUT;
        }
        if (!down.stalled) {
          timeout = timeout_until(p.down.queue, timeout);
          if (due_now(p.down)) cev |= POLLOUT;
        }
        fds.push_back(pollfd{p.client, cev, 0});
        fds.push_back(pollfd{p.server, sev, 0});
      }
      if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return;
      if (fds[0].revents & POLLIN) {
        char drain[64];
        while (::read(wake_[0], drain, sizeof drain) > 0) {
        }
      }
      if (fds[1].revents & POLLIN) accept_new();
      for (std::size_t i = 0; i < pairs_.size() && 2 + 2 * i + 1 < fds.size(); ++i) {
        pair& p = pairs_[i];
        const short cev = fds[2 + 2 * i].revents, sev = fds[2 + 2 * i + 1].revents;
        int requests = 0, replies = 0;
        // A side already at EOF that now reports an error or hang-up: nothing more can pass.
        const bool broken = ((cev & (POLLERR | POLLHUP)) && p.up.source_closed) ||
                            ((sev & (POLLERR | POLLHUP)) && p.down.source_closed);
        rules up_of_pair = up;
        up_of_pair.stalled = up.stalled || holding(p);
        const bool ok = !broken && step(p.client, p.server, cev, p.up, up_of_pair, p.lost_up, requests) &&
                        step(p.server, p.client, sev, p.down, down, p.lost_down, replies);
        if (!ok) {
          close_pair(p);
        } else if ((cut_after_request || cut_budget > 0) && requests > 0) {
          if (!cut_after_request) {
            --cut_budget;
            std::lock_guard<std::mutex> g(m_);
            if (cut_budget_ > 0) --cut_budget_;
          }
          ++cut_requests_;
          cut_keeping_request(p);
        } else if ((p.up.source_closed && p.up.queue.empty()) || (p.down.source_closed && p.down.queue.empty())) {
          // One side hung up and what it sent has been delivered (or dropped, black-holed); a
          // stalled way keeps the pair until it is resumed or cut.
          cut_keeping_request(p);
        } else if ((cev | sev) & POLLNVAL) {
          close_pair(p);
        }
      }
    }
  }

  int target_port_;
  int port_ = 0;
  int listener_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::vector<pair> pairs_;  // owned by the proxy thread (and the destructor after join)
  std::mt19937 rng_;         // the jitter's (proxy thread only)
  std::atomic<unsigned long> accepted_{0}, cut_requests_{0}, dropped_{0};
  std::atomic<int> held_open_{0};

  std::mutex m_;
  std::condition_variable done_;
  bool stop_ = false, refusing_ = false, cut_after_request_ = false;
  rules up_, down_;
  hook request_hook_;
  unsigned long cuts_requested_ = 0, cuts_done_ = 0, changes_ = 0, changes_seen_ = 0, cut_budget_ = 0;
  unsigned long holds_requested_ = 0, holds_done_ = 0, releases_requested_ = 0, releases_done_ = 0;
};

}  // namespace redislock_test
