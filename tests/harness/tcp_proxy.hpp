#pragma once
// A loopback TCP proxy for fault injection: accepts on a free 127.0.0.1 port and forwards each
// connection to 127.0.0.1:<target_port>. While running it can
//   - delay every forwarded chunk (latency),
//   - stall (stop forwarding; bytes stay queued until resumed),
//   - hold the connections open now (their client->server bytes wait until released; later
//     connections pass),
//   - cut all open connections (both sides see a reset),
//   - refuse new connections (accepted and reset at once).
// A client that closes its side (FIN) still gets what it sent before delivered to the server,
// then the proxy closes its side towards the server (FIN) and drops the server's replies, as
// TCP does. One thread multiplexes everything with poll(); a self-pipe wakes it for commands.
// The destructor stops the thread and closes every socket.

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
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace redislock_test {

class tcp_proxy {
 public:
  using clock = std::chrono::steady_clock;

  explicit tcp_proxy(int target_port) : target_port_(target_port) {
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

  /// Every chunk read from either side is forwarded `d` later (0: at once).
  void set_delay(std::chrono::milliseconds d) {
    command([&] { delay_ = d; });
  }
  /// Stops (true) or resumes (false) forwarding; accepted connections stay open.
  void set_stalled(bool stalled) {
    command([&] { stalled_ = stalled; });
  }
  /// New connections are reset right after accept while true.
  void set_refusing(bool refusing) {
    command([&] { refusing_ = refusing; });
  }

  /// Resets every open connection; returns once the proxy thread has done it (bounded).
  void cut_all() {
    on_loop([this] {
      for (auto& p : pairs_) close_pair(p);
    });
  }

  /// Holds every connection open now: what its client sends waits (unread, in the proxy's
  /// socket) until release_held(), even after the client closed it (as in a stalled network
  /// path). Connections accepted later are not held. Returns once in force (bounded).
  void hold_open() {
    on_loop([this] {
      for (auto& p : pairs_) {
        if (p.held) continue;
        p.held = true;
        ++held_open_;
      }
    });
  }
  /// Forwards what the held connections queued meanwhile (see hold_open()).
  void release_held() {
    on_loop([this] {
      for (auto& p : pairs_) p.released = true;
    });
  }
  /// Connections held by hold_open() that are still open: after release_held(), 0 once each
  /// was closed on both sides (a client that had closed it: its bytes reached the server,
  /// which then closed it in turn, so Redis ran every command in them).
  unsigned long held_open() const { return held_open_.load(); }

  /// Connections accepted so far (for tests that check the library went through the proxy).
  unsigned long accepted() const { return accepted_.load(); }

 private:
  struct chunk {
    clock::time_point due;
    std::string bytes;
  };
  struct pair {
    int client = -1, server = -1;
    std::deque<chunk> to_server, to_client;
    bool dead = false;
    bool held = false, released = false;  // hold_open(), release_held()
    bool client_closed = false;           // its client sent FIN: forward the rest, then FIN
    bool reading_client() const { return !client_closed && (!held || released); }
  };

  static sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    return a;
  }

  template <class F>
  void command(F&& f) {
    {
      std::lock_guard<std::mutex> g(m_);
      f();
    }
    wake();
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
  void close_pair(pair& p) {
    if (p.dead) return;
    reset_and_close(p.client);
    reset_and_close(p.server);
    p.client = p.server = -1;
    p.dead = true;
    if (p.held) --held_open_;
  }

  // Runs f on the proxy thread (which owns the connections) and waits for it (bounded).
  void on_loop(std::function<void()> f) {
    std::unique_lock<std::mutex> g(m_);
    const unsigned long want = ++requests_made_;
    requests_.push_back(std::move(f));
    g.unlock();
    wake();
    g.lock();
    done_.wait_for(g, std::chrono::seconds(10), [&] { return requests_done_ >= want || stop_; });
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

  enum class pumped { open, eof, failed };
  // Reads what is available from `from` into `queue`.
  static pumped pump_in(int from, std::deque<chunk>& queue, std::chrono::milliseconds delay) {
    char buf[16384];
    for (;;) {
      ssize_t n = ::recv(from, buf, sizeof buf, 0);
      if (n > 0) {
        queue.push_back(chunk{clock::now() + delay, std::string(buf, static_cast<std::size_t>(n))});
        continue;
      }
      if (n == 0) return pumped::eof;
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? pumped::open : pumped::failed;
    }
  }

  // Writes the chunks that are due; false on error.
  static bool pump_out(int to, std::deque<chunk>& queue) {
    const auto now = clock::now();
    while (!queue.empty() && queue.front().due <= now) {
      chunk& c = queue.front();
      ssize_t n = ::send(to, c.bytes.data(), c.bytes.size(), MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.bytes.erase(0, static_cast<std::size_t>(n));
      if (!c.bytes.empty()) return true;  // socket buffer full
      queue.pop_front();
    }
    return true;
  }

  static int timeout_until(const std::deque<chunk>& q, int current) {
    if (q.empty()) return current;
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(q.front().due - clock::now()).count();
    int t = static_cast<int>(std::max<long long>(ms, 0));
    return current < 0 ? t : std::min(current, t);
  }

  void loop() {
    std::vector<pollfd> fds;
    for (;;) {
      bool stalled;
      std::chrono::milliseconds delay;
      {
        std::lock_guard<std::mutex> g(m_);
        if (stop_) return;
        stalled = stalled_;
        delay = delay_;
        for (auto& f : requests_) f();
        requests_done_ += requests_.size();
        requests_.clear();
        done_.notify_all();
      }
      pairs_.erase(std::remove_if(pairs_.begin(), pairs_.end(), [](const pair& p) { return p.dead; }), pairs_.end());

      fds.assign({pollfd{wake_[0], POLLIN, 0}, pollfd{listener_, POLLIN, 0}});
      int timeout = -1;
      for (auto& p : pairs_) {
        short cin = stalled || !p.reading_client() ? 0 : POLLIN, sin = stalled ? 0 : POLLIN;
        if (!stalled) {
          timeout = timeout_until(p.to_client, timeout);
          timeout = timeout_until(p.to_server, timeout);
        }
        if (!stalled && !p.client_closed && !p.to_client.empty() && p.to_client.front().due <= clock::now())
          cin |= POLLOUT;
        if (!stalled && !p.to_server.empty() && p.to_server.front().due <= clock::now()) sin |= POLLOUT;
        // Not watched at all while not read: a closed client must not wake poll() over and over.
        fds.push_back(pollfd{cin == 0 ? -1 : p.client, cin, 0});
        fds.push_back(pollfd{p.server, sin, 0});
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
        const pollfd& c = fds[2 + 2 * i];
        const pollfd& s = fds[2 + 2 * i + 1];
        bool ok = true;
        if (!stalled) {
          if (p.reading_client() && (c.revents & (POLLIN | POLLHUP | POLLERR))) {
            const pumped in = pump_in(p.client, p.to_server, delay);
            ok = in != pumped::failed;
            p.client_closed = in == pumped::eof;
          }
          if (s.revents & (POLLIN | POLLHUP | POLLERR)) {
            // After the client's FIN the server's replies have nowhere to go; its FIN ends the pair.
            const pumped in = pump_in(p.server, p.to_client, delay);
            ok = in == pumped::open && ok;
            if (p.client_closed) p.to_client.clear();
          }
          ok = pump_out(p.server, p.to_server) && ok;
          if (!p.client_closed) ok = pump_out(p.client, p.to_client) && ok;
          if (ok && p.client_closed && p.to_server.empty()) ::shutdown(p.server, SHUT_WR);  // repeats harmlessly
        }
        if (!ok) close_pair(p);
      }
    }
  }

  int target_port_;
  int port_ = 0;
  int listener_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::vector<pair> pairs_;  // owned by the proxy thread (and the destructor after join)
  std::atomic<unsigned long> accepted_{0}, held_open_{0};

  std::mutex m_;
  std::condition_variable done_;
  bool stop_ = false, stalled_ = false, refusing_ = false;
  std::chrono::milliseconds delay_{0};
  std::vector<std::function<void()>> requests_;  // on_loop()
  unsigned long requests_made_ = 0, requests_done_ = 0;
};

}  // namespace redislock_test
