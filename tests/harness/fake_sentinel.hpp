#pragma once
// A stand-in for a sentinel on a free 127.0.0.1 port: every request read on a connection is
// answered (after delay_answers(), if set) with the master address set by name_master() (a
// SENTINEL GET-MASTER-ADDR-BY-NAME reply), or never answered after go_silent() (a sentinel
// that accepts TCP but hangs). It lets a test say which node "Sentinel" names, without
// Sentinel's own reconfiguration of the nodes. One thread polls every socket; the destructor
// stops it and closes them.

#include "redis_server.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace redislock_test {

class fake_sentinel {
 public:
  fake_sentinel() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int tries = 0; tries < 20; ++tries) {
      port_ = free_port();
      a.sin_port = htons(static_cast<std::uint16_t>(port_));
      if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(listener_, 16) == 0) {
        thread_ = std::thread([this] { serve(); });
        return;
      }
    }
    ::close(listener_);
    throw std::runtime_error("fake_sentinel: cannot listen");
  }
  ~fake_sentinel() {
    stop_ = true;
    thread_.join();
    for (int fd : clients_) ::close(fd);
    ::close(listener_);
  }
  fake_sentinel(const fake_sentinel&) = delete;
  fake_sentinel& operator=(const fake_sentinel&) = delete;

  int port() const { return port_; }
  void name_master(int master_port) {
    const std::string p = std::to_string(master_port);
    std::lock_guard<std::mutex> g(mutex_);
    answer_ = "*2\r\n$9\r\n127.0.0.1\r\n$" + std::to_string(p.size()) + "\r\n" + p + "\r\n";
  }
  void go_silent() {
    std::lock_guard<std::mutex> g(mutex_);
    answer_.clear();
  }
  // Each answer is written this long after its request (the serving thread sleeps).
  void delay_answers(std::chrono::milliseconds d) { delay_ms_ = static_cast<int>(d.count()); }
  int requests() const { return requests_; }

 private:
  void serve() {
    while (!stop_) {
      std::vector<pollfd> fds{{listener_, POLLIN, 0}};
      for (int fd : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        const int fd = ::accept(listener_, nullptr, nullptr);
        if (fd >= 0) clients_.push_back(fd);
      }
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        char buf[4096];
        const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n <= 0) {
          ::close(fds[i].fd);
          clients_.erase(std::find(clients_.begin(), clients_.end(), fds[i].fd));
          continue;
        }
        ++requests_;
        std::string answer;
        {
          std::lock_guard<std::mutex> g(mutex_);
          answer = answer_;
        }
        if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_.load()));
        if (!answer.empty()) (void)!::write(fds[i].fd, answer.data(), answer.size());
      }
    }
  }

  int listener_ = -1, port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0}, delay_ms_{0};
  std::vector<int> clients_;  // the serving thread's
  std::mutex mutex_;
  std::string answer_;
};

}  // namespace redislock_test
